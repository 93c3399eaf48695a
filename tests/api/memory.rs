//! What a cut-out holds follows its pixels, their depth and its options,
//! not the size of its upload; so each request's peak is worked out from
//! its header before a pixel is decoded (`pipeline::memory`) and reserved
//! against the board's budget. Here the binary's resident set is measured
//! over the idle server for the requests that cost most, against what the
//! server reserved for each, and the budget's refusals are checked.

use crate::helpers::*;
use std::time::Duration;

const MIB: u64 = 1 << 20;

/// The server's peak resident set since the last reset, and now, in bytes.
fn peak_and_now(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        let line = status.lines().find_map(|l| l.strip_prefix(name)).unwrap();
        line.trim()
            .trim_end_matches("kB")
            .trim()
            .parse::<u64>()
            .unwrap()
            * 1024
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// Starts the peak over from the resident set now (Linux's clear_refs 5).
fn reset_peak(pid: u32) {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
}

struct Measured {
    status: u16,
    /// The peak resident set over the one before the request.
    over_idle: u64,
    /// What the server reserved for it, from its log.
    reserved: u64,
}

fn post(server: &Server, key: &str, photo: &[u8], fields: &[(&str, &str)]) -> Reply {
    let mut form = Multipart::new();
    form.file("image_file", photo);
    for (name, value) in fields {
        form.text(name, value);
    }
    post_form(server.addr, Some(key), &form)
}

/// `photo` with `fields`, alone on `server`: its peak over the idle server.
fn measure(server: &Server, key: &str, photo: &[u8], fields: &[(&str, &str)]) -> Measured {
    let pid = server.child.id();
    // The last request's answer is freed once sent: let it go first.
    std::thread::sleep(Duration::from_millis(200));
    reset_peak(pid);
    let (_, idle) = peak_and_now(pid);
    let reply = post(server, key, photo, fields);
    let (peak, _) = peak_and_now(pid);
    let log = std::fs::read_to_string(&server.log).unwrap();
    let reserved = log
        .lines()
        .rev()
        .find_map(|l| {
            l.split(" needs ")
                .nth(1)?
                .split(" bytes")
                .next()?
                .parse()
                .ok()
        })
        .expect("the server logs what it reserves");
    Measured {
        status: reply.status,
        over_idle: peak.saturating_sub(idle),
        reserved,
    }
}

#[test]
fn the_costliest_requests_stay_within_what_is_reserved_for_them_on_tract() {
    costliest_requests_within_their_reserve("tract");
}

#[test]
fn the_costliest_requests_stay_within_what_is_reserved_for_them_on_onnxruntime() {
    costliest_requests_within_their_reserve("onnxruntime");
}

/// On `engine`, a server serving U2NetP that has run only IS-Net, for one
/// small `type=car` request: U2NetP's first request is one of the measured.
fn costliest_requests_within_their_reserve(engine: &str) {
    let data = tempfile::tempdir().unwrap();
    let key = cli_account(data.path(), "booth", "business");
    let env = [("CUTOUT_ENGINE", engine.to_owned())];
    let server = Server::start_with(
        data.path(),
        &models_dir(),
        "warn,cutout::serve=info,cutout::pipeline=debug",
        &[],
        &env,
    );
    let warm = post(&server, &key, &jpeg(600, 600), &[("type", "car")]);
    assert_eq!(warm.status, 200, "{}", warm.text());
    let log = std::fs::read_to_string(&server.log).unwrap();
    assert!(
        log.contains(&format!("serving u2netp on {engine}")),
        "{log}"
    );

    let photo_12mp = large_photo_jpeg(4000, 3000);
    let photo_25mp = large_photo_jpeg(5000, 5000);
    let checkerboard = checkerboard_png(5000, 5000, 40);
    let mut cases = vec![
        Costly {
            what: "12 MP photo",
            photo: photo_12mp,
            fields: &[],
        },
        Costly {
            what: "25 MP photo, format=zip",
            photo: photo_25mp.clone(),
            fields: &[("format", "zip"), ("size", "full")],
        },
        Costly {
            what: "25 MP photo, format=webp over a colour",
            photo: photo_25mp.clone(),
            fields: &[("format", "webp"), ("bg_color", "ffffff80")],
        },
        Costly {
            what: "25 MP photo cropped with 50% margins, as JPEG",
            photo: photo_25mp,
            fields: &[("crop", "true"), ("crop_margin", "50%"), ("format", "jpg")],
        },
        Costly {
            what: "25 MP checkerboard, type=car",
            photo: checkerboard,
            fields: &[("type", "car")],
        },
    ];
    cases.extend(costliest_requests());
    assert!(cases.iter().all(|c| c.photo.len() < 10 << 20));
    let mut over = Vec::new();
    for Costly {
        what,
        photo,
        fields,
    } in &cases
    {
        let m = measure(&server, &key, photo, fields);
        eprintln!(
            "{engine}, {what} ({} KB): {} MiB over the idle server, {} MiB reserved",
            photo.len() / 1000,
            m.over_idle / MIB,
            m.reserved / MIB
        );
        assert_eq!(m.status, 200, "{what}");
        assert!(
            m.over_idle <= m.reserved,
            "{what}: {} MiB over the idle server, {} MiB reserved",
            m.over_idle / MIB,
            m.reserved / MIB
        );
        over.push(m.over_idle);
    }
    // type=person: MODNet at two sizes and U2NetP, their median; MODNet
    // loaded by a small request first (a load is outside any reserve), so
    // its first runs at a 12 MP photo's sizes are the measured request's.
    let load = post(&server, &key, &jpeg(300, 200), &[("type", "person")]);
    assert_eq!(load.status, 200, "{}", load.text());
    let photo_12mp = large_photo_jpeg(4000, 3000);
    let m = measure(&server, &key, &photo_12mp, &[("type", "person")]);
    eprintln!(
        "{engine}, 12 MP photo, type=person: {} MiB over the idle server, {} MiB reserved",
        m.over_idle / MIB,
        m.reserved / MIB
    );
    assert_eq!(m.status, 200);
    assert!(m.over_idle <= m.reserved, "type=person");
    // The fill holds a byte a pixel: well under 100 MiB on 25 MP.
    let over_for = |what: &str| over[cases.iter().position(|c| c.what == what).unwrap()];
    let without = over_for("25 MP checkerboard, type=car");
    let with = over_for("25 MP checkerboard, type=car, semitransparency=false");
    assert!(
        with < without + 100 * MIB,
        "semitransparency=false: {} MiB against {} MiB",
        with / MIB,
        without / MIB
    );
}

#[test]
fn a_request_over_the_budget_is_refused_for_what_it_needs_and_a_long_line_gets_503() {
    let data = tempfile::tempdir().unwrap();
    let key = cli_account(data.path(), "booth", "business");
    let env = [("CUTOUT_SERVER_MEMORY_BUDGET_MIB", "300".to_owned())];
    let server = Server::start_with(data.path(), &models_dir(), "warn", &[], &env);
    // 16-bit or not, 25 MP is 100 MB of RGBA at 8 bits: it fits.
    let fits = post(&server, &key, &sixteen_bit_png(5000, 5000), &[]);
    assert_eq!(fits.status, 200, "{}", fits.text());
    let too_large = post(&server, &key, &sixteen_bit_png(10_000, 5_000), &[]);
    assert_eq!(too_large.status, 400);
    assert_eq!(too_large.error_code(), "image_too_large");
    let detail = too_large.error_detail();
    assert!(
        detail.contains("10000x5000") && detail.contains("memory_budget_mib"),
        "{detail}"
    );
    let usage = cutout_cli(data.path(), &["usage", "booth"]);
    assert!(
        usage.contains(": 1 of"),
        "only the one served is charged: {usage}"
    );

    // Twelve at once of a request that takes most of the budget: some
    // served one after another, the rest told to come back, none failed.
    let photo = large_photo_jpeg(5000, 5000);
    let statuses: Vec<(u16, Option<String>)> = std::thread::scope(|s| {
        let posts: Vec<_> = (0..12)
            .map(|_| {
                s.spawn(|| {
                    let reply = post(&server, &key, &photo, &[("add_shadow", "true")]);
                    let retry = reply.header("retry-after").map(str::to_owned);
                    (reply.status, retry)
                })
            })
            .collect();
        posts.into_iter().map(|p| p.join().unwrap()).collect()
    });
    assert!(statuses.iter().any(|(s, _)| *s == 200), "{statuses:?}");
    assert!(statuses.iter().any(|(s, _)| *s == 503), "{statuses:?}");
    for (status, retry) in &statuses {
        assert!(
            *status == 200 || (*status == 503 && retry.is_some()),
            "{statuses:?}"
        );
    }
}

/// IS-Net on tract configured where the memory holds U2NetP but not IS-Net
/// loading (a 200 MiB limit: measured, IS-Net's load was killed at 120-200
/// MiB and loaded at 300): the kernel kills the first start while it
/// loads; the next one, as systemd's `Restart=` starts it, serves U2NetP on
/// tract instead of dying the same way, and says why in the log and on the
/// Status page, until the operator tries again.
#[test]
fn a_model_load_killed_for_memory_is_reported_and_the_next_start_serves_one_that_fits() {
    use std::os::unix::process::ExitStatusExt;
    let data = tempfile::tempdir().unwrap();
    let key = cli_account(data.path(), "booth", "pro");
    let password = "a long operator passphrase";
    assert!(cli_set_password(data.path(), &format!("{password}\n"))
        .status
        .success());
    let isnet = ["--model", "isnet", "--engine", "tract"];
    let board = Cgroup::new("killed-load", 200);

    let mut cutout = board.command(&cutout_binary());
    let mut first = serve_command(&mut cutout, data.path(), &models_dir(), &isnet)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = first.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "IS-Net loaded in 200 MiB"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status}");
    assert!(board.oom_kills() >= 1);
    assert!(board.peak_mib() >= 190, "{} MiB", board.peak_mib());

    let second = Server::start_in(&board, data.path(), &isnet);
    let log = second.log_once_it_says("model u2netp loaded on tract-onnx");
    assert!(
        log.contains("killed this appliance for memory while it loaded isnet on tract"),
        "{log}"
    );
    assert!(
        log.contains("with u2netp on tract in place of isnet"),
        "{log}"
    );
    let mut form = Multipart::new();
    form.file("image_file", &jpeg(320, 240));
    let reply = post_form(second.addr, Some(&key), &form);
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.header("x-model"), Some("u2netp"));

    let operator = Browser::at(second.addr);
    assert_eq!(operator.sign_in("admin", password).status, 303);
    let page = operator.get("/admin/status").text();
    assert!(page.contains("Killed for memory"), "{page}");
    assert!(page.contains("while it loaded isnet on tract"), "{page}");
    let csrf = operator.csrf("/admin/status");
    let cleared = operator.post("/admin/status/killed-for-memory", &[("csrf", &csrf)]);
    assert_eq!(cleared.status, 303);
    let page = operator.get("/admin/status?done=killed-forgotten").text();
    assert!(
        page.contains("The next start loads those models again"),
        "{page}"
    );
    assert!(!data.path().join(cutout::engine::KILLED_FILE).exists());
    second.stop();

    // With the memory for it, the next start loads IS-Net again.
    drop(board);
    let third = Server::start(data.path(), "info", &isnet);
    third.log_once_it_says("model isnet loaded on tract-onnx");
}
