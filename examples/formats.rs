//! What each `format` costs: a cut-out through `imaging::finish` as PNG,
//! JPEG, WEBP and ZIP, side by side, with the time (median of 5) and the
//! size of each; then JPEG's quality settings, and image's own JPEG encoder
//! beside jpeg-encoder's, to choose from.
//!
//!     cutout remove PHOTO.jpg CUTOUT.png
//!     cargo run --release --example formats -- PHOTO.jpg CUTOUT.png
//!
//! The cut-out gets the photo's colours back under its transparent pixels,
//! as the server's own in-memory cut-out has them.

use cutout::imaging::{finish, Finish, Format};
use std::time::{Duration, Instant};

const RUNS: usize = 5;

fn median(mut run: impl FnMut() -> usize) -> (Duration, usize) {
    let mut times = Vec::new();
    let mut size = 0;
    for _ in 0..RUNS {
        let started = Instant::now();
        size = run();
        times.push(started.elapsed());
    }
    times.sort();
    (times[RUNS / 2], size)
}

fn row(name: &str, (took, size): (Duration, usize)) {
    println!(
        "| {name} | {:.2} | {:.0} |",
        size as f64 / 1e6,
        took.as_secs_f64() * 1e3
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (photo, cut) = match (args.next(), args.next()) {
        (Some(photo), Some(cut)) => (photo, cut),
        _ => panic!("usage: formats PHOTO.jpg CUTOUT.png"),
    };
    let photo = image::open(&photo).expect("the photo").into_rgb8();
    let mut cut = image::open(&cut).expect("the cut-out").into_rgba8();
    assert_eq!(
        photo.dimensions(),
        cut.dimensions(),
        "the photo's own cut-out"
    );
    for (px, from) in cut.pixels_mut().zip(photo.pixels()) {
        if px[3] == 0 {
            px.0 = [from[0], from[1], from[2], 0];
        }
    }
    let (width, height) = cut.dimensions();
    let seen = cut.pixels().filter(|px| px[3] != 0).count();
    println!(
        "{width}×{height}, {:.0}% of it the subject; {RUNS} runs each, median; {} threads\n",
        100.0 * seen as f64 / (width * height) as f64,
        rayon::current_num_threads()
    );
    println!("| format | MB | ms |\n|---|---|---|");
    for (name, format) in [
        ("png", Format::Png),
        ("jpg", Format::Jpg),
        ("webp", Format::Webp),
        ("zip", Format::Zip),
    ] {
        let options = Finish {
            format,
            ..Finish::default()
        };
        let size = median(|| {
            let done = finish(cut.clone(), (width, height), &options).unwrap();
            done.bytes.len()
        });
        row(name, size);
    }

    // JPEG's settings, on the cut-out over white as format=jpg makes it.
    let white = finish(
        cut.clone(),
        (width, height),
        &Finish {
            format: Format::Png,
            background: Some(cutout::imaging::Background::Colour([255; 4])),
            ..Finish::default()
        },
    )
    .unwrap();
    let rgb = image::load_from_memory(&white.bytes).unwrap().into_rgb8();
    println!("\n| JPEG encoder, quality, chroma | MB | ms | PSNR dB |\n|---|---|---|---|");
    let psnr = |jpeg: &[u8]| {
        let back = image::load_from_memory(jpeg).unwrap().into_rgb8();
        let squared: f64 = back
            .as_raw()
            .iter()
            .zip(rgb.as_raw())
            .map(|(a, b)| (f64::from(*a) - f64::from(*b)).powi(2))
            .sum();
        10.0 * (255.0f64.powi(2) / (squared / rgb.as_raw().len() as f64)).log10()
    };
    use jpeg_encoder::SamplingFactor;
    for quality in [80, 85, 90, 95] {
        for (chroma, sampling) in [
            ("4:2:0", SamplingFactor::F_2_2),
            ("4:4:4", SamplingFactor::F_1_1),
        ] {
            let mut jpeg = Vec::new();
            let size = median(|| {
                jpeg.clear();
                let mut encoder = jpeg_encoder::Encoder::new(&mut jpeg, quality);
                encoder.set_sampling_factor(sampling);
                encoder
                    .encode(
                        rgb.as_raw(),
                        width as u16,
                        height as u16,
                        jpeg_encoder::ColorType::Rgb,
                    )
                    .unwrap();
                jpeg.len()
            });
            let name = format!("jpeg-encoder, {quality}, {chroma}");
            println!(
                "| {name} | {:.2} | {:.0} | {:.1} |",
                size.1 as f64 / 1e6,
                size.0.as_secs_f64() * 1e3,
                psnr(&jpeg)
            );
        }
    }
    let mut jpeg = Vec::new();
    let size = median(|| {
        jpeg.clear();
        image::codecs::jpeg::JpegEncoder::new_with_quality(&mut jpeg, 90)
            .encode_image(&rgb)
            .unwrap();
        jpeg.len()
    });
    println!(
        "| image's JpegEncoder, 90 | {:.2} | {:.0} | {:.1} |",
        size.1 as f64 / 1e6,
        size.0.as_secs_f64() * 1e3,
        psnr(&jpeg)
    );
}
