//! Pixels in and out: decode an upload with limits and its EXIF orientation,
//! decide the output geometry, resize, put the matte in the alpha channel and
//! encode the PNG. Knows nothing of HTTP, SQL or the model.

mod decode;
mod edges;
mod foreground;
mod geometry;
mod parts;
mod planes;
mod png;
mod resize;

pub use decode::{decode, decode_reusing, format_of, DecodeError};
pub use geometry::{fit_within, output_size, GeometryError};
pub use parts::keep_main_parts;
pub use png::encode_png;
pub use resize::{resize, resize_gray, resize_with, Filter};

use crate::domain::Channels;
use edges::Edges;
use foreground::Colours;
use image::DynamicImage;
use std::sync::atomic::{AtomicU32, Ordering};

/// The cut-out of `image` as a PNG. The model's matte (`small_matte`, on
/// the grid of `small`, the photo as the model saw it) is enlarged to the
/// image, its edges are refined, and it becomes the alpha channel, times
/// whatever transparency the image already had; partial pixels get their
/// foreground colour. A pixel that ends fully transparent gets colour 0 as
/// well: nobody sees it, and long runs of zeros make the PNG smaller and
/// faster to encode. Also returns where the subject is: the box of the
/// pixels not fully transparent, `None` if there are none.
///
/// One pass, band by band on every core, from the photo's rows to the
/// PNG's: at 12 MP, a full-size matte and cut-out were 60 MB of fresh
/// memory a request, written and read again by each step.
/// With `Channels::Alpha`, the PNG is that alpha channel alone, in grey.
pub fn cut_out_png(
    image: &DynamicImage,
    small: &DynamicImage,
    small_matte: &[u8],
    channels: Channels,
) -> (Vec<u8>, Option<Foreground>) {
    // Small photos in a few bands a core too.
    let rows_a_band = png::rows_a_band(image.width()).min(band_rows(image.height()) as usize);
    let extent = Extent::default();
    let png = cut_out_in_bands(image, small, small_matte, rows_a_band, &extent, channels);
    (png, extent.foreground())
}

/// The box of a cut-out's visible pixels, in its own pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Foreground {
    pub left: u32,
    pub top: u32,
    pub width: u32,
    pub height: u32,
}

/// The visible pixels' box as bands find them, on any thread.
struct Extent {
    left: AtomicU32,
    right: AtomicU32,
    top: AtomicU32,
    bottom: AtomicU32,
}

impl Default for Extent {
    fn default() -> Extent {
        Extent {
            left: AtomicU32::new(u32::MAX),
            right: AtomicU32::new(0),
            top: AtomicU32::new(u32::MAX),
            bottom: AtomicU32::new(0),
        }
    }
}

impl Extent {
    /// Takes in row `y` of the cut-out (RGBA).
    fn include_row(&self, y: usize, rgba: &[u8]) {
        let visible = |p: &[u8]| p[3] != 0;
        let Some(first) = rgba.chunks_exact(4).position(visible) else {
            return;
        };
        let last = rgba.chunks_exact(4).rposition(visible).unwrap_or(first);
        self.left.fetch_min(first as u32, Ordering::Relaxed);
        self.right.fetch_max(last as u32, Ordering::Relaxed);
        self.top.fetch_min(y as u32, Ordering::Relaxed);
        self.bottom.fetch_max(y as u32, Ordering::Relaxed);
    }

    fn foreground(&self) -> Option<Foreground> {
        let (left, top) = (
            self.left.load(Ordering::Relaxed),
            self.top.load(Ordering::Relaxed),
        );
        (left != u32::MAX).then(|| Foreground {
            left,
            top,
            width: self.right.load(Ordering::Relaxed) - left + 1,
            height: self.bottom.load(Ordering::Relaxed) - top + 1,
        })
    }
}

fn cut_out_in_bands(
    image: &DynamicImage,
    small: &DynamicImage,
    small_matte: &[u8],
    rows_a_band: usize,
    extent: &Extent,
    channels: Channels,
) -> Vec<u8> {
    let (pixels, step) = match image {
        DynamicImage::ImageRgb8(rgb) => (rgb.as_raw(), 3),
        DynamicImage::ImageRgba8(rgba) => (rgba.as_raw(), 4),
        other => {
            let rgba = DynamicImage::ImageRgba8(other.to_rgba8());
            return cut_out_in_bands(&rgba, small, small_matte, rows_a_band, extent, channels);
        }
    };
    let size = (image.width(), image.height());
    let grid = (small.width(), small.height());
    let width = size.0 as usize;
    // The small-grid work, a side a core, before the full-size pass.
    let (edges, colours) = rayon::join(
        || Edges::fit(size, small, small_matte),
        || Colours::estimate(size, small, small_matte),
    );
    let colour = match channels {
        Channels::Rgba => png::Colour::Rgba,
        Channels::Alpha => png::Colour::Grey,
    };
    png::encode_rows(size.0, size.1, colour, rows_a_band, |rows, band| {
        let mut matte = vec![0u8; rows.len() * width];
        // The matte alone is the cut-out's alpha, so each row is made whole first.
        let mut whole_row = match channels {
            Channels::Rgba => Vec::new(),
            Channels::Alpha => vec![0u8; width * 4],
        };
        resize::resize_gray_band(small_matte, grid, size, rows.start as u32, &mut matte);
        for (y, matte) in rows.zip(matte.chunks_exact_mut(width)) {
            let pixels = &pixels[y * width * step..][..width * step];
            if let Some(edges) = &edges {
                edges.refine_row(y, matte, pixels, step);
            }
            let make = |cut: &mut [u8]| {
                match step {
                    3 => cut_out_row::<3>(matte, pixels, cut),
                    _ => cut_out_row::<4>(matte, pixels, cut),
                }
                if let Some(colours) = &colours {
                    colours.recolour_row(y, cut);
                }
                extent.include_row(y, cut);
            };
            match channels {
                Channels::Rgba => band.push_with(make),
                Channels::Alpha => {
                    make(&mut whole_row);
                    band.push_with(|grey| {
                        for (g, px) in grey.iter_mut().zip(whole_row.chunks_exact(4)) {
                            *g = px[3];
                        }
                    });
                }
            }
        }
    })
}

/// A row of the cut-out (RGBA): the colours of `pixels` (RGB, or RGBA whose
/// alpha multiplies the matte) with `matte` as alpha.
fn cut_out_row<const STEP: usize>(matte: &[u8], pixels: &[u8], cut: &mut [u8]) {
    let pixels = cut.chunks_exact_mut(4).zip(pixels.chunks_exact(STEP));
    for ((px, src), &m) in pixels.zip(matte) {
        let alpha = match STEP {
            4 => ((u16::from(src[3]) * u16::from(m) + 127) / 255) as u8,
            _ => m,
        };
        if alpha == 0 {
            px.copy_from_slice(&[0; 4]);
        } else {
            px[..3].copy_from_slice(&src[..3]);
            px[3] = alpha;
        }
    }
}

/// Rows a band when `height` rows are shared out: a few bands a core, so a
/// slow band does not hold the others up.
fn band_rows(height: u32) -> u32 {
    height.div_ceil(4 * rayon::current_num_threads() as u32)
}

/// A fraction as a byte, rounded, and clamped to 0..=255 by `as`:
/// `f32::round` is a call into libm on x86-64's baseline, and this runs for
/// every partial pixel of 12 MP.
fn unit_to_byte(unit: f32) -> u8 {
    (unit * 255.0 + 0.5) as u8
}

/// Neither transparent nor opaque: one compare, for loops over 12 MP.
fn is_partial(alpha: u8) -> bool {
    alpha.wrapping_sub(1) < 254
}

#[cfg(test)]
mod tests {
    use super::*;

    use image::{GenericImageView, RgbImage, RgbaImage};

    #[test]
    fn the_matte_becomes_alpha_and_input_transparency_is_kept() {
        let rgba = [9, 8, 7, 255, 9, 8, 7, 255, 9, 8, 7, 0, 9, 8, 7, 128];
        let mut cut = [1; 16];
        cut_out_row::<4>(&[255, 0, 255, 128], &rgba, &mut cut);
        assert_eq!(
            cut,
            [9, 8, 7, 255, 0, 0, 0, 0, 0, 0, 0, 0, 9, 8, 7, 64],
            "alpha multiplied; fully transparent pixels lose their colour"
        );
        let mut cut = [1; 12];
        cut_out_row::<3>(&[255, 0, 1], &[1, 2, 3, 4, 5, 6, 7, 8, 9], &mut cut);
        assert_eq!(cut, [1, 2, 3, 255, 0, 0, 0, 0, 7, 8, 9, 1]);
    }

    /// A noisy photo of `w`×`h` and, on a grid a third its size, a matte
    /// of a disc with a soft rim.
    fn photo_and_matte(w: u32, h: u32, alpha: bool) -> (DynamicImage, DynamicImage, Vec<u8>) {
        let colour = |x: u32, y: u32, c: u32| {
            ((x * 31 + y * 17 + c * 57).wrapping_mul(2654435761) >> 24) as u8
        };
        let photo = match alpha {
            false => DynamicImage::ImageRgb8(RgbImage::from_fn(w, h, |x, y| {
                image::Rgb([colour(x, y, 0), colour(x, y, 1), colour(x, y, 2)])
            })),
            true => DynamicImage::ImageRgba8(RgbaImage::from_fn(w, h, |x, y| {
                image::Rgba([
                    colour(x, y, 0),
                    colour(x, y, 1),
                    colour(x, y, 2),
                    colour(x, y, 3),
                ])
            })),
        };
        let (gw, gh) = (w / 3, h / 3);
        let small = resize(&photo, gw, gh);
        let matte = (0..gw * gh)
            .map(|i| {
                let (x, y) = (
                    f64::from(i % gw) - f64::from(gw) / 2.0,
                    f64::from(i / gw) - f64::from(gh) / 2.0,
                );
                let d = (x * x + y * y).sqrt() / f64::from(gh.min(gw)) * 4.0;
                ((2.0 - d).clamp(0.0, 1.0) * 255.0) as u8
            })
            .collect();
        (photo, small, matte)
    }

    #[test]
    fn bands_make_the_cut_out_one_pass_would() {
        for alpha in [false, true] {
            let (photo, small, matte) = photo_and_matte(120, 90, alpha);
            let decode = |png: Vec<u8>| image::load_from_memory(&png).unwrap().into_rgba8();
            let whole = decode(cut_out_in_bands(
                &photo,
                &small,
                &matte,
                90,
                &Extent::default(),
                Channels::Rgba,
            ));
            assert_eq!(whole.dimensions(), photo.dimensions());
            let partial = whole.pixels().filter(|p| is_partial(p[3])).count();
            assert!(partial > 500, "the test needs partial pixels: {partial}");
            for rows_a_band in [1, 7, 64] {
                let banded = decode(cut_out_in_bands(
                    &photo,
                    &small,
                    &matte,
                    rows_a_band,
                    &Extent::default(),
                    Channels::Rgba,
                ));
                let worst = banded
                    .as_raw()
                    .iter()
                    .zip(whole.as_raw())
                    .map(|(a, b)| a.abs_diff(*b))
                    .max();
                assert!(
                    worst <= Some(1),
                    "{rows_a_band} rows a band: off by {worst:?}"
                );
            }
        }
    }

    #[test]
    fn a_fraction_becomes_the_nearest_byte() {
        for k in 0..=255u8 {
            let at = f32::from(k) / 255.0;
            assert_eq!(unit_to_byte(at), k);
            assert_eq!(unit_to_byte(at - 0.49 / 255.0), k);
            assert_eq!(unit_to_byte(at + 0.49 / 255.0), k);
        }
        assert_eq!(unit_to_byte(-0.5), 0);
        assert_eq!(unit_to_byte(1.5), 255);
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
