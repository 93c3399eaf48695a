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

/// A 16-bit RGBA PNG of `w`×`h`, a grey ramp down its rows: a few hundred
/// KB that decode to eight bytes a pixel as stored.
pub fn sixteen_bit_png(w: u32, h: u32) -> Vec<u8> {
    let mut file = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut file, w, h);
        encoder.set_color(png::ColorType::Rgba);
        encoder.set_depth(png::BitDepth::Sixteen);
        encoder.set_compression(png::Compression::Fast);
        let mut writer = encoder.write_header().unwrap();
        let mut stream = writer.stream_writer().unwrap();
        for y in 0..h {
            let level = (y * 60_000 / h) as u16;
            let row: Vec<u8> = (0..w)
                .flat_map(|_| [level, level, level, u16::MAX])
                .flat_map(u16::to_be_bytes)
                .collect();
            std::io::Write::write_all(&mut stream, &row).unwrap();
        }
        stream.finish().unwrap();
    }
    file
}

/// A progressive JPEG of a few hundred bytes whose frame claims `w`×`h`:
/// its decoder keeps two bytes a sample of coefficients for all of them.
pub fn progressive_jpeg_claiming(w: u16, h: u16) -> Vec<u8> {
    let mut file = Vec::new();
    let mut encoder = jpeg_encoder::Encoder::new(&mut file, 50);
    encoder.set_progressive(true);
    encoder
        .encode(&[128; 8 * 8 * 3], 8, 8, jpeg_encoder::ColorType::Rgb)
        .unwrap();
    let sof = file.windows(2).position(|m| m == [0xFF, 0xC2]).unwrap();
    file[sof + 5..sof + 7].copy_from_slice(&h.to_be_bytes());
    file[sof + 7..sof + 9].copy_from_slice(&w.to_be_bytes());
    file
}

/// A black and white checkerboard of `cell`-pixel squares as a PNG: a
/// matte with edges everywhere, which `semitransparency=false` fills.
pub fn checkerboard_png(w: u32, h: u32, cell: u32) -> Vec<u8> {
    let board = image::GrayImage::from_fn(w, h, |x, y| {
        image::Luma([if (x / cell + y / cell).is_multiple_of(2) {
            255
        } else {
            0
        }])
    });
    encode(
        &image::DynamicImage::ImageLuma8(board),
        image::ImageFormat::Png,
    )
}

/// `rgb_photo` at `w`×`h` as a JPEG: a subject to cut out and shade.
pub fn large_photo_jpeg(w: u32, h: u32) -> Vec<u8> {
    let mut file = Vec::new();
    jpeg_encoder::Encoder::new(&mut file, 75)
        .encode(
            rgb_photo(w, h).as_raw(),
            w as u16,
            h as u16,
            jpeg_encoder::ColorType::Rgb,
        )
        .unwrap();
    file
}

/// A request whose memory follows its pixels, their depth and its options
/// rather than the size of its upload.
pub struct Costly {
    pub what: &'static str,
    pub photo: Vec<u8>,
    pub fields: &'static [(&'static str, &'static str)],
}

/// The requests that cost a board most for their upload: a 16-bit 50 MP
/// PNG, a few hundred bytes of progressive JPEG claiming 50 MP, a 25 MP
/// checkerboard whose enclosed squares `semitransparency=false` fills, and
/// a 50 MP photo with a shadow.
pub fn costliest_requests() -> Vec<Costly> {
    vec![
        Costly {
            what: "16-bit RGBA PNG, 50 MP",
            photo: sixteen_bit_png(10_000, 5_000),
            fields: &[],
        },
        Costly {
            what: "progressive JPEG claiming 7071x7071",
            photo: progressive_jpeg_claiming(7071, 7071),
            fields: &[],
        },
        Costly {
            what: "25 MP checkerboard, type=car, semitransparency=false",
            photo: checkerboard_png(5000, 5000, 40),
            fields: &[("type", "car"), ("semitransparency", "false")],
        },
        Costly {
            what: "50 MP photo, add_shadow=true",
            photo: large_photo_jpeg(10_000, 5_000),
            fields: &[("add_shadow", "true")],
        },
    ]
}
