//! `cutout backup` and `cutout restore`: an appliance brought back on
//! another card, where a booth paired with the old one (its key and pinned
//! certificate, untouched) goes on cutting out, charged to the same month;
//! and every bad backup refused with nothing changed.

use crate::helpers::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub(crate) const PASSPHRASE: &str = "correct horse battery staple";

/// The passphrase file as an operator writes one: the passphrase, a note
/// after it, and CRLF, as a file written on Windows has.
fn passphrase_file_text() -> String {
    format!("{PASSPHRASE}\r\n# the appliance's backups; a copy is in the safe\r\n")
}

/// `cutout` on `data` with the configuration file `data/cutout.toml` (made
/// empty if missing), the
/// passphrase in a file, and more environment.
pub(crate) fn cutout(data: &Path, args: &[&str], env: &[(&str, String)]) -> Output {
    std::fs::create_dir_all(data).unwrap();
    if !data.join("cutout.toml").exists() {
        std::fs::write(data.join("cutout.toml"), "").unwrap();
    }
    let passphrase = data.with_extension("passphrase");
    std::fs::write(&passphrase, passphrase_file_text()).unwrap();
    Command::new(cutout_binary())
        .arg("--data-dir")
        .arg(data)
        .arg("--config")
        .arg(data.join("cutout.toml"))
        .args(args)
        .arg("--passphrase-file")
        .arg(&passphrase)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

pub(crate) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The appliance over HTTPS, its certificate's fingerprint as the log says it.
fn serve_https(data: &Path) -> (Server, std::net::SocketAddr, String) {
    let env = [("CUTOUT_TLS_LISTEN", "127.0.0.1:0".to_owned())];
    let server = Server::start_with(data, &models_dir(), "warn,cutout::http=info", &[], &env);
    let log = server.log_once_it_says("certificate SHA-256 fingerprint");
    let line = log.lines().find(|l| l.contains("HTTPS on ")).unwrap();
    let (_, after) = line.split_once("HTTPS on ").unwrap();
    let (https, after) = after.split_once(';').unwrap();
    let fingerprint = after.rsplit(' ').next().unwrap().trim().to_owned();
    (server, https.parse().unwrap(), fingerprint)
}

/// A booth's cut-out over HTTPS, the certificate pinned.
fn pinned_cut_out(https: std::net::SocketAddr, fingerprint: &str, key: &str) -> Reply {
    let mut form = Multipart::new();
    form.file("image_file", &jpeg(64, 48));
    let headers = [
        ("X-Api-Key".to_owned(), key.to_owned()),
        ("Content-Type".to_owned(), form.content_type()),
    ];
    let raw = raw_request(https, "POST", "/api/remove-bg", &headers, &form.body());
    send_pinned(https, fingerprint, &raw).unwrap()
}

/// This month's count of `account`, as `cutout usage` says it.
fn used(data: &Path, account: &str) -> u32 {
    let said = cutout_cli(data, &["usage", account]);
    let (_, count) = said.split_once(": ").unwrap();
    count.split_whitespace().next().unwrap().parse().unwrap()
}

/// An appliance with the Pro account `booth`, two cut-outs charged, a
/// backdrop, an edited configuration and a made certificate; its data
/// directory, the booth's key and the certificate's fingerprint.
fn used_appliance(root: &Path) -> (PathBuf, String, String) {
    let data = root.join("old");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(
        data.join("cutout.toml"),
        "# the operator's edit\nmodel = \"u2netp\"\n",
    )
    .unwrap();
    let key = cli_account(&data, "booth", "pro");
    let background = root.join("beach.jpg");
    std::fs::write(&background, jpeg(1600, 1200)).unwrap();
    cutout_cli(
        &data,
        &["backdrop", "add", "Beach", background.to_str().unwrap()],
    );
    let (server, https, fingerprint) = serve_https(&data);
    for _ in 0..2 {
        assert_eq!(pinned_cut_out(https, &fingerprint, &key).status, 200);
    }
    server.stop();
    (data, key, fingerprint)
}

#[test]
fn a_booth_paired_with_the_old_card_cuts_out_on_the_restored_one_charged_to_the_same_month() {
    let root = tempfile::tempdir().unwrap();
    let (old, key, fingerprint) = used_appliance(root.path());
    let file = root.path().join("appliance.cutout-backup");
    let out = cutout(&old, &["backup", file.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("1 account(s), HTTPS certificate, 1 backdrop(s), configuration file"),
        "{said}"
    );
    // Nothing of it readable without the passphrase.
    let bytes = std::fs::read(&file).unwrap();
    assert!(bytes.starts_with(b"cutout-backup\n"));
    assert!(!bytes.windows(11).any(|w| w == b"PRIVATE KEY"));

    let new = root.path().join("new");
    std::fs::create_dir_all(&new).unwrap();
    let out = cutout(&new, &["restore", file.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(new.join("cutout.toml")).unwrap(),
        std::fs::read_to_string(old.join("cutout.toml")).unwrap()
    );
    assert_eq!(used(&new, "booth"), 2);
    assert!(cutout_cli(&new, &["backdrop", "list"]).contains("Beach"));

    let (server, https, restored) = serve_https(&new);
    assert_eq!(restored, fingerprint, "the booth's pin holds");
    let reply = pinned_cut_out(https, &fingerprint, &key);
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.header("x-ratelimit-remaining"), Some("497"));
    assert_private(&new, &["notify"]);
    server.stop();
    assert_eq!(used(&new, "booth"), 3, "the month's count goes on");
}

/// Everything in `dir`, and under it, is its owner's alone (the test
/// process's umask is 022), but the files in `theirs` that the test made.
fn assert_private(dir: &Path, theirs: &[&str]) {
    use std::os::unix::fs::PermissionsExt;
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        if theirs.iter().any(|name| entry.file_name() == *name) {
            continue;
        }
        let mode = entry.metadata().unwrap().permissions().mode();
        let path = entry.path();
        assert_eq!(mode & 0o077, 0, "{} is {mode:o}", path.display());
        if path.is_dir() {
            assert_private(&path, &[]);
        }
    }
}

#[test]
fn a_crashed_processs_plain_copies_are_removed_at_start_and_a_running_ones_kept() {
    let data = tempfile::tempdir().unwrap();
    let dead = u32::MAX; // over any pid_max
    let leftovers = [
        format!(".backup-{dead}-0123abcd.db"),
        format!(".upload-{dead}-0123abcd"),
        format!(".download-{dead}-0123abcd.cutout-backup"),
    ];
    for name in &leftovers {
        std::fs::write(data.path().join(name), "accounts and keys in clear").unwrap();
    }
    let staged = data.path().join(format!(".restore-{dead}-0123abcd"));
    std::fs::create_dir(&staged).unwrap();
    std::fs::write(staged.join("cutout.db"), "accounts and keys in clear").unwrap();
    let running = format!(".backup-{}-0123abcd.db", std::process::id());
    std::fs::write(data.path().join(&running), "a backup on its way").unwrap();

    let server = Server::start_with(data.path(), &models_dir(), "warn", &[], &[]);
    let log = std::fs::read_to_string(&server.log).unwrap();
    for name in leftovers
        .iter()
        .chain([&staged.file_name().unwrap().to_str().unwrap().to_owned()])
    {
        assert!(!data.path().join(name).exists(), "{name} removed");
        assert!(
            log.contains(&format!("removed {}", data.path().join(name).display())),
            "{log}"
        );
    }
    assert!(
        data.path().join(&running).exists(),
        "{running}: its process runs"
    );
    assert_private(data.path(), &[&running, "notify"]);
    server.stop();
}

#[test]
fn a_backup_under_nonstop_requests_fails_none_and_delays_none_by_a_second() {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let key = cli_account(&data, "booth", "business");
    // Backdrops make the file megabytes, as on a booth's appliance.
    for n in 0..4 {
        let background = root.path().join(format!("{n}.jpg"));
        std::fs::write(&background, jpeg(4000, 3000)).unwrap();
        cutout_cli(
            &data,
            &[
                "backdrop",
                "add",
                &format!("b{n}"),
                background.to_str().unwrap(),
            ],
        );
    }
    let server = Server::start(&data, "warn", &[]);
    let mut form = Multipart::new();
    form.file("image_file", &jpeg(320, 240));
    let stop = std::sync::atomic::AtomicBool::new(false);
    let file = root.path().join("nonstop.cutout-backup");
    // A client calling nonstop: each call's start and end.
    let (calls, window) = std::thread::scope(|s| {
        let client = s.spawn(|| {
            let mut calls = vec![];
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let started = Instant::now();
                let reply = post_form(server.addr, Some(&key), &form);
                assert_eq!(reply.status, 200, "{}", reply.text());
                calls.push((started, Instant::now()));
            }
            calls
        });
        std::thread::sleep(Duration::from_secs(3));
        let started = Instant::now();
        let out = cutout(&data, &["backup", file.to_str().unwrap()], &[]);
        assert!(out.status.success(), "{}", stderr(&out));
        let window = (started, Instant::now());
        std::thread::sleep(Duration::from_secs(3));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (client.join().unwrap(), window)
    });
    let took = |(start, end): &(Instant, Instant)| *end - *start;
    let longest =
        |calls: &[&(Instant, Instant)]| calls.iter().map(|&&(start, end)| end - start).max();
    let (during, alone): (Vec<_>, Vec<_>) = calls
        .iter()
        .partition(|(start, end)| *start < window.1 && *end > window.0);
    let worst = longest(&during).expect("a call during the backup");
    let usual = longest(&alone).unwrap();
    eprintln!(
        "backup of {:.1} MB in {:.2?}; {} calls during it, the slowest {worst:.2?} (otherwise {usual:.2?})",
        std::fs::metadata(&file).unwrap().len() as f64 / 1e6,
        took(&window),
        during.len()
    );
    assert!(
        worst <= usual + Duration::from_secs(1),
        "{worst:?} against {usual:?}"
    );
    server.stop();
    assert_eq!(used(&data, "booth") as usize, calls.len());
}

#[test]
fn bad_backups_are_refused_with_what_was_wrong_and_the_appliance_unchanged() {
    let root = tempfile::tempdir().unwrap();
    let (old, _, _) = used_appliance(root.path());
    let good = root.path().join("good.cutout-backup");
    assert!(cutout(&old, &["backup", good.to_str().unwrap()], &[])
        .status
        .success());
    let bytes = std::fs::read(&good).unwrap();

    // The appliance restored onto: its own account, its own count.
    let target = root.path().join("target");
    cli_account(&target, "local", "pro");
    cutout_cli(&target, &["usage", "set", "local", "--count", "7"]);
    std::fs::write(target.join("cutout.toml"), "").unwrap();
    let before = std::fs::read(target.join("cutout.db")).unwrap();

    let mut flipped = bytes.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x01;
    let mut header_flipped = bytes.clone();
    header_flipped[40] ^= 0x01;
    let newer = with_manifest(&good, |m| m["schema"] = 999.into());
    let newer_format = with_manifest(&good, |m| m["format"] = 2.into());
    // A changed salt is a wrong passphrase to scrypt: either message.
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("wrong passphrase", bytes.clone(), "wrong passphrase"),
        ("truncated", bytes[..bytes.len() - 100].to_vec(), "damaged"),
        (
            "cut in the header",
            bytes[..30].to_vec(),
            "not a cutout backup",
        ),
        ("a byte flipped in the middle", flipped, "damaged"),
        (
            "a byte flipped in the header's salt",
            header_flipped,
            "wrong passphrase",
        ),
        ("from a newer schema", newer, "newer cutout"),
        ("from a newer format", newer_format, "newer cutout"),
        ("not a backup", jpeg(64, 48), "not a cutout backup"),
        ("over accounts without --yes", bytes.clone(), "--yes"),
    ];
    for (what, file_bytes, expected) in cases {
        let file = root.path().join("bad.cutout-backup");
        std::fs::write(&file, &file_bytes).unwrap();
        let out = if what == "wrong passphrase" {
            let wrong = root.path().join("wrong");
            std::fs::write(&wrong, "not the passphrase at all\n").unwrap();
            Command::new(cutout_binary())
                .arg("--data-dir")
                .arg(&target)
                .arg("--config")
                .arg(target.join("cutout.toml"))
                .args(["restore", file.to_str().unwrap(), "--passphrase-file"])
                .arg(&wrong)
                .output()
                .unwrap()
        } else {
            cutout(&target, &["restore", file.to_str().unwrap()], &[])
        };
        let said = stderr(&out);
        assert!(!out.status.success(), "{what}: restored");
        assert!(said.contains(expected), "{what}: {said}");
        assert!(!said.contains("panicked"), "{what}: {said}");
        assert_eq!(
            std::fs::read(target.join("cutout.db")).unwrap(),
            before,
            "{what}: the database changed"
        );
        assert!(
            !target.join("tls").exists(),
            "{what}: a certificate appeared"
        );
        assert_eq!(
            std::fs::read(target.join("cutout.toml")).unwrap(),
            b"",
            "{what}: the configuration changed"
        );
        let left = dot_files(&target);
        assert!(left.is_empty(), "{what}: left {left:?}");
        eprintln!("{what}: {}", said.trim());
    }
    assert_eq!(used(&target, "local"), 7);

    // While the service answers: refused too.
    let server = Server::start(&target, "warn", &[]);
    let listen = [("CUTOUT_LISTEN", server.addr.to_string())];
    let out = cutout(
        &target,
        &["restore", good.to_str().unwrap(), "--yes"],
        &listen,
    );
    assert!(
        stderr(&out).contains("stop the service first"),
        "{}",
        stderr(&out)
    );
    server.stop();

    // With --yes, the backup's accounts replace this appliance's.
    let out = cutout(&target, &["restore", good.to_str().unwrap(), "--yes"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let accounts = cutout_cli(&target, &["account", "list"]);
    assert!(
        accounts.contains("booth") && !accounts.contains("local"),
        "{accounts}"
    );
    undone_then_deleted(&target);
}

/// The restore just made on `data` (with `local`, 7 images used, over an
/// appliance with no certificate or backdrop) is undone from the command
/// line, and what the undo replaced deleted on the Status page.
fn undone_then_deleted(data: &Path) {
    let out = cutout(data, &["restore", "--undo"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let accounts = cutout_cli(data, &["account", "list"]);
    assert!(
        accounts.contains("local") && !accounts.contains("booth"),
        "{accounts}"
    );
    assert_eq!(used(data, "local"), 7);
    assert!(!data.join("tls").join("certificate.pem").exists());
    assert_eq!(std::fs::read(data.join("cutout.toml")).unwrap(), b"");

    set_operator_password(data, PASSPHRASE);
    let server = Server::start(data, "warn", &[]);
    let operator = Browser::at(server.addr);
    assert_eq!(operator.sign_in("admin", PASSPHRASE).status, 303);
    let status = operator.get("/admin/status").text();
    assert!(
        status.contains(
            "replaced the database, the HTTPS certificate, 1 backdrop(s) and the configuration file"
        ),
        "{status}"
    );
    let csrf = operator.csrf("/admin/status");
    let deleted = operator.post("/admin/status/replaced", &[("csrf", &csrf)]);
    assert_eq!(deleted.status, 303);
    let status = operator.get("/admin/status?done=replaced-deleted").text();
    assert!(status.contains("can no longer be undone"), "{status}");
    assert!(!status.contains("Before the restore"));
    assert!(!data.join("replaced-by-restore").exists());
    server.stop();
    let out = cutout(data, &["restore", "--undo"], &[]);
    assert!(stderr(&out).contains("nothing to undo"), "{}", stderr(&out));
}

/// `backup` sealed again with its manifest changed by `edit`.
fn with_manifest(backup: &Path, edit: impl Fn(&mut serde_json::Value)) -> Vec<u8> {
    use cutout::backup::seal::{Opening, Sealing};
    use std::io::Read;
    let file = std::io::BufReader::new(std::fs::File::open(backup).unwrap());
    let mut archive = tar::Archive::new(Opening::new(file, PASSPHRASE).unwrap());
    let mut builder = tar::Builder::new(Sealing::new(vec![], PASSPHRASE).unwrap());
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().into_owned();
        let mut bytes = vec![];
        entry.read_to_end(&mut bytes).unwrap();
        if name == Path::new("cutout-backup.json") {
            let mut manifest: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            edit(&mut manifest);
            bytes = serde_json::to_vec(&manifest).unwrap();
        }
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o600);
        builder.append_data(&mut header, &name, &bytes[..]).unwrap();
    }
    builder.into_inner().unwrap().finish().unwrap()
}

#[test]
fn the_operator_downloads_from_the_dashboard_a_backup_that_restores() {
    let app = spawn_app();
    app.account("booth", "pro");
    let operator = app.admin();
    let page = operator.get("/admin/backup");
    assert_eq!(page.status, 200);
    assert!(page.text().contains("Download a backup"), "{}", page.text());
    let csrf = operator.csrf("/admin/backup");
    let post = |passphrase: &str, again: &str| {
        operator.post(
            "/admin/backup",
            &[
                ("csrf", &csrf),
                ("passphrase", passphrase),
                ("passphrase_again", again),
            ],
        )
    };
    let differ = post(PASSPHRASE, "another passphrase entirely");
    assert_eq!(differ.status, 400);
    assert!(differ.text().contains("The two passphrases differ."));
    let short = post("too short", "too short");
    assert_eq!(short.status, 400);
    assert!(short.text().contains("at least 12 characters"));
    let stranger = Browser::new(&app).post(
        "/admin/backup",
        &[("passphrase", PASSPHRASE), ("passphrase_again", PASSPHRASE)],
    );
    assert_ne!(stranger.status, 200);

    let reply = post(PASSPHRASE, PASSPHRASE);
    assert_eq!(reply.status, 200, "{}", reply.text());
    let disposition = reply.header("content-disposition").unwrap();
    assert!(
        disposition.starts_with("attachment; filename=\"cutout-")
            && disposition.ends_with(".cutout-backup\""),
        "{disposition}"
    );
    assert!(reply.body.starts_with(b"cutout-backup\n"));
    let (_root, fresh, _) = restored_from_download(app.data_dir(), &reply.body);
    assert_eq!(used(&fresh, "booth"), 0);
}

/// A downloaded `backup`, with nothing of it left in `data`, restored into
/// a fresh data directory: the directory and what `cutout restore` said.
fn restored_from_download(data: &Path, backup: &[u8]) -> (tempfile::TempDir, PathBuf, String) {
    let leftovers = dot_files(data);
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join("from-the-dashboard.cutout-backup");
    std::fs::write(&file, backup).unwrap();
    let fresh = root.path().join("fresh");
    let out = cutout(&fresh, &["restore", file.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    (
        root,
        fresh,
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// `cutout admin set-password` on `data`, the password typed.
fn set_operator_password(data: &Path, password: &str) {
    let out = cli_set_password(data, &format!("{password}\n"));
    assert!(out.status.success(), "{out:?}");
}

/// The highest resident set of process `pid` so far, in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .unwrap();
    line.trim().trim_end_matches("kB").trim().parse().unwrap()
}

/// `count` backdrops of noise in `data`, 9.7 MB each (noise does not
/// compress: a 1800x1800 PNG), one made and copied.
pub(crate) fn noise_backdrops(data: &Path, count: usize) {
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let noise = image::RgbImage::from_fn(1800, 1800, |_, _| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let [r, g, b, ..] = state.to_le_bytes();
        image::Rgb([r, g, b])
    });
    let mut png = Vec::new();
    noise
        .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .unwrap();
    let backdrops = cutout::backdrops::Backdrops::in_data_dir(data);
    backdrops.add("Noise", &png, None).unwrap();
    let dir = data.join("backdrops");
    for copy in 1..count {
        let to = dir.join(format!("noise-{copy}"));
        std::fs::create_dir(&to).unwrap();
        for file in std::fs::read_dir(dir.join("noise")).unwrap() {
            let file = file.unwrap();
            std::fs::copy(file.path(), to.join(file.file_name())).unwrap();
        }
    }
}

#[test]
fn a_dashboard_download_of_200_mb_of_backdrops_streams_from_a_file() {
    let data = tempfile::tempdir().unwrap();
    noise_backdrops(data.path(), 21);
    set_operator_password(data.path(), PASSPHRASE);

    let server = Server::start(data.path(), "warn", &[]);
    let operator = Browser::at(server.addr);
    assert_eq!(operator.sign_in("admin", PASSPHRASE).status, 303);
    let csrf = operator.csrf("/admin/backup");
    let before = peak_rss_kib(server.child.id());
    let reply = operator.post(
        "/admin/backup",
        &[
            ("csrf", &csrf),
            ("passphrase", PASSPHRASE),
            ("passphrase_again", PASSPHRASE),
        ],
    );
    assert_eq!(reply.status, 200, "{}", reply.text());
    let grew_mib = (peak_rss_kib(server.child.id()) - before) >> 10;
    assert!(reply.body.len() > 200_000_000, "{} bytes", reply.body.len());
    assert!(reply.body.starts_with(b"cutout-backup\n"));
    eprintln!(
        "a {} MB download: the server's peak grew {grew_mib} MiB",
        reply.body.len() / 1_000_000
    );
    assert!(grew_mib < 64, "the server's peak grew {grew_mib} MiB");
    let (_root, _, said) = restored_from_download(data.path(), &reply.body);
    assert!(said.contains("21 backdrop(s)"), "{said}");
}

/// `[backup] dir`: while the stick is missing, the Status page says why no
/// backup was made; once it is there, one every interval, the newest
/// `keep` kept, the Status page naming the last, which restores whole.
#[test]
fn scheduled_backups_keep_the_newest_and_the_status_page_names_the_last() {
    let root = tempfile::tempdir().unwrap();
    let stick = root.path().join("stick");
    let passphrase_file = root.path().join("passphrase");
    std::fs::write(&passphrase_file, passphrase_file_text()).unwrap();
    let schedule = cutout::backup::schedule::Schedule {
        dir: stick.clone(),
        passphrase_file,
        every: Duration::from_secs(1),
        keep: 2,
    };
    let app = spawn_app_with(cutout::EngineSource::Ready(u2netp()), |s| {
        s.backup = Some(schedule)
    });
    let key = app.account("booth", "pro");
    assert_eq!(app.post_image(Some(&key), &jpeg(64, 48), None).status, 200);
    let admin = app.admin();
    let status = || admin.get("/admin/status").text();
    wait_until("the Status page says the stick is missing", || {
        status().contains("The last one failed at")
    });
    assert!(status().contains("none made yet"), "{}", status());
    assert!(
        status().contains("No such file or directory"),
        "{}",
        status()
    );

    std::fs::create_dir(&stick).unwrap();
    let backups = || {
        let mut names: Vec<String> = std::fs::read_dir(&stick)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".backup")) // not one being written
            .collect();
        names.sort();
        names
    };
    let first = {
        wait_until("a first backup", || !backups().is_empty());
        backups()[0].clone()
    };
    wait_until("the first one removed, as two newer are kept", || {
        let now = backups();
        now.len() == 2 && !now.contains(&first)
    });
    let newest = backups().pop().unwrap();
    assert!(
        newest.starts_with("cutout-") && newest.ends_with("Z.backup"),
        "{newest}"
    );
    let page = status();
    assert!(page.contains("last made "), "{page}");
    assert!(!page.contains("failed"), "{page}");
    drop(app);

    let last = backups().pop().unwrap();
    let restored = root.path().join("restored");
    let out = cutout(
        &restored,
        &["restore", stick.join(&last).to_str().unwrap()],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    use cutout::store::Store;
    let store = cutout::store::SqliteStore::open(&restored).unwrap();
    let booth = store.account("booth").unwrap();
    let march = cutout::domain::Month::of_unix(MID_MARCH);
    assert_eq!(store.usage(booth.id, march).unwrap(), 1);

    let setup = SetupPage::open(&root.path().join("set-up"));
    let backup = std::fs::read(stick.join(&last)).unwrap();
    let done = setup.restore(&backup, PASSPHRASE);
    assert_eq!(done.status, 200, "{}", done.text());
    setup
        .server
        .log_once_it_says("put a restored backup in place");
}

/// A new card's setup page, opened with the setup link its log prints.
pub(crate) struct SetupPage {
    server: Server,
    browser: Browser,
    token: String,
    csrf: String,
}

impl SetupPage {
    pub(crate) fn open(data: &Path) -> SetupPage {
        std::fs::create_dir_all(data).unwrap();
        let config = data.join("cutout.toml");
        std::fs::write(&config, "").unwrap();
        let server = Server::start(data, "info", &["--config", config.to_str().unwrap()]);
        let log = server.log_once_it_says("No operator password is set");
        let (_, after) = log.split_once("?token=").unwrap();
        let token = after.split_whitespace().next().unwrap().to_owned();
        let browser = Browser::at(server.addr);
        let page = browser.get(&format!("/setup?token={token}"));
        assert!(
            page.text().contains("Restore and restart"),
            "{}",
            page.text()
        );
        let csrf = csrf_in(&page);
        SetupPage {
            server,
            browser,
            token,
            csrf,
        }
    }

    fn restore_with(&self, token: &str, file: &[u8], passphrase: &str) -> Reply {
        let mut form = Multipart::new();
        form.text("csrf", &self.csrf)
            .text("token", token)
            .file("backup_file", file)
            .text("passphrase", passphrase);
        self.browser.post_multipart("/setup/restore", &form)
    }

    pub(crate) fn restore(&self, file: &[u8], passphrase: &str) -> Reply {
        self.restore_with(&self.token, file, passphrase)
    }
}

/// A new card's setup page takes the old appliance's backup, behind the
/// setup link: a wrong passphrase and a file cut short are refused on the
/// page with nothing changed; the good one is restored, the program starts
/// again by itself (the same process, as systemd sees it), and the booth's
/// key cuts out, charged to the same month, with the old certificate and
/// the old operator password.
#[test]
fn the_setup_page_restores_the_old_appliance_and_starts_again_with_it() {
    const OLD_PASSWORD: &str = "the old operator password";
    let root = tempfile::tempdir().unwrap();
    let (old, key, _) = used_appliance(root.path());
    set_operator_password(&old, OLD_PASSWORD);
    let file = root.path().join("old.backup");
    let out = cutout(&old, &["backup", file.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let backup = std::fs::read(&file).unwrap();

    let new = root.path().join("new");
    let setup = SetupPage::open(&new);
    let (server, config) = (&setup.server, new.join("cutout.toml"));
    let pid = server.child.id();
    let restore = |file: &[u8], passphrase: &str| setup.restore(file, passphrase);
    let stranger = setup.restore_with(&"0".repeat(64), &backup, PASSPHRASE);
    assert_eq!(
        stranger.status,
        404,
        "without the setup link: {}",
        stranger.text()
    );
    let wrong = restore(&backup, "not the passphrase at all");
    assert_eq!(wrong.status, 400);
    assert!(
        wrong.text().contains("Wrong passphrase for this file"),
        "{}",
        wrong.text()
    );
    let cut_short = restore(&backup[..backup.len() - 100], PASSPHRASE);
    assert_eq!(cut_short.status, 400);
    assert!(
        cut_short.text().contains("This file is damaged"),
        "{}",
        cut_short.text()
    );
    assert_eq!(
        cutout_cli(&new, &["account", "list"]).lines().count(),
        1,
        "no accounts"
    );
    assert_eq!(
        dot_files(&new).len(),
        0,
        "nothing left of the refused uploads"
    );

    let done = restore(&backup, PASSPHRASE);
    assert_eq!(done.status, 200, "{}", done.text());
    assert!(
        done.text().contains("restarts with it now"),
        "{}",
        done.text()
    );
    let log = server.log_once_it_says("put a restored backup in place");
    let listening = || {
        let log = std::fs::read_to_string(&server.log).unwrap();
        let lines: Vec<String> = log
            .lines()
            .filter(|l| l.contains("listening on http://"))
            .map(str::to_owned)
            .collect();
        (lines.len() == 2).then(|| {
            lines[1]
                .rsplit("http://")
                .next()
                .unwrap()
                .parse::<std::net::SocketAddr>()
                .unwrap()
        })
    };
    wait_until("the program started again", || listening().is_some());
    assert!(
        log.contains("1 account(s), HTTPS certificate, 1 backdrop(s)"),
        "{log}"
    );
    assert_eq!(server.child.id(), pid);
    let addr = listening().unwrap();
    wait_until("the model loaded", || {
        request(addr, "GET", "/readyz", &[], b"").status == 200
    });
    let mut form = Multipart::new();
    form.file("image_file", &jpeg(64, 48));
    let reply = post_form(addr, Some(&key), &form);
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.header("x-ratelimit-remaining"), Some("497"));
    let admin = Browser::at(addr).sign_in("admin", OLD_PASSWORD);
    assert_eq!(admin.status, 303, "{}", admin.text());
    let (old_certificate, _) = cutout::tls::made_paths(&old);
    let (new_certificate, _) = cutout::tls::made_paths(&new);
    assert_eq!(
        std::fs::read(new_certificate).unwrap(),
        std::fs::read(old_certificate).unwrap()
    );
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        std::fs::read_to_string(old.join("cutout.toml")).unwrap()
    );
    let (_, stopped, _) = setup.server.stop();
    assert!(stopped);
}
