//! Backdrops: the operator adds them on the dashboard's Backdrops page (or
//! with `cutout backdrop`), a booth's key lists them (`GET /api/backdrops`)
//! and a request names one (`backdrop`): the subject on its background,
//! under its overlay. Every bad upload is refused with a clear error and
//! leaves the store as it was; only the operator may add or delete. The
//! accounts page warns the operator of an account near its month's limit.

use crate::helpers::*;
use cutout::backdrops::Backdrops;
use cutout::EngineSource;
use image::RgbaImage;

const BLUE: [u8; 4] = [0, 0, 255, 255];
const RED: [u8; 4] = [255, 0, 0, 255];

fn png(image: RgbaImage) -> Vec<u8> {
    encode(&image.into(), image::ImageFormat::Png)
}

/// Blue, square: the photo is 4:3.
fn blue() -> Vec<u8> {
    png(RgbaImage::from_pixel(90, 90, image::Rgba(BLUE)))
}

/// Transparent but for an opaque red band over its top tenth.
fn red_band() -> Vec<u8> {
    png(RgbaImage::from_fn(160, 120, |_, y| match y < 12 {
        true => image::Rgba(RED),
        false => image::Rgba([0; 4]),
    }))
}

fn cut(app: &TestApp, key: &str, fields: &[(&str, &str)]) -> Reply {
    let mut form = Multipart::new();
    form.file("image_file", &jpeg(160, 120));
    for (name, value) in fields {
        form.text(name, value);
    }
    app.post_form(Some(key), &form)
}

#[test]
fn a_request_naming_a_backdrop_puts_the_subject_on_its_background_under_its_overlay() {
    let app = spawn_app();
    let key = app.account("booth", "pro");
    Backdrops::in_data_dir(app.data_dir())
        .add("Beach at Dusk", &blue(), Some(&red_band()))
        .unwrap();
    let plain = cut(&app, &key, &[]).png();
    let reply = cut(&app, &key, &[("backdrop", "beach at dusk")]);
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(app.used("booth"), 2);
    let framed = image::load_from_memory(&reply.body).unwrap().into_rgba8();
    assert_eq!(framed.dimensions(), plain.dimensions());
    for ((x, y, on), cut) in framed.enumerate_pixels().zip(plain.pixels()) {
        let expected = match (y < 12, cut[3]) {
            (true, _) => RED,
            (false, 0) => BLUE,
            (false, 255) => cut.0,
            (false, _) => continue,
        };
        assert_eq!(on.0, expected, "({x}, {y})");
    }
    // By its id too, the placement options applied to the subject.
    let scaled = cut(
        &app,
        &key,
        &[("backdrop", "beach-at-dusk"), ("scale", "50%")],
    );
    assert_eq!(scaled.status, 200, "{}", scaled.text());
}

#[test]
fn a_booths_key_lists_the_backdrops() {
    let app = spawn_app();
    let key = app.account("booth", "pro");
    let backdrops = Backdrops::in_data_dir(app.data_dir());
    backdrops.add("Party", &jpeg(64, 48), None).unwrap();
    backdrops.add("Beach", &blue(), Some(&red_band())).unwrap();
    let headers = [("X-Api-Key".to_owned(), key)];
    let listed = app.request("GET", "/api/backdrops", &headers, b"");
    assert_eq!(listed.status, 200, "{}", listed.text());
    let json: serde_json::Value = serde_json::from_slice(&listed.body).unwrap();
    let names: Vec<_> = json["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["id"].as_str().unwrap(),
                b["name"].as_str().unwrap(),
                b["width"].as_u64().unwrap(),
                b["overlay"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [("beach", "Beach", 90, true), ("party", "Party", 64, false)]
    );
    assert_eq!(
        app.request("GET", "/api/backdrops", &[], b"").status,
        401,
        "a key is needed"
    );
    assert_eq!(
        app.request("POST", "/api/backdrops", &headers, b"").status,
        405
    );
    // Their images as uploaded, for a booth that composites itself.
    let image = |path: &str, headers: &[(String, String)]| app.request("GET", path, headers, b"");
    let background = image("/api/backdrops/beach/background", &headers);
    assert_eq!(background.status, 200, "{}", background.text());
    assert_eq!(background.header("content-type"), Some("image/png"));
    assert_eq!(background.body, blue());
    let overlay = image("/api/backdrops/beach/overlay", &headers);
    assert_eq!((overlay.status, overlay.body), (200, red_band()));
    assert_eq!(
        image("/api/backdrops/party/background", &headers).header("content-type"),
        Some("image/jpeg")
    );
    for missing in [
        "/api/backdrops/party/overlay",
        "/api/backdrops/sea/background",
        "/api/backdrops/beach/name",
        "/api/backdrops/../backdrops/beach/background",
        "/api/backdrops/.beach.writing/background",
    ] {
        let reply = image(missing, &headers);
        assert_eq!(reply.status, 404, "{missing}: {}", reply.text());
        assert_eq!(reply.error_code(), "not_found", "{missing}");
    }
    assert_eq!(image("/api/backdrops/beach/background", &[]).status, 401);
    assert_eq!(
        app.request("DELETE", "/api/backdrops/beach/background", &headers, b"")
            .status,
        405
    );
    assert_eq!(app.used("booth"), 0, "nothing charged");
}

#[test]
fn a_backdrop_that_can_no_longer_be_read_is_named_in_the_refusal_at_no_charge() {
    let app = spawn_app();
    let key = app.account("booth", "pro");
    let backdrops = Backdrops::in_data_dir(app.data_dir());
    backdrops.add("Party", &blue(), None).unwrap();
    backdrops.add("Beach", &blue(), Some(&red_band())).unwrap();
    let dir = app.data_dir().join("backdrops");
    // Damaged since (a bad sector, a full card), their headers still read:
    // the first found when a request decodes them.
    let mut damaged = blue();
    let end = damaged.len() - 12 - 4; // the IDAT's last bytes, before its CRC and IEND
    damaged[end - 8..end].fill(0xff);
    std::fs::write(dir.join("party/background"), damaged).unwrap();
    std::fs::write(dir.join("beach/overlay.png"), &red_band()[..40]).unwrap();
    for (name, why) in [
        (
            "Party",
            "the background of the backdrop \\\"Party\\\" cannot be read",
        ),
        (
            "Beach",
            "the overlay of the backdrop \\\"Beach\\\" cannot be read",
        ),
    ] {
        let reply = cut(&app, &key, &[("backdrop", name)]);
        assert_eq!(reply.status, 400, "{name}: {}", reply.text());
        assert_eq!(reply.error_code(), "invalid_backdrop", "{name}");
        assert!(reply.text().contains(why), "{name}: {}", reply.text());
    }
    assert_eq!(app.used("booth"), 0);
}

#[test]
fn a_bad_backdrop_field_is_refused_by_name_at_no_charge() {
    let app = spawn_app();
    let key = app.account("booth", "pro");
    Backdrops::in_data_dir(app.data_dir())
        .add("Party", &jpeg(64, 48), None)
        .unwrap();
    let cases: [(&[(&str, &str)], &str); 4] = [
        (
            &[("backdrop", "Beach")],
            "there is no backdrop named \\\"Beach\\\"; GET /api/backdrops lists them",
        ),
        (
            &[("backdrop", "Party"), ("bg_color", "red")],
            "a backdrop brings its own background: send it without bg_color",
        ),
        (
            &[
                ("backdrop", "Party"),
                ("bg_image_url", "http://192.0.2.1/b.png"),
            ],
            "without bg_image_url",
        ),
        (
            &[("backdrop", "Party"), ("channels", "alpha")],
            "channels=alpha asks for the matte alone",
        ),
    ];
    for (fields, why) in cases {
        let reply = cut(&app, &key, fields);
        assert_eq!(reply.status, 400, "{fields:?}: {}", reply.text());
        assert_eq!(reply.error_code(), "invalid_backdrop", "{fields:?}");
        assert!(reply.text().contains(why), "{fields:?}: {}", reply.text());
    }
    assert_eq!(app.used("booth"), 0);
}

fn upload(
    browser: &Browser,
    name: &str,
    background: Option<&[u8]>,
    overlay: Option<&[u8]>,
) -> Reply {
    let mut form = Multipart::new();
    form.text("csrf", &browser.csrf("/admin/backdrops"))
        .text("backdrop", name);
    if let Some(background) = background {
        form.file("image_file", background);
    }
    if let Some(overlay) = overlay {
        form.file("bg_image_file", overlay);
    }
    browser.post_multipart("/admin/backdrops", &form)
}

#[test]
fn the_operator_adds_previews_and_deletes_backdrops_on_the_dashboard() {
    let app = spawn_app();
    app.set_admin_password();
    let operator = app.admin();
    assert!(operator
        .get("/admin/backdrops")
        .text()
        .contains("No backdrop yet"));
    let added = upload(&operator, "Beach at Dusk", Some(&blue()), Some(&red_band()));
    assert_eq!(
        (added.status, added.header("location")),
        (303, Some("/admin/backdrops?done=backdrop-added")),
        "{}",
        added.text()
    );
    let page = operator.get("/admin/backdrops?done=backdrop-added").text();
    assert!(
        page.contains("Backdrop added.")
            && page.contains("Beach at Dusk")
            && page.contains("90×90"),
        "{page}"
    );
    let preview = operator.get("/admin/backdrops/beach-at-dusk/preview");
    assert_eq!(preview.header("content-type"), Some("image/jpeg"));
    let preview = image::load_from_memory(&preview.body).unwrap().into_rgb8();
    assert_eq!(preview.dimensions(), (320, 320));
    let top = preview.get_pixel(160, 5).0;
    let middle = preview.get_pixel(160, 200).0;
    assert!(
        top[0] > 200 && top[2] < 60,
        "the overlay's red band on top: {top:?}"
    );
    assert!(
        middle[2] > 200 && middle[0] < 60,
        "the background's blue: {middle:?}"
    );

    let csrf = operator.csrf("/admin/backdrops");
    let deleted = operator.post("/admin/backdrops/beach-at-dusk/delete", &[("csrf", &csrf)]);
    assert_eq!(
        deleted.header("location"),
        Some("/admin/backdrops?done=backdrop-deleted")
    );
    assert_eq!(
        Backdrops::in_data_dir(app.data_dir()).list().unwrap(),
        vec![]
    );
    assert_eq!(
        operator
            .get("/admin/backdrops/beach-at-dusk/preview")
            .status,
        404
    );
}

/// The `href`/`src` values in `page` that start with `prefix`, as a browser
/// asks for them: each byte beyond ASCII percent-encoded.
fn links(page: &str, prefix: &str) -> Vec<String> {
    let quoted = format!("\"{prefix}");
    page.match_indices(&quoted)
        .map(|(at, _)| page[at + 1..].split('"').next().unwrap())
        .map(|link| {
            link.bytes()
                .map(|b| match b.is_ascii() {
                    true => (b as char).to_string(),
                    false => format!("%{b:02X}"),
                })
                .collect()
        })
        .collect()
}

#[test]
fn backdrops_named_beyond_ascii_work_on_the_dashboard_for_booths_and_in_requests() {
    let app = spawn_app();
    app.set_admin_password();
    let operator = app.admin();
    let key = app.account("booth", "pro");
    for name in ["Été", "日本"] {
        let added = upload(&operator, name, Some(&blue()), Some(&red_band()));
        assert_eq!(added.status, 303, "{name}: {}", added.text());
    }
    let page = operator.get("/admin/backdrops").text();
    let previews = links(&page, "/admin/backdrops/");
    let previews: Vec<_> = previews
        .iter()
        .filter(|l| l.ends_with("/preview"))
        .collect();
    assert_eq!(previews.len(), 2, "{page}");
    for preview in previews {
        let reply = operator.get(preview);
        assert_eq!(reply.status, 200, "{preview}");
        assert_eq!(
            reply.header("content-type"),
            Some("image/jpeg"),
            "{preview}"
        );
    }

    let headers = [("X-Api-Key".to_owned(), key.clone())];
    let listed = app.request("GET", "/api/backdrops", &headers, b"");
    let json: serde_json::Value = serde_json::from_slice(&listed.body).unwrap();
    let ids: Vec<&str> = json["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["été", "日本"]);
    for id in ids {
        // As booths ask for it (Python's urllib.parse.quote).
        let id = percent_encoding::utf8_percent_encode(id, percent_encoding::NON_ALPHANUMERIC);
        for part in ["background", "overlay"] {
            let path = format!("/api/backdrops/{id}/{part}");
            let reply = app.request("GET", &path, &headers, b"");
            assert_eq!(reply.status, 200, "{path}: {}", reply.text());
        }
    }
    for name in ["Été", "日本", "été"] {
        let reply = cut(&app, &key, &[("backdrop", name)]);
        assert_eq!(reply.status, 200, "{name}: {}", reply.text());
    }

    let csrf = operator.csrf("/admin/backdrops");
    for delete in links(&page, "/admin/backdrops/") {
        if delete.ends_with("/delete") {
            let reply = operator.post(&delete, &[("csrf", &csrf)]);
            assert_eq!(reply.status, 303, "{delete}: {}", reply.text());
        }
    }
    assert_eq!(
        Backdrops::in_data_dir(app.data_dir()).list().unwrap(),
        vec![]
    );
}

#[test]
fn every_bad_upload_is_refused_with_a_clear_error_and_changes_nothing() {
    let app = spawn_app_with(EngineSource::Ready(u2netp()), |s| {
        s.memory_budget = 16 << 20
    });
    app.set_admin_password();
    let operator = app.admin();
    assert_eq!(
        upload(&operator, "Party", Some(&jpeg(64, 48)), None).status,
        303
    );
    let before = Backdrops::in_data_dir(app.data_dir()).list().unwrap();
    let opaque = png(RgbaImage::from_pixel(8, 8, image::Rgba(RED)));
    let huge = {
        let mut bytes = jpeg(64, 48);
        bytes.resize(11 * 1024 * 1024, 0);
        bytes
    };
    // 12 MB decoded (with the decoder's buffers, 16), 6 MB more to scale it
    // for the preview; 1 of the 16 MiB is kept for the photos' spare pixels.
    let over_the_budget = jpeg(2000, 2000);
    type Case<'a> = (&'a str, Option<&'a [u8]>, Option<&'a [u8]>, u16, &'a str);
    let cases: [Case; 7] = [
        ("Beach", None, None, 400, "Choose a background image."),
        (
            "Beach",
            Some(b"<html>not an image</html>"),
            None,
            400,
            "The background is not a JPG, PNG or WEBP image",
        ),
        (
            "Beach",
            Some(&blue()),
            Some(&opaque),
            400,
            "The overlay must be a PNG with transparency",
        ),
        (
            "party",
            Some(&blue()),
            None,
            400,
            "The name &quot;party&quot; is taken by the backdrop &quot;Party&quot;",
        ),
        (
            "",
            Some(&blue()),
            None,
            400,
            "Give the backdrop a name with a letter or a digit.",
        ),
        ("Beach", Some(&huge), None, 413, "File too large"),
        (
            "Beach",
            Some(&over_the_budget),
            None,
            400,
            "needs about 22 MiB of memory, and this appliance gives its requests 15 MiB of its board's memory (server.memory_budget_mib)",
        ),
    ];
    for (name, background, overlay, status, why) in cases {
        let refused = upload(&operator, name, background, overlay);
        assert_eq!(refused.status, status, "{name:?}: {}", refused.text());
        assert!(
            refused.text().contains(why),
            "{name:?}: {why}: {}",
            refused.text()
        );
        assert_eq!(
            Backdrops::in_data_dir(app.data_dir()).list().unwrap(),
            before,
            "{why}"
        );
    }
}

#[test]
fn only_the_operator_adds_or_deletes_a_backdrop() {
    let app = spawn_app();
    app.set_admin_password();
    app.account_with_login("booth", "pro");
    Backdrops::in_data_dir(app.data_dir())
        .add("Party", &jpeg(64, 48), None)
        .unwrap();
    let user = app.user("booth");
    let csrf = user.csrf("/account");
    let mut form = Multipart::new();
    form.text("csrf", &csrf)
        .text("backdrop", "Beach")
        .file("image_file", &blue());
    assert_eq!(user.post_multipart("/admin/backdrops", &form).status, 403);
    assert_eq!(
        user.post("/admin/backdrops/party/delete", &[("csrf", &csrf)])
            .status,
        403
    );
    assert_eq!(
        Browser::new(&app).get("/admin/backdrops").status,
        303,
        "to sign in"
    );
    let names: Vec<_> = Backdrops::in_data_dir(app.data_dir())
        .list()
        .unwrap()
        .into_iter()
        .map(|b| b.name)
        .collect();
    assert_eq!(names, ["Party"]);
}

#[test]
fn the_accounts_page_warns_of_an_account_near_its_months_limit() {
    let app = spawn_app();
    app.set_admin_password();
    app.account("quiet", "pro");
    app.account("busy", "pro");
    let operator = app.admin();
    assert!(!operator.get("/admin").text().contains("quota-warning"));
    let month = cutout::domain::Month::of_unix(app.now.load(std::sync::atomic::Ordering::SeqCst));
    app.store.set_usage("busy", month, 450).unwrap();
    let page = operator.get("/admin").text();
    assert!(
        page.contains("Nearly or all used this month: busy."),
        "{page}"
    );
    assert!(page.contains("month nearly used"), "{page}");
    app.store.set_usage("busy", month, 500).unwrap();
    assert!(operator.get("/admin").text().contains("month used up"));
}
