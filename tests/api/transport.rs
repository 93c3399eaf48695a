//! How the appliance is reached: HTTPS with a certificate a booth pins by
//! its fingerprint, plain HTTP beside it for the API alone, and a dashboard
//! that answers only to its own names and to forms from its own pages.

use crate::helpers::*;
use cutout::config::TlsSettings;
use std::net::SocketAddr;

/// `raw_request` with the headers as pairs of string slices.
fn raw(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Vec<u8> {
    let headers: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    raw_request(addr, method, path, &headers, body)
}

fn with_https(plain_http: bool) -> TestApp {
    spawn_app_with(cutout::EngineSource::Ready(u2netp()), |s| {
        s.tls = Some(TlsSettings {
            listen: "127.0.0.1:0".into(),
            certificate: None,
            plain_http,
        });
    })
}

fn https_addr(app: &TestApp) -> SocketAddr {
    app.state.tls.as_ref().expect("HTTPS is on").addr
}

#[test]
fn a_booth_that_pins_the_fingerprint_cuts_out_a_photo_over_https() {
    let app = with_https(true);
    let key = app.account("booth", "pro");
    let fingerprint = cutout_cli(app.data_dir(), &["tls", "fingerprint"])
        .trim()
        .to_owned();
    assert_eq!(fingerprint, app.state.tls.as_ref().unwrap().fingerprint);

    let mut form = Multipart::new();
    form.file("image_file", &jpeg(64, 48));
    let content_type = form.content_type();
    let upload = raw(
        https_addr(&app),
        "POST",
        "/api/remove-bg",
        &[("X-Api-Key", &key), ("Content-Type", &content_type)],
        &form.body(),
    );
    let reply = send_pinned(https_addr(&app), &fingerprint, &upload).unwrap();
    assert_eq!(reply.png().dimensions(), (64, 48));
    assert_eq!(app.used("booth"), 1);

    // The pin means something: another fingerprint, no connection.
    let other = fingerprint.replace(
        &fingerprint[..2],
        if &fingerprint[..2] == "00" {
            "11"
        } else {
            "00"
        },
    );
    let error = send_pinned(https_addr(&app), &other, &upload).unwrap_err();
    assert!(error.to_string().contains("pinned"), "{error}");
    // The API still answers on plain HTTP.
    assert_eq!(app.post_image(Some(&key), &jpeg(64, 48), None).status, 200);
}

#[test]
fn plain_http_sent_to_the_https_port_is_told_to_use_https() {
    let app = with_https(true);
    let reply = send_raw(
        https_addr(&app),
        b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n",
    );
    assert_eq!(reply.status, 400);
    assert_eq!(reply.error_code(), "https_required");
}

#[test]
fn with_https_on_the_dashboard_is_only_served_there_and_its_cookies_are_secure() {
    let app = with_https(true);
    app.set_admin_password();
    let port = https_addr(&app).port();
    for path in ["/login", "/admin/status?x=1", "/"] {
        let reply = Browser::new(&app).get(path);
        assert_eq!(reply.status, 307, "{path}");
        assert_eq!(
            reply.header("location"),
            Some(format!("https://127.0.0.1:{port}{path}").as_str())
        );
    }
    // A form posted over plain HTTP is not read, only sent on.
    let reply = Browser::new(&app).post("/login", &[("name", "admin")]);
    assert_eq!(reply.status, 307);

    let fingerprint = app.state.tls.as_ref().unwrap().fingerprint.clone();
    let addr = https_addr(&app);
    let form = send_pinned(addr, &fingerprint, &raw(addr, "GET", "/login", &[], b"")).unwrap();
    assert_eq!(form.status, 200);
    let form_cookie = form
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let body = format!(
        "csrf={}&name=admin&password={}",
        csrf_in(&form),
        ADMIN_PASSWORD.replace(' ', "+")
    );
    let signed_in = send_pinned(
        addr,
        &fingerprint,
        &raw(
            addr,
            "POST",
            "/login",
            &[
                ("Cookie", &form_cookie),
                ("Content-Type", "application/x-www-form-urlencoded"),
                ("Origin", &format!("https://{addr}")),
            ],
            body.as_bytes(),
        ),
    )
    .unwrap();
    assert_eq!(signed_in.status, 303, "{}", signed_in.text());
    let session = signed_in
        .all_headers("set-cookie")
        .into_iter()
        .find(|c| c.starts_with("cutout_session="))
        .expect("a session cookie");
    assert!(session.contains("; Secure"), "{session}");

    let cookie = session.split(';').next().unwrap();
    let status = send_pinned(
        addr,
        &fingerprint,
        &raw(addr, "GET", "/admin/status", &[("Cookie", cookie)], b""),
    )
    .unwrap();
    assert_eq!(status.status, 200);
    assert!(
        status.text().contains(&fingerprint),
        "the Status page shows the fingerprint"
    );
}

#[test]
fn with_plain_http_off_only_https_listens() {
    let app = with_https(false);
    assert_eq!(app.addr, https_addr(&app));
    let reply = send_raw(
        app.addr,
        b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n",
    );
    assert_eq!(reply.error_code(), "https_required");
}

#[test]
fn the_dashboard_answers_only_to_its_own_names() {
    let app = spawn_app_with(cutout::EngineSource::Ready(u2netp()), |s| {
        s.allowed_hosts = vec!["booth.example.lan".into()];
    });
    let port = app.addr.port();
    let status_for = |host: &str, path: &str| {
        let raw = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        send_raw(app.addr, raw.as_bytes()).status
    };
    for foreign in [
        "rebound.attacker.example",
        "rebound.attacker.example:80",
        "203.0.113.9",
    ] {
        assert_eq!(status_for(foreign, "/login"), 421, "{foreign}");
    }
    let own = cutout::discovery::hostname();
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        format!("{own}.local:{port}"),
        format!("{}:{port}", own.to_uppercase()),
        "BOOTH.example.lan".into(),
    ] {
        assert_eq!(status_for(&host, "/login"), 200, "{host}");
    }
    // The API and health checks are not the dashboard's: any name reaches them.
    assert_eq!(status_for("rebound.attacker.example", "/healthz"), 200);
    assert_eq!(
        status_for("rebound.attacker.example", "/api/openapi.json"),
        200
    );
}

/// RFC 9112's absolute-form, as a client set up for a proxy sends it: the
/// target's path is served, and its authority is the Host the dashboard's
/// rules see (a Host header beside it is ignored, as the RFC says).
#[test]
fn an_absolute_url_as_the_target_is_served_as_its_path_with_its_host_checked() {
    let app = spawn_app_with(cutout::EngineSource::Ready(u2netp()), |s| {
        s.allowed_hosts = vec!["booth.example.lan".into()];
    });
    let key = app.account("booth", "pro");
    let send = |target: &str, host: &str, extra: &str, body: &[u8]| {
        let mut raw = format!(
            "{target} HTTP/1.1\r\nHost: {host}\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        raw.extend_from_slice(body);
        send_raw(app.addr, &raw)
    };
    let mut form = Multipart::new();
    form.file("image_file", &jpeg(64, 48));
    let extra = format!(
        "X-Api-Key: {key}\r\nContent-Type: {}\r\n",
        form.content_type()
    );
    let cut = send(
        &format!("POST http://{}/api/remove-bg", app.addr),
        "ignored.example",
        &extra,
        &form.body(),
    );
    assert_eq!(cut.status, 200, "{}", cut.text());
    assert_eq!(cut.header("content-type"), Some("image/png"));
    assert_eq!(app.used("booth"), 1);
    let page = |target: &str, host: &str| send(&format!("GET {target}"), host, "", b"").status;
    assert_eq!(
        page("http://booth.example.lan/login", "rebound.attacker.example"),
        200
    );
    assert_eq!(
        page("HTTP://rebound.attacker.example/login", "booth.example.lan"),
        421
    );
    assert_eq!(
        page("http://booth.example.lan", "x"),
        303,
        "the root, signed out"
    );
    assert_eq!(page("http:///login", "booth.example.lan"), 400);
    assert_eq!(
        page("http://user@booth.example.lan/login", "booth.example.lan"),
        400
    );
}

#[test]
fn a_form_posted_from_another_sites_page_is_refused() {
    let app = spawn_app();
    app.set_admin_password();
    let browser = Browser::new(&app);
    let csrf = browser.csrf("/login");
    let fields = [
        ("csrf", csrf.as_str()),
        ("name", "admin"),
        ("password", ADMIN_PASSWORD),
    ];
    let foreign = Browser::new(&app).with_header("Origin", "http://attacker.example");
    foreign.set_cookie("cutout_form", &browser.cookie("cutout_form").unwrap());
    let reply = foreign.post("/login", &fields);
    assert_eq!(reply.status, 403);
    assert!(reply.text().contains("another site"), "{}", reply.text());
    let opaque = Browser::new(&app).with_header("Origin", "null");
    opaque.set_cookie("cutout_form", &browser.cookie("cutout_form").unwrap());
    assert_eq!(opaque.post("/login", &fields).status, 403);

    let own = Browser::new(&app).with_header("Origin", &format!("http://{}", app.addr));
    own.set_cookie("cutout_form", &browser.cookie("cutout_form").unwrap());
    assert_eq!(own.post("/login", &fields).status, 303);
}
