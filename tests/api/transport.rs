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

    let session = operator_session_over_https(&app);
    assert!(session.contains("; Secure"), "{session}");
    let cookie = session.split(';').next().unwrap();
    let status = over_https(&app, "GET", "/admin/status", &[("Cookie", cookie)], b"");
    assert_eq!(status.status, 200);
    assert!(
        status
            .text()
            .contains(&app.state.tls.as_ref().unwrap().fingerprint),
        "the Status page shows the fingerprint"
    );
}

/// `raw` sent to the HTTPS port, its certificate pinned.
fn over_https(
    app: &TestApp,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let (addr, fingerprint) = (
        https_addr(app),
        &app.state.tls.as_ref().unwrap().fingerprint,
    );
    send_pinned(addr, fingerprint, &raw(addr, method, path, headers, body)).unwrap()
}

/// Signs the operator in over HTTPS as a browser does; the session's
/// `Set-Cookie`.
fn operator_session_over_https(app: &TestApp) -> String {
    let form = over_https(app, "GET", "/login", &[], b"");
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
    let signed_in = post_over_https(app, "/login", &form_cookie, &body);
    assert_eq!(signed_in.status, 303, "{}", signed_in.text());
    signed_in
        .all_headers("set-cookie")
        .into_iter()
        .find(|c| c.starts_with("cutout_session="))
        .expect("a session cookie")
        .to_owned()
}

/// A form posted over HTTPS from the dashboard's own page.
fn post_over_https(app: &TestApp, path: &str, cookie: &str, body: &str) -> Reply {
    let origin = format!("https://{}", https_addr(app));
    let headers = [
        ("Cookie", cookie),
        ("Content-Type", "application/x-www-form-urlencoded"),
        ("Origin", &origin),
    ];
    over_https(app, "POST", path, &headers, body.as_bytes())
}

#[test]
fn the_operator_switches_the_api_over_plain_http_off_and_sees_which_keys_came_in_clear() {
    let app = with_https(true);
    app.set_admin_password();
    let booth = app.account("booth", "pro");
    let kiosk = app.account("kiosk", "pro");
    let photo = jpeg(64, 48);
    let mut form = Multipart::new();
    form.file("image_file", &photo);
    let content_type = form.content_type();
    let upload_over_https = |key: &str| {
        let headers = [("X-Api-Key", key), ("Content-Type", &content_type)];
        over_https(&app, "POST", "/api/remove-bg", &headers, &form.body())
    };
    assert_eq!(app.post_image(Some(&booth), &photo, None).status, 200);
    assert_eq!(upload_over_https(&kiosk).status, 200);

    let session = operator_session_over_https(&app);
    let cookie = session.split(';').next().unwrap();
    let in_clear = |account: &str| {
        let page = over_https(
            &app,
            "GET",
            &format!("/admin/accounts/{account}"),
            &[("Cookie", cookie)],
            b"",
        );
        let html = page.text();
        let column = "data-label=\"Last in clear\">";
        let cell = &html[html.find(column).expect("the column") + column.len()..];
        cell[..cell.find('<').unwrap()].to_owned()
    };
    assert_eq!(in_clear("booth"), cutout::domain::utc_datetime(MID_MARCH));
    assert_eq!(in_clear("kiosk"), "never");
    let listed = cutout_cli(app.data_dir(), &["key", "list", "booth"]);
    assert!(listed.contains("LAST IN CLEAR"), "{listed}");
    assert_eq!(
        listed.matches(&cutout::domain::utc_date(MID_MARCH)).count(),
        3,
        "{listed}"
    );

    let switch = |to: &str| {
        let status = over_https(&app, "GET", "/admin/status", &[("Cookie", cookie)], b"");
        assert!(status.text().contains("API over plain HTTP"));
        let body = format!("csrf={}&api={to}", csrf_in(&status));
        let reply = post_over_https(&app, "/admin/status/plain-http", cookie, &body);
        assert_eq!(reply.status, 303);
        let location = reply.header("location").unwrap().to_owned();
        over_https(&app, "GET", &location, &[("Cookie", cookie)], b"").text()
    };
    let page = switch("off");
    assert!(page.contains("Plain HTTP is off for the API"), "{page}");
    assert!(page.contains(&format!(
        "keys sent to port {} are refused",
        app.addr.port()
    )));

    // Refused on both routes, costing nothing; an unknown key is told so as before.
    let refused = app.post_image(Some(&booth), &photo, None);
    assert_eq!(
        (refused.status, refused.error_code().as_str()),
        (403, "plain_http_off")
    );
    assert!(refused
        .text()
        .contains(&format!("port {}", https_addr(&app).port())));
    let headers = [("X-Api-Key".to_owned(), booth.clone())];
    let account = app.request("GET", "/v1.0/account", &headers, b"");
    assert_eq!(
        (account.status, account.error_code().as_str()),
        (403, "plain_http_off")
    );
    let unknown = app.post_image(Some(&format!("ck_{}", "0".repeat(40))), &photo, None);
    assert_eq!(unknown.error_code(), "invalid_api_key");
    assert_eq!(app.used("booth"), 1);
    // Over HTTPS the same key works; the kiosk's refused call in clear shows.
    assert_eq!(upload_over_https(&booth).status, 200);
    assert_eq!(app.used("booth"), 2);
    assert_eq!(app.post_image(Some(&kiosk), &photo, None).status, 403);
    assert_eq!(in_clear("kiosk"), cutout::domain::utc_datetime(MID_MARCH));

    let page = switch("on");
    assert!(
        page.contains("Plain HTTP is on for the API again"),
        "{page}"
    );
    assert_eq!(app.post_image(Some(&booth), &photo, None).status, 200);
    assert_eq!(app.used("booth"), 3);
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
