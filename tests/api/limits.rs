//! Monthly quotas, concurrency slots and the server-wide queue.

use crate::helpers::*;
use cutout::EngineSource;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

const APRIL_1: i64 = 1_775_001_600;
const MAY_1: i64 = 1_777_593_600;

#[test]
fn with_3_images_left_exactly_3_of_8_parallel_calls_succeed() {
    let app = Arc::new(spawn_app());
    let key = app.account("acme", "pro");
    app.store
        .set_usage("acme", cutout::domain::Month::of_unix(MID_MARCH), 497)
        .unwrap();
    let image = Arc::new(jpeg(64, 48));
    let replies: Vec<Reply> = (0..8)
        .map(|_| {
            let (app, key, image) = (app.clone(), key.clone(), image.clone());
            thread::spawn(move || app.post_image(Some(&key), &image, None))
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    let ok: Vec<&Reply> = replies.iter().filter(|r| r.status == 200).collect();
    assert_eq!(ok.len(), 3);
    for r in replies.iter().filter(|r| r.status != 200) {
        assert_eq!((r.status, r.error_code().as_str()), (402, "quota_exceeded"));
    }
    let mut remaining: Vec<&str> = ok
        .iter()
        .map(|r| r.header("x-ratelimit-remaining").unwrap())
        .collect();
    remaining.sort();
    assert_eq!(remaining, ["0", "1", "2"]);
    assert_eq!(app.used("acme"), 500);
}

#[test]
fn pro_calls_carry_rate_limit_headers_and_business_calls_do_not() {
    let app = spawn_app();
    let pro = app.account("pro-co", "pro");
    let biz = app.account("big-co", "business");
    let reply = app.post_image(Some(&pro), &jpeg(64, 48), None);
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("x-ratelimit-limit"), Some("500"));
    assert_eq!(reply.header("x-ratelimit-remaining"), Some("499"));
    assert_eq!(
        reply.header("x-ratelimit-reset"),
        Some(APRIL_1.to_string().as_str())
    );
    let reply = app.post_image(Some(&biz), &jpeg(64, 48), None);
    assert_eq!(reply.status, 200);
    assert!(reply
        .headers
        .iter()
        .all(|(k, _)| !k.starts_with("x-ratelimit")));
    assert_eq!((app.used("pro-co"), app.used("big-co")), (1, 1));
}

#[test]
fn a_used_up_month_is_402_until_the_next_utc_month_begins() {
    let app = spawn_app();
    let key = app.account("acme", "pro");
    app.store
        .set_usage("acme", cutout::domain::Month::of_unix(MID_MARCH), 500)
        .unwrap();
    let reply = app.post_image(Some(&key), &jpeg(64, 48), None);
    assert_eq!(
        (reply.status, reply.error_code().as_str()),
        (402, "quota_exceeded")
    );

    app.now.store(APRIL_1 - 1, Ordering::SeqCst);
    assert_eq!(app.post_image(Some(&key), &jpeg(64, 48), None).status, 402);
    app.now.store(APRIL_1, Ordering::SeqCst);
    let reply = app.post_image(Some(&key), &jpeg(64, 48), None);
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("x-ratelimit-remaining"), Some("499"));
    assert_eq!(
        reply.header("x-ratelimit-reset"),
        Some(MAY_1.to_string().as_str())
    );
}

pub fn gated_app(tweak: impl FnOnce(&mut cutout::config::Settings)) -> (Arc<TestApp>, Arc<Gate>) {
    let gate = Arc::new(Gate::default());
    let app = spawn_app_with(
        EngineSource::Ready(Arc::new(GatedEngine(gate.clone()))),
        tweak,
    );
    (Arc::new(app), gate)
}

pub fn send_in_background(
    app: &Arc<TestApp>,
    key: &str,
    n: usize,
) -> Vec<thread::JoinHandle<Reply>> {
    (0..n)
        .map(|_| {
            let (app, key) = (app.clone(), key.to_owned());
            thread::spawn(move || app.post_image(Some(&key), &jpeg(64, 48), None))
        })
        .collect()
}

#[test]
fn a_pro_account_gets_429_past_5_requests_in_flight_across_its_keys() {
    let (app, gate) = gated_app(|_| {});
    let key = app.account("acme", "pro");
    let second_key = app
        .store
        .create_key("acme", "second", MID_MARCH)
        .unwrap()
        .expose()
        .to_owned();
    let running = send_in_background(&app, &key, 5);
    wait_until("5 requests are in flight", || app.in_flight("acme") == 5);

    let reply = app.post_image(Some(&second_key), &jpeg(64, 48), None);
    assert_eq!(
        (reply.status, reply.error_code().as_str()),
        (429, "too_many_concurrent_requests")
    );
    assert!(reply.header("retry-after").is_some());

    gate.open();
    assert!(running.into_iter().all(|t| t.join().unwrap().status == 200));
    assert_eq!(app.used("acme"), 5);
}

#[test]
fn a_business_burst_of_12_is_all_served() {
    let (app, gate) = gated_app(|_| {});
    let key = app.account("big-co", "business");
    let running = send_in_background(&app, &key, 12);
    wait_until("12 requests are in flight", || {
        app.in_flight("big-co") == 12
    });
    gate.open();
    let statuses: Vec<u16> = running
        .into_iter()
        .map(|t| t.join().unwrap().status)
        .collect();
    assert_eq!(statuses, [200; 12]);
}

#[test]
fn uploads_past_the_upload_buffer_wait_unread_and_then_succeed() {
    // A buffer of 1 byte: one upload at a time is held, however large.
    let (app, gate) = gated_app(|s| s.upload_buffer = 1);
    let key = app.account("big-co", "business");
    let running = send_in_background(&app, &key, 3);
    wait_until("3 requests are in line", || {
        app.state.pipeline.queue.depth() == 3
    });
    let one_body = app.state.pipeline.queue.uploads_held();
    assert!(one_body > 0);
    let held: Vec<u64> = (0..20)
        .map(|_| {
            thread::sleep(Duration::from_millis(10));
            app.state.pipeline.queue.uploads_held()
        })
        .collect();
    assert!(
        held.iter().all(|&h| h == one_body),
        "only one body is held: {held:?}"
    );
    gate.open();
    assert!(running.into_iter().all(|t| t.join().unwrap().status == 200));
    assert_eq!(app.used("big-co"), 3);
    assert_eq!(app.state.pipeline.queue.uploads_held(), 0);
}

#[test]
fn a_full_server_queue_answers_503_with_retry_after() {
    let (app, gate) = gated_app(|s| s.queue_capacity = 2);
    let key = app.account("big-co", "business");
    let running = send_in_background(&app, &key, 4);
    // Two hold pixels (one in the model, one beside it), two wait: full.
    wait_until("4 requests are queued", || {
        app.state.pipeline.queue.depth() == 4
    });
    let reply = app.post_image(Some(&key), &jpeg(64, 48), None);
    assert_eq!(
        (reply.status, reply.error_code().as_str()),
        (503, "service_unavailable")
    );
    assert!(reply.header("retry-after").is_some());
    gate.open();
    assert!(running.into_iter().all(|t| t.join().unwrap().status == 200));
    assert_eq!(app.used("big-co"), 4);
}

/// `post_image`'s request, sent whole; the client hangs up, without
/// reading the answer, when the stream is dropped.
fn post_unread(app: &TestApp, key: &str) -> std::net::TcpStream {
    let mut form = Multipart::new();
    form.file("image_file", &jpeg(64, 48));
    let headers = [
        ("X-Api-Key".to_owned(), key.to_owned()),
        ("Content-Type".to_owned(), form.content_type()),
    ];
    let raw = raw_request(app.addr, "POST", "/api/remove-bg", &headers, &form.body());
    let mut stream = std::net::TcpStream::connect(app.addr).unwrap();
    std::io::Write::write_all(&mut stream, &raw).unwrap();
    stream
}

#[test]
fn a_client_gone_before_its_answer_is_written_is_not_charged() {
    let (app, gate) = gated_app(|s| s.inference_workers = 1);
    let key = app.account("acme", "business");
    // One request holds the model; the next waits its turn, then hangs up.
    let first = send_in_background(&app, &key, 1);
    wait_until("the first is in flight", || app.in_flight("acme") == 1);
    let second = post_unread(&app, &key);
    wait_until("the second waits its turn", || app.in_flight("acme") == 2);
    drop(second);
    gate.open();
    assert_eq!(
        first.into_iter().next().unwrap().join().unwrap().status,
        200
    );
    wait_until("the second is done", || app.in_flight("acme") == 0);
    assert_eq!(
        app.used("acme"),
        1,
        "the one gone before its turn is not charged"
    );
    let metrics = app.request("GET", "/metrics", &[], b"").text();
    assert!(
        metrics.contains("cutout_http_requests_total{route=\"remove_bg\",status=\"499\"} 1"),
        "{metrics}"
    );

    // Gone while its model runs: nothing was delivered, so nothing is
    // charged (remove.bg's rule), though the work was done.
    let (app, gate) = gated_app(|s| s.inference_workers = 1);
    let key = app.account("acme", "business");
    let stream = post_unread(&app, &key);
    wait_until("it is in flight", || app.in_flight("acme") == 1);
    // Past the check before the model, held at the gate inside it.
    std::thread::sleep(Duration::from_millis(300));
    drop(stream);
    std::thread::sleep(Duration::from_millis(100));
    gate.open();
    wait_until("it is done", || app.in_flight("acme") == 0);
    assert_eq!(app.used("acme"), 0);
    let metrics = app.request("GET", "/metrics", &[], b"").text();
    assert!(
        metrics.contains("cutout_http_requests_total{route=\"remove_bg\",status=\"499\"} 1"),
        "{metrics}"
    );
}
