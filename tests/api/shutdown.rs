//! Shutting down: requests in flight finish, new ones get 503.

use crate::helpers::*;
use cutout::EngineSource;
use std::sync::Arc;
use std::thread;

#[test]
fn shutdown_finishes_requests_in_flight_and_refuses_new_ones() {
    let gate = Arc::new(Gate::default());
    let app = Arc::new(spawn_app_with(
        EngineSource::Ready(Arc::new(GatedEngine(gate.clone()))),
        |_| {},
    ));
    let key = app.account("acme", "pro");
    let in_flight = {
        let (app, key) = (app.clone(), key.clone());
        thread::spawn(move || app.post_image(Some(&key), &jpeg(64, 48), None))
    };
    wait_until("the request is in flight", || app.in_flight("acme") == 1);

    let stopping = {
        let handle = app.shutdown.clone();
        thread::spawn(move || handle.shutdown())
    };
    wait_until("the app is stopping", || app.state.is_stopping());
    let refused = app.post_image(Some(&key), &jpeg(64, 48), None);
    assert_eq!(
        (refused.status, refused.error_code().as_str()),
        (503, "service_unavailable")
    );

    gate.open();
    assert_eq!(in_flight.join().unwrap().status, 200);
    stopping.join().unwrap();
    assert_eq!(app.used("acme"), 1);
}

/// The processes whose parent is `pid`, alive (not yet reaped zombies aside).
fn children_of(pid: u32) -> Vec<u32> {
    let mut children = vec![];
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Some(fields) = stat_fields(child) {
            if fields[1] == pid.to_string() && fields[0] != "Z" {
                children.push(child);
            }
        }
    }
    children
}

/// `/proc/PID/stat`'s fields after the command's name: state, parent, …
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, after) = stat.rsplit_once(')')?;
    Some(after.split_whitespace().map(str::to_owned).collect())
}

const QUICK_STOP: std::time::Duration = std::time::Duration::from_secs(2);

/// Under the packaged unit's system call filter, as systemd applies it:
/// the board's measurement runs at the lowest priority, nothing the server
/// does at start or while idle is refused, and a stop with nothing in
/// flight is over within 2 s, also while it measures, its child with it.
#[test]
fn under_the_units_filter_the_measurement_yields_and_a_stop_is_quick() {
    let data = tempfile::tempdir().unwrap();
    let (took, clean, _) = Server::start_under_unit_filter(data.path(), &[], &[]).stop();
    assert!(clean, "a clean stop");
    assert!(took < QUICK_STOP, "stopped in {took:?} with nothing to do");

    let measure = [("CUTOUT_PIPELINE_BENCH_WHEN_IDLE", "true".to_owned())];
    let server = Server::start_under_unit_filter(data.path(), &[], &measure);
    let pid = server.child.id();
    // Once idle 10 s and its 12 MP photo made, the first rung is timed.
    wait_until("the measurement's child runs", || {
        !children_of(pid).is_empty()
    });
    let measuring = children_of(pid)[0];
    // Set by the server just after the child started.
    wait_until("the measurement runs at niceness 19", || {
        stat_fields(measuring).is_some_and(|f| f[16] == "19")
    });
    let (took, clean, log) = server.stop();
    assert!(clean, "a clean stop");
    assert!(took < QUICK_STOP, "stopped in {took:?} while measuring");
    wait_until("the measurement ended with the server", || {
        stat_fields(measuring).is_none_or(|f| f[0] == "Z")
    });
    for refused in ["not permitted", "denied", "EPERM", "priority"] {
        assert!(!log.contains(refused), "{refused:?} in the log: {log}");
    }
}

/// A request still running when the grace period is over is not waited
/// for: the stop takes the grace it says, and the request is not charged.
/// Here a client that sends half its photo and then nothing, as a booth
/// whose Wi-Fi dropped.
#[test]
fn a_request_running_past_the_grace_is_not_waited_for() {
    let data = tempfile::tempdir().unwrap();
    let key = cli_account(data.path(), "booth", "pro");
    let grace = [("CUTOUT_SERVER_SHUTDOWN_GRACE_SECS", "1".to_owned())];
    let server = Server::start_with(
        data.path(),
        &models_dir(),
        "info",
        &["--engine", "tract"],
        &grace,
    );
    let addr = server.addr;
    let mut form = Multipart::new();
    form.file("image_file", &jpeg(640, 480));
    let headers = [
        ("Content-Type".to_owned(), form.content_type()),
        ("X-Api-Key".to_owned(), key),
    ];
    let raw = raw_request(addr, "POST", "/api/remove-bg", &headers, &form.body());
    let (sent, half_sent) = std::sync::mpsc::channel();
    let client = thread::spawn(move || {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream.write_all(&raw[..raw.len() / 2]).unwrap();
        sent.send(()).unwrap();
        let mut reply = vec![];
        let _ = stream.read_to_end(&mut reply);
        reply.starts_with(b"HTTP/1.1 200")
    });
    half_sent.recv().unwrap();
    // Its head read, a worker waits for the rest of its form.
    thread::sleep(std::time::Duration::from_millis(300));
    let (took, clean, log) = server.stop();
    assert!(clean, "a clean stop");
    assert!(
        took < std::time::Duration::from_millis(2500),
        "stopped in {took:?} with a grace of 1 s"
    );
    assert!(!client.join().unwrap(), "no answer to half a request");
    assert!(
        log.contains("the grace period is over: stopping with 1 requests unanswered"),
        "{log}"
    );
    let store = cutout::store::SqliteStore::open(data.path()).unwrap();
    let month = cutout::domain::Month::of_unix(cutout::clock::Clock::default().now_unix());
    use cutout::store::Store;
    assert_eq!(
        store
            .usage(store.account("booth").unwrap().id, month)
            .unwrap(),
        0
    );
}
