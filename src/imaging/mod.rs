//! Pixels in and out: decode an upload with limits and its EXIF orientation,
//! decide the output geometry, resize, put the matte in the alpha channel and
//! encode the PNG. Knows nothing of HTTP, SQL or the model.

mod decode;
mod edges;
mod finish;
mod foreground;
mod geometry;
mod parts;
mod planes;
mod png;
mod zip;

pub use cutout_resize::{resize, resize_gray, resize_with, Filter};
pub use decode::{decode, decode_at_most, decode_reusing, format_of, header, DecodeError, Header};
pub use finish::{
    finish, Background, Finish, FinishError, Finished, Format, Length, Margins, Placement,
    Position, Roi, Shadow, ShadowKind,
};
pub use geometry::{fit_within, output_size, GeometryError};
pub use parts::keep_main_parts;
pub use png::encode_png;

use crate::domain::Channels;
use cutout_resize::band_rows;
use edges::Edges;
use foreground::Colours;
use image::{DynamicImage, RgbaImage};
use rayon::prelude::*;
use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering};

/// The cut-out of `image` as a PNG. The model's matte (`small_matte`, on
/// the grid of `small`, the photo as the model saw it) is enlarged to the
/// image, its edges are refined, and it becomes the alpha channel, times
/// whatever transparency the image already had; partial pixels get their
/// foreground colour. A pixel that ends fully transparent gets colour 0 as
/// well: nobody sees it, and long runs of zeros make the PNG smaller and
/// faster to encode. Also returns where the subject is: the box of the
/// pixels seen (`SEEN_FROM`), `None` if there are none.
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

/// The least alpha that counts as the subject's. The models leave a haze of
/// alpha 1 to 7 scattered across many photos (1,836 pixels of one grabcut
/// photo, from edge to edge): no one sees 3% of a colour, yet counted, it
/// made the subject's box the whole photo and a crop nothing.
pub const SEEN_FROM: u8 = 8;

/// The box of a cut-out's visible pixels (alpha `SEEN_FROM` or more), in
/// its own pixels.
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
        let visible = |p: &[u8]| p[3] >= SEEN_FROM;
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
    let rgb_or_rgba = as_rgb_or_rgba(image);
    let cut = CutRows::new(&rgb_or_rgba, small, small_matte);
    let (width, height) = cut.size;
    let colour = match channels {
        Channels::Rgba => png::Colour::Rgba,
        Channels::Alpha => png::Colour::Grey,
    };
    png::encode_rows(width, height, colour, rows_a_band, |rows, band| {
        let mut matte = cut.band_matte(rows.clone());
        // The matte alone is the cut-out's alpha, so each row is made whole first.
        let mut whole_row = match channels {
            Channels::Rgba => Vec::new(),
            Channels::Alpha => vec![0u8; width as usize * 4],
        };
        for (y, matte) in rows.zip(matte.chunks_exact_mut(width as usize)) {
            let mut make = |row: &mut [u8]| {
                cut.make_row::<false>(y, matte, row);
                extent.include_row(y, row);
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

/// The cut-out of `image` as `cut_out_png` makes it, whole in memory, for
/// the options that work on all of it (`finish`). A transparent pixel keeps
/// the photo's colour here: zip's colour image shows it, and `finish` clears
/// it where the format would store it for nothing.
pub fn cut_out_image(image: &DynamicImage, small: &DynamicImage, small_matte: &[u8]) -> RgbaImage {
    let rgb_or_rgba = as_rgb_or_rgba(image);
    let cut = CutRows::new(&rgb_or_rgba, small, small_matte);
    let (width, height) = cut.size;
    let row_bytes = width as usize * 4;
    let rows_a_band = band_rows(height) as usize;
    let mut pixels = vec![0u8; row_bytes * height as usize];
    pixels
        .par_chunks_mut(rows_a_band * row_bytes)
        .enumerate()
        .for_each(|(i, band)| {
            let first = i * rows_a_band;
            let rows = first..first + band.len() / row_bytes;
            let mut matte = cut.band_matte(rows.clone());
            let rows = rows.zip(matte.chunks_exact_mut(width as usize));
            for ((y, matte), row) in rows.zip(band.chunks_exact_mut(row_bytes)) {
                cut.make_row::<true>(y, matte, row);
            }
        });
    RgbaImage::from_raw(width, height, pixels).expect("width*height pixels")
}

/// `image` as 8-bit RGB or RGBA, the two kinds the row code reads.
fn as_rgb_or_rgba(image: &DynamicImage) -> std::borrow::Cow<'_, DynamicImage> {
    match image {
        DynamicImage::ImageRgb8(_) | DynamicImage::ImageRgba8(_) => {
            std::borrow::Cow::Borrowed(image)
        }
        other => std::borrow::Cow::Owned(DynamicImage::ImageRgba8(other.to_rgba8())),
    }
}

/// Makes the cut-out's rows: the matte enlarged band by band from the
/// model's grid, its edges refined, and the photo's colours beside it.
struct CutRows<'a> {
    /// The photo's pixels, RGB or RGBA (`step` bytes each).
    pixels: &'a [u8],
    step: usize,
    size: (u32, u32),
    grid: (u32, u32),
    small_matte: &'a [u8],
    edges: Option<Edges<'a>>,
    colours: Option<Colours>,
}

impl<'a> CutRows<'a> {
    /// `image` is 8-bit RGB or RGBA (`as_rgb_or_rgba`).
    fn new(image: &'a DynamicImage, small: &DynamicImage, small_matte: &'a [u8]) -> CutRows<'a> {
        let (pixels, step) = match image {
            DynamicImage::ImageRgb8(rgb) => (rgb.as_raw().as_slice(), 3),
            DynamicImage::ImageRgba8(rgba) => (rgba.as_raw().as_slice(), 4),
            _ => unreachable!("as_rgb_or_rgba made it RGB or RGBA"),
        };
        let size = (image.width(), image.height());
        // The small-grid work, a side a core, before the full-size pass.
        let (edges, colours) = rayon::join(
            || Edges::fit(size, small, small_matte),
            || Colours::estimate(size, small, small_matte),
        );
        CutRows {
            pixels,
            step,
            size,
            grid: (small.width(), small.height()),
            small_matte,
            edges,
            colours,
        }
    }

    /// The matte of `rows`, enlarged to the photo's width.
    fn band_matte(&self, rows: Range<usize>) -> Vec<u8> {
        let mut matte = vec![0u8; rows.len() * self.size.0 as usize];
        cutout_resize::resize_gray_band(
            self.small_matte,
            self.grid,
            self.size,
            rows.start as u32,
            &mut matte,
        );
        matte
    }

    /// Row `y` of the cut-out (RGBA) into `cut`, from its enlarged `matte`
    /// (refined in place). `KEEP_HIDDEN`: transparent pixels keep their colour.
    fn make_row<const KEEP_HIDDEN: bool>(&self, y: usize, matte: &mut [u8], cut: &mut [u8]) {
        let width = self.size.0 as usize;
        let pixels = &self.pixels[y * width * self.step..][..width * self.step];
        if let Some(edges) = &self.edges {
            edges.refine_row(y, matte, pixels, self.step);
        }
        match self.step {
            3 => cut_out_row::<3, KEEP_HIDDEN>(matte, pixels, cut),
            _ => cut_out_row::<4, KEEP_HIDDEN>(matte, pixels, cut),
        }
        if let Some(colours) = &self.colours {
            colours.recolour_row(y, cut);
        }
    }
}

/// A row of the cut-out (RGBA): the colours of `pixels` (RGB, or RGBA whose
/// alpha multiplies the matte) with `matte` as alpha. A fully transparent
/// pixel gets colour 0 unless `KEEP_HIDDEN`.
fn cut_out_row<const STEP: usize, const KEEP_HIDDEN: bool>(
    matte: &[u8],
    pixels: &[u8],
    cut: &mut [u8],
) {
    let pixels = cut.chunks_exact_mut(4).zip(pixels.chunks_exact(STEP));
    for ((px, src), &m) in pixels.zip(matte) {
        let alpha = match STEP {
            4 => ((u16::from(src[3]) * u16::from(m) + 127) / 255) as u8,
            _ => m,
        };
        if alpha == 0 && !KEEP_HIDDEN {
            px.copy_from_slice(&[0; 4]);
        } else {
            px[..3].copy_from_slice(&src[..3]);
            px[3] = alpha;
        }
    }
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
        cut_out_row::<4, false>(&[255, 0, 255, 128], &rgba, &mut cut);
        assert_eq!(
            cut,
            [9, 8, 7, 255, 0, 0, 0, 0, 0, 0, 0, 0, 9, 8, 7, 64],
            "alpha multiplied; fully transparent pixels lose their colour"
        );
        let mut cut = [1; 12];
        cut_out_row::<3, false>(&[255, 0, 1], &[1, 2, 3, 4, 5, 6, 7, 8, 9], &mut cut);
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
