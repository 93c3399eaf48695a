//! What one LAN client can try to stop service for everyone, each attack
//! against the binary under the unit's 1,024 open files with HTTPS beside
//! plain HTTP. During each and after it, a legitimate client on another
//! address gets `/healthz` within 2 s every time and a cut-out within 30 s,
//! over both; each test prints that client's worst latency.

use crate::helpers::*;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const HEALTH_WITHIN: Duration = Duration::from_secs(2);
const CUT_OUT_WITHIN: Duration = Duration::from_secs(30);

/// The binary with HTTPS on, and the Pro account `guest`'s key.
struct Appliance {
    server: Server,
    https: SocketAddr,
    fingerprint: String,
    guest: String,
    data: tempfile::TempDir,
}

fn appliance(env: &[(&str, String)]) -> Appliance {
    let data = tempfile::tempdir().unwrap();
    let guest = cli_account(data.path(), "guest", "pro");
    let mut env = env.to_vec();
    env.push(("CUTOUT_TLS_LISTEN", "127.0.0.1:0".into()));
    let server = Server::start_limited(data.path(), "warn,cutout::http=info", 1024, &env);
    let log = server.log_once_it_says("certificate SHA-256 fingerprint");
    let line = log.lines().find(|l| l.contains("HTTPS on ")).unwrap();
    let (_, after) = line.split_once("HTTPS on ").unwrap();
    let (https, after) = after.split_once(';').unwrap();
    let fingerprint = after.rsplit(' ').next().unwrap().trim().to_owned();
    Appliance {
        https: https.parse().unwrap(),
        fingerprint,
        guest,
        server,
        data,
    }
}

impl Appliance {
    /// The sum of the metric lines that start with `prefix`.
    fn metric(&self, prefix: &str) -> f64 {
        let text = request(self.server.addr, "GET", "/metrics", &[], b"").text();
        text.lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// The guest's cut-out over plain HTTP, then over HTTPS, each in time.
    fn guest_cuts_out(&self) {
        let mut form = Multipart::new();
        form.file("image_file", &jpeg(64, 48));
        for https in [false, true] {
            let started = Instant::now();
            let reply = if https {
                let headers = [
                    ("X-Api-Key".to_owned(), self.guest.clone()),
                    ("Content-Type".to_owned(), form.content_type()),
                ];
                let raw = raw_request(self.https, "POST", "/api/remove-bg", &headers, &form.body());
                send_pinned(self.https, &self.fingerprint, &raw).unwrap()
            } else {
                post_form(self.server.addr, Some(&self.guest), &form)
            };
            let took = started.elapsed();
            assert_eq!(reply.status, 200, "https={https}: {}", reply.text());
            assert!(
                took < CUT_OUT_WITHIN,
                "https={https}: a cut-out took {took:?}"
            );
            eprintln!("the guest's cut-out (https={https}) took {took:?}");
        }
    }
}

/// The legitimate client: `/healthz` over HTTP and HTTPS, and the sign-in
/// page over HTTPS, every 100 ms until stopped.
struct Watch {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<String>>,
    worst: Arc<Mutex<(Duration, Duration, usize)>>,
}

fn watch(app: &Appliance) -> Watch {
    let stop = Arc::new(AtomicBool::new(false));
    let worst = Arc::new(Mutex::new((Duration::ZERO, Duration::ZERO, 0)));
    let (addr, https, fingerprint) = (app.server.addr, app.https, app.fingerprint.clone());
    let thread = {
        let (stop, worst) = (stop.clone(), worst.clone());
        std::thread::spawn(move || {
            let mut failures = vec![];
            while !stop.load(Ordering::Relaxed) {
                // A connection closed without an answer is status 0.
                let status_of = |ask: &dyn Fn() -> u16| {
                    let started = Instant::now();
                    let status = std::panic::catch_unwind(std::panic::AssertUnwindSafe(ask));
                    (status.unwrap_or(0), started.elapsed())
                };
                let (plain, plain_took) =
                    status_of(&|| request(addr, "GET", "/healthz", &[], b"").status);
                let over_https = |path: &str| {
                    let raw = raw_request(https, "GET", path, &[], b"");
                    send_pinned(https, &fingerprint, &raw).map_or(0, |r| r.status)
                };
                let (secure, secure_took) = status_of(&|| over_https("/healthz"));
                let (sign_in, sign_in_took) = status_of(&|| over_https("/login"));
                for (what, status, took) in [
                    ("GET /healthz over HTTP", plain, plain_took),
                    ("GET /healthz over HTTPS", secure, secure_took),
                    ("GET /login over HTTPS", sign_in, sign_in_took),
                ] {
                    if status != 200 || took >= HEALTH_WITHIN {
                        failures.push(format!("{what}: {status} in {took:?}"));
                    }
                }
                let mut worst = worst.lock().unwrap();
                worst.0 = worst.0.max(plain_took);
                worst.1 = worst.1.max(secure_took).max(sign_in_took);
                worst.2 += 1;
                drop(worst);
                std::thread::sleep(Duration::from_millis(100));
            }
            failures
        })
    };
    Watch {
        stop,
        thread,
        worst,
    }
}

impl Watch {
    fn finish(self, attack: &str) {
        self.stop.store(true, Ordering::Relaxed);
        let failures = self.thread.join().unwrap();
        let (plain, secure, checks) = *self.worst.lock().unwrap();
        eprintln!(
            "{attack}: the legitimate client's worst latency over {checks} checks: \
             HTTP {plain:?}, HTTPS {secure:?}"
        );
        assert!(failures.is_empty(), "{attack}: {failures:#?}");
    }
}

/// What the server sent until it closed the connection (or reset it).
fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut answer = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    while let Ok(n @ 1..) = stream.read(&mut buf) {
        answer.extend_from_slice(&buf[..n]);
    }
    answer
}

#[test]
fn pipelined_bursts_that_hang_up_are_not_served_to_the_end() {
    let app = appliance(&[("CUTOUT_SERVER_MAX_CONNECTIONS", "40".into())]);
    let watcher = watch(&app);
    let burst = "GET /api/openapi.json HTTP/1.1\r\nHost: t\r\n\r\n".repeat(300);
    // 540 connections from 9 addresses over 9 s, each 300 requests in one
    // write, then closed. (A client on the LAN spends its own CPU; here the
    // attackers share the server's two cores, so they pace themselves.)
    let attackers: Vec<_> = (1..=9u8)
        .map(|i| {
            let (addr, burst) = (app.server.addr, burst.clone());
            std::thread::spawn(move || {
                let mut bursts = 0;
                for _ in 0..60 {
                    if let Some(mut stream) = try_connect_from(IpAddr::from([127, 0, 1, i]), addr) {
                        let _ = stream.write_all(burst.as_bytes());
                        bursts += 1;
                    }
                    std::thread::sleep(Duration::from_millis(150));
                }
                bursts
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    app.guest_cuts_out();
    let bursts: u32 = attackers.into_iter().map(|a| a.join().unwrap()).sum();
    wait_until("the bursts' connections are closed", || {
        app.metric("cutout_connections_open") <= 3.0
    });
    app.guest_cuts_out();
    watcher.finish("pipelined bursts");
    let served = app.metric("cutout_http_requests_total{route=\"openapi\"");
    eprintln!("{served} of {} pipelined requests answered", bursts * 300);
    assert!(
        served <= f64::from(bursts) * 16.0,
        "{served} answered to {bursts} clients that had left"
    );
}

#[test]
fn a_client_that_pipelines_gets_sixteen_answers_in_a_row_then_its_connection_closes() {
    let app = appliance(&[]);
    let mut stream = TcpStream::connect(app.server.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let burst = "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n".repeat(100);
    stream.write_all(burst.as_bytes()).unwrap();
    // Read until the server closes, as a pipelining client must.
    let answers = read_until_closed(&mut stream);
    let answered = String::from_utf8_lossy(&answers)
        .matches("HTTP/1.1 200")
        .count();
    assert_eq!(answered, 16);
    // The same client, waiting for each answer, is served on and on.
    let mut stream = TcpStream::connect(app.server.addr).unwrap();
    for _ in 0..40 {
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        assert_eq!(read_reply(&mut stream).status, 200);
    }
}

/// A declared 10 MB upload that sends a byte every 5 s: the status it got
/// (0 for none) and when.
fn slow_upload(from: IpAddr, addr: SocketAddr, key: &str) -> (u16, Duration) {
    let started = Instant::now();
    let Some(mut stream) = try_connect_from(from, addr) else {
        return (0, started.elapsed());
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let head = format!(
        "POST /api/remove-bg HTTP/1.1\r\nHost: t\r\nX-Api-Key: {key}\r\n\
         Content-Type: multipart/form-data; boundary=b\r\nContent-Length: 10000000\r\n\r\n--b\r\n"
    );
    if stream.write_all(head.as_bytes()).is_err() {
        return (0, started.elapsed());
    }
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while started.elapsed() < Duration::from_secs(180) {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                answer.extend_from_slice(&buf[..n]);
                if Reply::complete(&answer) {
                    break;
                }
            }
            // Nothing yet: one more byte.
            Err(_) => {
                if stream.write_all(b"x").is_err() && answer.is_empty() {
                    let _ = stream.read_to_end(&mut answer);
                    break;
                }
            }
        }
    }
    let status = if answer.is_empty() {
        0
    } else {
        Reply::parse(&answer).status
    };
    (status, started.elapsed())
}

#[test]
fn slow_uploads_give_up_their_room_and_leave_room_for_another_account() {
    let app = appliance(&[]);
    let hog = cli_account(app.data.path(), "hog", "business");
    let watcher = watch(&app);
    let uploads: Vec<_> = (0..17)
        .map(|_| {
            let (addr, hog) = (app.server.addr, hog.clone());
            std::thread::spawn(move || slow_upload(IpAddr::from([127, 0, 2, 1]), addr, &hog))
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    app.guest_cuts_out();
    let ended: Vec<(u16, Duration)> = uploads.into_iter().map(|u| u.join().unwrap()).collect();
    eprintln!("17 slow uploads ended: {ended:?}");
    for (status, took) in &ended {
        assert_eq!(*status, 408, "{ended:?}");
        // Two waves: half the buffer's room is the account's, and its
        // first uploads' room comes free after their 10 s.
        assert!(*took < Duration::from_secs(40), "{ended:?}");
    }
    app.guest_cuts_out();
    watcher.finish("slow uploads");
    let account = request(
        app.server.addr,
        "GET",
        "/v1.0/account",
        &[("X-Api-Key".into(), hog)],
        b"",
    );
    let account: serde_json::Value = serde_json::from_slice(&account.body).unwrap();
    let used = account["data"]["attributes"]["used"].as_u64();
    assert_eq!(used, Some(0), "the slow uploads cost nothing");
}

#[test]
fn heads_a_proxy_could_read_two_ways_get_400_and_the_connection_closes() {
    let app = appliance(&[]);
    let watcher = watch(&app);
    let next = "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n";
    for (head, why) in [
        ("POST /api/remove-bg HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcde", "more than one Content-Length"),
        ("POST /api/remove-bg HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "both Content-Length and Transfer-Encoding"),
        ("POST /api/remove-bg HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n", "chunked"),
        ("GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "more than one Host"),
        ("GET /login\rSet-Cookie:x=1 HTTP/1.1\r\nHost: t\r\n\r\n", "CR"),
        ("GET /healthz HTTP/1.1\nHost: t\r\n\r\n", "LF without CR"),
        ("GET /healthz HTTP/1.1\r\nHost: t\r\nX-A: a\x01b\r\n\r\n", "malformed"),
        ("GET /he\x7fllo HTTP/1.1\r\nHost: t\r\n\r\n", "malformed"),
        ("POST /api/remove-bg HTTP/1.1\r\nHost: t\r\nContent-Length: 0x10\r\n\r\n", "not a number"),
    ] {
        let mut stream = TcpStream::connect(app.server.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        // A second request behind it: a smuggled one must not be answered.
        stream
            .write_all(format!("{head}{next}").as_bytes())
            .unwrap();
        let answer = read_until_closed(&mut stream);
        let text = String::from_utf8_lossy(&answer);
        assert_eq!(text.matches("HTTP/1.1 ").count(), 1, "{head:?}: {text}");
        let reply = Reply::parse(&answer);
        assert_eq!(
            (reply.status, reply.error_code().as_str()),
            (400, "invalid_request"),
            "{head:?}"
        );
        assert!(reply.text().contains(why), "{head:?}: {}", reply.text());
    }
    app.guest_cuts_out();
    watcher.finish("ambiguous heads");
    let log = std::fs::read_to_string(&app.server.log).unwrap();
    assert!(!log.contains("Set-Cookie"), "{log}");
}

#[test]
fn the_setup_link_is_for_https_alone_and_https_answers_carry_hsts() {
    let app = appliance(&[]);
    let log = app.server.log_once_it_says("No operator password is set");
    let line = log.lines().find(|l| l.contains("/setup?token=")).unwrap();
    let port = app.https.port();
    let link = format!("https://127.0.0.1:{port}/setup?token=");
    assert!(line.contains(&link) && !line.contains("http://"), "{line}");
    // A token sent over plain HTTP is not carried on to HTTPS.
    let reply = request(app.server.addr, "GET", "/setup?token=abc", &[], b"");
    assert_eq!(reply.status, 307);
    assert_eq!(
        reply.header("location"),
        Some(format!("https://127.0.0.1:{port}/setup").as_str())
    );
    assert_eq!(reply.header("strict-transport-security"), None);
    let raw = raw_request(app.https, "GET", "/healthz", &[], b"");
    let reply = send_pinned(app.https, &app.fingerprint, &raw).unwrap();
    assert_eq!(
        reply.header("strict-transport-security"),
        Some("max-age=31536000")
    );
}

#[test]
fn a_flood_of_refused_requests_is_logged_as_counts_not_a_line_each() {
    let app = appliance(&[]);
    let watcher = watch(&app);
    let flood = |n: usize| {
        let mut stream = try_connect_from(IpAddr::from([127, 0, 3, 1]), app.server.addr).unwrap();
        for _ in 0..n {
            stream
                .write_all(b"GET /v1.0/account HTTP/1.1\r\nHost: t\r\nX-Api-Key: wrong\r\n\r\n")
                .unwrap();
            assert_eq!(read_reply(&mut stream).status, 403);
        }
    };
    flood(2000);
    app.guest_cuts_out();
    let lines = |log: &str| {
        log.lines()
            .filter(|l| l.contains("/v1.0/account 403"))
            .count()
    };
    let log = app.server.log_once_it_says("/v1.0/account 403");
    assert_eq!(lines(&log), 1, "{log}");
    // The interval over, the next refusal brings the count.
    std::thread::sleep(Duration::from_secs(10));
    flood(1);
    // After the answer the server logs the summary, then the refusal's own
    // line: both are waited for.
    app.server
        .log_once_it_says("1999 more 403 answers to 127.0.3.1");
    wait_until(
        "the refusal after the interval has a line of its own",
        || lines(&std::fs::read_to_string(&app.server.log).unwrap()) == 2,
    );
    watcher.finish("refused requests");
}

#[test]
fn pairing_requests_from_many_addresses_neither_fill_memory_nor_slow_the_api() {
    use cutout::pairing::MAX_PENDING;
    let app = appliance(&[]);
    // Warm: the model's buffers are not the flood's.
    app.guest_cuts_out();
    let before = app.server.rss_kib();
    let watcher = watch(&app);
    // 2,000 addresses over 10 s, each asking twice with a name at the limit.
    let body = serde_json::json!({ "name": "x".repeat(64), "nonce": "0".repeat(128) }).to_string();
    let headers = [("Content-Type".to_owned(), "application/json".to_owned())];
    let raw = raw_request(app.https, "POST", "/api/pair", &headers, body.as_bytes());
    let attackers: Vec<_> = (0..8u8)
        .map(|thread| {
            let (https, fingerprint, raw) = (app.https, app.fingerprint.clone(), raw.clone());
            std::thread::spawn(move || {
                let mut statuses = std::collections::BTreeMap::<u16, u32>::new();
                for n in 0..250u16 {
                    let from = IpAddr::from([127, 2 + thread, (n >> 8) as u8, n as u8 + 1]);
                    for _ in 0..2 {
                        let status = send_pinned_from(Some(from), https, &fingerprint, &raw)
                            .map_or(0, |r| r.status);
                        *statuses.entry(status).or_default() += 1;
                    }
                    std::thread::sleep(Duration::from_millis(30));
                }
                statuses
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    app.guest_cuts_out();
    let mut statuses = std::collections::BTreeMap::<u16, u32>::new();
    for attacker in attackers {
        for (status, count) in attacker.join().unwrap() {
            *statuses.entry(status).or_default() += count;
        }
    }
    let grew = app.server.rss_kib().saturating_sub(before);
    app.guest_cuts_out();
    watcher.finish("a flood of pairing requests");
    eprintln!("pairing flood: {statuses:?}");
    // Past the bound only an address already waiting is answered 202: its
    // second request replaces its first.
    let (accepted, refused) = (statuses[&202] as usize, statuses[&429] as usize);
    assert!(accepted <= 2 * MAX_PENDING, "{statuses:?}");
    assert_eq!(accepted + refused, 4000, "{statuses:?}");
    eprintln!("the server's memory grew by {grew} KiB");
    assert!(grew < 16 * 1024, "memory grew by {grew} KiB");
}
