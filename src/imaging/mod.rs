//! Pixels in and out: decode an upload with limits and its EXIF orientation,
//! decide the output geometry, resize, put the matte in the alpha channel and
//! encode the PNG. Knows nothing of HTTP, SQL or the model.

mod decode;
mod geometry;
mod resize;

pub use decode::{decode, format_of, DecodeError};
pub use geometry::{fit_within, output_size, GeometryError};
pub use resize::{resize_gray, resize_rgba};

use image::codecs::png::{CompressionType, FilterType, PngEncoder};
use image::{ImageEncoder, RgbaImage};

/// Replaces the alpha of `image` by `matte` (same size, one byte a pixel),
/// keeping whatever transparency the input already had.
pub fn apply_matte(image: &mut RgbaImage, matte: &[u8]) {
    debug_assert_eq!(image.as_raw().len(), matte.len() * 4);
    for (px, &m) in image.chunks_exact_mut(4).zip(matte) {
        px[3] = ((u16::from(px[3]) * u16::from(m) + 127) / 255) as u8;
    }
}

/// `Fast` deflate with the Paeth filter: of every setting, the fastest on a
/// 12 MP cut-out at the adaptive filter's size (`examples/png_settings.rs`,
/// BENCHMARKS.md).
pub fn encode_png(image: &RgbaImage) -> image::ImageResult<Vec<u8>> {
    let mut out = Vec::with_capacity(image.as_raw().len() / 3);
    PngEncoder::new_with_quality(&mut out, CompressionType::Fast, FilterType::Paeth).write_image(
        image.as_raw(),
        image.width(),
        image.height(),
        image::ExtendedColorType::Rgba8,
    )?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_matte_becomes_alpha_and_input_transparency_is_kept() {
        let mut img =
            RgbaImage::from_raw(3, 1, vec![9, 9, 9, 255, 9, 9, 9, 255, 9, 9, 9, 0]).unwrap();
        apply_matte(&mut img, &[255, 0, 255]);
        assert_eq!(img.as_raw(), &[9, 9, 9, 255, 9, 9, 9, 0, 9, 9, 9, 0]);
    }

    #[test]
    fn encoded_png_round_trips() {
        let img = RgbaImage::from_fn(5, 4, |x, y| {
            image::Rgba([x as u8, y as u8, 7, (x * 50) as u8])
        });
        let png = encode_png(&img).unwrap();
        let back = image::load_from_memory(&png).unwrap().into_rgba8();
        assert_eq!(back, img);
    }
}
