//! Pairing a booth: `POST /api/pair` over HTTPS, the operator's answer on
//! the dashboard or by the button, the booth's key collected once; and
//! what a refused, expired, malformed or flooding request gets (nothing).

use crate::helpers::*;
use cutout::config::TlsSettings;
use cutout::pairing::{code, ASKS_PER_MINUTE, MAX_PENDING};
use sha2::{Digest, Sha256};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::Ordering;

const NONCE: &str = "00112233445566778899aabbccddeeff";

fn with_https() -> TestApp {
    spawn_app_with(cutout::EngineSource::Ready(u2netp()), |s| {
        s.tls = Some(TlsSettings {
            listen: "127.0.0.1:0".into(),
            certificate: None,
            plain_http: true,
        });
    })
}

struct Booth<'a> {
    app: &'a TestApp,
    from: Option<IpAddr>,
}

impl Booth<'_> {
    fn https(&self) -> SocketAddr {
        self.app.state.tls.as_ref().unwrap().addr
    }

    fn send(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
        let headers: Vec<_> = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let raw = raw_request(self.https(), method, path, &headers, body);
        let fingerprint = &self.app.state.tls.as_ref().unwrap().fingerprint;
        send_pinned_from(self.from, self.https(), fingerprint, &raw).unwrap()
    }

    fn ask(&self, name: &str) -> Reply {
        let body = serde_json::json!({ "name": name, "nonce": NONCE }).to_string();
        self.send(
            "POST",
            "/api/pair",
            &[("Content-Type", "application/json")],
            body.as_bytes(),
        )
    }

    fn id(&self, name: &str) -> String {
        let reply = self.ask(name);
        assert_eq!(reply.status, 202, "{}", reply.text());
        let answer: serde_json::Value = serde_json::from_str(&reply.text()).unwrap();
        assert_eq!(
            (
                answer["expires_in"].as_i64(),
                answer["button_seconds"].as_i64()
            ),
            (Some(120), Some(60))
        );
        answer["id"].as_str().unwrap().to_owned()
    }

    fn poll(&self, id: &str) -> Reply {
        self.send("GET", &format!("/api/pair/{id}"), &[], b"")
    }
}

/// The code a booth that saw the appliance's own certificate shows.
fn booth_code(app: &TestApp, name: &str) -> String {
    let fingerprint = &app.state.tls.as_ref().unwrap().fingerprint;
    let sha256: Vec<u8> = fingerprint
        .split(':')
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect();
    code(&sha256, NONCE, name)
}

/// The requests waiting now, by the app's clock.
fn waiting_now(app: &TestApp) -> Vec<cutout::pairing::PendingView> {
    app.state.pairings.waiting(app.now.load(Ordering::SeqCst))
}

fn json(reply: &Reply) -> serde_json::Value {
    serde_json::from_str(&reply.text()).unwrap()
}

#[test]
fn a_booth_pairs_over_https_and_collects_its_own_key_once() {
    let app = with_https();
    app.account("booth", "pro");
    let booth = Booth {
        app: &app,
        from: None,
    };
    let id = booth.id("Booth by the door");
    let pending = booth.poll(&id);
    assert_eq!(
        (pending.status, json(&pending)["status"].as_str()),
        (202, Some("pending"))
    );

    let now = app.now.load(Ordering::SeqCst);
    let [waiting] = <[_; 1]>::try_from(app.state.pairings.waiting(now)).unwrap();
    assert_eq!(waiting.code, booth_code(&app, "Booth by the door"));
    assert_eq!(waiting.address, IpAddr::V4(Ipv4Addr::LOCALHOST));
    app.state
        .approve_pairing(&waiting.handle, "booth", now)
        .unwrap()
        .unwrap();

    let approved = booth.poll(&id);
    assert_eq!(approved.status, 200, "{}", approved.text());
    let answer = json(&approved);
    assert_eq!(answer["account"], "booth");
    let key = answer["api_key"].as_str().unwrap().to_owned();
    assert_eq!(booth.poll(&id).status, 404, "the key is handed out once");

    let mut form = Multipart::new();
    form.file("image_file", &jpeg(64, 48));
    let content_type = form.content_type();
    let cut_out = booth.send(
        "POST",
        "/api/remove-bg",
        &[("X-Api-Key", &key), ("Content-Type", &content_type)],
        &form.body(),
    );
    assert_eq!(cut_out.png().dimensions(), (64, 48));
    assert_eq!(app.used("booth"), 1);
    let keys = app.store.keys("booth").unwrap();
    assert!(
        keys.iter().any(|k| k.label == "Booth by the door"),
        "labelled with the booth's name"
    );
}

#[test]
fn pairing_over_plain_http_or_without_https_is_refused() {
    let app = with_https();
    let body = serde_json::json!({ "name": "Booth", "nonce": NONCE }).to_string();
    let headers = [("Content-Type".to_string(), "application/json".to_string())];
    let plain = send_raw(
        app.addr,
        &raw_request(app.addr, "POST", "/api/pair", &headers, body.as_bytes()),
    );
    assert_eq!(
        (plain.status, plain.error_code()),
        (403, "https_required".into())
    );
    let poll = request(app.addr, "GET", "/api/pair/anything", &[], b"");
    assert_eq!(
        (poll.status, poll.error_code()),
        (403, "https_required".into())
    );
    assert!(waiting_now(&app).is_empty());

    let no_https = spawn_app();
    let plain = send_raw(
        no_https.addr,
        &raw_request(
            no_https.addr,
            "POST",
            "/api/pair",
            &headers,
            body.as_bytes(),
        ),
    );
    assert_eq!(
        (plain.status, plain.error_code()),
        (403, "https_required".into())
    );
}

#[test]
fn a_malformed_pairing_request_is_named_and_records_nothing() {
    let app = with_https();
    let booth = Booth {
        app: &app,
        from: None,
    };
    let json_type = [("Content-Type", "application/json")];
    let big = format!(
        "{{\"name\": \"{}\", \"nonce\": \"{NONCE}\"}}",
        "x".repeat(5000)
    );
    for (headers, body, says) in [
        (&[][..], br#"{"name": "Booth"}"#.to_vec(), "Send JSON"),
        (&json_type[..], b"not json".to_vec(), "not JSON"),
        (
            &json_type[..],
            br#"{"name": "Booth"}"#.to_vec(),
            "Both name and nonce",
        ),
        (
            &json_type[..],
            br#"{"name": "", "nonce": "00112233445566778899aabbccddeeff"}"#.to_vec(),
            "name",
        ),
        (
            &json_type[..],
            br#"{"name": "Booth", "nonce": "short"}"#.to_vec(),
            "nonce",
        ),
        (&json_type[..], big.into_bytes(), "4 KiB"),
    ] {
        let reply = booth.send("POST", "/api/pair", headers, &body);
        assert_eq!(
            (reply.status, reply.error_code()),
            (400, "invalid_pairing_request".into())
        );
        assert!(
            reply.error_detail().contains(says),
            "{}",
            reply.error_detail()
        );
    }
    let get = booth.send("GET", "/api/pair", &[], b"");
    assert_eq!(get.status, 405);
    let unknown = booth.poll("0123456789abcdef");
    assert_eq!(
        (unknown.status, unknown.error_code()),
        (404, "pairing_unknown".into())
    );
    assert!(waiting_now(&app).is_empty());
}

#[test]
fn refused_and_expired_requests_get_nothing() {
    let app = with_https();
    app.account("booth", "pro");
    let refused = Booth {
        app: &app,
        from: None,
    };
    let expired = Booth {
        app: &app,
        from: Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))),
    };
    let (refused_id, expired_id) = (refused.id("Refused"), expired.id("Expired"));
    let now = app.now.load(Ordering::SeqCst);
    let handle = app
        .state
        .pairings
        .waiting(now)
        .into_iter()
        .find(|w| w.name == "Refused")
        .unwrap()
        .handle;
    assert!(app.state.pairings.refuse(&handle, now));
    let reply = refused.poll(&refused_id);
    assert_eq!(
        (reply.status, reply.error_code()),
        (403, "pairing_refused".into())
    );
    assert!(!reply.text().contains("ck_"));
    assert!(
        app.state
            .approve_pairing(&handle, "booth", now)
            .unwrap()
            .is_none(),
        "a refused request cannot be approved after all"
    );

    app.now.fetch_add(120, Ordering::SeqCst);
    let reply = expired.poll(&expired_id);
    assert_eq!(
        (reply.status, reply.error_code()),
        (404, "pairing_unknown".into())
    );
    assert_eq!(
        app.store.keys("booth").unwrap().len(),
        1,
        "no key issued but the account's own"
    );
}

#[test]
fn an_address_that_asks_too_often_and_too_many_booths_at_once_are_told_to_wait() {
    let app = with_https();
    let booth = Booth {
        app: &app,
        from: None,
    };
    for _ in 0..ASKS_PER_MINUTE {
        booth.id("Booth");
    }
    let refused = booth.ask("Booth");
    assert_eq!(
        (refused.status, refused.error_code()),
        (429, "too_many_pairing_requests".into())
    );
    assert_eq!(refused.header("retry-after"), Some("60"));
    for n in 0..MAX_PENDING as u8 {
        let other = Booth {
            app: &app,
            from: Some(IpAddr::V4(Ipv4Addr::new(127, 0, 1, n + 1))),
        };
        let reply = other.ask("Another");
        let expected = if n + 1 < MAX_PENDING as u8 { 202 } else { 429 };
        assert_eq!(reply.status, expected, "request {n}: {}", reply.text());
    }
    assert_eq!(waiting_now(&app).len(), MAX_PENDING);
}

#[test]
fn the_operator_compares_the_code_and_approves_or_refuses_on_the_dashboard() {
    let app = spawn_app();
    app.account("booth", "pro");
    app.account("kiosk", "business");
    let now = app.now.load(Ordering::SeqCst);
    let certificate = Sha256::digest(b"the appliance's certificate");
    let ask = |name: &str, n: u8| {
        let address = IpAddr::V4(Ipv4Addr::new(192, 168, 1, n));
        app.state
            .pairings
            .ask(name, NONCE, address, &certificate, now)
            .unwrap()
    };
    let (door, stranger) = (ask("Door", 10), ask("Stranger", 11));
    let admin = app.admin();
    let page = admin.get("/admin/booths");
    assert_eq!(page.status, 200);
    let text = page.text();
    let waiting = app.state.pairings.waiting(now);
    for booth in &waiting {
        assert!(
            text.contains(&format!("data-pairing=\"{}\"", booth.handle)),
            "{text}"
        );
        assert!(text.contains(&format!("<td class=\"code\">{}</td>", booth.code)));
    }
    let shown = waiting.iter().find(|w| w.name == "Door").unwrap();
    assert_eq!(shown.code, code(&certificate, NONCE, "Door"));
    let csrf = csrf_in(&page);
    let handle = |name: &str| {
        waiting
            .iter()
            .find(|w| w.name == name)
            .unwrap()
            .handle
            .clone()
    };

    let forged = admin.post(
        &format!("/admin/booths/{}/approve", handle("Door")),
        &[("csrf", "forged"), ("account", "kiosk")],
    );
    assert_eq!(forged.status, 403);
    let no_account = admin.post(
        &format!("/admin/booths/{}/approve", handle("Door")),
        &[("csrf", &csrf), ("account", "nobody")],
    );
    assert!(no_account
        .text()
        .contains("Choose one of the listed accounts."));
    let approved = admin.post(
        &format!("/admin/booths/{}/approve", handle("Door")),
        &[("csrf", &csrf), ("account", "kiosk")],
    );
    assert_eq!(
        approved.header("location"),
        Some("/admin/booths?done=paired")
    );
    let refused = admin.post(
        &format!("/admin/booths/{}/refuse", handle("Stranger")),
        &[("csrf", &csrf)],
    );
    assert_eq!(
        refused.header("location"),
        Some("/admin/booths?done=refused")
    );
    let again = admin.post(
        &format!("/admin/booths/{}/approve", handle("Stranger")),
        &[("csrf", &csrf), ("account", "kiosk")],
    );
    assert_eq!(again.status, 404);
    assert!(again.text().contains("no longer waiting"));

    let cutout::pairing::Poll::Approved { key, account } = app.state.pairings.poll(&door, now)
    else {
        panic!("not approved");
    };
    assert_eq!(account, "kiosk");
    assert_eq!(
        app.post_image(Some(key.expose()), &jpeg(32, 24), None)
            .status,
        200
    );
    assert_eq!(
        app.state.pairings.poll(&stranger, now),
        cutout::pairing::Poll::Refused
    );
    assert_eq!(app.store.keys("kiosk").unwrap().len(), 2);

    let user = {
        app.account_with_login("owner", "pro");
        app.user("owner")
    };
    assert_eq!(user.get("/admin/booths").status, 403);
    assert_eq!(
        Browser::new(&app).get("/admin/booths").header("location"),
        Some("/login")
    );
}

#[test]
fn the_button_approves_the_one_booth_that_asked_in_the_last_minute() {
    // The button's thread is `serve`'s; here the test presses for it.
    let app = spawn_app_with(cutout::EngineSource::Ready(u2netp()), |s| {
        s.button.value_file = Some("/nonexistent/button".into());
        s.pairing_account = Some("kiosk".into());
    });
    app.account("booth", "pro");
    app.account("kiosk", "business");
    let certificate = [1u8; 32];
    let ask = |n: u8| {
        let now = app.now.load(Ordering::SeqCst);
        let address = IpAddr::V4(Ipv4Addr::new(192, 168, 1, n));
        app.state
            .pairings
            .ask("Booth", NONCE, address, &certificate, now)
            .unwrap()
    };
    let now = || app.now.load(Ordering::SeqCst);
    let late = ask(1);
    app.now.fetch_add(60, Ordering::SeqCst);
    app.state.button_pressed();
    assert!(
        matches!(
            app.state.pairings.poll(&late, now()),
            cutout::pairing::Poll::Pending { .. }
        ),
        "a minute late"
    );

    let (first, second) = (ask(2), ask(3));
    app.state.button_pressed();
    for id in [&first, &second] {
        assert!(
            matches!(
                app.state.pairings.poll(id, now()),
                cutout::pairing::Poll::Pending { .. }
            ),
            "which one?"
        );
    }
    app.now.fetch_add(60, Ordering::SeqCst);
    let one = ask(4);
    assert_eq!(
        app.state.led_state(),
        cutout::led::State::Waiting,
        "one booth to approve: the LED says the button is awaited"
    );
    app.state.button_pressed();
    assert_eq!(app.state.led_state(), cutout::led::State::Idle);
    let cutout::pairing::Poll::Approved { account, .. } = app.state.pairings.poll(&one, now())
    else {
        panic!("the press approved nothing");
    };
    assert_eq!(account, "kiosk", "[pairing] account");
}
