//! Test images: photos, encodings, and PNGs built chunk by chunk.

pub fn rgb_photo(w: u32, h: u32) -> image::RgbImage {
    // A bright disc on a dark, textured background: something to cut out.
    image::RgbImage::from_fn(w, h, |x, y| {
        let (dx, dy) = (x as f32 - w as f32 / 2.0, y as f32 - h as f32 / 2.0);
        if dx * dx + dy * dy < (w.min(h) as f32 / 3.0).powi(2) {
            image::Rgb([230, 60, 40])
        } else {
            image::Rgb([20 + (x % 7) as u8, 40, 30 + (y % 5) as u8])
        }
    })
}

pub fn encode(image: &image::DynamicImage, format: image::ImageFormat) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    image.write_to(&mut out, format).unwrap();
    out.into_inner()
}

pub fn jpeg(w: u32, h: u32) -> Vec<u8> {
    encode(
        &image::DynamicImage::ImageRgb8(rgb_photo(w, h)),
        image::ImageFormat::Jpeg,
    )
}

pub fn png(w: u32, h: u32) -> Vec<u8> {
    encode(
        &image::DynamicImage::ImageRgb8(rgb_photo(w, h)),
        image::ImageFormat::Png,
    )
}

/// A PNG whose header declares `w`×`h` and whose data is a few bytes: it
/// must be refused from the header, before any pixel buffer exists.
pub fn png_header_only(w: u32, h: u32) -> Vec<u8> {
    png_of_chunks(
        w,
        h,
        &[(
            *b"IDAT",
            vec![0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01],
        )],
    )
}

/// An 8-bit RGB PNG: the signature, IHDR for `w`×`h`, `chunks` as given
/// (with correct CRCs) and IEND.
pub fn png_of_chunks(w: u32, h: u32, chunks: &[([u8; 4], Vec<u8>)]) -> Vec<u8> {
    fn chunk(out: &mut Vec<u8>, kind: &[u8], data: &[u8]) {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let start = out.len();
        out.extend_from_slice(kind);
        out.extend_from_slice(data);
        let crc = crc32(&out[start..]);
        out.extend_from_slice(&crc.to_be_bytes());
    }
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&w.to_be_bytes());
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    chunk(&mut out, b"IHDR", &ihdr);
    for (kind, data) in chunks {
        chunk(&mut out, kind, data);
    }
    chunk(&mut out, b"IEND", &[]);
    out
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}
