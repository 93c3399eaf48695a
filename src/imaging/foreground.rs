//! Foreground colour where the matte is partial. A pixel of a hair strand is
//! part strand, part old background; kept as it was, every strand carries a
//! fringe of the old background onto the new one. Blur-fusion (Forte and
//! Pitié, "Approximate Fast Foreground Colour Estimation", ICIP 2021) takes
//! the local foreground and background colours from alpha-weighted box
//! means, twice (a wide window, then a narrow one), and solves each pixel's
//! compositing equation `I = αF + (1 - α)B` for F.
//!
//! The means are smooth, so they are computed on a small copy of the photo
//! and the model's matte (`MEANS_PIXELS`) and sampled bilinearly; only the
//! partial pixels of the full-size cut-out are solved, at full size.

use super::planes::{interleave, rgb_planes, Bilinear, BoxWindow, Rgb};
use image::DynamicImage;

/// The paper's window radii, for a photo about 1000 pixels across; they
/// scale with the small copy's longer side.
const WIDE_RADIUS: usize = 90;
const NARROW_RADIUS: usize = 6;
const RADII_FOR: usize = 1000;
/// The small copy's size. `make eval`'s colour error on partial pixels:
/// 0.0877 at 16,384 pixels, 0.0875 at 65,536 (four times the time: 7 of
/// a 0.3 MP photo's 160 ms), the same at 262,144 (BENCHMARKS.md, "Foreground colour").
const MEANS_PIXELS: u64 = 1 << 14;

/// The local foreground and background colours, on a small copy, that
/// recolour a cut-out's partial pixels.
pub struct Colours {
    /// `[F_r, F_g, F_b, B_r, B_g, B_b]` a cell.
    means: Vec<[f32; 6]>,
    sampler: Bilinear,
}

impl Colours {
    /// The means for a cut-out of `cut` size; `small` is the photo at the
    /// size of `small_matte` (one byte a pixel), both covering the whole
    /// photo. `None` where there is no matte.
    pub fn estimate(cut: (u32, u32), small: &DynamicImage, small_matte: &[u8]) -> Option<Colours> {
        debug_assert_eq!(small_matte.len(), (small.width() * small.height()) as usize);
        if small_matte.is_empty() {
            return None;
        }
        let (w, h) = super::fit_within(small.width(), small.height(), MEANS_PIXELS);
        let colour = rgb_planes(&super::resize(small, w, h));
        let small_matte = super::resize_gray(small_matte, (small.width(), small.height()), (w, h));
        let (w, h) = (w as usize, h as usize);
        let alpha: Vec<f32> = small_matte.iter().map(|&a| f32::from(a) / 255.0).collect();
        let scale = |r: usize| (r * w.max(h) / RADII_FOR).max(1);

        let wide = BoxWindow {
            w,
            h,
            r: scale(WIDE_RADIUS),
        };
        let (foreground, background) = blur_fusion_step(&wide, &alpha, &colour, &colour, &colour);
        let narrow = BoxWindow {
            w,
            h,
            r: scale(NARROW_RADIUS),
        };
        let (foreground, background) = means(&narrow, &alpha, &foreground, &background);

        let [f_r, f_g, f_b] = &foreground;
        let [b_r, b_g, b_b] = &background;
        Some(Colours {
            means: interleave([f_r, f_g, f_b, b_r, b_g, b_b]),
            sampler: Bilinear::new((w, h), (cut.0 as usize, cut.1 as usize)),
        })
    }

    /// Replaces the colour of every partially transparent pixel of row `y`
    /// of the cut-out (RGBA) with its estimated foreground colour.
    pub fn recolour_row(&self, y: usize, row: &mut [u8]) {
        for (x, px) in row.chunks_exact_mut(4).enumerate() {
            if !super::is_partial(px[3]) {
                continue;
            }
            let sampled = self.sampler.at(x, y).sample(&self.means);
            let a = f32::from(px[3]) / 255.0;
            for c in 0..3 {
                let (f, b) = (sampled[c], sampled[3 + c]);
                let observed = f32::from(px[c]) / 255.0;
                px[c] = super::unit_to_byte(solve_foreground(observed, a, f, b));
            }
        }
    }
}

/// One blur-fusion step: the local foreground and background colours
/// (`means`), and F solved from them at every pixel of the small copy.
fn blur_fusion_step(
    window: &BoxWindow,
    alpha: &[f32],
    image: &Rgb,
    foreground: &Rgb,
    background: &Rgb,
) -> (Rgb, Rgb) {
    let (mean_f, mean_b) = means(window, alpha, foreground, background);
    let solved = std::array::from_fn(|c| {
        let pixels = image[c]
            .iter()
            .zip(alpha)
            .zip(mean_f[c].iter().zip(&mean_b[c]));
        pixels
            .map(|((&i, &a), (&f, &b))| solve_foreground(i, a, f, b))
            .collect()
    });
    (solved, mean_b)
}

/// The alpha-weighted mean of `foreground` and the (1 - alpha)-weighted
/// mean of `background` around each pixel.
fn means(window: &BoxWindow, alpha: &[f32], foreground: &Rgb, background: &Rgb) -> (Rgb, Rgb) {
    // Eight box means of a small plane, four a side: a side a core.
    let transparency: Vec<f32> = alpha.iter().map(|a| 1.0 - a).collect();
    rayon::join(
        || weighted_mean(window, foreground, alpha),
        || weighted_mean(window, background, &transparency),
    )
}

fn weighted_mean(window: &BoxWindow, colour: &Rgb, weight: &[f32]) -> Rgb {
    const EPSILON: f32 = 1e-5;
    let mean_weight = window.mean(weight.to_vec());
    std::array::from_fn(|c| {
        let sum = window.mean_of_product(&colour[c], weight);
        sum.iter()
            .zip(&mean_weight)
            .map(|(&s, &m)| s / (m + EPSILON))
            .collect()
    })
}

/// F from `observed = αF + (1 - α)B`, given estimates of F and B, as
/// blur-fusion solves it (clamped to 0..=1).
fn solve_foreground(observed: f32, alpha: f32, foreground: f32, background: f32) -> f32 {
    let residual = observed - alpha * foreground - (1.0 - alpha) * background;
    (foreground + alpha * residual).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::{Rgb, RgbImage, Rgba, RgbaImage};

    /// Every row of `cut` recoloured.
    fn recolour_partial_pixels(cut: &mut RgbaImage, small: &DynamicImage, small_matte: &[u8]) {
        let Some(colours) = Colours::estimate(cut.dimensions(), small, small_matte) else {
            return;
        };
        let width = cut.width() as usize;
        for (y, row) in cut.chunks_exact_mut(width * 4).enumerate() {
            colours.recolour_row(y, row);
        }
    }

    /// Red subject on the left, blue background on the right, and between
    /// them a thin band where alpha ramps down and the photo mixes the two.
    fn red_on_blue(w: u32, h: u32) -> (DynamicImage, Vec<u8>) {
        let alpha = |x: u32| {
            let t = (x as f32 - w as f32 * 0.5) / (w as f32 * 0.03);
            (1.0 - t).clamp(0.0, 1.0)
        };
        let photo = RgbImage::from_fn(w, h, |x, _| {
            let a = alpha(x);
            Rgb([(a * 220.0) as u8, 0, ((1.0 - a) * 200.0) as u8])
        });
        let matte = (0..w * h)
            .map(|i| (alpha(i % w) * 255.0).round() as u8)
            .collect();
        (DynamicImage::ImageRgb8(photo), matte)
    }

    #[test]
    fn partial_pixels_lose_the_old_background() {
        let (photo, matte) = red_on_blue(800, 40);
        let rgb = photo.as_rgb8().unwrap().as_raw();
        let mut cut = RgbaImage::new(800, 40);
        super::super::cut_out_row::<3, false>(&matte, rgb, &mut cut);
        let before = cut.clone();
        let small = crate::imaging::resize(&photo, 400, 20);
        let small_matte = crate::imaging::resize_gray(&matte, (800, 40), (400, 20));
        recolour_partial_pixels(&mut cut, &small, &small_matte);

        let mut partial = 0;
        for (now, was) in cut.pixels().zip(before.pixels()) {
            match was[3] {
                0 | 255 => assert_eq!(now, was, "opaque and transparent pixels are kept"),
                _ => {
                    partial += 1;
                    assert!(
                        now[2] < 40,
                        "blue of the old background left in {now:?} (was {was:?})"
                    );
                    assert!(
                        now[0] > 150,
                        "red subject not recovered in {now:?} (was {was:?})"
                    );
                }
            }
        }
        assert!(
            partial > 500,
            "the test needs partial pixels, it had {partial}"
        );
    }

    #[test]
    fn degenerate_sizes_do_not_panic() {
        for (w, h) in [(1, 1), (1, 7), (7, 1), (2, 2)] {
            let photo = DynamicImage::ImageRgb8(RgbImage::from_pixel(w, h, Rgb([9, 9, 9])));
            let matte = vec![128u8; (w * h) as usize];
            let mut cut = RgbaImage::from_pixel(w * 3, h * 3, Rgba([9, 9, 9, 128]));
            recolour_partial_pixels(&mut cut, &photo, &matte);
            assert!(cut.pixels().all(|p| p[3] == 128));
        }
    }
}
