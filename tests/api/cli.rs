//! The operator's command line, run as a user would run it.

use crate::helpers::{cli_set_password, cutout_binary};
use cutout::store::Store;
use std::process::{Command, Output};

fn cutout(data: &std::path::Path, args: &[&str]) -> Output {
    Command::new(cutout_binary())
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn an_operator_creates_an_account_and_a_key_and_sees_usage() {
    let data = tempfile::tempdir().unwrap();
    assert!(cutout(
        data.path(),
        &["account", "create", "booth-co", "--plan", "pro"]
    )
    .status
    .success());
    let created = cutout(
        data.path(),
        &["key", "create", "booth-co", "--label", "front door"],
    );
    assert!(created.status.success());
    let key = stdout(&created).lines().last().unwrap().to_owned();
    assert!(cutout::domain::ApiKey::parse(&key).is_some(), "{key}");

    let listed = stdout(&cutout(data.path(), &["key", "list", "booth-co"]));
    assert!(listed.contains(&key[..12]) && listed.contains("front door") && !listed.contains(&key));
    assert!(stdout(&cutout(data.path(), &["usage", "booth-co"])).contains("0 of 500"));
    assert!(
        cutout(data.path(), &["usage", "set", "booth-co", "--count", "7"])
            .status
            .success()
    );
    assert!(stdout(&cutout(data.path(), &["usage", "booth-co"])).contains("7 of 500"));
    assert!(cutout(
        data.path(),
        &["account", "set-plan", "booth-co", "business"]
    )
    .status
    .success());
    assert!(stdout(&cutout(data.path(), &["account", "list"])).contains("business"));
    assert!(cutout(data.path(), &["key", "revoke", &key[..12]])
        .status
        .success());
    assert!(stdout(&cutout(data.path(), &["key", "list", "booth-co"])).contains("revoked"));

    let db = std::fs::read(data.path().join("cutout.db")).unwrap();
    assert!(
        !db.windows(key.len()).any(|w| w == key.as_bytes()),
        "the clear key is never stored"
    );
}

#[test]
fn bad_arguments_exit_non_zero_with_one_line() {
    let data = tempfile::tempdir().unwrap();
    for args in [
        &["account", "create", "x"][..],
        &["frobnicate"],
        &["account", "create", "x", "--plan", "gold"],
        &["usage", "nobody"],
        &["remove", "a.jpg", "b.png", "--engine", "torch"],
    ] {
        let out = cutout(data.path(), args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
}

/// `cutout ladder | head -1`: the reader gone, the command ends by SIGPIPE
/// as other tools do, without a panic on standard error.
#[test]
fn a_command_whose_reader_has_gone_ends_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let data = tempfile::tempdir().unwrap();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(cutout_binary())
        .arg("--data-dir")
        .arg(data.path())
        .arg("--models-dir")
        .arg(crate::helpers::models_dir())
        .args(["ladder", "--board", "Raspberry Pi 4"])
        .env("RUST_LOG", "warn")
        .stdout(writer)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGPIPE),
        "{:?}: {stderr}",
        out.status
    );
}

#[test]
fn remove_cuts_out_a_file_offline_on_either_engine() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jpg");
    std::fs::write(&input, crate::helpers::jpeg(200, 150)).unwrap();
    let models = crate::helpers::models_dir();
    for engine in ["tract", "onnxruntime"] {
        let output = dir.path().join(format!("{engine}.png"));
        let out = Command::new(cutout_binary())
            .args(["--models-dir".as_ref(), models.as_os_str()])
            .args(["remove".as_ref(), input.as_os_str(), output.as_os_str()])
            .args(["--size", "preview", "--model", "u2netp", "--engine", engine])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{engine}: {stderr}");
        assert!(stderr.contains(&format!("on {engine}")), "{stderr}");
        let png = image::open(&output).unwrap();
        assert_eq!(
            (png.width(), png.height(), png.color()),
            (200, 150, image::ColorType::Rgba8)
        );
        // The caller's file, by the caller's umask (022 here): not private
        // as the appliance's own files are.
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&output).unwrap().permissions().mode();
        assert_eq!(mode & 0o044, 0o044, "{mode:o}");
    }
}

/// With tract asked for and no model, the board's model is tract's: on a
/// CPU with int8 dot products `isnet-int8` in tract's own file (`make
/// quantize`), elsewhere IS-Net in f32.
#[test]
fn remove_on_tract_without_a_model_runs_the_boards_model_on_tract() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (dir.path().join("in.jpg"), dir.path().join("out.png"));
    std::fs::write(&input, crate::helpers::jpeg(200, 150)).unwrap();
    let models = crate::helpers::models_dir();
    let out = Command::new(cutout_binary())
        .args(["--models-dir".as_ref(), models.as_os_str()])
        .args(["remove".as_ref(), input.as_os_str(), output.as_os_str()])
        .args([
            "--size", "preview", "--type", "general", "--engine", "tract",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let model = if cutout::board::Board::detect().int8_dot_product {
        "isnet-int8"
    } else {
        "isnet"
    };
    let loaded = format!("model {model} loaded on tract");
    assert!(stderr.contains(&loaded), "{stderr}");
    assert!(image::open(&output).is_ok());
}

#[test]
fn remove_writes_several_inputs_into_a_folder_and_names_a_bad_one() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.jpg"), dir.path().join("b.jpg"));
    std::fs::write(&a, crate::helpers::jpeg(64, 48)).unwrap();
    std::fs::write(&b, crate::helpers::jpeg(48, 64)).unwrap();
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let remove = |paths: &[&std::path::Path]| {
        Command::new(cutout_binary())
            .args([
                "--models-dir".as_ref(),
                crate::helpers::models_dir().as_os_str(),
            ])
            .arg("remove")
            .args(paths)
            .args(["--model", "u2netp"])
            .output()
            .unwrap()
    };
    let out = remove(&[&a, &b, &out_dir]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (name, size) in [("a.png", (64, 48)), ("b.png", (48, 64))] {
        let png = image::open(out_dir.join(name)).unwrap();
        assert_eq!((png.width(), png.height()), size);
    }

    let out = remove(&[&a, &b, &dir.path().join("c.png")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("must be a folder"),
        "{stderr}"
    );

    let junk = dir.path().join("junk.jpg");
    std::fs::write(&junk, b"not an image").unwrap();
    let out = remove(&[&a, &junk, &out_dir]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && stderr.contains("junk.jpg")
            && stderr.contains("unsupported_image_format"),
        "{stderr}"
    );
}

#[test]
fn serve_demo_prints_a_working_key_and_sigterm_stops_it_cleanly() {
    use std::io::{BufRead, BufReader};
    let data = tempfile::tempdir().unwrap();
    let models = crate::helpers::models_dir();
    let mut server = Command::new(cutout_binary())
        .arg("--data-dir")
        .arg(data.path())
        .arg("--models-dir")
        .arg(&models)
        .args([
            "serve",
            "--demo",
            "--listen",
            "127.0.0.1:0",
            "--model",
            "u2netp",
        ])
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(server.stderr.take().unwrap()).lines();
    let addr: std::net::SocketAddr = loop {
        let line = stderr.next().expect("the server logs its address").unwrap();
        if let Some(addr) = line.split("listening on http://").nth(1) {
            break addr.trim().parse().unwrap();
        }
    };
    let printed = {
        let mut out = String::new();
        let mut stdout = BufReader::new(server.stdout.take().unwrap());
        while !out.contains("remove-bg") {
            stdout.read_line(&mut out).unwrap();
        }
        out
    };
    let key = printed
        .split_whitespace()
        .find(|w| w.starts_with("ck_"))
        .unwrap()
        .to_owned();
    assert!(
        printed.contains(&format!("X-Api-Key: {key}"))
            && printed.contains(&format!("http://{addr}/api/remove-bg"))
    );

    crate::helpers::wait_until("the model is loaded", || {
        crate::helpers::request(addr, "GET", "/readyz", &[], b"").status == 200
    });
    let mut form = crate::helpers::Multipart::new();
    form.file("image_file", &crate::helpers::jpeg(64, 48));
    assert_eq!(
        crate::helpers::post_form(addr, Some(&key), &form).status,
        200
    );

    let killed = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert_eq!(server.wait().unwrap().code(), Some(0));
}

#[test]
fn admin_set_password_reads_the_password_from_stdin_and_stores_only_a_hash() {
    let data = tempfile::tempdir().unwrap();
    let refused = cli_set_password(data.path(), "short\n");
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("at least 8 characters"));
    assert_eq!(cli_set_password(data.path(), "").status.code(), Some(1));

    assert!(cli_set_password(data.path(), "a fine password\n")
        .status
        .success());
    let store = cutout::store::SqliteStore::open(data.path()).unwrap();
    let hash = store.admin_password_hash().unwrap().unwrap();
    assert!(hash.starts_with("$argon2id$"));
    assert!(cutout::secrets::verify_password(
        "a fine password",
        Some(&hash)
    ));
    let db = std::fs::read(data.path().join("cutout.db")).unwrap();
    assert!(!db.windows(15).any(|w| w == b"a fine password"));
}

#[test]
fn an_account_may_not_take_the_operators_login_name() {
    let data = tempfile::tempdir().unwrap();
    let reply = cutout(
        data.path(),
        &["account", "create", "admin", "--plan", "pro"],
    );
    assert_eq!(reply.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&reply.stderr).contains("\"admin\""));
}

#[test]
fn the_command_line_refuses_dot_names_and_labels_that_reorder_text() {
    let data = tempfile::tempdir().unwrap();
    let dot = cutout(data.path(), &["account", "create", "..", "--plan", "pro"]);
    assert!(!dot.status.success());
    assert!(String::from_utf8_lossy(&dot.stderr).contains("may not be"));

    let made = cutout(
        data.path(),
        &["account", "create", "booth", "--plan", "pro"],
    );
    assert!(made.status.success());
    let bidi = cutout(
        data.path(),
        &[
            "key",
            "create",
            "booth",
            "--label",
            "invoice\u{202E}gpj.exe",
        ],
    );
    assert!(!bidi.status.success());
    assert!(String::from_utf8_lossy(&bidi.stderr).contains("text-direction"));
    assert!(stdout(&bidi).is_empty(), "no key printed");
}
