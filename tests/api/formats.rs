//! Inputs: JPEG, PNG and WEBP in their colour types, EXIF orientation, and
//! animations. The output keeps the input's own pixel colours wherever it
//! is opaque (partial pixels get their foreground colour estimated: the unit
//! tests of `imaging::foreground`).

use crate::helpers::*;
use image::{DynamicImage, ImageFormat};

fn cut(app: &TestApp, key: &str, bytes: &[u8]) -> image::RgbaImage {
    app.post_image(Some(key), bytes, None).png()
}

#[test]
fn png_and_lossless_webp_keep_the_original_colours_exactly_where_opaque() {
    let app = spawn_app();
    let key = app.account("acme", "business");
    let photo = DynamicImage::ImageRgb8(rgb_photo(96, 64));
    for format in [ImageFormat::Png, ImageFormat::WebP] {
        let out = cut(&app, &key, &encode(&photo, format));
        assert_eq!(out.dimensions(), (96, 64));
        assert_visible_colours_are(&out, &photo.to_rgb8());
    }
}

/// Every opaque pixel of `out` has `photo`'s colour, and there are some; the
/// fully transparent ones are black.
fn assert_visible_colours_are(out: &image::RgbaImage, photo: &image::RgbImage) {
    let mut opaque = 0;
    for (o, i) in out.pixels().zip(photo.pixels()) {
        match o.0[3] {
            0 => assert_eq!(o.0, [0; 4]),
            255 => {
                assert_eq!(o.0[..3], i.0);
                opaque += 1;
            }
            _ => {}
        }
    }
    assert!(opaque > 0, "nothing of the photo is left to compare");
}

#[test]
fn grey_16_bit_palette_and_cmyk_inputs_are_handled() {
    let app = spawn_app();
    let key = app.account("acme", "business");
    let photo = DynamicImage::ImageRgb8(rgb_photo(80, 60));
    let grey = encode(
        &DynamicImage::ImageLuma8(photo.to_luma8()),
        ImageFormat::Png,
    );
    let sixteen = encode(
        &DynamicImage::ImageRgb16(photo.to_rgb16()),
        ImageFormat::Png,
    );
    assert_visible_colours_are(
        &cut(&app, &key, &grey),
        &DynamicImage::ImageLuma8(photo.to_luma8()).to_rgb8(),
    );
    assert_eq!(cut(&app, &key, &sixteen).dimensions(), (80, 60));
    assert_eq!(cut(&app, &key, &jpeg(80, 60)).dimensions(), (80, 60));

    let palette = png_palette(80, 60);
    assert_eq!(
        cut(&app, &key, &palette).get_pixel(0, 0).0[..3],
        [10, 200, 30]
    );

    let mut cmyk = Vec::new();
    let cmyk_pixels: Vec<u8> = (0..80 * 60).flat_map(|_| [0u8, 255, 255, 0]).collect();
    jpeg_encoder::Encoder::new(&mut cmyk, 95)
        .encode(&cmyk_pixels, 80, 60, jpeg_encoder::ColorType::Cmyk)
        .unwrap();
    assert_eq!(cut(&app, &key, &cmyk).dimensions(), (80, 60));
}

#[test]
fn input_transparency_stays_transparent() {
    let app = spawn_app();
    let key = app.account("acme", "business");
    let mut rgba = DynamicImage::ImageRgb8(rgb_photo(64, 64)).to_rgba8();
    for x in 0..64 {
        for y in 0..16 {
            rgba.get_pixel_mut(x, y).0[3] = 0;
        }
    }
    let out = cut(
        &app,
        &key,
        &encode(&DynamicImage::ImageRgba8(rgba), ImageFormat::Png),
    );
    assert!((0..64).all(|x| (0..16).all(|y| out.get_pixel(x, y).0[3] == 0)));
}

#[test]
fn exif_orientation_is_applied() {
    let app = spawn_app();
    let key = app.account("acme", "business");
    // Stored 120x80; orientation 6 (rotate 90° clockwise) shows it 80x120.
    let rotated = with_exif_orientation(&jpeg(120, 80), 6);
    let reply = app.post_image(Some(&key), &rotated, None);
    assert_eq!(reply.png().dimensions(), (80, 120));
}

#[test]
fn an_animated_png_gives_its_first_frame() {
    let app = spawn_app();
    let key = app.account("acme", "business");
    let first = rgb_photo(48, 32);
    let out = cut(&app, &key, &two_frame_apng(&first));
    assert_visible_colours_are(&out, &first);
}

fn png_palette(w: u32, h: u32) -> Vec<u8> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, w, h);
    encoder.set_color(png::ColorType::Indexed);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_palette(vec![10, 200, 30, 240, 240, 240]);
    let mut writer = encoder.write_header().unwrap();
    let indices: Vec<u8> = (0..w * h).map(|i| u8::from(i % w > w / 2)).collect();
    writer.write_image_data(&indices).unwrap();
    writer.finish().unwrap();
    out
}

/// `first`, then its negative.
fn two_frame_apng(first: &image::RgbImage) -> Vec<u8> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, first.width(), first.height());
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_animated(2, 0).unwrap();
    let mut writer = encoder.write_header().unwrap();
    let negative: Vec<u8> = first.as_raw().iter().map(|v| 255 - v).collect();
    writer.write_image_data(first.as_raw()).unwrap();
    writer.write_image_data(&negative).unwrap();
    writer.finish().unwrap();
    out
}

/// Inserts an EXIF APP1 segment holding only an orientation tag after SOI.
fn with_exif_orientation(jpeg: &[u8], orientation: u8) -> Vec<u8> {
    let mut tiff = b"MM\x00\x2a\x00\x00\x00\x08\x00\x01".to_vec();
    tiff.extend_from_slice(&[0x01, 0x12, 0x00, 0x03, 0, 0, 0, 1, 0, orientation, 0, 0]);
    tiff.extend_from_slice(&[0, 0, 0, 0]);
    let mut app1 = b"Exif\x00\x00".to_vec();
    app1.extend_from_slice(&tiff);
    let mut out = jpeg[..2].to_vec();
    out.extend_from_slice(&[0xFF, 0xE1]);
    out.extend_from_slice(&((app1.len() + 2) as u16).to_be_bytes());
    out.extend_from_slice(&app1);
    out.extend_from_slice(&jpeg[2..]);
    out
}
