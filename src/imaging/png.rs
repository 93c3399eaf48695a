//! The cut-out's PNG, deflated in bands of rows on every core.
//!
//! `png` writes one zlib stream from one thread, and at 12 MP that stream
//! was most of the time spent around the model. PNG requires one zlib stream
//! too, but a stream may hold many deflate blocks, so each band is filtered
//! and compressed on its own (fdeflate, as `png`'s `Fast` setting uses) and
//! the pieces are joined the way pigz joins its: every block but the last is
//! marked not final and ends with an empty stored block, which puts the next
//! block on a byte boundary; the Adler-32 of the whole is combined from the
//! pieces'. fdeflate's Huffman table is fixed, so splitting costs only a
//! block header (about 55 bytes) a band.

use image::RgbaImage;
use rayon::prelude::*;
use std::ops::Range;

/// Raw bytes a band aims at: a 12 MP cut-out (48 MB) makes about 24 of
/// them, enough for rayon to keep every core busy to the end.
const BAND_BYTES: usize = 2 << 20;
/// fdeflate's stream: the zlib header (2 bytes), then its one block, whose
/// first bit says "final".
const ZLIB_HEADER_BYTES: usize = 2;
const ADLER_BYTES: usize = 4;
/// An empty stored block's length and its complement; its 3 header bits
/// (not final, stored) and the padding to the byte come before it.
const EMPTY_STORED_BLOCK: [u8; 4] = [0, 0, 0xFF, 0xFF];

/// An RGBA8 PNG of `image`, rows filtered with Up: at 12 MP, Paeth's files
/// were 9% smaller and took 40% longer (`examples/png_settings.rs`).
pub fn encode_png(image: &RgbaImage) -> Vec<u8> {
    encode_image(image, rows_a_band(image.width()))
}

/// Rows of `width` pixels that make a band of about `BAND_BYTES`.
pub fn rows_a_band(width: u32) -> usize {
    (BAND_BYTES / (width as usize * 4).max(1)).max(1)
}

fn encode_image(image: &RgbaImage, rows_a_band: usize) -> Vec<u8> {
    let (width, height) = image.dimensions();
    encode_pixels(width, height, Colour::Rgba, image.as_raw(), rows_a_band)
}

/// A PNG of `pixels`, `width`×`height` of `colour`, row after row.
pub fn encode_pixels(
    width: u32,
    height: u32,
    colour: Colour,
    pixels: &[u8],
    rows_a_band: usize,
) -> Vec<u8> {
    let row_bytes = width as usize * colour.bytes();
    assert_eq!(pixels.len(), row_bytes * height as usize);
    encode_rows(width, height, colour, rows_a_band, |rows, band| {
        for row in rows {
            band.push_with(|out| out.copy_from_slice(&pixels[row * row_bytes..][..row_bytes]));
        }
    })
}

/// What a pixel of the PNG holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Colour {
    /// RGBA, 8 bits each.
    Rgba,
    /// RGB, 8 bits each: an opaque image.
    Rgb,
    /// One 8-bit grey value.
    Grey,
}

impl Colour {
    fn bytes(self) -> usize {
        match self {
            Colour::Rgba => 4,
            Colour::Rgb => 3,
            Colour::Grey => 1,
        }
    }
}

/// A PNG of `width`×`height` pixels of `colour` whose rows `fill` makes,
/// band by band (`rows_a_band` rows each, the last shorter) on every core:
/// `fill` is given a band's rows and makes each of them, in order, in the band.
pub fn encode_rows<F>(
    width: u32,
    height: u32,
    colour: Colour,
    rows_a_band: usize,
    fill: F,
) -> Vec<u8>
where
    F: Fn(Range<usize>, &mut Band) + Sync,
{
    let row_bytes = width as usize * colour.bytes();
    let height = height as usize;
    let band_starts: Vec<usize> = (0..height).step_by(rows_a_band.max(1)).collect();
    let pieces: Vec<Piece> = band_starts
        .par_iter()
        .map(|&first_row| {
            let rows = first_row..(first_row + rows_a_band).min(height);
            let mut band = Band::new(row_bytes, colour.bytes(), rows.len());
            fill(rows.clone(), &mut band);
            assert_eq!(band.rows, rows.len(), "a band's rows, each pushed once");
            let stream = band.compressor.finish().expect("writing to a Vec");
            let raw_len = rows.len() * (row_bytes + 1);
            join_band(stream, raw_len, rows.start == 0, rows.end == height)
        })
        .collect();

    let adler = pieces.iter().fold(1, |adler, piece| {
        adler32_combine(adler, piece.adler, piece.raw_len)
    });
    let idat_len: usize = pieces.iter().map(|piece| piece.chunk.len()).sum();
    let mut out = Vec::with_capacity(8 + 25 + idat_len + 16 + 12);
    out.extend_from_slice(b"\x89PNG\r\n\x1a\n");
    let mut header = Vec::with_capacity(13);
    header.extend_from_slice(&width.to_be_bytes());
    header.extend_from_slice(&(height as u32).to_be_bytes());
    // 8 bits a sample, RGBA or grey, deflate, adaptive filtering, not interlaced.
    let colour_type = match colour {
        Colour::Rgba => 6,
        Colour::Rgb => 2,
        Colour::Grey => 0,
    };
    header.extend_from_slice(&[8, colour_type, 0, 0, 0]);
    write_chunk(&mut out, b"IHDR", &header);
    // Each piece freed once copied: the file's untouched pages take no
    // memory until written, so the whole is held about once, not twice.
    for piece in pieces {
        out.extend_from_slice(&piece.chunk);
    }
    write_chunk(&mut out, b"IDAT", &adler.to_be_bytes());
    write_chunk(&mut out, b"IEND", &[]);
    out
}

/// One band of the PNG being written: its rows are filtered and deflated
/// as they are pushed.
pub struct Band {
    compressor: fdeflate::Compressor<Vec<u8>>,
    /// The row being made; once it is deflated, it swaps places with
    /// `above`, the unfiltered row the next one is filtered against.
    row: Vec<u8>,
    above: Vec<u8>,
    filtered: Vec<u8>,
    rows: usize,
    /// Bytes a pixel: how far left Sub's byte is.
    pixel_bytes: usize,
}

impl Band {
    fn new(row_bytes: usize, pixel_bytes: usize, rows: usize) -> Band {
        Band {
            // A cut-out deflates to about a third.
            compressor: fdeflate::Compressor::new(Vec::with_capacity(rows * row_bytes / 3))
                .expect("writing to a Vec"),
            row: vec![0; row_bytes],
            above: vec![0; row_bytes],
            filtered: Vec::with_capacity(row_bytes + 1),
            rows: 0,
            pixel_bytes,
        }
    }

    /// The band's next row, which `make` writes whole. Filtered with
    /// Up (type 2: each byte less the one above it), but the band's first
    /// row, whose row above is in another band, with Sub (type 1: less the
    /// byte a pixel to the left).
    pub fn push_with(&mut self, make: impl FnOnce(&mut [u8])) {
        make(&mut self.row);
        let row = &self.row;
        self.filtered.clear();
        if self.rows == 0 {
            self.filtered.push(1);
            let left = std::iter::repeat_n(&0, self.pixel_bytes).chain(row);
            self.filtered
                .extend(row.iter().zip(left).map(|(&c, &l)| c.wrapping_sub(l)));
        } else {
            self.filtered.push(2);
            let up = row
                .iter()
                .zip(&self.above)
                .map(|(&c, &a)| c.wrapping_sub(a));
            self.filtered.extend(up);
        }
        self.compressor
            .write_data(&self.filtered)
            .expect("writing to a Vec");
        std::mem::swap(&mut self.row, &mut self.above);
        self.rows += 1;
    }
}

/// One band's deflate blocks, already an IDAT chunk, with what the whole
/// stream's Adler-32 needs of it.
struct Piece {
    chunk: Vec<u8>,
    adler: u32,
    raw_len: usize,
}

/// fdeflate's zlib stream for a band, made into a piece of the whole one.
fn join_band(mut stream: Vec<u8>, raw_len: usize, first: bool, last: bool) -> Piece {
    let adler_at = stream.len() - ADLER_BYTES;
    let adler = u32::from_be_bytes(stream[adler_at..].try_into().expect("4 bytes"));
    stream.truncate(adler_at);
    if !last {
        // The block is not the final one.
        stream[ZLIB_HEADER_BYTES] &= !1;
        // fdeflate pads the end-of-block code, which ends in a 1 bit, to the
        // byte with zeros. Three of them are the empty stored block's header;
        // with fewer, a zero byte carries it. (Were a new fdeflate's code to
        // end in a 0, `bands_join_into_one_valid_png` would fail.)
        let end = *stream.last().expect("the end-of-block code");
        debug_assert_ne!(end, 0);
        if end.leading_zeros() < 3 {
            stream.push(0);
        }
        stream.extend_from_slice(&EMPTY_STORED_BLOCK);
    }
    let blocks = if first {
        &stream[..]
    } else {
        &stream[ZLIB_HEADER_BYTES..]
    };
    let mut chunk = Vec::with_capacity(blocks.len() + 12);
    write_chunk(&mut chunk, b"IDAT", blocks);
    Piece {
        chunk,
        adler,
        raw_len,
    }
}

fn write_chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let mut crc = crc32fast::Hasher::new();
    crc.update(kind);
    crc.update(data);
    out.extend_from_slice(&crc.finalize().to_be_bytes());
}

/// The Adler-32 of A followed by B, from each one's and B's length
/// (zlib's `adler32_combine`).
fn adler32_combine(a: u32, b: u32, b_len: usize) -> u32 {
    const MOD: u64 = 65521;
    let (a_sum, a_weighted) = (u64::from(a & 0xFFFF), u64::from(a >> 16));
    let (b_sum, b_weighted) = (u64::from(b & 0xFFFF), u64::from(b >> 16));
    let sum = (a_sum + b_sum + MOD - 1) % MOD;
    let weighted = (a_weighted + b_weighted + (b_len as u64 % MOD) * (a_sum + MOD - 1)) % MOD;
    ((weighted << 16) | sum) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::io::Read;

    /// The IDAT chunks' payload, the one zlib stream, and whether each
    /// chunk's CRC holds.
    fn zlib_stream(png: &[u8]) -> Vec<u8> {
        let mut stream = Vec::new();
        let mut at = 8;
        while at < png.len() {
            let len = u32::from_be_bytes(png[at..at + 4].try_into().unwrap()) as usize;
            let (kind, data) = (&png[at + 4..at + 8], &png[at + 8..at + 8 + len]);
            let crc = u32::from_be_bytes(png[at + 8 + len..at + 12 + len].try_into().unwrap());
            assert_eq!(
                crc,
                crc32fast::hash(&png[at + 4..at + 8 + len]),
                "CRC of a chunk"
            );
            if kind == b"IDAT" {
                stream.extend_from_slice(data);
            }
            at += 12 + len;
        }
        stream
    }

    fn inflate(stream: &[u8]) -> std::io::Result<Vec<u8>> {
        let mut raw = Vec::new();
        flate2::read::ZlibDecoder::new(stream).read_to_end(&mut raw)?;
        Ok(raw)
    }

    fn noisy_image(width: u32, height: u32, seed: u32) -> RgbaImage {
        RgbaImage::from_fn(width, height, |x, y| {
            let v = (x * 31 + y * 17 + seed).wrapping_mul(2654435761) >> 24;
            // Transparent runs, as a cut-out has, between noisy pixels.
            if (x + seed) % 7 < 3 {
                image::Rgba([0, 0, 0, 0])
            } else {
                image::Rgba([v as u8, (v >> 1) as u8, x as u8, y as u8])
            }
        })
    }

    proptest! {
        /// Any size, any band height: the pieces join into one stream
        /// whose Adler-32 holds, and the image comes back as it went in.
        #[test]
        fn bands_join_into_one_valid_png(
            width in 1u32..40, height in 1u32..40, rows_a_band in 1usize..45, seed in 0u32..1000
        ) {
            let image = noisy_image(width, height, seed);
            let png = encode_image(&image, rows_a_band);
            let raw = inflate(&zlib_stream(&png)).expect("a valid zlib stream");
            prop_assert_eq!(raw.len(), height as usize * (width as usize * 4 + 1));
            let back = image::load_from_memory_with_format(&png, image::ImageFormat::Png)
                .expect("a PNG")
                .into_rgba8();
            prop_assert_eq!(back, image);
        }
    }

    #[test]
    fn a_wrong_checksum_is_caught() {
        let png = encode_image(&noisy_image(30, 20, 5), 2);
        let mut stream = zlib_stream(&png);
        assert!(inflate(&stream).is_ok());
        *stream.last_mut().unwrap() ^= 1;
        assert!(inflate(&stream).is_err(), "the decoder checks Adler-32");
    }

    #[test]
    fn adler32_combines_as_if_computed_whole() {
        let data: Vec<u8> = (0..100_000u32).map(|i| ((i * 7919) >> 3) as u8).collect();
        let whole = adler32(&data);
        for split in [0, 1, 5552, 65_521, 99_999] {
            let (a, b) = data.split_at(split);
            let combined = adler32_combine(adler32(a), adler32(b), b.len());
            assert_eq!(combined, whole, "split at {split}");
        }
    }

    /// Adler-32 straight from its definition.
    fn adler32(data: &[u8]) -> u32 {
        let (mut a, mut b) = (1u32, 0u32);
        for &byte in data {
            a = (a + u32::from(byte)) % 65521;
            b = (b + a) % 65521;
        }
        (b << 16) | a
    }
}
