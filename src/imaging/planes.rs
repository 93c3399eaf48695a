//! Planes of f32 for the matte's refinements: a photo's colour channels,
//! box means over them, and bilinear sampling of a small plane at the
//! pixels of a larger image.

use image::DynamicImage;
use std::borrow::Cow;

pub type Rgb = [Vec<f32>; 3];

/// The photo's pixels as bytes, R, G and B first, and the bytes a pixel.
pub fn rgb_bytes(image: &DynamicImage) -> (Cow<'_, [u8]>, usize) {
    match image {
        DynamicImage::ImageRgb8(img) => (Cow::Borrowed(img.as_raw()), 3),
        DynamicImage::ImageRgba8(img) => (Cow::Borrowed(img.as_raw()), 4),
        other => (Cow::Owned(other.to_rgb8().into_raw()), 3),
    }
}

/// The photo's R, G and B in 0..=1, a plane each.
pub fn rgb_planes(image: &DynamicImage) -> Rgb {
    let (bytes, step) = rgb_bytes(image);
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
pub struct BoxWindow {
    pub w: usize,
    pub h: usize,
    pub r: usize,
}

impl BoxWindow {
    pub fn mean(&self, mut plane: Vec<f32>) -> Vec<f32> {
        let (w, h, r) = (self.w, self.h, self.r);
        // Sums in f64: the guided filter subtracts products of means from
        // means of products, and f32 sums would drift into that difference.
        let across = reciprocal_counts(w, r);
        let mut prefix = vec![0.0f64; w + 1];
        for row in plane.chunks_exact_mut(w) {
            for (x, &v) in row.iter().enumerate() {
                prefix[x + 1] = prefix[x] + f64::from(v);
            }
            for (x, v) in row.iter_mut().enumerate() {
                *v =
                    ((prefix[(x + r + 1).min(w)] - prefix[x.saturating_sub(r)]) * across[x]) as f32;
            }
        }
        // Down the columns: a running sum of rows.
        let down = reciprocal_counts(h, r);
        let row = |y: usize| &plane[y * w..(y + 1) * w];
        let mut sum = vec![0.0f64; w];
        for y in 0..r.min(h) {
            sum.iter_mut()
                .zip(row(y))
                .for_each(|(s, &v)| *s += f64::from(v));
        }
        let mut out = vec![0.0; w * h];
        for (y, out_row) in out.chunks_exact_mut(w).enumerate() {
            if y + r < h {
                sum.iter_mut()
                    .zip(row(y + r))
                    .for_each(|(s, &v)| *s += f64::from(v));
            }
            if y > r {
                sum.iter_mut()
                    .zip(row(y - r - 1))
                    .for_each(|(s, &v)| *s -= f64::from(v));
            }
            out_row
                .iter_mut()
                .zip(&sum)
                .for_each(|(o, &s)| *o = (s * down[y]) as f32);
        }
        out
    }

    /// The mean of the product of two planes.
    pub fn mean_of_product(&self, a: &[f32], b: &[f32]) -> Vec<f32> {
        self.mean(a.iter().zip(b).map(|(x, y)| x * y).collect())
    }
}

/// 1 / the number of positions of `[i - r, i + r] ∩ [0, n)`, for every i.
fn reciprocal_counts(n: usize, r: usize) -> Vec<f64> {
    (0..n)
        .map(|i| 1.0 / ((i + r).min(n - 1) - i.saturating_sub(r) + 1) as f64)
        .collect()
}

/// Maps a large image's pixel to the small planes' pixel centres. Each
/// column's and row's taps are worked out once: the loops over a 25 MP
/// cut-out only look them up.
pub struct Bilinear {
    width: usize,
    columns: Vec<Taps>,
    rows: Vec<Taps>,
}

#[derive(Clone, Copy)]
struct Taps {
    low: usize,
    high: usize,
    weight: f32,
}

pub struct Sample {
    width: usize,
    /// The two columns and the two rows of the grid it reads.
    columns: [usize; 2],
    rows: [usize; 2],
    weight: [f32; 4],
}

impl Bilinear {
    pub fn new(small: (usize, usize), large: (usize, usize)) -> Bilinear {
        let axis = |n: usize, large: usize| -> Vec<Taps> {
            let scale = n as f32 / large as f32;
            (0..large)
                .map(|v| {
                    let s = ((v as f32 + 0.5) * scale - 0.5).clamp(0.0, (n - 1) as f32);
                    let low = s as usize;
                    Taps {
                        low,
                        high: (low + 1).min(n - 1),
                        weight: s - low as f32,
                    }
                })
                .collect()
        };
        Bilinear {
            width: small.0,
            columns: axis(small.0, large.0),
            rows: axis(small.1, large.1),
        }
    }

    pub fn at(&self, x: usize, y: usize) -> Sample {
        let (c, r) = (self.columns[x], self.rows[y]);
        let (fx, fy) = (c.weight, r.weight);
        Sample {
            width: self.width,
            columns: [c.low, c.high],
            rows: [r.low, r.high],
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
    /// All of a grid's values at once: one sample of several planes reads
    /// four neighbouring cells (`interleave`), not four scattered ones a
    /// plane.
    pub fn sample<const N: usize>(&self, grid: &[[f32; N]]) -> [f32; N] {
        self.sample_by(|x, y| grid[y * self.width + x])
    }

    /// `sample` of a grid whose cell at column `x`, row `y` is `cell(x, y)`.
    pub fn sample_by<const N: usize>(&self, cell: impl Fn(usize, usize) -> [f32; N]) -> [f32; N] {
        let ([left, right], [top, bottom], w) = (self.columns, self.rows, &self.weight);
        let cells = [
            cell(left, top),
            cell(right, top),
            cell(left, bottom),
            cell(right, bottom),
        ];
        std::array::from_fn(|v| {
            cells[0][v] * w[0] + cells[1][v] * w[1] + cells[2][v] * w[2] + cells[3][v] * w[3]
        })
    }
}

/// Planes of one size as one grid of `N` values a cell, for `Sample`.
pub fn interleave<const N: usize>(planes: [&[f32]; N]) -> Vec<[f32; N]> {
    (0..planes[0].len())
        .map(|i| std::array::from_fn(|v| planes[v][i]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn box_means_match_a_direct_sum() {
        for (w, h, r) in [(7, 5, 2), (3, 2, 4), (1, 1, 1)] {
            let plane: Vec<f32> = (0..w * h).map(|i| ((i * 37) % 11) as f32).collect();
            let fast = BoxWindow { w, h, r }.mean(plane.clone());
            for y in 0..h {
                for x in 0..w {
                    let (mut sum, mut n) = (0.0, 0.0);
                    for yy in y.saturating_sub(r)..(y + r + 1).min(h) {
                        for xx in x.saturating_sub(r)..(x + r + 1).min(w) {
                            sum += plane[yy * w + xx];
                            n += 1.0;
                        }
                    }
                    assert!(
                        (fast[y * w + x] - sum / n).abs() < 1e-4,
                        "{w}x{h} r {r} at {x},{y}"
                    );
                }
            }
        }
    }

    #[test]
    fn bilinear_sampling_hits_pixel_centres_and_interpolates_between() {
        let plane = [0.0, 1.0, 2.0, 3.0]; // 2 x 2
        let negated = plane.map(|v: f32| -v);
        let grid = interleave([&plane, &negated]);
        let up = Bilinear::new((2, 2), (4, 4));
        assert_eq!(
            up.at(0, 0).sample(&grid),
            [0.0, 0.0],
            "clamped at the border"
        );
        assert_eq!(up.at(3, 3).sample(&grid), [3.0, -3.0]);
        let [between, negated_between] = up.at(1, 0).sample(&grid);
        assert!((between - 0.25).abs() < 1e-6);
        assert_eq!(negated_between, -between, "each plane sampled on its own");
        let same = Bilinear::new((2, 2), (2, 2));
        assert_eq!(same.at(1, 1).sample(&grid), [3.0, -3.0]);
    }
}
