//! remove.bg's output options over HTTP, each checked on the pixels against
//! the plain cut-out of the same photo: the crop and its margins, a
//! background colour or image, the region of interest, scale and position,
//! and the formats. Every bad value is refused by a code that names its
//! field, at no charge.

use crate::helpers::*;
use image::{GenericImageView, RgbaImage};

const ROUTE: &str = "/v1.0/removebg";

fn post(app: &TestApp, key: &str, form: &Multipart) -> Reply {
    let headers = [
        ("X-Api-Key".to_owned(), key.to_owned()),
        ("Content-Type".to_owned(), form.content_type()),
    ];
    app.request("POST", ROUTE, &headers, &form.body())
}

/// The photo cut out with `fields`, as the reply.
fn cut(app: &TestApp, key: &str, photo: &[u8], fields: &[(&str, &str)]) -> Reply {
    let mut form = Multipart::new();
    form.file("image_file", photo);
    for (name, value) in fields {
        form.text(name, value);
    }
    let reply = post(app, key, &form);
    assert_eq!(reply.status, 200, "{fields:?}: {}", reply.text());
    reply
}

fn decoded(reply: &Reply) -> image::DynamicImage {
    let image = image::load_from_memory(&reply.body).unwrap();
    let says = |name: &str| reply.header(name).unwrap().parse::<u32>().unwrap();
    assert_eq!(image.dimensions(), (says("x-width"), says("x-height")));
    image
}

/// The subject's box as the reply's headers say: left, top, width, height.
fn foreground(reply: &Reply) -> [u32; 4] {
    ["left", "top", "width", "height"].map(|side| {
        let name = format!("x-foreground-{side}");
        reply.header(&name).unwrap().parse().unwrap()
    })
}

/// A photo with a subject, and its plain cut-out.
fn photo_and_plain(app: &TestApp, key: &str) -> (Vec<u8>, RgbaImage, [u32; 4]) {
    let photo = jpeg(160, 120);
    let plain = cut(app, key, &photo, &[]);
    let image = plain.png();
    assert!(image.pixels().any(|p| p[3] == 0) && image.pixels().any(|p| p[3] == 255));
    (photo, image, foreground(&plain))
}

#[test]
fn a_crop_is_the_subjects_box_plus_its_margins_transparent_past_the_photo() {
    let app = spawn_app();
    let key = app.account("acme", "pro");
    let (photo, plain, [left, top, width, height]) = photo_and_plain(&app, &key);
    let reply = cut(
        &app,
        &key,
        &photo,
        &[("crop", "true"), ("crop_margin", "10px 50%")],
    );
    let side = (width as f32 * 0.5).round() as u32;
    let image = decoded(&reply).into_rgba8();
    assert_eq!(image.dimensions(), (side + width + side, 10 + height + 10));
    assert_eq!(foreground(&reply), [side, 10, width, height]);
    for (x, y, px) in image.enumerate_pixels() {
        let (px_x, px_y) = (
            i64::from(x) + i64::from(left) - i64::from(side),
            i64::from(y) + i64::from(top) - 10,
        );
        let inside = (0..160).contains(&px_x) && (0..120).contains(&px_y);
        let expected = match inside {
            true => plain.get_pixel(px_x as u32, px_y as u32).0,
            false => [0; 4],
        };
        assert_eq!(px.0, expected, "({x}, {y})");
    }
    let bare = cut(&app, &key, &photo, &[("crop", "true")]);
    assert_eq!(decoded(&bare).dimensions(), (width, height));
    assert_eq!(app.used("acme"), 3);
}

#[test]
fn a_shadow_falls_where_the_subject_was_not_in_black_and_leaves_the_subject_as_it_was() {
    let app = spawn_app();
    let key = app.account("acme", "business");
    let (photo, plain, _) = photo_and_plain(&app, &key);
    let with = |fields: &[(&str, &str)]| cut(&app, &key, &photo, fields).png();
    let added = |shadowed: &RgbaImage| {
        let mut fell = 0;
        for (was, now) in plain.pixels().zip(shadowed.pixels()) {
            if was[3] == 255 {
                assert_eq!(was, now, "the subject is left as it was");
            } else if now[3] > was[3] {
                assert!(now[0] <= was[0].max(8), "a shadow darkens: {was:?} {now:?}");
                fell += 1;
            }
        }
        fell
    };
    let ground = with(&[("add_shadow", "true")]);
    let drop = with(&[("add_shadow", "true"), ("shadow_type", "drop")]);
    let dark = with(&[
        ("add_shadow", "true"),
        ("shadow_type", "drop"),
        ("shadow_opacity", "100"),
    ]);
    for (name, shadowed) in [("3D", &ground), ("drop", &drop), ("drop at 100", &dark)] {
        assert!(added(shadowed) > 50, "{name}: no shadow fell");
    }
    assert!(ground != drop, "the kinds differ");
    let darkness = |image: &RgbaImage| image.pixels().map(|p| u64::from(p[3])).sum::<u64>();
    assert!(
        darkness(&dark) > darkness(&drop),
        "opacity 100 is darker than 50"
    );
    // Without add_shadow, or at opacity 0, no shadow.
    assert_eq!(
        with(&[("shadow_type", "drop"), ("shadow_opacity", "80")]),
        plain
    );
    assert_eq!(
        with(&[("add_shadow", "true"), ("shadow_opacity", "0")]),
        plain
    );
}

#[test]
fn semitransparency_false_fills_what_a_car_encloses_and_changes_nothing_for_other_types() {
    let app = spawn_app();
    let key = app.account("acme", "business");
    // A car's body around a window that shows the wall behind it; U2NetP
    // leaves the window partly transparent.
    let photo = {
        let car = image::RgbImage::from_fn(160, 120, |x, y| {
            let body = (20..140).contains(&x) && (15..105).contains(&y);
            let window = (34..126).contains(&x) && (29..91).contains(&y);
            match (body, window) {
                (true, false) => image::Rgb([200, 20, 20]),
                _ => image::Rgb([235, 235, 235]),
            }
        });
        encode(&car.into(), image::ImageFormat::Png)
    };
    let with = |fields: &[(&str, &str)]| cut(&app, &key, &photo, fields).png();
    let car = with(&[("type", "car")]);
    let filled = with(&[("type", "car"), ("semitransparency", "false")]);
    let mut opaque_now = 0;
    for (was, now) in car.pixels().zip(filled.pixels()) {
        assert!(now[3] >= was[3], "only ever more opaque");
        opaque_now += usize::from(was[3] < 224 && now[3] == 255);
    }
    assert!(
        opaque_now > 100,
        "the window is filled: {opaque_now} pixels"
    );
    assert_eq!(filled.get_pixel(80, 57)[3], 255, "the window");
    assert_eq!(
        filled.get_pixel(5, 5)[3],
        car.get_pixel(5, 5)[3],
        "not the wall around"
    );
    let product = with(&[("type", "product")]);
    assert_eq!(
        with(&[("type", "product"), ("semitransparency", "false")]),
        product
    );
}

#[test]
fn a_background_colour_is_opaque_where_the_matte_was_0_and_auto_makes_it_a_jpeg() {
    let app = spawn_app();
    let key = app.account("acme", "pro");
    let (photo, plain, box_) = photo_and_plain(&app, &key);
    for colour in ["#00ff00", "00ff00", "0f0", "lime"] {
        let reply = cut(&app, &key, &photo, &[("bg_color", colour)]);
        assert_eq!(reply.header("content-type"), Some("image/png"));
        assert_eq!(
            foreground(&reply),
            box_,
            "the subject's box, not the canvas"
        );
        let image = decoded(&reply).into_rgba8();
        for (cut, on_green) in plain.pixels().zip(image.pixels()) {
            match cut[3] {
                0 => assert_eq!(on_green.0, [0, 255, 0, 255], "{colour}"),
                255 => assert_eq!(on_green.0, cut.0),
                _ => assert_eq!(on_green[3], 255),
            }
        }
    }
    let see_through = decoded(&cut(&app, &key, &photo, &[("bg_color", "00ff0080")])).into_rgba8();
    let corner = plain.pixels().position(|p| p[3] == 0).unwrap();
    assert_eq!(
        see_through.pixels().nth(corner).unwrap().0,
        [0, 255, 0, 128]
    );

    let auto = cut(
        &app,
        &key,
        &photo,
        &[("bg_color", "white"), ("format", "auto")],
    );
    assert_eq!(auto.header("content-type"), Some("image/jpeg"));
    assert_eq!(decoded(&auto).color(), image::ColorType::Rgb8);
    let transparent = cut(&app, &key, &photo, &[("format", "auto")]);
    assert_eq!(
        transparent.png(),
        plain,
        "auto: a PNG where there is transparency"
    );
}

#[test]
fn a_background_image_shows_where_the_matte_was_0_cropped_to_the_photos_shape() {
    let app = spawn_app();
    let key = app.account("acme", "pro");
    let (photo, plain, _) = photo_and_plain(&app, &key);
    // Square and blue; the photo is 4:3.
    let blue = image::RgbImage::from_pixel(90, 90, image::Rgb([0, 0, 255]));
    let blue = encode(&blue.into(), image::ImageFormat::Png);
    let mut form = Multipart::new();
    form.file("image_file", &photo).file("bg_image_file", &blue);
    let reply = post(&app, &key, &form);
    assert_eq!(reply.status, 200, "{}", reply.text());
    let image = decoded(&reply).into_rgba8();
    for (cut, on_blue) in plain.pixels().zip(image.pixels()) {
        match cut[3] {
            0 => assert_eq!(on_blue.0, [0, 0, 255, 255]),
            255 => assert_eq!(on_blue.0, cut.0),
            _ => assert_eq!(on_blue[3], 255),
        }
    }
}

#[test]
fn the_region_of_interest_keeps_the_cut_out_inside_it_and_nothing_outside() {
    let app = spawn_app();
    let key = app.account("acme", "pro");
    let (photo, plain, _) = photo_and_plain(&app, &key);
    for roi in ["0% 0% 50% 100%", "0px 0px 80px 120px", "0 0 80 100%"] {
        let image = decoded(&cut(&app, &key, &photo, &[("roi", roi)])).into_rgba8();
        for (x, y, px) in image.enumerate_pixels() {
            let expected = match x < 80 {
                true => plain.get_pixel(x, y).0,
                false => [0; 4],
            };
            assert_eq!(px.0, expected, "{roi}: ({x}, {y})");
        }
    }
}

#[test]
fn scale_fits_the_subject_into_that_share_of_the_photo_and_position_places_it() {
    let app = spawn_app();
    let key = app.account("acme", "pro");
    let (photo, _, [_, _, width, height]) = photo_and_plain(&app, &key);
    let scaled = cut(&app, &key, &photo, &[("scale", "50%")]);
    assert_eq!(decoded(&scaled).dimensions(), (160, 120));
    let [left, top, w, h] = foreground(&scaled);
    // Fitted into 80 × 60, aspect kept; resampling may blur a pixel more.
    let fill = (f64::from(w) / 80.0).max(f64::from(h) / 60.0);
    assert!((0.96..=1.04).contains(&fill), "{w}×{h} in 80×60");
    let ratio = |w: u32, h: u32| f64::from(w) / f64::from(h);
    assert!(
        (ratio(w, h) - ratio(width, height)).abs() < 0.1,
        "{w}×{h} from {width}×{height}"
    );
    assert!(
        left.abs_diff((160 - w) / 2) <= 2 && top.abs_diff((120 - h) / 2) <= 2,
        "centred: {left}, {top}"
    );

    let corner = cut(
        &app,
        &key,
        &photo,
        &[("scale", "50%"), ("position", "100% 0%")],
    );
    let [left, top, w, _] = foreground(&corner);
    assert!(left + w >= 158 && top <= 2, "top right: {left}+{w}, {top}");
    let moved = cut(&app, &key, &photo, &[("position", "0%")]);
    let [left, top, w, h] = foreground(&moved);
    assert!(left <= 1 && top <= 1, "top left: {left}, {top}");
    assert_eq!(
        (w.abs_diff(width) <= 1, h.abs_diff(height) <= 1),
        (true, true),
        "its size kept"
    );
}

#[test]
fn jpg_webp_and_zip_hold_the_same_cut_out() {
    let app = spawn_app();
    let key = app.account("acme", "pro");
    let (photo, plain, _) = photo_and_plain(&app, &key);

    let jpg = cut(&app, &key, &photo, &[("format", "jpg")]);
    assert_eq!(jpg.header("content-type"), Some("image/jpeg"));
    let on_white = decoded(&jpg);
    assert_eq!(on_white.color(), image::ColorType::Rgb8, "no alpha");
    let corner = plain.pixels().position(|p| p[3] == 0).unwrap();
    let white = on_white.to_rgb8().pixels().nth(corner).unwrap().0;
    assert!(
        white.iter().all(|&c| c >= 245),
        "white where transparent: {white:?}"
    );

    let webp = cut(&app, &key, &photo, &[("format", "webp")]);
    assert_eq!(webp.header("content-type"), Some("image/webp"));
    assert_eq!(decoded(&webp).into_rgba8(), plain, "lossless");

    let zip = cut(&app, &key, &photo, &[("format", "zip")]);
    assert_eq!(zip.header("content-type"), Some("application/zip"));
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(&zip.body)).unwrap();
    let mut read = |name: &str| {
        let mut bytes = vec![];
        std::io::Read::read_to_end(&mut archive.by_name(name).unwrap(), &mut bytes).unwrap();
        image::load_from_memory(&bytes).unwrap()
    };
    let colour = read("color.jpg");
    let matte = read("alpha.png");
    assert_eq!(
        (colour.color(), matte.color()),
        (image::ColorType::Rgb8, image::ColorType::L8)
    );
    assert_eq!(colour.dimensions(), plain.dimensions());
    let alpha: Vec<u8> = plain.pixels().map(|p| p[3]).collect();
    assert_eq!(matte.into_luma8().into_raw(), alpha);
    // The colour image is the cut-out's: JPEG keeps it within a few levels.
    let colour = colour.to_rgb8();
    let opaque: Vec<(&image::Rgb<u8>, &image::Rgba<u8>)> = colour
        .pixels()
        .zip(plain.pixels())
        .filter(|(_, p)| p[3] == 255)
        .collect();
    let error: u32 = opaque
        .iter()
        .map(|(a, b)| (0..3).map(|c| u32::from(a[c].abs_diff(b[c]))).sum::<u32>())
        .sum();
    let mean = f64::from(error) / (3 * opaque.len()) as f64;
    assert!(
        mean < 4.0,
        "the subject's colours off by {mean:.1} levels on average"
    );
    assert_eq!(app.used("acme"), 4);
}

#[test]
fn options_in_a_json_body_work_as_in_a_form() {
    let app = spawn_app();
    let key = app.account("acme", "pro");
    let (photo, _, [_, _, width, height]) = photo_and_plain(&app, &key);
    use base64::Engine;
    let body = serde_json::json!({
        "image_file_b64": base64::engine::general_purpose::STANDARD.encode(&photo),
        "crop": true,
        "format": "jpg",
        "bg_color": "white",
    });
    let headers = [
        ("X-Api-Key".to_owned(), key.clone()),
        ("Content-Type".to_owned(), "application/json".to_owned()),
    ];
    let reply = app.request("POST", ROUTE, &headers, body.to_string().as_bytes());
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.header("content-type"), Some("image/jpeg"));
    assert_eq!(decoded(&reply).dimensions(), (width, height));
}

#[test]
fn a_bad_value_of_each_option_is_refused_by_a_code_naming_it_at_no_charge() {
    let app = spawn_app();
    let key = app.account("acme", "pro");
    let photo = jpeg(64, 48);
    let not_an_image = b"GIF89a not really".to_vec();
    let huge = png_header_only(6000, 5000);
    // The fields, a background image if any, the code, and a word the detail says.
    type Case<'a> = (&'a [(&'a str, &'a str)], Option<&'a [u8]>, &'a str, &'a str);
    let cases: &[Case] = &[
        (&[("format", "gif")], None, "invalid_format", "format"),
        (
            &[("format", "zip"), ("channels", "alpha")],
            None,
            "invalid_format",
            "channels=alpha",
        ),
        (
            &[("bg_color", "blurple")],
            None,
            "invalid_bg_color",
            "bg_color",
        ),
        (
            &[("bg_color", "#12345")],
            None,
            "invalid_bg_color",
            "bg_color",
        ),
        (
            &[("bg_color", "red"), ("channels", "alpha")],
            None,
            "invalid_bg_color",
            "channels=alpha",
        ),
        (
            &[("bg_color", "red")],
            Some(&photo),
            "invalid_bg_color",
            "bg_image_file",
        ),
        (
            &[],
            Some(&not_an_image),
            "invalid_bg_image_file",
            "bg_image_file",
        ),
        (&[], Some(&huge), "invalid_bg_image_file", "25000000 pixels"),
        (
            &[],
            Some(&b"\xff\xd8\xff\xe0 truncated"[..]),
            "invalid_bg_image_file",
            "bg_image_file",
        ),
        (&[("crop", "yes")], None, "invalid_crop", "crop"),
        (
            &[("crop_margin", "10px")],
            None,
            "invalid_crop_margin",
            "crop=true",
        ),
        (
            &[("crop", "true"), ("crop_margin", "501px")],
            None,
            "invalid_crop_margin",
            "500px",
        ),
        (
            &[("crop", "true"), ("crop_margin", "51%")],
            None,
            "invalid_crop_margin",
            "50%",
        ),
        (
            &[("crop", "true"), ("crop_margin", "1 2 3")],
            None,
            "invalid_crop_margin",
            "crop_margin",
        ),
        (&[("roi", "0 0 10")], None, "invalid_roi", "roi"),
        (&[("roi", "50% 0% 10% 100%")], None, "invalid_roi", "x1"),
        (&[("roi", "0% 0% 120% 100%")], None, "invalid_roi", "100%"),
        (
            &[("roi", "0 0 99999 99999")],
            None,
            "invalid_roi",
            "past the photo",
        ),
        (
            &[("bg_color", "rgb(1e308,0,0)")],
            None,
            "invalid_bg_color",
            "out of range",
        ),
        (
            &[("bg_color", "rgb(0,256,0)")],
            None,
            "invalid_bg_color",
            "out of range",
        ),
        (&[("scale", "5%")], None, "invalid_scale", "10%"),
        (&[("scale", "150%")], None, "invalid_scale", "scale"),
        (&[("scale", "0.5")], None, "invalid_scale", "scale"),
        (
            &[("position", "left")],
            None,
            "invalid_position",
            "position",
        ),
        (
            &[("position", "-10%")],
            None,
            "invalid_position",
            "position",
        ),
    ];
    for (fields, background, code, named) in cases {
        let mut form = Multipart::new();
        form.file("image_file", &photo);
        for (name, value) in *fields {
            form.text(name, value);
        }
        if let Some(background) = background {
            form.file("bg_image_file", background);
        }
        let reply = post(&app, &key, &form);
        assert_eq!(
            (reply.status, reply.error_code()),
            (400, code.to_string()),
            "{fields:?}"
        );
        assert!(reply.text().contains(named), "{fields:?}: {}", reply.text());
    }
    assert_eq!(app.used("acme"), 0);
}

#[test]
fn a_result_wider_than_webp_holds_is_refused_by_name_at_no_charge() {
    let app = spawn_app();
    let key = app.account("acme", "business");
    // 16,400 × 40: within every upload limit, over WEBP's 16,383 a side.
    let wide = encode(&rgb_photo(16_400, 40).into(), image::ImageFormat::Png);
    let mut form = Multipart::new();
    form.file("image_file", &wide).text("format", "webp");
    let reply = post(&app, &key, &form);
    assert_eq!(
        (reply.status, reply.error_code().as_str()),
        (400, "invalid_format")
    );
    assert!(reply.text().contains("16383"), "{}", reply.text());
    assert_eq!(app.used("acme"), 0);
}

#[test]
fn options_combine_in_order_region_crop_placement_background_then_format() {
    let app = spawn_app();
    let key = app.account("acme", "business");
    let (photo, plain, [left, top, width, height]) = photo_and_plain(&app, &key);

    // Cropped, then on red: the box's pixels over red.
    let reply = cut(&app, &key, &photo, &[("crop", "true"), ("bg_color", "red")]);
    let image = decoded(&reply).into_rgba8();
    assert_eq!(image.dimensions(), (width, height));
    for (x, y, px) in image.enumerate_pixels() {
        let cut = plain.get_pixel(left + x, top + y);
        match cut[3] {
            0 => assert_eq!(px.0, [255, 0, 0, 255], "({x}, {y})"),
            255 => assert_eq!(px.0, cut.0),
            _ => assert_eq!(px[3], 255),
        }
    }

    // The matte alone, cropped: the cropped cut-out's alpha.
    let rgba = decoded(&cut(&app, &key, &photo, &[("crop", "true")])).into_rgba8();
    let matte = cut(
        &app,
        &key,
        &photo,
        &[("crop", "true"), ("channels", "alpha")],
    );
    let grey = decoded(&matte);
    assert_eq!(grey.color(), image::ColorType::L8);
    let alpha: Vec<u8> = rgba.pixels().map(|p| p[3]).collect();
    assert_eq!(grey.into_luma8().into_raw(), alpha);

    // A region of interest left of the subject's middle, then a crop: the
    // box ends at the region's edge.
    let middle = left + width / 2;
    let roi = format!("0px 0px {middle}px 100%");
    let cropped = cut(
        &app,
        &key,
        &photo,
        &[("roi", roi.as_str()), ("crop", "true")],
    );
    let [box_left, _, box_width, _] = foreground(&cropped);
    assert_eq!(box_left, 0);
    assert!(
        box_width <= middle - left,
        "{box_width} past {}",
        middle - left
    );

    // Pixels of the region count in the uploaded photo, whatever size is asked.
    let large = jpeg(1000, 750);
    let preview = cut(&app, &key, &large, &[("size", "preview")]).png();
    let inside = cut(
        &app,
        &key,
        &large,
        &[("size", "preview"), ("roi", "0px 0px 500px 750px")],
    );
    let inside = decoded(&inside).into_rgba8();
    assert_eq!(inside.dimensions(), preview.dimensions());
    let half = preview.width() / 2;
    for (x, y, px) in inside.enumerate_pixels() {
        match x.cmp(&half) {
            std::cmp::Ordering::Less => assert_eq!(px.0, preview.get_pixel(x, y).0),
            std::cmp::Ordering::Equal => {}
            std::cmp::Ordering::Greater => assert_eq!(px[3], 0, "({x}, {y})"),
        }
    }
}
