//! What remove.bg's clients send: its route and statuses, its names for
//! sizes and types, every field it documents, and clear refusals of values
//! this appliance does not serve, of unknown fields and of a file part
//! under another name. The output options are in `options`, the URLs in
//! `fetch`.

use crate::helpers::*;

const ROUTES: [&str; 2] = ["/api/remove-bg", "/v1.0/removebg"];

fn post(app: &TestApp, path: &str, key: &str, form: &Multipart) -> Reply {
    let mut headers = vec![("X-Api-Key".to_owned(), key.to_owned())];
    headers.push(("Content-Type".to_owned(), form.content_type()));
    app.request("POST", path, &headers, &form.body())
}

#[test]
fn remove_bgs_route_serves_the_same_cut_out_and_counts_it() {
    let app = spawn_app();
    let key = app.account("acme", "pro");
    let image = jpeg(120, 80);
    let mut pngs = vec![];
    for path in ROUTES {
        let reply = post(
            &app,
            path,
            &key,
            Multipart::new().file("image_file", &image),
        );
        assert_eq!(reply.status, 200, "{path}: {}", reply.text());
        assert_eq!(reply.header("content-type"), Some("image/png"));
        assert_eq!(reply.header("x-type"), Some("other"));
        assert_eq!(reply.header("x-ratelimit-limit"), Some("500"));
        pngs.push(reply.png());
    }
    assert_eq!(pngs[0], pngs[1]);
    assert_eq!(app.used("acme"), 2);
    let get = app.request("GET", "/v1.0/removebg", &[], b"");
    assert_eq!((get.status, get.header("allow")), (405, Some("POST")));
    let unauthenticated = app.request("POST", "/v1.0/removebg", &[], b"");
    assert_eq!(unauthenticated.error_code(), "missing_api_key");
}

#[test]
fn remove_bgs_size_names_give_their_resolutions() {
    let app = spawn_app();
    let key = app.account("acme", "business");
    // 2400 x 1800 = 4.32 MP.
    let image = jpeg(2400, 1800);
    for (size, pixels) in [
        ("small", 250_000),
        ("regular", 250_000),
        ("medium", 1_500_000),
        ("hd", 4_000_000),
        ("4k", 4_320_000),
        ("50MP", 4_320_000),
    ] {
        let reply = post(
            &app,
            "/v1.0/removebg",
            &key,
            Multipart::new()
                .file("image_file", &image)
                .text("size", size),
        );
        let (w, h) = reply.png().dimensions();
        let got = u64::from(w) * u64::from(h);
        assert!(
            got <= pixels && got > pixels * 99 / 100,
            "size={size}: {w}x{h}"
        );
        assert!(
            (f64::from(w) / f64::from(h) - 4.0 / 3.0).abs() < 0.01,
            "aspect kept: {w}x{h}"
        );
    }
}

#[test]
fn remove_bgs_types_run_a_model_and_say_so_in_x_type() {
    let app = spawn_app();
    let key = app.account("acme", "business");
    for (kind, x_type) in [
        ("person", "person"),
        ("product", "product"),
        ("car", "car"),
        ("auto", "other"),
        ("general", "other"),
    ] {
        let reply = post(
            &app,
            "/v1.0/removebg",
            &key,
            Multipart::new()
                .file("image_file", &jpeg(64, 48))
                .text("type", kind),
        );
        assert_eq!(reply.status, 200, "type={kind}");
        assert_eq!(reply.header("x-type"), Some(x_type), "type={kind}");
    }
}

#[test]
fn a_file_part_under_another_name_is_named_and_costs_nothing() {
    let app = spawn_app();
    let key = app.account("acme", "pro");
    // Larger than a text field may be: it is still read past and named.
    let image = jpeg(1600, 1200);
    for name in ["file", "image", "photo"] {
        let reply = post(
            &app,
            "/v1.0/removebg",
            &key,
            Multipart::new().file(name, &image),
        );
        assert_eq!(
            (reply.status, reply.error_code().as_str()),
            (400, "missing_image_file"),
            "{name}"
        );
        assert!(
            reply.text().contains(&format!(
                "a file part named \\\"{name}\\\" but none named image_file"
            )),
            "{}",
            reply.text()
        );
    }
    assert_eq!(app.used("acme"), 0);
}

#[test]
fn unknown_fields_and_values_not_served_are_refused_by_name_and_cost_nothing() {
    let app = spawn_app();
    let key = app.account("acme", "pro");
    let long = "x".repeat(5000);
    for (fields, code) in [
        (vec![("sise", "auto")], "unknown_field"),
        // Named as unknown, not as too long.
        (vec![("image_base64", long.as_str())], "unknown_field"),
        (vec![("add_shadow", "yes")], "invalid_add_shadow"),
        (vec![("type_level", "3")], "unsupported_option"),
        (vec![("shadow_type", "flat")], "invalid_shadow_type"),
        (vec![("shadow_opacity", "101")], "invalid_shadow_opacity"),
        (
            vec![("semitransparency", "maybe")],
            "invalid_semitransparency",
        ),
        (vec![("type", "truck")], "invalid_type"),
    ] {
        let named = fields[fields.len() - 1].0;
        for path in ROUTES {
            let mut form = Multipart::new();
            form.file("image_file", &jpeg(64, 48));
            for (field, value) in &fields {
                form.text(field, value);
            }
            let reply = post(&app, path, &key, &form);
            assert_eq!(
                (reply.status, reply.error_code().as_str()),
                (400, code),
                "{fields:?} on {path}: {}",
                reply.text()
            );
            assert!(reply.text().contains(named), "{}", reply.text());
            let body: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
            assert_eq!(body["errors"][0]["source"]["parameter"], named);
        }
        let urlencoded: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("image_file_b64", &b64(&jpeg(64, 48)))
            .extend_pairs(&fields)
            .finish();
        let reply = post_body(
            &app,
            &key,
            "application/x-www-form-urlencoded",
            urlencoded.as_bytes(),
        );
        assert_eq!(reply.error_code(), code, "{fields:?} urlencoded");
    }
    assert_eq!(app.used("acme"), 0);
}

#[test]
fn remove_bgs_statuses_on_its_routes_and_the_contracts_on_the_api() {
    let app = spawn_app();
    let key = app.account("acme", "pro");
    let wrong = format!("ck_{}", "0".repeat(40));
    let form = {
        let mut form = Multipart::new();
        form.file("image_file", b"GIF89a not an image we take");
        form
    };
    for (path, keyless, wrong_key, unreadable) in [
        ("/api/remove-bg", 401, 401, 415),
        ("/v1.0/removebg", 403, 403, 400),
    ] {
        let mut headers = vec![("Content-Type".to_owned(), form.content_type())];
        let reply = app.request("POST", path, &headers, &form.body());
        assert_eq!(
            (reply.status, reply.error_code().as_str()),
            (keyless, "missing_api_key")
        );
        headers.push(("X-Api-Key".to_owned(), wrong.clone()));
        let reply = app.request("POST", path, &headers, &form.body());
        assert_eq!(
            (reply.status, reply.error_code().as_str()),
            (wrong_key, "invalid_api_key")
        );
        let reply = post(&app, path, &key, &form);
        assert_eq!(
            (reply.status, reply.error_code().as_str()),
            (unreadable, "unsupported_image_format")
        );
    }
    // Any path under /v1.0/: the key first, as remove.bg checks it.
    for path in ["/v1.0/account", "/v1.0/improve", "/v1.0/anything"] {
        let headers = [("X-Api-Key".to_owned(), wrong.clone())];
        let reply = app.request("GET", path, &headers, b"");
        assert_eq!(
            (reply.status, reply.error_code().as_str()),
            (403, "invalid_api_key"),
            "{path}"
        );
        let body: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
        assert!(body["errors"][0]["title"].is_string(), "remove.bg's body");
    }
    let known = [("X-Api-Key".to_owned(), key.clone())];
    assert_eq!(
        app.request("GET", "/v1.0/anything", &known, b"").status,
        404
    );
    assert_eq!(app.used("acme"), 0);
}

#[test]
fn every_kind_remove_bg_reports_is_a_type_and_comes_back_in_x_type() {
    let app = spawn_app();
    let key = app.account("acme", "business");
    let image = jpeg(64, 48);
    for kind in [
        "person",
        "product",
        "animal",
        "car",
        "car_interior",
        "car_part",
        "transportation",
        "graphics",
        "other",
    ] {
        let mut form = Multipart::new();
        form.file("image_file", &image).text("type", kind);
        let reply = post(&app, "/v1.0/removebg", &key, &form);
        assert_eq!(reply.status, 200, "{kind}: {}", reply.text());
        assert_eq!(reply.header("x-type"), Some(kind));
    }
}

#[test]
fn remove_bgs_defaults_are_taken_as_what_the_appliance_does_anyway() {
    let app = spawn_app();
    let key = app.account("acme", "pro");
    let image = jpeg(64, 48);
    let plain = post(
        &app,
        "/v1.0/removebg",
        &key,
        Multipart::new().file("image_file", &image),
    );
    let mut form = Multipart::new();
    form.file("image_file", &image);
    for (field, value) in [
        ("format", "auto"),
        ("channels", "rgba"),
        ("bg_color", ""),
        ("crop", "false"),
        ("crop_margin", "0"),
        ("roi", "0% 0% 100% 100%"),
        ("scale", "original"),
        ("position", "original"),
        ("semitransparency", "true"),
        ("semitransparency", "false"),
        ("add_shadow", "false"),
        ("type_level", "none"),
        ("type_level", "latest"),
        ("shadow_type", "drop"),
        ("shadow_opacity", "50"),
    ] {
        form.text(field, value);
    }
    let reply = post(&app, "/v1.0/removebg", &key, &form);
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.png(), plain.png());
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn post_body(app: &TestApp, key: &str, content_type: &str, body: &[u8]) -> Reply {
    let headers = [
        ("X-Api-Key".to_owned(), key.to_owned()),
        ("Content-Type".to_owned(), content_type.to_owned()),
    ];
    app.request("POST", "/v1.0/removebg", &headers, body)
}

#[test]
fn the_image_in_base64_as_json_urlencoded_or_a_form_field_gives_the_same_cut_out() {
    let app = spawn_app();
    let key = app.account("acme", "pro");
    let image = jpeg(120, 80);
    let file = post(
        &app,
        "/v1.0/removebg",
        &key,
        Multipart::new().file("image_file", &image),
    );
    let encoded = b64(&image);
    let json =
        serde_json::json!({ "image_file_b64": encoded, "size": "regular", "add_shadow": false });
    let urlencoded: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("image_file_b64", &encoded)
        .append_pair("type", "product")
        .finish();
    let data_url = format!(
        "data:image/jpeg;base64,{}",
        encoded
            .as_bytes()
            .chunks(76)
            .map(|l| std::str::from_utf8(l).unwrap())
            .collect::<Vec<_>>()
            .join("\r\n")
    );
    let replies = [
        post_body(&app, &key, "application/json", json.to_string().as_bytes()),
        post_body(
            &app,
            &key,
            "application/x-www-form-urlencoded",
            urlencoded.as_bytes(),
        ),
        post(
            &app,
            "/v1.0/removebg",
            &key,
            Multipart::new().text("image_file_b64", &data_url),
        ),
    ];
    for reply in &replies {
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert_eq!(reply.png(), file.png());
    }
    assert_eq!(replies[1].header("x-type"), Some("product"));
    assert_eq!(app.used("acme"), 4);
}

#[test]
fn bad_base64_both_images_or_one_too_large_are_refused_and_cost_nothing() {
    let app = spawn_app();
    let key = app.account("acme", "pro");
    let check = |reply: Reply, status: u16, code: &str| {
        assert_eq!(
            (reply.status, reply.error_code().as_str()),
            (status, code),
            "{}",
            reply.text()
        );
    };
    check(
        post_body(
            &app,
            &key,
            "application/json",
            br#"{"image_file_b64": "not base64!"}"#,
        ),
        400,
        "invalid_image_file_b64",
    );
    check(
        post_body(&app, &key, "application/json", br#"{"size": "auto"}"#),
        400,
        "missing_image_file",
    );
    check(
        post_body(
            &app,
            &key,
            "application/json",
            br#"{"image_file_b64": "", "colour": "red"}"#,
        ),
        400,
        "unknown_field",
    );
    check(
        post_body(
            &app,
            &key,
            "application/x-www-form-urlencoded",
            b"image_file=abc",
        ),
        400,
        "invalid_request",
    );
    let image = jpeg(64, 48);
    let mut both = Multipart::new();
    both.file("image_file", &image)
        .text("image_file_b64", &b64(&image));
    check(
        post(&app, "/v1.0/removebg", &key, &both),
        400,
        "invalid_request",
    );
    // 10 MiB and one byte, in base64: over the limit once decoded.
    let over = b64(&vec![0xFF; 10 * 1024 * 1024 + 1]);
    let body = serde_json::json!({ "image_file_b64": over }).to_string();
    check(
        post_body(&app, &key, "application/json", body.as_bytes()),
        400,
        "file_too_large",
    );
    assert_eq!(app.used("acme"), 0);
}

fn account_info(app: &TestApp, key: Option<&str>) -> Reply {
    let headers: Vec<_> = key
        .map(|k| ("X-Api-Key".to_owned(), k.to_owned()))
        .into_iter()
        .collect();
    app.request("GET", "/v1.0/account", &headers, b"")
}

#[test]
fn the_account_route_says_the_plan_and_what_is_left_in_remove_bgs_shape() {
    let app = spawn_app();
    let pro = app.account("booth", "pro");
    for _ in 0..3 {
        assert_eq!(app.post_image(Some(&pro), &jpeg(64, 48), None).status, 200);
    }
    let reply = account_info(&app, Some(&pro));
    assert_eq!(reply.status, 200, "{}", reply.text());
    let info: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    let attributes = &info["data"]["attributes"];
    assert_eq!(attributes["credits"]["total"], 497);
    assert_eq!(attributes["credits"]["subscription"], 497);
    assert_eq!(attributes["api"]["sizes"], "all");
    assert_eq!(
        (
            &attributes["account"],
            &attributes["plan"],
            &attributes["used"]
        ),
        (&"booth".into(), &"pro".into(), &3.into())
    );
    assert_eq!(
        (&attributes["monthly_limit"], &attributes["concurrency"]),
        (&500.into(), &5.into())
    );
    assert_eq!(attributes["month"], "2026-03");

    let business = app.account("venue", "business");
    let info: serde_json::Value =
        serde_json::from_slice(&account_info(&app, Some(&business)).body).unwrap();
    assert!(
        info["data"]["attributes"]["credits"]["total"].is_null(),
        "no monthly limit"
    );
    assert_eq!(app.used("booth"), 3, "asking costs nothing");
    assert_eq!(app.used("venue"), 0);
}

#[test]
fn the_account_route_refuses_as_the_api_does() {
    let app = spawn_app();
    let key = app.account("booth", "pro");
    let free = app.account("freebie", "free");
    let check = |reply: Reply, status: u16, code: &str| {
        assert_eq!((reply.status, reply.error_code().as_str()), (status, code));
    };
    check(account_info(&app, None), 403, "missing_api_key");
    check(account_info(&app, Some("ck_nope")), 403, "invalid_api_key");
    check(account_info(&app, Some(&free)), 403, "plan_not_allowed");
    app.store.set_suspended("booth", true, MID_MARCH).unwrap();
    check(account_info(&app, Some(&key)), 403, "account_suspended");
    let post = app.request("POST", "/v1.0/account", &[], b"");
    assert_eq!(
        (post.status, post.header("allow")),
        (405, Some("GET, HEAD"))
    );
}

#[test]
fn the_subjects_box_comes_in_headers_and_accept_json_gives_remove_bgs_json_answer() {
    let app = spawn_app();
    let key = app.account("acme", "pro");
    let image = jpeg(160, 120);
    let png = post(
        &app,
        "/v1.0/removebg",
        &key,
        Multipart::new().file("image_file", &image),
    );
    assert_eq!(png.header("x-credits-charged"), Some("1"));
    let cut = png.png();
    let visible: Vec<(u32, u32)> = cut
        .enumerate_pixels()
        .filter(|(_, _, p)| p[3] >= 8)
        .map(|(x, y, _)| (x, y))
        .collect();
    assert!(!visible.is_empty(), "the test photo has a subject");
    let left = visible.iter().map(|p| p.0).min().unwrap();
    let right = visible.iter().map(|p| p.0).max().unwrap();
    let top = visible.iter().map(|p| p.1).min().unwrap();
    let bottom = visible.iter().map(|p| p.1).max().unwrap();
    let expected = [left, top, right - left + 1, bottom - top + 1].map(|n| n.to_string());
    let got = ["left", "top", "width", "height"].map(|side| {
        png.header(&format!("x-foreground-{side}"))
            .unwrap()
            .to_owned()
    });
    assert_eq!(got, expected);

    let mut headers = vec![
        ("X-Api-Key".to_owned(), key.clone()),
        ("Accept".to_owned(), "application/json".to_owned()),
    ];
    let mut form = Multipart::new();
    form.file("image_file", &image);
    headers.push(("Content-Type".to_owned(), form.content_type()));
    let reply = app.request("POST", "/v1.0/removebg", &headers, &form.body());
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.header("content-type"), Some("application/json"));
    let answer: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    let data = &answer["data"];
    use base64::Engine;
    let result = base64::engine::general_purpose::STANDARD
        .decode(data["result_b64"].as_str().unwrap())
        .unwrap();
    assert_eq!(result, png.body);
    let in_json = ["left", "top", "width", "height"].map(|side| {
        data[format!("foreground_{side}")]
            .as_u64()
            .unwrap()
            .to_string()
    });
    assert_eq!(in_json, expected);
    assert_eq!(app.used("acme"), 2);
}

#[test]
fn channels_alpha_is_the_cut_outs_alpha_as_a_grey_png_and_a_bad_value_is_refused() {
    let app = spawn_app();
    let key = app.account("acme", "pro");
    let image = jpeg(160, 120);
    let rgba = post(
        &app,
        "/v1.0/removebg",
        &key,
        Multipart::new().file("image_file", &image),
    );
    let mut form = Multipart::new();
    form.file("image_file", &image).text("channels", "alpha");
    let alpha = post(&app, "/v1.0/removebg", &key, &form);
    assert_eq!(alpha.status, 200, "{}", alpha.text());
    assert_eq!(alpha.header("content-type"), Some("image/png"));
    let grey = image::load_from_memory(&alpha.body).unwrap();
    assert_eq!(grey.color(), image::ColorType::L8);
    let cut = rgba.png();
    let expected: Vec<u8> = cut.pixels().map(|p| p[3]).collect();
    assert_eq!(grey.to_luma8().into_raw(), expected);
    assert!(expected.iter().any(|&a| a > 0) && expected.contains(&0));
    for side in ["top", "left", "width", "height"] {
        let name = format!("x-foreground-{side}");
        assert_eq!(alpha.header(&name), rgba.header(&name), "{name}");
    }

    let mut bad = Multipart::new();
    bad.file("image_file", &image).text("channels", "rgb");
    let refused = post(&app, "/v1.0/removebg", &key, &bad);
    assert_eq!(
        (refused.status, refused.error_code().as_str()),
        (400, "invalid_channels")
    );
    assert_eq!(app.used("acme"), 2);
}
