//! Decoding an upload: the format comes from the bytes alone, the pixel
//! count is checked from the header before any pixel buffer is allocated,
//! and the EXIF orientation is applied.

use crate::error::MAX_PIXELS_DECODED;
use image::{
    ColorType, DynamicImage, ImageDecoder, ImageError, ImageFormat, ImageReader, Limits, RgbImage,
    RgbaImage,
};
use std::io::Cursor;

/// Ceiling on any single allocation the decoders make: a 50 MP image at 16
/// bits per channel with alpha is 400 MB.
const MAX_DECODER_ALLOC: u64 = 512 * 1024 * 1024;

/// Ceiling while only the header is read, before the pixel count is known:
/// metadata such as a PNG's ICC profile inflates into memory there, and a
/// profile of zeros inflates a thousandfold. Text chunks filling a 10 MB
/// upload still fit.
const MAX_HEADER_ALLOC: u64 = 32 * 1024 * 1024;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DecodeError {
    #[error("not a JPEG, PNG or WEBP")]
    Unsupported,
    #[error("{width}x{height} is over the limit of {most} pixels")]
    TooLarge { width: u32, height: u32, most: u64 },
    #[error("{0}")]
    Invalid(String),
}

/// The format the bytes are in, from their first bytes alone: a cheap
/// check before a request waits its turn to decode.
pub fn format_of(bytes: &[u8]) -> Result<ImageFormat, DecodeError> {
    if bytes.is_empty() {
        return Err(DecodeError::Invalid("the file is empty".into()));
    }
    match image::guess_format(bytes) {
        Ok(f @ (ImageFormat::Jpeg | ImageFormat::Png | ImageFormat::WebP)) => Ok(f),
        _ => Err(DecodeError::Unsupported),
    }
}

/// Decodes to 8-bit RGB, or RGBA when the file has transparency to keep,
/// upright. Grey, 16-bit, CMYK and palette inputs end up as one of the two;
/// an animation gives its first frame.
pub fn decode(bytes: &[u8]) -> Result<DynamicImage, DecodeError> {
    decode_reusing(bytes, Vec::new(), MAX_PIXELS_DECODED)
}

/// `decode`, with the pixels of an 8-bit RGB or RGBA file written into
/// `spare`'s memory when it is large enough: faulting in a 12 MP photo's
/// 36 MB of fresh pages took a third of its decode. More than
/// `max_pixels` are refused before any is decoded.
pub fn decode_reusing(
    bytes: &[u8],
    spare: Vec<u8>,
    max_pixels: u64,
) -> Result<DynamicImage, DecodeError> {
    decode_within(bytes, spare, max_pixels.min(MAX_PIXELS_DECODED))
}

/// `decode`, refusing more than `max_pixels` before any is decoded.
pub fn decode_at_most(bytes: &[u8], max_pixels: u64) -> Result<DynamicImage, DecodeError> {
    decode_within(bytes, Vec::new(), max_pixels.min(MAX_PIXELS_DECODED))
}

fn decode_within(
    bytes: &[u8],
    spare: Vec<u8>,
    max_pixels: u64,
) -> Result<DynamicImage, DecodeError> {
    let format = format_of(bytes)?;
    if format == ImageFormat::Jpeg && !jpeg_has_its_end(bytes) {
        // The decoder would fill the missing rows with grey and succeed.
        return Err(DecodeError::Invalid("the JPEG is truncated".into()));
    }
    let mut reader = ImageReader::with_format(Cursor::new(bytes), format);
    reader.limits(allocating_at_most(MAX_HEADER_ALLOC));
    let mut decoder = reader.into_decoder().map_err(|e| match e {
        ImageError::Limits(_) => DecodeError::Invalid(format!(
            "its metadata (ICC profile or text) needs over {} MiB",
            MAX_HEADER_ALLOC >> 20
        )),
        other => from_image_error(other),
    })?;
    let (width, height) = decoder.dimensions();
    if u64::from(width) * u64::from(height) > max_pixels {
        return Err(DecodeError::TooLarge {
            width,
            height,
            most: max_pixels,
        });
    }
    decoder
        .set_limits(allocating_at_most(MAX_DECODER_ALLOC))
        .map_err(from_image_error)?;
    if width == 0 || height == 0 {
        return Err(DecodeError::Invalid("the image has no pixels".into()));
    }
    // A broken EXIF block is no reason to refuse the pixels.
    let orientation = decoder
        .orientation()
        .unwrap_or(image::metadata::Orientation::NoTransforms);
    let mut image = match decoder.color_type() {
        ColorType::Rgb8 | ColorType::Rgba8 => read_8_bit(decoder, spare)?,
        _ => DynamicImage::from_decoder(decoder).map_err(from_image_error)?,
    };
    image.apply_orientation(orientation);
    // A JPEG stays RGB: a fourth byte a pixel would only be carried around.
    Ok(if image.color().has_alpha() {
        DynamicImage::ImageRgba8(image.into_rgba8())
    } else {
        DynamicImage::ImageRgb8(image.into_rgb8())
    })
}

fn read_8_bit(decoder: impl ImageDecoder, spare: Vec<u8>) -> Result<DynamicImage, DecodeError> {
    let (width, height) = decoder.dimensions();
    let colour = decoder.color_type();
    let len = usize::try_from(decoder.total_bytes()).expect("under the pixel limit");
    let mut pixels = if spare.capacity() >= len {
        spare
    } else {
        Vec::new()
    };
    // Zeros, not the last photo: no decoder may leave a byte of it behind.
    pixels.clear();
    pixels.resize(len, 0);
    decoder.read_image(&mut pixels).map_err(from_image_error)?;
    Ok(match colour {
        ColorType::Rgb8 => RgbImage::from_raw(width, height, pixels).map(DynamicImage::ImageRgb8),
        _ => RgbaImage::from_raw(width, height, pixels).map(DynamicImage::ImageRgba8),
    }
    .expect("the decoder filled width*height pixels"))
}

/// Whether the end-of-image marker follows the first scan. Entropy-coded
/// data cannot hold one (a 0xFF there is always followed by 0x00 or a
/// restart marker), so its absence means the file was cut short. The
/// segments before the scan are skipped by their lengths, since an EXIF
/// thumbnail carries an end marker of its own.
fn jpeg_has_its_end(bytes: &[u8]) -> bool {
    let mut at = 2; // past SOI
    while let Some(&[0xFF, marker]) = bytes.get(at..at + 2) {
        match marker {
            0xFF => at += 1, // fill byte
            0xDA => return bytes[at..].windows(2).any(|w| w == [0xFF, 0xD9]),
            0x01 | 0xD0..=0xD7 => at += 2,
            _ => {
                let Some(&[high, low]) = bytes.get(at + 2..at + 4) else {
                    return false;
                };
                at += 2 + usize::from(u16::from_be_bytes([high, low]));
            }
        }
    }
    false
}

fn allocating_at_most(bytes: u64) -> Limits {
    let mut limits = Limits::default();
    limits.max_alloc = Some(bytes);
    limits
}

fn from_image_error(e: ImageError) -> DecodeError {
    match e {
        ImageError::Limits(_) => DecodeError::TooLarge {
            width: 0,
            height: 0,
            most: MAX_PIXELS_DECODED,
        },
        ImageError::Unsupported(e) => DecodeError::Invalid(e.to_string()),
        other => DecodeError::Invalid(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jpeg(w: u32, h: u32) -> Vec<u8> {
        let photo = image::RgbImage::from_fn(w, h, |x, y| image::Rgb([x as u8, y as u8, 90]));
        let mut out = Cursor::new(Vec::new());
        photo.write_to(&mut out, ImageFormat::Jpeg).unwrap();
        out.into_inner()
    }

    #[test]
    fn a_spare_buffer_takes_the_pixels_when_it_is_large_enough() {
        let (large, small) = (jpeg(320, 240), jpeg(64, 48));
        let spare = decode(&large).unwrap().into_bytes();
        let at = spare.as_ptr();
        let reused = decode_reusing(&small, spare, MAX_PIXELS_DECODED).unwrap();
        assert_eq!(reused, decode(&small).unwrap());
        assert_eq!(reused.as_bytes().as_ptr(), at, "decoded into the spare");

        let too_small = decode(&small).unwrap().into_bytes();
        let grown = decode_reusing(&large, too_small, MAX_PIXELS_DECODED).unwrap();
        assert_eq!(grown, decode(&large).unwrap());
    }

    #[test]
    fn a_jpeg_cut_short_is_refused_even_when_a_thumbnail_ends_early() {
        let photo = jpeg(320, 240);
        assert!(decode(&photo).is_ok());
        let truncated = &photo[..photo.len() * 2 / 3];
        assert_eq!(
            decode(truncated).unwrap_err(),
            DecodeError::Invalid("the JPEG is truncated".into())
        );
        // An APP1 segment holding a whole thumbnail, end marker included.
        let thumbnail = jpeg(16, 16);
        let mut with_thumbnail = photo[..2].to_vec();
        with_thumbnail.extend_from_slice(&[0xFF, 0xE1]);
        with_thumbnail.extend_from_slice(&(thumbnail.len() as u16 + 8).to_be_bytes());
        with_thumbnail.extend_from_slice(b"Exif\0\0");
        with_thumbnail.extend_from_slice(&thumbnail);
        with_thumbnail.extend_from_slice(&photo[2..]);
        assert!(decode(&with_thumbnail).is_ok());
        with_thumbnail.truncate(with_thumbnail.len() - 200);
        assert!(decode(&with_thumbnail).is_err());
    }
}
