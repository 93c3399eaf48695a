//! One LAN client that opens connections and sends half a request, as an
//! attacker would, against the real binary under the unit's kind of limit
//! on open files: the server keeps accepting and answering everyone else.

use crate::helpers::*;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A connection from `from` to `to` that has sent half a request line.
fn half_request(from: IpAddr, to: SocketAddr) -> Option<TcpStream> {
    let mut stream = try_connect_from(from, to)?;
    stream.write_all(b"GET /healthz HTTP/1.1\r\n").ok()?;
    Some(stream)
}

/// `GET /healthz` from 127.0.0.1: the status and how long the answer took.
fn health(addr: SocketAddr) -> (u16, Duration) {
    let started = Instant::now();
    let reply = request(addr, "GET", "/healthz", &[], b"");
    (reply.status, started.elapsed())
}

fn metric(addr: SocketAddr, name: &str) -> f64 {
    let text = request(addr, "GET", "/metrics", &[], b"").text();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("{name} in {text}"))
}

/// Not a speed target: a server stuck behind held connections answers only
/// after their 10 s head deadline, or never. Under qemu, whose emulated
/// server answered a health check in 2.2 s while 2,000 sockets were held,
/// the bound is wider and still far from that deadline.
fn answered_within() -> Duration {
    match std::env::var_os("TEST_UNDER_QEMU") {
        Some(_) => Duration::from_secs(5),
        None => Duration::from_secs(2),
    }
}

#[test]
fn two_thousand_idle_half_requests_under_1024_open_files_never_stop_the_server() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start_with_open_files(data.path(), "warn", 1024);
    let addr = server.addr;
    let idle = server.rss_kib();

    // A normal client asks every 100 ms the whole time; each answer in time.
    let done = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(idle));
    let watcher = {
        let (done, peak, pid) = (done.clone(), peak.clone(), server.child.id());
        std::thread::spawn(move || {
            let mut slowest = Duration::ZERO;
            let mut asked = 0;
            while !done.load(Ordering::Relaxed) {
                let (status, took) = health(addr);
                assert_eq!(status, 200, "a normal client was refused");
                slowest = slowest.max(took);
                asked += 1;
                if let Some(rss) = rss_kib(pid) {
                    peak.fetch_max(rss, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            (asked, slowest)
        })
    };

    // 2,000 from one address, then one each from 2,000 addresses.
    let one_address = [IpAddr::from([127, 0, 0, 2])].repeat(2000);
    let many_addresses: Vec<IpAddr> = (0..2000u32)
        .map(|i| IpAddr::from([127, 0, 10 + (i / 250) as u8, 1 + (i % 250) as u8]))
        .collect();
    for sources in [one_address, many_addresses] {
        let held: Vec<TcpStream> = sources
            .into_iter()
            .filter_map(|from| half_request(from, addr))
            .collect();
        assert!(held.len() > 1000, "only {} connected", held.len());
        // Held open a while, the normal client asking all along.
        std::thread::sleep(Duration::from_secs(3));
        let (status, took) = health(addr);
        assert_eq!(status, 200);
        assert!(took < answered_within(), "{took:?}");
        drop(held);
    }
    done.store(true, Ordering::Relaxed);
    let (asked, slowest) = watcher.join().expect("every answer a 200");
    assert!(slowest < answered_within(), "slowest answer {slowest:?}");

    let evicted = metric(addr, "cutout_connections_evicted_total");
    let open = metric(addr, "cutout_connections_open");
    assert!(evicted >= 3000.0, "{evicted} idle connections made room");
    assert!(open <= 512.0, "{open} open");
    let peak = peak.load(Ordering::Relaxed);
    if std::env::var_os("TEST_UNDER_QEMU").is_some() {
        // `make test-aarch64`: the RSS is qemu's, with its own state for
        // every guest thread (about half a MiB each, 512 of them here).
        eprintln!("peak RSS not checked under qemu-user: {peak} KiB against idle {idle} KiB");
    } else {
        assert!(
            peak <= idle + 100 * 1024,
            "peak RSS {peak} KiB against idle {idle} KiB"
        );
    }
    let log = std::fs::read_to_string(&server.log).unwrap();
    assert!(!log.contains("panicked"), "{log}");
    eprintln!(
        "idle RSS {idle} KiB, peak {peak} KiB; {asked} health checks, slowest {slowest:?}; \
         {evicted} evicted"
    );
}

#[test]
fn a_request_head_trickled_in_gets_408_at_the_head_deadline() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), "warn", &[]);
    let mut stream = TcpStream::connect(server.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let started = Instant::now();
    let mut answer = Vec::new();
    // A byte every 200 ms never trips the 30 s socket timeout; the 10 s
    // head deadline ends it.
    for byte in b"GET /healthz HTTP/1.1\r\nX-Padding: "
        .iter()
        .chain([b'x'; 200].iter())
    {
        if stream.write_all(&[*byte]).is_err() {
            break;
        }
        let mut buf = [0u8; 1024];
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
        if !answer.is_empty() {
            break;
        }
    }
    let took = started.elapsed();
    let reply = Reply::parse(&answer);
    assert_eq!(
        (reply.status, reply.error_code().as_str()),
        (408, "request_timeout")
    );
    assert!(
        took >= Duration::from_secs(9) && took < Duration::from_secs(15),
        "{took:?}"
    );
    assert_eq!(
        metric(server.addr, "cutout_request_head_timeouts_total"),
        1.0
    );
}
