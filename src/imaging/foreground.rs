//! Foreground colour where the matte is partial. A pixel of a hair strand is
//! part strand, part old background; kept as it was, every strand carries a
//! fringe of the old background onto the new one. Blur-fusion (Forte and
//! Pitié, "Approximate Fast Foreground Colour Estimation", ICIP 2021) takes
//! the local foreground and background colours from alpha-weighted box
//! means, twice (a wide window, then a narrow one), and solves each pixel's
//! compositing equation `I = αF + (1 - α)B` for F.
//!
//! The means are smooth, so they are computed on the small copy of the photo
//! that went into the model, with the model's matte, and sampled bilinearly;
//! only the partial pixels of the full-size cut-out are solved, at full size.

use image::{DynamicImage, RgbaImage};

/// The paper's window radii, for a photo about 1000 pixels across; they
/// scale with the small copy's longer side.
const WIDE_RADIUS: usize = 90;
const NARROW_RADIUS: usize = 6;
const RADII_FOR: usize = 1000;

/// Replaces the colour of every partially transparent pixel of `cut` with
/// its estimated foreground colour. `small` is the photo at the size of
/// `small_matte` (one byte a pixel); both cover the whole photo.
pub fn recolour_partial_pixels(cut: &mut RgbaImage, small: &DynamicImage, small_matte: &[u8]) {
    let (w, h) = (small.width() as usize, small.height() as usize);
    debug_assert_eq!(small_matte.len(), w * h);
    let partial = |px: &[u8]| px[3] != 0 && px[3] != 255;
    if w == 0 || h == 0 || !cut.as_raw().chunks_exact(4).any(partial) {
        return;
    }
    let colour = rgb_planes(small);
    let alpha: Vec<f32> = small_matte.iter().map(|&a| f32::from(a) / 255.0).collect();
    let scale = |r: usize| (r * w.max(h) / RADII_FOR).max(1);

    let wide = Planes {
        w,
        h,
        r: scale(WIDE_RADIUS),
    };
    let (foreground, background) = wide.blur_fusion(&alpha, &colour, &colour, &colour);
    let narrow = Planes {
        w,
        h,
        r: scale(NARROW_RADIUS),
    };
    let (foreground, background) = narrow.means(&alpha, &foreground, &background);

    let (cut_w, cut_h) = (cut.width() as usize, cut.height() as usize);
    let sampler = Bilinear::new((w, h), (cut_w, cut_h));
    for (i, px) in cut.as_mut().chunks_exact_mut(4).enumerate() {
        if !partial(px) {
            continue;
        }
        let at = sampler.at(i % cut_w, i / cut_w);
        let a = f32::from(px[3]) / 255.0;
        for c in 0..3 {
            let (f, b) = (at.sample(&foreground[c]), at.sample(&background[c]));
            let observed = f32::from(px[c]) / 255.0;
            let solved = f + a * (observed - a * f - (1.0 - a) * b);
            px[c] = (solved.clamp(0.0, 1.0) * 255.0).round() as u8;
        }
    }
}

type Rgb = [Vec<f32>; 3];

fn rgb_planes(image: &DynamicImage) -> Rgb {
    let rgb;
    let (bytes, step) = match image {
        DynamicImage::ImageRgb8(img) => (img.as_raw(), 3),
        DynamicImage::ImageRgba8(img) => (img.as_raw(), 4),
        other => {
            rgb = other.to_rgb8();
            (rgb.as_raw(), 3)
        }
    };
    std::array::from_fn(|c| {
        bytes
            .iter()
            .skip(c)
            .step_by(step)
            .map(|&v| f32::from(v) / 255.0)
            .collect()
    })
}

/// Box means over `(2r + 1)²` windows of `w × h` planes; a window is cut at
/// the border and averages what is left.
struct Planes {
    w: usize,
    h: usize,
    r: usize,
}

impl Planes {
    /// One blur-fusion step: the local foreground and background colours
    /// (`means`), and F solved from them at every pixel of the small copy.
    fn blur_fusion(
        &self,
        alpha: &[f32],
        image: &Rgb,
        foreground: &Rgb,
        background: &Rgb,
    ) -> (Rgb, Rgb) {
        let (mean_f, mean_b) = self.means(alpha, foreground, background);
        let solved = std::array::from_fn(|c| {
            let pixels = image[c]
                .iter()
                .zip(alpha)
                .zip(mean_f[c].iter().zip(&mean_b[c]));
            pixels
                .map(|((&i, &a), (&f, &b))| (f + a * (i - a * f - (1.0 - a) * b)).clamp(0.0, 1.0))
                .collect()
        });
        (solved, mean_b)
    }

    /// The alpha-weighted mean of `foreground` and the (1 - alpha)-weighted
    /// mean of `background` around each pixel.
    fn means(&self, alpha: &[f32], foreground: &Rgb, background: &Rgb) -> (Rgb, Rgb) {
        const EPSILON: f32 = 1e-5;
        let mean_alpha = self.box_mean(alpha.to_vec());
        let weighted = |plane: &[f32], weight: &dyn Fn(f32) -> f32| {
            self.box_mean(
                plane
                    .iter()
                    .zip(alpha)
                    .map(|(&v, &a)| v * weight(a))
                    .collect(),
            )
        };
        let f = std::array::from_fn(|c| {
            let sum = weighted(&foreground[c], &|a| a);
            sum.iter()
                .zip(&mean_alpha)
                .map(|(&s, &m)| s / (m + EPSILON))
                .collect()
        });
        let b = std::array::from_fn(|c| {
            let sum = weighted(&background[c], &|a| 1.0 - a);
            sum.iter()
                .zip(&mean_alpha)
                .map(|(&s, &m)| s / (1.0 - m + EPSILON))
                .collect()
        });
        (f, b)
    }

    fn box_mean(&self, mut plane: Vec<f32>) -> Vec<f32> {
        let (w, h, r) = (self.w, self.h, self.r);
        let mut row_out = vec![0.0; w];
        for row in plane.chunks_exact_mut(w) {
            sliding_mean(row.len(), r, |x| row[x], |x, v| row_out[x] = v);
            row.copy_from_slice(&row_out);
        }
        // Down the columns, all columns at once, a row at a time.
        let mut out = vec![0.0; w * h];
        let mut sum = vec![0.0f32; w];
        let add = |sum: &mut [f32], y: usize, sign: f32| {
            for (s, &v) in sum.iter_mut().zip(&plane[y * w..(y + 1) * w]) {
                *s += sign * v;
            }
        };
        for y in 0..r.min(h) {
            add(&mut sum, y, 1.0);
        }
        for y in 0..h {
            if y + r < h {
                add(&mut sum, y + r, 1.0);
            }
            if y > r {
                add(&mut sum, y - r - 1, -1.0);
            }
            let count = ((y + r).min(h - 1) - y.saturating_sub(r) + 1) as f32;
            for (o, &s) in out[y * w..(y + 1) * w].iter_mut().zip(&sum) {
                *o = s / count;
            }
        }
        out
    }
}

/// Means of `get(x)` over `[x - r, x + r] ∩ [0, n)` for every x, handed to `set`.
fn sliding_mean(n: usize, r: usize, get: impl Fn(usize) -> f32, mut set: impl FnMut(usize, f32)) {
    let mut sum: f32 = (0..r.min(n)).map(&get).sum();
    for x in 0..n {
        if x + r < n {
            sum += get(x + r);
        }
        if x > r {
            sum -= get(x - r - 1);
        }
        let count = ((x + r).min(n - 1) - x.saturating_sub(r) + 1) as f32;
        set(x, sum / count);
    }
}

/// Maps a full-size pixel to the small copy's pixel centres.
struct Bilinear {
    small: (usize, usize),
    scale: (f32, f32),
}

struct Sample {
    index: [usize; 4],
    weight: [f32; 4],
}

impl Bilinear {
    fn new(small: (usize, usize), full: (usize, usize)) -> Bilinear {
        let scale = (
            small.0 as f32 / full.0 as f32,
            small.1 as f32 / full.1 as f32,
        );
        Bilinear { small, scale }
    }

    fn at(&self, x: usize, y: usize) -> Sample {
        let axis = |v: usize, scale: f32, n: usize| {
            let s = ((v as f32 + 0.5) * scale - 0.5).clamp(0.0, (n - 1) as f32);
            let low = s.floor() as usize;
            (low, (low + 1).min(n - 1), s - low as f32)
        };
        let (x0, x1, fx) = axis(x, self.scale.0, self.small.0);
        let (y0, y1, fy) = axis(y, self.scale.1, self.small.1);
        let w = self.small.0;
        Sample {
            index: [y0 * w + x0, y0 * w + x1, y1 * w + x0, y1 * w + x1],
            weight: [
                (1.0 - fx) * (1.0 - fy),
                fx * (1.0 - fy),
                (1.0 - fx) * fy,
                fx * fy,
            ],
        }
    }
}

impl Sample {
    fn sample(&self, plane: &[f32]) -> f32 {
        self.index
            .iter()
            .zip(&self.weight)
            .map(|(&i, &w)| plane[i] * w)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::{Rgb, RgbImage, Rgba};

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

    fn cut_of(photo: &DynamicImage, matte: &[u8]) -> RgbaImage {
        crate::imaging::cut_out(photo, matte)
    }

    #[test]
    fn partial_pixels_lose_the_old_background() {
        let (photo, matte) = red_on_blue(800, 40);
        let mut cut = cut_of(&photo, &matte);
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

    #[test]
    fn box_means_match_a_direct_sum() {
        let (w, h, r) = (7, 5, 2);
        let plane: Vec<f32> = (0..w * h).map(|i| ((i * 37) % 11) as f32).collect();
        let fast = Planes { w, h, r }.box_mean(plane.clone());
        for y in 0..h {
            for x in 0..w {
                let (mut sum, mut n) = (0.0, 0.0);
                for yy in y.saturating_sub(r)..(y + r + 1).min(h) {
                    for xx in x.saturating_sub(r)..(x + r + 1).min(w) {
                        sum += plane[yy * w + xx];
                        n += 1.0;
                    }
                }
                assert!((fast[y * w + x] - sum / n).abs() < 1e-4, "at {x},{y}");
            }
        }
    }
}
