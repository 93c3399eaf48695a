//! Which PNG encoder the server uses, by measurement: encodes one cut-out
//! with every compression level and filter of the `png` crate, and with
//! cutout's own (fdeflate in bands on every core, Up filter), and prints
//! time (best of 3) and size, fastest first.
//!
//!     cargo run --release --example png_settings -- CUTOUT.png

use std::time::{Duration, Instant};

fn main() {
    let path = std::env::args()
        .nth(1)
        .expect("usage: png_settings CUTOUT.png");
    let image = image::open(&path).expect("an image").into_rgba8();
    let (width, height) = image.dimensions();
    println!(
        "{path}: {width}x{height}, {:.1} MB raw",
        image.as_raw().len() as f64 / 1e6
    );
    let compressions = [
        ("fastest", png::Compression::Fastest),
        ("fast", png::Compression::Fast),
        ("balanced", png::Compression::Balanced),
        ("high", png::Compression::High),
    ];
    let filters = [
        ("none", png::Filter::NoFilter),
        ("sub", png::Filter::Sub),
        ("up", png::Filter::Up),
        ("avg", png::Filter::Avg),
        ("paeth", png::Filter::Paeth),
        ("adaptive", png::Filter::Adaptive),
    ];
    let mut rows = Vec::new();
    for (cname, compression) in compressions {
        for (fname, filter) in filters {
            let mut best = Duration::MAX;
            let mut size = 0;
            for _ in 0..3 {
                let started = Instant::now();
                let mut out = Vec::with_capacity(image.as_raw().len() / 3);
                let mut encoder = png::Encoder::new(&mut out, width, height);
                encoder.set_color(png::ColorType::Rgba);
                encoder.set_depth(png::BitDepth::Eight);
                encoder.set_compression(compression);
                encoder.set_filter(filter);
                let mut writer = encoder.write_header().unwrap();
                writer.write_image_data(image.as_raw()).unwrap();
                writer.finish().unwrap();
                best = best.min(started.elapsed());
                size = out.len();
            }
            rows.push((best, size, cname, fname));
        }
    }
    let mut best = Duration::MAX;
    let mut size = 0;
    for _ in 0..3 {
        let started = Instant::now();
        size = cutout::imaging::encode_png(&image).len();
        best = best.min(started.elapsed());
    }
    rows.push((best, size, "cutout: fast in bands", "up"));
    rows.sort();
    println!("| compression | filter | ms | MB |\n|---|---|---|---|");
    for (time, size, cname, fname) in rows {
        println!(
            "| {cname} | {fname} | {:.0} | {:.2} |",
            time.as_secs_f64() * 1000.0,
            size as f64 / 1e6
        );
    }
}
