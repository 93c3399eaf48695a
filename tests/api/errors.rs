//! Every row of the error table, and that no error costs the caller an image.

use crate::helpers::*;
use cutout::engine::Engine;
use cutout::EngineSource;
use std::sync::Arc;

#[test]
fn authentication_errors_are_401_and_cost_nothing() {
    let app = spawn_app();
    let key = app.account("acme", "pro");
    let image = jpeg(64, 48);

    assert_eq!(
        app.post_image(None, &image, None).error_code(),
        "missing_api_key"
    );
    let unknown = "ck_0123456789abcdef0123456789abcdef01234567";
    let reply = app.post_image(Some(unknown), &image, None);
    assert_eq!(
        (reply.status, reply.error_code().as_str()),
        (401, "invalid_api_key")
    );
    assert_eq!(
        app.post_image(Some("not a key at all"), &image, None)
            .error_code(),
        "invalid_api_key"
    );

    app.store.revoke_key(&key[..12], MID_MARCH).unwrap();
    let revoked = app.post_image(Some(&key), &image, None);
    assert_eq!(
        (revoked.status, revoked.body.clone()),
        (401, reply.body.clone()),
        "revoked looks like unknown"
    );
    assert_eq!(app.used("acme"), 0);
}

#[test]
fn a_free_plan_has_no_api_access() {
    let app = spawn_app();
    let key = app.account("freebie", "free");
    let reply = app.post_image(Some(&key), &jpeg(64, 48), None);
    assert_eq!(
        (reply.status, reply.error_code().as_str()),
        (403, "plan_not_allowed")
    );
}

#[test]
fn bad_forms_and_bad_images_are_400_415_413_and_cost_nothing() {
    let app = spawn_app();
    let key = app.account("acme", "pro");
    let k = Some(key.as_str());
    let check = |reply: Reply, status: u16, code: &str| {
        assert_eq!((reply.status, reply.error_code().as_str()), (status, code));
    };

    check(
        app.post_image(k, &jpeg(64, 48), Some("large")),
        400,
        "invalid_size",
    );
    check(
        app.post_form(k, Multipart::new().text("size", "auto")),
        400,
        "missing_image_file",
    );
    for bad in ["truck", "Person", ""] {
        check(
            app.post_form(
                k,
                Multipart::new()
                    .file("image_file", &jpeg(64, 48))
                    .text("type", bad),
            ),
            400,
            "invalid_type",
        );
    }
    check(
        app.post_image(k, b"just some text, not an image", None),
        415,
        "unsupported_image_format",
    );
    check(app.post_image(k, b"", None), 400, "invalid_image");
    let mut truncated = jpeg(640, 480);
    truncated.truncate(300);
    check(app.post_image(k, &truncated, None), 400, "invalid_image");
    let mut corrupt = png(64, 48);
    corrupt[40..80].fill(0xAA);
    check(app.post_image(k, &corrupt, None), 400, "invalid_image");
    check(
        app.post_image(k, &png_header_only(30_000, 30_000), None),
        400,
        "image_too_large",
    );
    for (content_type, body) in [
        ("text/plain", &b"image_file=x"[..]),
        ("application/json", b"[1, 2]"),
        ("application/json", b"{\"size\": "),
        ("application/json", b"{\"size\": {\"a\": 1}}"),
    ] {
        let headers = [
            ("X-Api-Key".to_owned(), key.clone()),
            ("Content-Type".to_owned(), content_type.to_owned()),
        ];
        check(
            app.request("POST", "/api/remove-bg", &headers, body),
            400,
            "invalid_request",
        );
    }
    let two = Multipart::new()
        .file("image_file", &jpeg(8, 8))
        .file("image_file", &jpeg(8, 8))
        .body();
    let headers = [
        ("X-Api-Key".to_owned(), key.clone()),
        ("Content-Type".to_owned(), Multipart::new().content_type()),
    ];
    check(
        app.request("POST", "/api/remove-bg", &headers, &two),
        400,
        "invalid_request",
    );
    check(
        app.post_image(k, &vec![0xFF; 10 * 1024 * 1024 + 1], None),
        413,
        "file_too_large",
    );

    assert_eq!(app.used("acme"), 0);
}

#[test]
fn a_body_over_the_cap_is_refused_by_its_declared_length_before_it_is_read() {
    let app = spawn_app();
    let key = app.account("acme", "pro");
    // Declares 1 GB and sends only the head: the answer must not wait for the body.
    let head = format!(
        "POST /api/remove-bg HTTP/1.1\r\nHost: t\r\nX-Api-Key: {key}\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: 1000000000\r\n\r\n"
    );
    let reply = send_raw(app.addr, head.as_bytes());
    assert_eq!(
        (reply.status, reply.error_code().as_str()),
        (413, "file_too_large")
    );
}

#[test]
fn unknown_paths_are_404_and_wrong_methods_405() {
    let app = spawn_app();
    let reply = app.request("GET", "/nowhere", &[], b"");
    assert_eq!(
        (reply.status, reply.error_code().as_str()),
        (404, "not_found")
    );
    let reply = app.request("GET", "/api/remove-bg", &[], b"");
    assert_eq!(
        (reply.status, reply.error_code().as_str()),
        (405, "method_not_allowed")
    );
    assert_eq!(reply.header("allow"), Some("POST"));
}

#[test]
fn until_the_model_is_loaded_calls_get_503_with_retry_after() {
    let empty = tempfile::tempdir().unwrap();
    let app = spawn_app_with(EngineSource::Load, |s| {
        s.models_dir = empty.path().to_owned()
    });
    let key = app.account("acme", "pro");
    wait_until("the load has failed", || {
        let ready = app.request("GET", "/readyz", &[], b"");
        ready.status == 503 && String::from_utf8_lossy(&ready.body).contains("missing")
    });
    let reply = app.post_image(Some(&key), &jpeg(64, 48), None);
    assert_eq!(
        (reply.status, reply.error_code().as_str()),
        (503, "service_unavailable")
    );
    assert!(reply.header("retry-after").is_some());
    let ready: serde_json::Value =
        serde_json::from_slice(&app.request("GET", "/readyz", &[], b"").body).unwrap();
    let said = ready["model_error"].as_str().unwrap();
    assert!(said.contains("missing"), "{ready}");
    // The file's name, not where the appliance keeps it.
    let directory = empty.path().to_str().unwrap();
    assert!(
        !said.contains(directory) && said.contains(".onnx"),
        "{ready}"
    );
    assert_eq!(app.used("acme"), 0);
}

pub struct FailingEngine;

impl Engine for FailingEngine {
    fn name(&self) -> &'static str {
        "failing test engine"
    }

    fn run(&self, _: Vec<f32>, _: u32, _: u32) -> anyhow::Result<Vec<f32>> {
        anyhow::bail!("secret internal detail")
    }
}

#[test]
fn an_engine_failure_is_an_opaque_500_that_costs_nothing() {
    let app = spawn_app_with(EngineSource::Ready(Arc::new(FailingEngine)), |_| {});
    let key = app.account("acme", "pro");
    let reply = app.post_image(Some(&key), &jpeg(64, 48), None);
    assert_eq!(
        (reply.status, reply.error_code().as_str()),
        (500, "internal_error")
    );
    assert!(!String::from_utf8_lossy(&reply.body).contains("secret"));
    assert_eq!(app.used("acme"), 0);
}

#[test]
fn a_body_that_stops_arriving_gets_408_and_frees_the_worker() {
    let app = spawn_app_with(EngineSource::Ready(u2netp()), |s| {
        s.socket_timeout = std::time::Duration::from_secs(1);
        s.http_workers = 1;
    });
    let key = app.account("acme", "pro");
    let stalled = format!(
        "POST /api/remove-bg HTTP/1.1\r\nHost: t\r\nX-Api-Key: {key}\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: 5000\r\n\r\n--b\r\n"
    );
    let reply = send_raw(app.addr, stalled.as_bytes());
    assert_eq!(
        (reply.status, reply.error_code().as_str()),
        (408, "request_timeout")
    );
    // The only worker is free again for a client that sends its request.
    assert_eq!(app.post_image(Some(&key), &jpeg(64, 48), None).status, 200);
    assert_eq!(app.used("acme"), 1);
}
