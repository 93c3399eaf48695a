//! Pixels in and out: decode an upload with limits and its EXIF orientation,
//! decide the output geometry, resize, put the matte in the alpha channel and
//! encode the PNG. Knows nothing of HTTP, SQL or the model.

mod decode;
mod edges;
mod foreground;
mod geometry;
mod planes;
mod png;
mod resize;

pub use decode::{decode, format_of, DecodeError};
pub use edges::refine_edges;
pub use foreground::recolour_partial_pixels;
pub use geometry::{fit_within, output_size, GeometryError};
pub use png::encode_png;
pub use resize::{resize, resize_gray, resize_with, Filter};

use image::{DynamicImage, RgbaImage};
use rayon::prelude::*;

/// The cut-out: `image`'s colours with `matte` (same size, one byte a pixel)
/// as alpha, times whatever transparency the input already had. A pixel
/// that ends fully transparent gets colour 0 as well: nobody sees it, and
/// long runs of zeros make the PNG smaller and faster to encode.
pub fn cut_out(image: &DynamicImage, matte: &[u8]) -> RgbaImage {
    let (width, height) = (image.width(), image.height());
    debug_assert_eq!(matte.len(), (width * height) as usize);
    let mut out = vec![0u8; matte.len() * 4];
    let rows = |bytes_a_pixel: usize| (width as usize * bytes_a_pixel).max(1);
    let out_rows = out
        .par_chunks_exact_mut(rows(4))
        .zip(matte.par_chunks_exact(rows(1)));
    match image {
        DynamicImage::ImageRgb8(rgb) => {
            out_rows
                .zip(rgb.par_chunks_exact(rows(3)))
                .for_each(|((out, matte), src)| {
                    let pixels = out.chunks_exact_mut(4).zip(src.chunks_exact(3));
                    for ((px, src), &alpha) in pixels.zip(matte) {
                        if alpha != 0 {
                            px[..3].copy_from_slice(src);
                            px[3] = alpha;
                        }
                    }
                });
        }
        DynamicImage::ImageRgba8(rgba) => {
            out_rows
                .zip(rgba.par_chunks_exact(rows(4)))
                .for_each(|((out, matte), src)| {
                    let pixels = out.chunks_exact_mut(4).zip(src.chunks_exact(4));
                    for ((px, src), &m) in pixels.zip(matte) {
                        let alpha = ((u16::from(src[3]) * u16::from(m) + 127) / 255) as u8;
                        if alpha != 0 {
                            px[..3].copy_from_slice(&src[..3]);
                            px[3] = alpha;
                        }
                    }
                });
        }
        other => return cut_out(&DynamicImage::ImageRgba8(other.to_rgba8()), matte),
    }
    RgbaImage::from_raw(width, height, out).expect("four bytes a pixel")
}

/// Neither transparent nor opaque: one compare, for loops over 12 MP.
fn is_partial(alpha: u8) -> bool {
    alpha.wrapping_sub(1) < 254
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_matte_becomes_alpha_and_input_transparency_is_kept() {
        let rgba = RgbaImage::from_raw(
            4,
            1,
            vec![9, 8, 7, 255, 9, 8, 7, 255, 9, 8, 7, 0, 9, 8, 7, 128],
        )
        .unwrap();
        let cut = cut_out(&DynamicImage::ImageRgba8(rgba), &[255, 0, 255, 128]);
        assert_eq!(
            cut.as_raw(),
            &[9, 8, 7, 255, 0, 0, 0, 0, 0, 0, 0, 0, 9, 8, 7, 64],
            "alpha multiplied; fully transparent pixels lose their colour"
        );
        let rgb = image::RgbImage::from_raw(3, 1, vec![1, 2, 3, 4, 5, 6, 7, 8, 9]).unwrap();
        let cut = cut_out(&DynamicImage::ImageRgb8(rgb), &[255, 0, 1]);
        assert_eq!(cut.as_raw(), &[1, 2, 3, 255, 0, 0, 0, 0, 7, 8, 9, 1]);
    }

    #[test]
    fn encoded_png_round_trips() {
        let img = RgbaImage::from_fn(5, 4, |x, y| {
            image::Rgba([x as u8, y as u8, 7, (x * 50) as u8])
        });
        let png = encode_png(&img);
        let back = image::load_from_memory(&png).unwrap().into_rgba8();
        assert_eq!(back, img);
    }
}
