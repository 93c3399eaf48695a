//! A power cut in the middle of work: `kill -9` while clients are being
//! served loses no charge and makes none twice.

use crate::helpers::*;
use cutout::store::Store;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One call: `None` when nothing listens (the server is down, so no
/// request was made), else whether it got a complete 200 whose body is a
/// PNG, which is what a client keeps (and so what it may be charged for).
fn served(addr: SocketAddr, request: &[u8]) -> Option<bool> {
    let Ok(mut stream) = TcpStream::connect(addr) else {
        std::thread::sleep(Duration::from_millis(50));
        return None;
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    Some(stream.write_all(request).is_ok() && reply_is_a_png(&mut stream))
}

fn reply_is_a_png(stream: &mut TcpStream) -> bool {
    let mut response = vec![];
    let _ = stream.read_to_end(&mut response);
    reply_bytes_are_a_png(&response)
}

fn reply_bytes_are_a_png(response: &[u8]) -> bool {
    let Some(end) = response.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&response[..end]).to_ascii_lowercase();
    let body = &response[end + 4..];
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|n| n.trim().parse::<usize>().ok());
    head.starts_with("http/1.1 200")
        && length == Some(body.len())
        && image::load_from_memory_with_format(body, image::ImageFormat::Png).is_ok()
}

/// The faster engine: two hundred model runs on tract take minutes here.
const ONNXRUNTIME: &[&str] = &["--engine", "onnxruntime"];

#[test]
fn kill_9_in_the_middle_of_200_requests_loses_and_doubles_no_charge() {
    let data = tempfile::tempdir().unwrap();
    let accounts = ["north", "south", "west"];
    let plans = ["pro", "pro", "business"];
    let keys: Vec<String> = accounts
        .iter()
        .zip(plans)
        .map(|(name, plan)| cli_account(data.path(), name, plan))
        .collect();
    let server = Server::start(data.path(), "warn", ONNXRUNTIME);
    let addr = Arc::new(Mutex::new(server.addr));
    let served_per_account: Arc<Vec<AtomicUsize>> =
        Arc::new(accounts.iter().map(|_| AtomicUsize::new(0)).collect());
    let attempts = Arc::new(AtomicUsize::new(0));

    let clients: Vec<_> = (0..8)
        .map(|client| {
            let account = client % accounts.len();
            let form = Multipart::new().file("image_file", &jpeg(96, 64)).body();
            let request = [
                format!(
                    "POST /api/remove-bg HTTP/1.1\r\nHost: t\r\nConnection: close\r\nX-Api-Key: {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n\r\n",
                    keys[account],
                    Multipart::new().content_type(),
                    form.len()
                )
                .into_bytes(),
                form,
            ]
            .concat();
            let (addr, served_per_account, attempts) =
                (addr.clone(), served_per_account.clone(), attempts.clone());
            std::thread::spawn(move || {
                while attempts.fetch_add(1, Ordering::SeqCst) < 200 {
                    let to = *addr.lock().unwrap();
                    match served(to, &request) {
                        // Not a request: the server was down. Try again.
                        None => _ = attempts.fetch_sub(1, Ordering::SeqCst),
                        Some(true) => _ = served_per_account[account].fetch_add(1, Ordering::SeqCst),
                        Some(false) => {}
                    }
                }
            })
        })
        .collect();

    // Each call runs the model, so this may wait longer than wait_until.
    let served_so_far = || {
        served_per_account
            .iter()
            .map(|n| n.load(Ordering::SeqCst))
            .sum::<usize>()
    };
    let started = Instant::now();
    while served_so_far() < 30 {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "30 calls served in 5 minutes"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    server.kill_9();
    let restarted = Server::start(data.path(), "warn", ONNXRUNTIME);
    *addr.lock().unwrap() = restarted.addr;
    for client in clients {
        client.join().unwrap();
    }
    drop(restarted);

    let store = cutout::store::SqliteStore::open(data.path()).unwrap();
    let month = cutout::domain::Month::of_unix(cutout::clock::Clock::default().now_unix());
    let total = served_so_far();
    assert!(total >= 100, "only {total} of 200 calls were served");
    for (i, name) in accounts.iter().enumerate() {
        let account = store.account(name).unwrap();
        assert_eq!(
            store.usage(account.id, month).unwrap() as usize,
            served_per_account[i].load(Ordering::SeqCst),
            "{name}'s month count against the images its clients received"
        );
    }
    let conn = rusqlite::Connection::open(data.path().join("cutout.db")).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
}

/// A booth that stops waiting (its own timeout) and closes the connection
/// before its answer comes is not charged, on either engine; one that got
/// its answer is. After two patient clients, each waits less and less, so
/// that some give up while the photo is decoded, some while the model runs,
/// some while the PNG is made: a share of the second one's time, so that
/// none gives up just as its answer is written (a client that closes then
/// has an answer the server sent whole, and a charge), however fast the
/// machine.
#[test]
fn a_client_that_gives_up_before_its_answer_is_not_charged_on_either_engine() {
    let mut form = Multipart::new();
    form.file("image_file", &jpeg(3000, 2000));
    for engine in ["tract", "onnxruntime"] {
        let data = tempfile::tempdir().unwrap();
        let key = cli_account(data.path(), "booth", "pro");
        let server = Server::start(data.path(), "info", &["--engine", engine]);
        let request = [
            format!(
                "POST /api/remove-bg HTTP/1.1\r\nHost: t\r\nConnection: close\r\nX-Api-Key: {key}\r\nContent-Type: {}\r\nContent-Length: {}\r\n\r\n",
                form.content_type(),
                form.body().len()
            )
            .into_bytes(),
            form.body(),
        ]
        .concat();
        let (mut whole, mut some_bytes, mut none) = (0, 0, 0);
        let mut answered_in = Duration::from_secs(20);
        for (n, share) in [1.0, 1.0, 0.5, 0.25, 0.1, 0.05].into_iter().enumerate() {
            let started = Instant::now();
            let mut stream = TcpStream::connect(server.addr).unwrap();
            stream.write_all(&request).unwrap();
            stream
                .set_read_timeout(Some(answered_in.mul_f64(share)))
                .unwrap();
            let mut first = [0u8; 1];
            match stream.read(&mut first) {
                Ok(1) if reply_is_a_png_after(&first, &mut stream) => whole += 1,
                Ok(1) => some_bytes += 1,
                _ => none += 1,
            }
            if n == 1 {
                answered_in = started.elapsed();
            }
            drop(stream);
            // One at a time: the server is done with this one before the next.
            wait_until("the server is done with it", || {
                remove_bg_requests(server.addr) == n + 1
            });
        }
        assert!(
            whole >= 2,
            "{engine}: the patient clients got their cut-outs"
        );
        assert!(
            none >= 2,
            "{engine}: only {none} clients gave up before any answer"
        );
        let store = cutout::store::SqliteStore::open(data.path()).unwrap();
        let month = cutout::domain::Month::of_unix(cutout::clock::Clock::default().now_unix());
        let used = store
            .usage(store.account("booth").unwrap().id, month)
            .unwrap() as usize;
        assert!(
            (whole..=whole + some_bytes).contains(&used),
            "{engine}: {used} charged for {whole} answers received whole, {some_bytes} in part, {none} not at all"
        );
    }
}

/// `reply_is_a_png` for a reply whose first byte was read already.
fn reply_is_a_png_after(first: &[u8], stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut rest = vec![];
    let _ = stream.read_to_end(&mut rest);
    reply_bytes_are_a_png(&[first, &rest].concat())
}

/// The server's count of remove-bg requests answered, every status.
fn remove_bg_requests(addr: SocketAddr) -> usize {
    let metrics = request(addr, "GET", "/metrics", &[], b"").text();
    metrics
        .lines()
        .filter(|l| l.starts_with("cutout_http_requests_total{route=\"remove_bg\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<usize>().ok())
        .sum()
}
