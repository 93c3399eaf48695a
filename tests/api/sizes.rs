//! The `size` field: auto, preview and full, and the headers that report it.

use crate::helpers::*;

#[test]
fn auto_and_full_keep_the_input_resolution_and_preview_shrinks_it() {
    let app = spawn_app();
    let key = app.account("acme", "business");
    let image = jpeg(1200, 800);
    for (size, want) in [
        (None, (1200, 800)),
        (Some("auto"), (1200, 800)),
        (Some("full"), (1200, 800)),
        (Some("preview"), (612, 408)),
    ] {
        let reply = app.post_image(Some(&key), &image, size);
        let png = reply.png();
        assert_eq!(png.dimensions(), want, "size={size:?}");
        assert_eq!(reply.header("x-width"), Some(want.0.to_string().as_str()));
        assert_eq!(reply.header("x-height"), Some(want.1.to_string().as_str()));
        assert_eq!(
            reply.header("content-length"),
            Some(reply.body.len().to_string().as_str())
        );
    }
}

#[test]
fn above_25_megapixels_auto_scales_down_and_full_is_refused() {
    let app = spawn_app();
    let key = app.account("acme", "business");
    // 6000x4500 = 27 MP, flat grey so the PNG is small.
    let big = encode(
        &image::DynamicImage::ImageLuma8(image::GrayImage::from_pixel(
            6000,
            4500,
            image::Luma([90]),
        )),
        image::ImageFormat::Png,
    );
    let reply = app.post_image(Some(&key), &big, Some("full"));
    assert_eq!(
        (reply.status, reply.error_code().as_str()),
        (400, "resolution_too_high")
    );
    let reply = app.post_image(Some(&key), &big, Some("auto"));
    let (w, h) = reply.png().dimensions();
    assert!(
        u64::from(w) * u64::from(h) <= 25_000_000 && w > 5700 && h > 4300,
        "{w}x{h}"
    );
}

#[test]
fn server_timing_names_every_step_in_order() {
    let app = spawn_app();
    let key = app.account("acme", "pro");
    let reply = app.post_image(Some(&key), &jpeg(300, 200), None);
    assert_eq!(reply.status, 200);
    let timing = reply
        .header("server-timing")
        .expect("a Server-Timing header");
    let steps: Vec<&str> = timing
        .split(", ")
        .map(|part| {
            let (step, ms) = part.split_once(";dur=").expect("step;dur=ms");
            assert!(ms.parse::<f64>().is_ok_and(|ms| ms >= 0.0), "{part}");
            step
        })
        .collect();
    assert_eq!(steps, ["queue", "decode", "prepare", "model", "compose"]);
}
