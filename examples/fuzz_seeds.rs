//! The seed corpus for `make fuzz`: small valid uploads in every format and
//! colour type the decoder takes, and multipart bodies around them (valid,
//! two files, no closing boundary, an unknown field), so the fuzzer starts
//! from inputs that reach deep into both parsers.
//!
//!     cargo run --example fuzz_seeds -- fuzz/corpus

use image::{DynamicImage, ImageFormat};
use std::path::Path;

fn encoded(image: DynamicImage, format: ImageFormat) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    image.write_to(&mut out, format).expect("encodes");
    out.into_inner()
}

fn photo(w: u32, h: u32) -> image::RgbImage {
    image::RgbImage::from_fn(w, h, |x, y| image::Rgb([(x * 9) as u8, (y * 7) as u8, 120]))
}

fn part(name: &str, filename: Option<&str>, data: &[u8]) -> Vec<u8> {
    let filename = filename.map_or(String::new(), |f| format!("; filename=\"{f}\""));
    let mut out =
        format!("--fuzz\r\nContent-Disposition: form-data; name=\"{name}\"{filename}\r\n\r\n")
            .into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

fn main() {
    let dir = std::env::args().nth(1).expect("usage: fuzz_seeds DIR");
    let (decode, multipart) = (
        Path::new(&dir).join("decode"),
        Path::new(&dir).join("multipart"),
    );
    std::fs::create_dir_all(&decode).unwrap();
    std::fs::create_dir_all(&multipart).unwrap();

    let rgb = DynamicImage::ImageRgb8(photo(24, 16));
    let images = [
        ("rgb.jpg", encoded(rgb.clone(), ImageFormat::Jpeg)),
        (
            "grey.jpg",
            encoded(DynamicImage::ImageLuma8(rgb.to_luma8()), ImageFormat::Jpeg),
        ),
        ("rgb.png", encoded(rgb.clone(), ImageFormat::Png)),
        (
            "rgba.png",
            encoded(DynamicImage::ImageRgba8(rgb.to_rgba8()), ImageFormat::Png),
        ),
        (
            "grey16.png",
            encoded(DynamicImage::ImageLuma16(rgb.to_luma16()), ImageFormat::Png),
        ),
        ("rgb.webp", encoded(rgb.clone(), ImageFormat::WebP)),
        (
            "rgba.webp",
            encoded(DynamicImage::ImageRgba8(rgb.to_rgba8()), ImageFormat::WebP),
        ),
    ];
    for (name, bytes) in &images {
        std::fs::write(decode.join(name), bytes).unwrap();
    }

    let jpeg = &images[0].1;
    let close: &[u8] = b"--fuzz--\r\n";
    let forms = [
        (
            "valid",
            vec![
                part("image_file", Some("a.jpg"), jpeg),
                part("size", None, b"preview"),
            ],
            close,
        ),
        (
            "two-files",
            vec![
                part("image_file", Some("a.jpg"), jpeg),
                part("image_file", Some("b.jpg"), jpeg),
            ],
            close,
        ),
        (
            "unclosed",
            vec![part("image_file", Some("a.jpg"), jpeg)],
            &[],
        ),
        (
            "other-field",
            vec![part("colour", None, b"red"), part("image_file", None, jpeg)],
            close,
        ),
        ("empty", vec![], close),
    ];
    for (name, parts, end) in forms {
        let body = [parts.concat(), end.to_vec()].concat();
        // The first byte: odd declares a Content-Length, even is chunked.
        for (flag, suffix) in [(1u8, "length"), (0, "chunked")] {
            let seed = [vec![flag], body.clone()].concat();
            std::fs::write(multipart.join(format!("{name}-{suffix}")), seed).unwrap();
        }
    }
    println!("seeds in {}/decode and {}/multipart", dir, dir);
}
