//! `/api/openapi.json` against the running server: every status and code it
//! documents for `POST /api/remove-bg` is provoked here and must come back
//! exactly so, and every documented code must have a way to provoke it.

use crate::errors::FailingEngine;
use crate::helpers::*;
use crate::limits::{gated_app, send_in_background};
use cutout::domain::Month;
use cutout::EngineSource;
use std::sync::Arc;

fn documented(app: &TestApp) -> Vec<(u16, String)> {
    let reply = app.request("GET", "/api/openapi.json", &[], b"");
    assert_eq!(reply.header("content-type"), Some("application/json"));
    let doc: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let post = &doc["paths"]["/api/remove-bg"]["post"];
    let mut compatible = doc["paths"]["/v1.0/removebg"]["post"].clone();
    assert_eq!(compatible["operationId"], "removeBackgroundAsRemoveBg");
    compatible["operationId"] = post["operationId"].clone();
    assert_eq!(&compatible, post, "remove.bg's route is the same operation");
    let responses = post["responses"].as_object().unwrap();
    assert!(responses["200"]["content"]["image/png"].is_object());
    let mut pairs = vec![];
    for (status, response) in responses.iter().filter(|(s, _)| *s != "200") {
        let examples = response["content"]["application/json"]["examples"]
            .as_object()
            .unwrap_or_else(|| panic!("{status} lists no codes"));
        for code in examples.keys() {
            pairs.push((status.parse().unwrap(), code.clone()));
        }
    }
    pairs
}

/// Makes the server answer with `code`; a fresh app where the error needs one.
fn provoke(app: &TestApp, pro: &str, code: &str) -> Reply {
    let k = Some(pro);
    let photo = jpeg(64, 48);
    match code {
        "missing_image_file" => app.post_form(k, Multipart::new().text("size", "auto")),
        "invalid_size" => app.post_image(k, &photo, Some("huge")),
        "invalid_type" => app.post_form(
            k,
            Multipart::new()
                .file("image_file", &photo)
                .text("type", "truck"),
        ),
        "invalid_image_file_b64" => {
            let headers = [
                ("X-Api-Key".to_owned(), pro.to_owned()),
                ("Content-Type".to_owned(), "application/json".to_owned()),
            ];
            let body = br#"{"image_file_b64": "not base64!"}"#;
            app.request("POST", "/v1.0/removebg", &headers, body)
        }
        "invalid_channels" => app.post_form(
            k,
            Multipart::new()
                .file("image_file", &photo)
                .text("channels", "rgb"),
        ),
        "unknown_field" => app.post_form(
            k,
            Multipart::new()
                .file("image_file", &photo)
                .text("colour", "red"),
        ),
        "invalid_format"
        | "invalid_bg_color"
        | "invalid_crop"
        | "invalid_crop_margin"
        | "invalid_roi"
        | "invalid_scale"
        | "invalid_position"
        | "invalid_add_shadow"
        | "invalid_shadow_type"
        | "invalid_shadow_opacity"
        | "invalid_semitransparency"
        | "invalid_backdrop" => {
            let field = code.strip_prefix("invalid_").unwrap();
            app.post_form(
                k,
                Multipart::new()
                    .file("image_file", &photo)
                    .text(field, "nonsense"),
            )
        }
        "invalid_bg_image_url" => app.post_form(
            k,
            Multipart::new()
                .file("image_file", &photo)
                .text("bg_color", "red")
                .text("bg_image_url", "http://192.168.1.2/bg.jpg"),
        ),
        "url_fetch_off" => app.post_form(
            k,
            Multipart::new().text("image_url", "http://192.168.1.2/a.jpg"),
        ),
        "url_not_allowed" | "url_fetch_failed" => {
            let app = spawn_app_with(EngineSource::Ready(u2netp()), |s| {
                s.fetch_allow = vec!["127.0.0.2/32".parse().unwrap()]
            });
            let key = app.account("fetching", "pro");
            let url = match code {
                "url_not_allowed" => "http://127.0.0.1:1/a.jpg",
                _ => "http://127.0.0.2:1/a.jpg",
            };
            app.post_form(Some(&key), Multipart::new().text("image_url", url))
        }
        "invalid_bg_image_file" => app.post_form(
            k,
            Multipart::new()
                .file("image_file", &photo)
                .file("bg_image_file", b"not an image"),
        ),
        "unsupported_option" => app.post_form(
            k,
            Multipart::new()
                .file("image_file", &photo)
                .text("type_level", "3"),
        ),
        "invalid_image" => app.post_image(k, &photo[..photo.len() / 2], None),
        "image_too_large" => app.post_image(k, &png_header_only(30_000, 30_000), None),
        "resolution_too_high" => {
            let flat = image::GrayImage::from_pixel(6000, 4500, image::Luma([90]));
            let big = encode(&flat.into(), image::ImageFormat::Png);
            app.post_image(k, &big, Some("full"))
        }
        "invalid_request" => {
            let headers = [("X-Api-Key".to_owned(), pro.to_owned())];
            app.request("POST", "/api/remove-bg", &headers, b"{}")
        }
        "missing_api_key" => app.post_image(None, &photo, None),
        "invalid_api_key" => app.post_image(Some(&format!("ck_{}", "0".repeat(40))), &photo, None),
        "quota_exceeded" => {
            let key = app.account("used-up", "pro");
            let month = Month::of_unix(MID_MARCH);
            app.store.set_usage("used-up", month, 500).unwrap();
            app.post_image(Some(&key), &photo, None)
        }
        "plan_not_allowed" => app.post_image(Some(&app.account("free", "free")), &photo, None),
        "account_suspended" => {
            let key = app.account("suspended", "pro");
            app.store
                .set_suspended("suspended", true, MID_MARCH)
                .unwrap();
            app.post_image(Some(&key), &photo, None)
        }
        "plain_http_off" => {
            let app = spawn_app_with(EngineSource::Ready(u2netp()), |s| {
                s.tls = Some(cutout::config::TlsSettings {
                    listen: "127.0.0.1:0".into(),
                    certificate: None,
                    plain_http: true,
                })
            });
            let key = app.account("in-clear", "pro");
            app.store.set_plain_http_api(false, MID_MARCH).unwrap();
            app.post_image(Some(&key), &photo, None)
        }
        "request_timeout" => {
            let app = spawn_app_with(EngineSource::Ready(u2netp()), |s| {
                s.socket_timeout = std::time::Duration::from_secs(1)
            });
            let key = app.account("slow", "pro");
            let stalled = format!(
                "POST /api/remove-bg HTTP/1.1\r\nHost: t\r\nX-Api-Key: {key}\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: 5000\r\n\r\n--b\r\n"
            );
            send_raw(app.addr, stalled.as_bytes())
        }
        "request_header_fields_too_large" => {
            let head = format!("GET /api/remove-bg?{} HTTP/1.1\r\n\r\n", "a".repeat(9000));
            send_raw(app.addr, head.as_bytes())
        }
        "file_too_large" => app.post_image(k, &vec![0xFF; 10 * 1024 * 1024 + 1], None),
        "unsupported_image_format" => app.post_image(k, b"GIF89a not supported", None),
        "too_many_concurrent_requests" => {
            let (app, gate) = gated_app(|_| {});
            let key = app.account("busy", "pro");
            let running = send_in_background(&app, &key, 5);
            wait_until("5 requests are in flight", || app.in_flight("busy") == 5);
            let reply = app.post_image(Some(&key), &photo, None);
            gate.open();
            running.into_iter().for_each(|t| drop(t.join()));
            reply
        }
        "internal_error" => {
            let app = spawn_app_with(EngineSource::Ready(Arc::new(FailingEngine)), |_| {});
            let key = app.account("broken", "pro");
            app.post_image(Some(&key), &photo, None)
        }
        "service_unavailable" => {
            let empty = tempfile::tempdir().unwrap();
            let app = spawn_app_with(EngineSource::Load, |s| s.models_dir = empty.path().into());
            let key = app.account("early", "pro");
            wait_until("the load has failed", || {
                app.request("GET", "/readyz", &[], b"").status == 503
            });
            app.post_image(Some(&key), &photo, None)
        }
        other => panic!("the OpenAPI document lists {other:?}, which no test provokes"),
    }
}

#[test]
fn every_documented_status_and_code_is_one_the_server_really_returns() {
    let app = spawn_app();
    let pro = app.account("pro", "pro");
    let documented = documented(&app);
    assert_eq!(documented.len(), cutout::pages::REMOVE_BG_ERRORS.len());
    for (status, code) in documented {
        let reply = provoke(&app, &pro, &code);
        assert_eq!(
            (reply.status, reply.error_code()),
            (status, code.clone()),
            "documented as {status} {code}"
        );
    }
    assert_eq!(app.used("pro"), 0, "no error cost anything");
    assert_eq!(
        app.post_image(Some(&pro), &jpeg(64, 48), None)
            .png()
            .dimensions(),
        (64, 48)
    );
}
