//! Decoding an upload: the format comes from the bytes alone, the pixel
//! count is checked from the header before any pixel buffer is allocated,
//! and the EXIF orientation is applied.

use crate::error::MAX_PIXELS_DECODED;
use image::{DynamicImage, ImageDecoder, ImageError, ImageFormat, ImageReader, Limits};
use std::io::Cursor;

/// Ceiling on any single allocation the decoders make: a 50 MP image at 16
/// bits per channel with alpha is 400 MB.
const MAX_DECODER_ALLOC: u64 = 512 * 1024 * 1024;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DecodeError {
    #[error("not a JPEG, PNG or WEBP")]
    Unsupported,
    #[error("{width}x{height} is over the pixel limit")]
    TooLarge { width: u32, height: u32 },
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
    let format = format_of(bytes)?;
    let mut reader = ImageReader::with_format(Cursor::new(bytes), format);
    let mut limits = Limits::default();
    limits.max_alloc = Some(MAX_DECODER_ALLOC);
    reader.limits(limits);
    let mut decoder = reader.into_decoder().map_err(from_image_error)?;
    let (width, height) = decoder.dimensions();
    if u64::from(width) * u64::from(height) > MAX_PIXELS_DECODED {
        return Err(DecodeError::TooLarge { width, height });
    }
    if width == 0 || height == 0 {
        return Err(DecodeError::Invalid("the image has no pixels".into()));
    }
    // A broken EXIF block is no reason to refuse the pixels.
    let orientation = decoder
        .orientation()
        .unwrap_or(image::metadata::Orientation::NoTransforms);
    let mut image = DynamicImage::from_decoder(decoder).map_err(from_image_error)?;
    image.apply_orientation(orientation);
    // A JPEG stays RGB: a fourth byte a pixel would only be carried around.
    Ok(if image.color().has_alpha() {
        DynamicImage::ImageRgba8(image.into_rgba8())
    } else {
        DynamicImage::ImageRgb8(image.into_rgb8())
    })
}

fn from_image_error(e: ImageError) -> DecodeError {
    match e {
        ImageError::Limits(_) => DecodeError::TooLarge {
            width: 0,
            height: 0,
        },
        ImageError::Unsupported(e) => DecodeError::Invalid(e.to_string()),
        other => DecodeError::Invalid(other.to_string()),
    }
}
