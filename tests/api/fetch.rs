//! remove.bg's `image_url` and `bg_image_url`, fetched from a real web
//! server on loopback: only from the networks the operator allows, checked
//! again after each redirect and through DNS names; inside the request's
//! slot, within its timeouts, and a failed fetch costs nothing.

use crate::helpers::*;
use cutout::EngineSource;
use std::time::{Duration, Instant};

const ROUTE: &str = "/v1.0/removebg";

fn allowing(networks: &[&str]) -> TestApp {
    let networks: Vec<ipnet::IpNet> = networks.iter().map(|n| n.parse().unwrap()).collect();
    spawn_app_with(EngineSource::Ready(u2netp()), |s| s.fetch_allow = networks)
}

fn post(app: &TestApp, key: &str, fields: &[(&str, &str)]) -> Reply {
    let mut form = Multipart::new();
    for (name, value) in fields {
        form.text(name, value);
    }
    let headers = [
        ("X-Api-Key".to_owned(), key.to_owned()),
        ("Content-Type".to_owned(), form.content_type()),
    ];
    app.request("POST", ROUTE, &headers, &form.body())
}

fn refused(reply: &Reply, code: &str) {
    assert_eq!(
        (reply.status, reply.error_code().as_str()),
        (400, code),
        "{}",
        reply.text()
    );
}

#[test]
fn a_photo_and_a_background_from_urls_are_cut_out_as_if_uploaded() {
    let (photo, background) = (jpeg(96, 64), jpeg(40, 30));
    let camera = WebServer::start(
        [127, 0, 0, 1],
        vec![
            ("/snapshot.jpg", Answer::File(photo.clone())),
            ("/backdrop.jpg", Answer::File(background.clone())),
            ("/latest", Answer::Redirect("/snapshot.jpg".into())),
        ],
    );
    let app = allowing(&["127.0.0.1/32"]);
    let key = app.account("booth", "pro");
    let uploaded = {
        let mut form = Multipart::new();
        form.file("image_file", &photo)
            .file("bg_image_file", &background);
        let headers = [
            ("X-Api-Key".to_owned(), key.clone()),
            ("Content-Type".to_owned(), form.content_type()),
        ];
        app.request("POST", ROUTE, &headers, &form.body())
    };
    assert_eq!(uploaded.status, 200, "{}", uploaded.text());
    for image_url in [camera.url("/snapshot.jpg"), camera.url("/latest")] {
        let reply = post(
            &app,
            &key,
            &[
                ("image_url", &image_url),
                ("bg_image_url", &camera.url("/backdrop.jpg")),
            ],
        );
        assert_eq!(reply.status, 200, "{image_url}: {}", reply.text());
        assert!(
            reply.body == uploaded.body,
            "{image_url}: not the same cut-out"
        );
    }
    // remove.bg's clients send it urlencoded too; localhost is 127.0.0.1
    // (and ::1, which is not allowed and so never connected to).
    let body = format!(
        "image_url={}",
        camera
            .url("/snapshot.jpg")
            .replace("127.0.0.1", "localhost")
    );
    let headers = [
        ("X-Api-Key".to_owned(), key.clone()),
        (
            "Content-Type".to_owned(),
            "application/x-www-form-urlencoded".to_owned(),
        ),
    ];
    let reply = app.request("POST", ROUTE, &headers, body.as_bytes());
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(app.used("booth"), 4);
}

#[test]
fn nothing_is_fetched_until_the_operator_allows_a_network() {
    let camera = WebServer::start(
        [127, 0, 0, 1],
        vec![("/snapshot.jpg", Answer::File(jpeg(32, 32)))],
    );
    let app = spawn_app();
    let key = app.account("booth", "pro");
    for field in ["image_url", "bg_image_url"] {
        let mut fields = vec![(field, camera.url("/snapshot.jpg"))];
        if field == "bg_image_url" {
            fields.push(("image_file_b64", b64(&jpeg(32, 32))));
        }
        let fields: Vec<(&str, &str)> = fields.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let reply = post(&app, &key, &fields);
        refused(&reply, "url_fetch_off");
        assert!(reply.text().contains("[fetch] allow"), "{}", reply.text());
        assert!(reply.text().contains(field), "{}", reply.text());
    }
    assert_eq!(camera.hits(), 0);
    assert_eq!(app.used("booth"), 0);
}

#[test]
fn addresses_not_allowed_are_refused_directly_after_a_redirect_and_through_dns() {
    let inside = WebServer::start(
        [127, 0, 0, 1],
        vec![("/secret.jpg", Answer::File(jpeg(32, 32)))],
    );
    let secret = inside.url("/secret.jpg");
    let by_name = secret.replace("127.0.0.1", "localhost");
    // The one address allowed: a camera that redirects.
    let camera = WebServer::start(
        [127, 0, 0, 2],
        vec![
            ("/to-address", Answer::Redirect(secret.clone())),
            ("/to-name", Answer::Redirect(by_name.clone())),
            ("/photo.jpg", Answer::File(jpeg(32, 32))),
        ],
    );
    let app = allowing(&["127.0.0.2/32"]);
    let key = app.account("booth", "pro");
    let photo = post(&app, &key, &[("image_url", &camera.url("/photo.jpg"))]);
    assert_eq!(photo.status, 200, "{}", photo.text());
    // One message for every refusal, whatever the name resolved to or
    // whether it did: no map of the appliance's network.
    let unresolvable = "http://no-such-camera.invalid/photo.jpg".to_owned();
    let mut details = Vec::new();
    for url in [
        secret.clone(),
        by_name.clone(),
        camera.url("/to-address"),
        camera.url("/to-name"),
        unresolvable,
    ] {
        let reply = post(&app, &key, &[("image_url", &url)]);
        refused(&reply, "url_not_allowed");
        let detail = reply.error_detail();
        assert!(
            !detail.contains("::1") && !detail.contains("resolv"),
            "{detail}"
        );
        let host = url.split('/').nth(2).unwrap().split(':').next().unwrap();
        let host = if url.contains("/to-name") {
            "localhost"
        } else {
            host
        };
        let host = if url.contains("/to-address") {
            "127.0.0.1"
        } else {
            host
        };
        details.push(detail.replace(host, "HOST"));
    }
    assert!(details.windows(2).all(|w| w[0] == w[1]), "{details:#?}");
    // Every address but loopback's own kind.
    let everywhere = allowing(&["0.0.0.0/0", "::/0"]);
    let key = everywhere.account("booth", "pro");
    refused(
        &post(&everywhere, &key, &[("image_url", &secret)]),
        "url_not_allowed",
    );
    assert_eq!(inside.hits(), 0, "nothing reached the address not allowed");
    assert_eq!(app.used("booth"), 1);
}

#[test]
fn a_fetch_that_fails_says_why_and_costs_nothing() {
    let mut routes = vec![
        ("/gone", Answer::Status(404)),
        ("/huge.jpg", Answer::File(vec![0xFF; 10 * 1024 * 1024 + 1])),
        ("/hop3", Answer::Redirect("/photo.jpg".into())),
        ("/photo.jpg", Answer::File(jpeg(32, 32))),
        ("/zipped.jpg", Answer::Gzipped(jpeg(32, 32))),
        (
            "/page.html",
            Answer::File(b"<html>camera offline</html>".to_vec()),
        ),
    ];
    for (from, to) in [("/hop0", "/hop1"), ("/hop1", "/hop2"), ("/hop2", "/hop3")] {
        routes.push((from, Answer::Redirect(to.into())));
    }
    let camera = WebServer::start([127, 0, 0, 1], routes);
    let app = allowing(&["127.0.0.1/32"]);
    let key = app.account("booth", "pro");
    let three = post(&app, &key, &[("image_url", &camera.url("/hop1"))]);
    assert_eq!(three.status, 200, "three redirects: {}", three.text());
    for (url, says) in [
        (camera.url("/hop0"), "more than 3 redirects"),
        (camera.url("/gone"), "answered 404"),
        (camera.url("/huge.jpg"), "over 10485760 bytes"),
        (
            "ftp://127.0.0.1/photo.jpg".into(),
            "not an http or https URL",
        ),
        ("file:///etc/passwd".into(), "not an http or https URL"),
        ("http://127.0.0.1:1/photo.jpg".into(), "no connection"),
        (camera.url("/zipped.jpg"), "Content-Encoding: gzip"),
        (camera.url("/page.html"), "not a JPEG, PNG or WEBP"),
    ] {
        let reply = post(&app, &key, &[("image_url", &url)]);
        refused(&reply, "url_fetch_failed");
        assert!(reply.text().contains(says), "{url}: {}", reply.text());
        assert!(
            reply.error_detail().starts_with("image_url "),
            "{}",
            reply.text()
        );
    }
    assert_eq!(app.used("booth"), 1);
}

#[test]
fn a_server_that_never_answers_or_drips_holds_the_slot_for_its_timeouts_alone() {
    let camera = WebServer::start(
        [127, 0, 0, 1],
        vec![
            ("/silent", Answer::Silent),
            ("/drip", Answer::Drip(1024 * 1024)),
        ],
    );
    let app = allowing(&["127.0.0.1/32"]);
    let key = app.account("booth", "pro");
    let started = Instant::now();
    // The Pro plan's five slots, each held by a fetch.
    let fetches: Vec<_> = ["/silent", "/drip", "/silent", "/drip", "/silent"]
        .into_iter()
        .map(|path| {
            let (addr, key, url) = (app.addr, key.clone(), camera.url(path));
            std::thread::spawn(move || {
                let mut form = Multipart::new();
                form.text("image_url", &url);
                let headers = [
                    ("X-Api-Key".to_owned(), key),
                    ("Content-Type".to_owned(), form.content_type()),
                ];
                request(addr, "POST", ROUTE, &headers, &form.body())
            })
        })
        .collect();
    wait_until("five fetches hold the slots", || {
        app.in_flight("booth") == 5
    });
    let sixth = app.post_image(Some(&key), &jpeg(32, 32), None);
    assert_eq!(sixth.status, 429, "the fetches are in the slots");
    for fetch in fetches {
        let reply = fetch.join().unwrap();
        refused(&reply, "url_fetch_failed");
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(18),
        "5 s to connect and 10 s to read at most, took {took:?}"
    );
    assert_eq!(app.used("booth"), 0);
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
