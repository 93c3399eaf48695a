//! Decoding an upload: the format comes from the bytes alone, the pixel
//! count is checked from the header before any pixel buffer is allocated,
//! and the EXIF orientation is applied.

use crate::error::MAX_PIXELS_DECODED;
use image::metadata::Orientation;
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

/// What decoding a file makes and holds, read from its header alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub width: u32,
    pub height: u32,
    /// The decoded photo keeps an alpha channel: RGBA, else RGB.
    pub alpha: bool,
    /// The most bytes decoding holds at once, the decoded photo included.
    pub decoding: u64,
}

impl Header {
    pub fn pixels(&self) -> u64 {
        u64::from(self.width) * u64::from(self.height)
    }

    /// Bytes a pixel of the decoded photo.
    pub fn channels(&self) -> u64 {
        if self.alpha {
            4
        } else {
            3
        }
    }
}

/// Row buffers, the inflater's window, tables: what a decoder holds beside
/// its pixels, at most.
const DECODER_OVERHEAD: u64 = 4 << 20;

/// The header of `bytes`, refusing more than `max_pixels` as `decode` does,
/// without decoding a pixel.
pub fn header(bytes: &[u8], max_pixels: u64) -> Result<Header, DecodeError> {
    let max_pixels = max_pixels.min(MAX_PIXELS_DECODED);
    match checked_format(bytes)? {
        ImageFormat::Png => {
            let reader = png_reader(bytes)?;
            let (width, height) = reader.info().size();
            within(width, height, max_pixels)?;
            let alpha = png_alpha(&reader);
            // Grey is widened to RGB in the photo's own buffer.
            let decoded = Header {
                width,
                height,
                alpha,
                decoding: 0,
            };
            let decoding = decoded.pixels() * decoded.channels() + DECODER_OVERHEAD;
            Ok(Header {
                decoding,
                ..decoded
            })
        }
        format => {
            let decoder = other_decoder(bytes, format)?;
            let (width, height) = decoder.dimensions();
            within(width, height, max_pixels)?;
            let colour = decoder.color_type();
            let pixels = u64::from(width) * u64::from(height);
            let kept = pixels * if colour.has_alpha() { 4 } else { 3 };
            // Anything but 8-bit RGB(A) is decoded as it is, then converted.
            let converted = match colour {
                ColorType::Rgb8 | ColorType::Rgba8 => 0,
                other => pixels * u64::from(other.bytes_per_pixel()),
            };
            let working = match format {
                // A progressive JPEG keeps every coefficient, two bytes each,
                // until its last scan.
                ImageFormat::Jpeg => jpeg_frame(bytes).map_or(0, |frame| match frame.progressive {
                    true => pixels * 2 * u64::from(frame.components),
                    false => 0,
                }),
                // A lossless or animated WEBP is put together in RGBA before
                // it is handed over; a lossy one in YUV planes.
                _ => pixels * 4,
            };
            Ok(Header {
                width,
                height,
                alpha: colour.has_alpha(),
                decoding: kept + converted + working + DECODER_OVERHEAD,
            })
        }
    }
}

fn within(width: u32, height: u32, max_pixels: u64) -> Result<(), DecodeError> {
    if u64::from(width) * u64::from(height) > max_pixels {
        return Err(DecodeError::TooLarge {
            width,
            height,
            most: max_pixels,
        });
    }
    if width == 0 || height == 0 {
        return Err(DecodeError::Invalid("the image has no pixels".into()));
    }
    Ok(())
}

/// `format_of`, and a JPEG that was cut short refused.
fn checked_format(bytes: &[u8]) -> Result<ImageFormat, DecodeError> {
    let format = format_of(bytes)?;
    if format == ImageFormat::Jpeg && !jpeg_has_its_end(bytes) {
        // The decoder would fill the missing rows with grey and succeed.
        return Err(DecodeError::Invalid("the JPEG is truncated".into()));
    }
    Ok(format)
}

fn decode_within(
    bytes: &[u8],
    spare: Vec<u8>,
    max_pixels: u64,
) -> Result<DynamicImage, DecodeError> {
    let (mut image, orientation) = match checked_format(bytes)? {
        ImageFormat::Png => decode_png(bytes, spare, max_pixels)?,
        format => decode_other(bytes, format, spare, max_pixels)?,
    };
    image.apply_orientation(orientation);
    // A JPEG stays RGB: a fourth byte a pixel would only be carried around.
    Ok(if image.color().has_alpha() {
        DynamicImage::ImageRgba8(image.into_rgba8())
    } else {
        DynamicImage::ImageRgb8(image.into_rgb8())
    })
}

/// A PNG's reader, every sample widened or narrowed to 8 bits as it
/// inflates: a 16-bit photo never takes twice its 8-bit memory. Text and
/// ICC profiles are not read: nothing uses them, and they can inflate a
/// thousandfold.
fn png_reader(bytes: &[u8]) -> Result<png::Reader<Cursor<&[u8]>>, DecodeError> {
    let limits = png::Limits {
        bytes: MAX_HEADER_ALLOC as usize,
    };
    let mut decoder = png::Decoder::new_with_limits(Cursor::new(bytes), limits);
    decoder.set_ignore_text_chunk(true);
    decoder.set_ignore_iccp_chunk(true);
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    decoder.read_info().map_err(from_png_error)
}

fn png_alpha(reader: &png::Reader<Cursor<&[u8]>>) -> bool {
    matches!(
        reader.output_color_type().0,
        png::ColorType::Rgba | png::ColorType::GrayscaleAlpha
    )
}

/// A PNG as 8-bit RGB or RGBA (grey widened in place), in `spare`'s memory
/// where it is large enough; an animation's first frame.
fn decode_png(
    bytes: &[u8],
    spare: Vec<u8>,
    max_pixels: u64,
) -> Result<(DynamicImage, Orientation), DecodeError> {
    let mut reader = png_reader(bytes)?;
    let (width, height) = reader.info().size();
    within(width, height, max_pixels)?;
    let orientation = reader
        .info()
        .exif_metadata
        .as_deref()
        .and_then(Orientation::from_exif_chunk)
        .unwrap_or(Orientation::NoTransforms);
    let grey = matches!(
        reader.output_color_type().0,
        png::ColorType::Grayscale | png::ColorType::GrayscaleAlpha
    );
    let channels = if png_alpha(&reader) { 4 } else { 3 };
    let pixels = width as usize * height as usize;
    let mut buffer = zeroed(spare, pixels * channels);
    let frame = reader.next_frame(&mut buffer).map_err(from_png_error)?;
    if grey {
        widen_grey(&mut buffer, frame.color_type.samples(), channels);
    }
    let image = match channels {
        3 => RgbImage::from_raw(width, height, buffer).map(DynamicImage::ImageRgb8),
        _ => RgbaImage::from_raw(width, height, buffer).map(DynamicImage::ImageRgba8),
    };
    Ok((image.expect("width*height pixels"), orientation))
}

/// Grey (or grey and alpha) samples at the start of `buffer` spread to RGB
/// (or RGBA) over all of it, from the last pixel back so nothing is read
/// after it was written.
fn widen_grey(buffer: &mut [u8], samples: usize, channels: usize) {
    let pixels = buffer.len() / channels;
    for i in (0..pixels).rev() {
        let grey = buffer[i * samples];
        let alpha = if samples == 2 {
            buffer[i * samples + 1]
        } else {
            255
        };
        let px = &mut buffer[i * channels..][..channels];
        px[..3].fill(grey);
        if channels == 4 {
            px[3] = alpha;
        }
    }
}

/// JPEG and WEBP through `image`'s decoders.
fn other_decoder(bytes: &[u8], format: ImageFormat) -> Result<impl ImageDecoder + '_, DecodeError> {
    let mut reader = ImageReader::with_format(Cursor::new(bytes), format);
    reader.limits(allocating_at_most(MAX_HEADER_ALLOC));
    reader.into_decoder().map_err(|e| match e {
        ImageError::Limits(_) => DecodeError::Invalid(format!(
            "its metadata (ICC profile or text) needs over {} MiB",
            MAX_HEADER_ALLOC >> 20
        )),
        other => from_image_error(other),
    })
}

fn decode_other(
    bytes: &[u8],
    format: ImageFormat,
    spare: Vec<u8>,
    max_pixels: u64,
) -> Result<(DynamicImage, Orientation), DecodeError> {
    let mut decoder = other_decoder(bytes, format)?;
    let (width, height) = decoder.dimensions();
    within(width, height, max_pixels)?;
    decoder
        .set_limits(allocating_at_most(MAX_DECODER_ALLOC))
        .map_err(from_image_error)?;
    // A broken EXIF block is no reason to refuse the pixels.
    let orientation = decoder.orientation().unwrap_or(Orientation::NoTransforms);
    let image = match decoder.color_type() {
        ColorType::Rgb8 | ColorType::Rgba8 => read_8_bit(decoder, spare)?,
        _ => DynamicImage::from_decoder(decoder).map_err(from_image_error)?,
    };
    Ok((image, orientation))
}

/// `spare` made `len` zeros long, if its memory holds them; else new.
/// Zeros, not the last photo: no decoder may leave a byte of it behind.
fn zeroed(spare: Vec<u8>, len: usize) -> Vec<u8> {
    let mut pixels = if spare.capacity() >= len {
        spare
    } else {
        Vec::new()
    };
    pixels.clear();
    pixels.resize(len, 0);
    pixels
}

fn read_8_bit(decoder: impl ImageDecoder, spare: Vec<u8>) -> Result<DynamicImage, DecodeError> {
    let (width, height) = decoder.dimensions();
    let colour = decoder.color_type();
    let len = usize::try_from(decoder.total_bytes()).expect("under the pixel limit");
    let mut pixels = zeroed(spare, len);
    decoder.read_image(&mut pixels).map_err(from_image_error)?;
    Ok(match colour {
        ColorType::Rgb8 => RgbImage::from_raw(width, height, pixels).map(DynamicImage::ImageRgb8),
        _ => RgbaImage::from_raw(width, height, pixels).map(DynamicImage::ImageRgba8),
    }
    .expect("the decoder filled width*height pixels"))
}

/// Whether the end-of-image marker follows the first scan. Entropy-coded
/// data cannot hold one (a 0xFF there is always followed by 0x00 or a
/// restart marker), so its absence means the file was cut short.
fn jpeg_has_its_end(bytes: &[u8]) -> bool {
    jpeg_segments(bytes)
        .find(|&(marker, _)| marker == 0xDA)
        .is_some_and(|(_, at)| bytes[at..].windows(2).any(|w| w == [0xFF, 0xD9]))
}

/// What a JPEG's frame header says of its decoding.
struct JpegFrame {
    progressive: bool,
    components: u8,
}

fn jpeg_frame(bytes: &[u8]) -> Option<JpegFrame> {
    let (marker, at) = jpeg_segments(bytes).find(|&(marker, _)| {
        matches!(marker, 0xC0..=0xCF) && ![0xC4, 0xC8, 0xCC].contains(&marker)
    })?;
    Some(JpegFrame {
        // SOF2, SOF6, SOF10, SOF14: progressive.
        progressive: matches!(marker, 0xC2 | 0xC6 | 0xCA | 0xCE),
        components: *bytes.get(at + 9)?,
    })
}

/// The markers up to the first scan (SOS included) and where each starts.
/// The segments are skipped by their lengths, since an EXIF thumbnail
/// carries markers of its own.
fn jpeg_segments(bytes: &[u8]) -> impl Iterator<Item = (u8, usize)> + '_ {
    let mut at = 2; // past SOI
    std::iter::from_fn(move || loop {
        let &[0xFF, marker] = bytes.get(at..at + 2)? else {
            return None;
        };
        let here = at;
        match marker {
            0xFF => at += 1, // fill byte
            0xDA => {
                at = bytes.len();
                return Some((marker, here));
            }
            0x01 | 0xD0..=0xD7 => at += 2,
            _ => {
                let &[high, low] = bytes.get(at + 2..at + 4)? else {
                    return None;
                };
                at += 2 + usize::from(u16::from_be_bytes([high, low]));
                return Some((marker, here));
            }
        }
    })
}

fn allocating_at_most(bytes: u64) -> Limits {
    let mut limits = Limits::default();
    limits.max_alloc = Some(bytes);
    limits
}

fn from_png_error(e: png::DecodingError) -> DecodeError {
    match e {
        png::DecodingError::LimitsExceeded => DecodeError::Invalid(format!(
            "decoding it needs over {} MiB beside its pixels",
            MAX_HEADER_ALLOC >> 20
        )),
        other => DecodeError::Invalid(other.to_string()),
    }
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

    /// A PNG of `samples` (big-endian at 16 bits), as `png` writes it.
    fn png_file(
        w: u32,
        h: u32,
        colour: png::ColorType,
        depth: png::BitDepth,
        samples: &[u8],
    ) -> Vec<u8> {
        let mut file = Vec::new();
        let mut encoder = png::Encoder::new(&mut file, w, h);
        encoder.set_color(colour);
        encoder.set_depth(depth);
        if colour == png::ColorType::Indexed {
            encoder.set_palette(
                (0..=255u8)
                    .flat_map(|i| [i, 255 - i, i / 2])
                    .collect::<Vec<_>>(),
            );
            encoder.set_trns((0..=255u8).collect::<Vec<_>>());
        }
        let mut writer = encoder.write_header().unwrap();
        writer.write_image_data(samples).unwrap();
        writer.finish().unwrap();
        file
    }

    #[test]
    fn every_png_kind_decodes_to_8_bits_as_image_decodes_it_within_a_level() {
        use png::{BitDepth, ColorType as C};
        let (w, h) = (37u32, 23u32);
        let n = (w * h) as usize;
        let ramp = |len: usize| {
            (0..len)
                .map(|i| (i * 7919 % 256) as u8)
                .collect::<Vec<u8>>()
        };
        for (colour, depth, bytes_a_pixel) in [
            (C::Rgba, BitDepth::Sixteen, 8),
            (C::Rgb, BitDepth::Sixteen, 6),
            (C::Grayscale, BitDepth::Sixteen, 2),
            (C::GrayscaleAlpha, BitDepth::Eight, 2),
            (C::Grayscale, BitDepth::Eight, 1),
            (C::Indexed, BitDepth::Eight, 1),
            (C::Rgb, BitDepth::Eight, 3),
        ] {
            let file = png_file(w, h, colour, depth, &ramp(n * bytes_a_pixel));
            let ours = decode(&file).unwrap();
            let theirs = image::load_from_memory(&file).unwrap();
            let theirs = match ours.color().has_alpha() {
                true => DynamicImage::ImageRgba8(theirs.into_rgba8()),
                false => DynamicImage::ImageRgb8(theirs.into_rgb8()),
            };
            assert_eq!(ours.color(), theirs.color(), "{colour:?} {depth:?}");
            let off = ours
                .as_bytes()
                .iter()
                .zip(theirs.as_bytes())
                .map(|(a, b)| a.abs_diff(*b))
                .max();
            assert!(off <= Some(1), "{colour:?} {depth:?}: {off:?}");
            let header = header(&file, MAX_PIXELS_DECODED).unwrap();
            assert_eq!(header.channels(), ours.color().bytes_per_pixel() as u64);
            // 8 bits a sample held, whatever the file's depth.
            assert_eq!(
                header.decoding,
                n as u64 * header.channels() + DECODER_OVERHEAD
            );
        }
    }

    #[test]
    fn a_progressive_jpeg_holds_its_coefficients_while_it_decodes() {
        let photo = image::RgbImage::from_fn(64, 48, |x, y| image::Rgb([x as u8, y as u8, 90]));
        let encode = |progressive: bool| {
            let mut file = Vec::new();
            let mut encoder = jpeg_encoder::Encoder::new(&mut file, 90);
            encoder.set_progressive(progressive);
            encoder
                .encode(photo.as_raw(), 64, 48, jpeg_encoder::ColorType::Rgb)
                .unwrap();
            file
        };
        let pixels = 64 * 48;
        let baseline = header(&encode(false), MAX_PIXELS_DECODED).unwrap();
        assert_eq!(baseline.decoding, pixels * 3 + DECODER_OVERHEAD);
        let progressive = header(&encode(true), MAX_PIXELS_DECODED).unwrap();
        assert_eq!(
            progressive.decoding,
            pixels * (3 + 2 * 3) + DECODER_OVERHEAD
        );
        assert_eq!(decode(&encode(true)).unwrap().width(), 64);
        assert_eq!(
            header(&encode(true), 1000),
            Err(DecodeError::TooLarge {
                width: 64,
                height: 48,
                most: 1000
            })
        );
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
