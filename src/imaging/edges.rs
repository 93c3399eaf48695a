//! Edges at full resolution. The model's matte lives on its input grid
//! (IS-Net's 1024 pixels across, MODNet's short side of 512); resized to a
//! 12 MP photo, an edge is a blur several pixels wide that follows that grid,
//! not the photo. A fast guided filter (He and Sun, "Fast Guided Filter",
//! 2015) fits the matte, on the grid, as a linear function of the photo's
//! colour in each small window, and applies the fits to the full-size photo,
//! so the edge follows the photo's own. Only pixels the resized matte leaves
//! partial are recomputed: elsewhere the fit is flat and changes nothing.

use super::planes::{rgb_bytes, Bilinear, BoxWindow};
use image::DynamicImage;
use rayon::prelude::*;

/// Window radius on the grid, and the regularisation that keeps a fit flat
/// where the photo is: both chosen with `make eval`'s U2NetP (whose grid is
/// coarser than the dev photos) and a simulation of 12 MP photos on IS-Net.
const RADIUS: usize = 1;
const EPSILON: f32 = 1e-4;
/// Below this the photo has no detail the grid lacks, and refining only
/// smooths (measured on the dev photos at their own size).
const FINER_BY: f32 = 1.5;

/// The fits that refine a matte the size of the photo, sampled at each of
/// its pixels.
pub struct Edges<'a> {
    fits: Fits<'a>,
    sampler: Bilinear,
}

impl<'a> Edges<'a> {
    /// The fits for a photo of `full` size whose model saw it as `small`,
    /// the size of `small_matte`, the model's own matte; `None` where the
    /// photo is not enough finer than the grid to have detail it lacks.
    pub fn fit(full: (u32, u32), small: &DynamicImage, small_matte: &'a [u8]) -> Option<Edges<'a>> {
        let (w, h) = (small.width() as usize, small.height() as usize);
        let (full_w, full_h) = (full.0 as usize, full.1 as usize);
        debug_assert_eq!(small_matte.len(), w * h);
        if w == 0
            || h == 0
            || (full_w as f32) < FINER_BY * w as f32
            || (full_h as f32) < FINER_BY * h as f32
        {
            return None;
        }
        Some(Edges {
            fits: tiled_fits(small, small_matte, w, h),
            sampler: Bilinear::new((w, h), (full_w, full_h)),
        })
    }

    /// Row `y` of the matte, refined where it is partial; `pixels` is the
    /// photo's row, `step` bytes a pixel, R, G and B first.
    pub fn refine_row(&self, y: usize, matte: &mut [u8], pixels: &[u8], step: usize) {
        for (x, (m, px)) in matte.iter_mut().zip(pixels.chunks_exact(step)).enumerate() {
            if !super::is_partial(*m) {
                continue;
            }
            let [a_r, a_g, a_b, b] = self.sampler.at(x, y).sample_by(|x, y| self.fits.cell(x, y));
            let fitted = a_r * f32::from(px[0]) / 255.0
                + a_g * f32::from(px[1]) / 255.0
                + a_b * f32::from(px[2]) / 255.0
                + b;
            *m = super::unit_to_byte(fitted);
        }
    }
}

const TILE: usize = 32;

/// The fits on the model's grid, `[a_r, a_g, a_b, b]` a cell, kept only in
/// the tiles near a change of the matte. Elsewhere the fit is flat
/// (`a = 0`, `b` the matte), which is what the filter gives there, and no
/// partial pixel samples it. A whole grid of fits was 11 MB of fresh memory
/// a request for a 3:2 photo on IS-Net, written to be read in a few tiles.
struct Fits<'a> {
    width: usize,
    tiles_across: usize,
    /// `TILE`² cells a tile, row by row.
    tiles: Vec<Option<Box<[[f32; 4]]>>>,
    matte: &'a [u8],
}

impl Fits<'_> {
    fn cell(&self, x: usize, y: usize) -> [f32; 4] {
        match &self.tiles[y / TILE * self.tiles_across + x / TILE] {
            Some(tile) => tile[y % TILE * TILE + x % TILE],
            None => [
                0.0,
                0.0,
                0.0,
                f32::from(self.matte[y * self.width + x]) / 255.0,
            ],
        }
    }
}

/// `linear_fits` where they matter: in tiles of the grid near a change of
/// the matte. The tiles read the photo and the matte as bytes: whole planes
/// of floats would be fresh memory, and at 1024² its page faults cost more
/// than the fits.
fn tiled_fits<'a>(small: &DynamicImage, small_matte: &'a [u8], w: usize, h: usize) -> Fits<'a> {
    // A partial full-size pixel samples grid pixels up to 3 from a change
    // (the matte's resize reaches 2, bilinear sampling 1 more).
    const REACH: usize = 3;
    // A fit's value depends on pixels up to 2 radii away (the window's
    // fit, then the mean of fits).
    const NEEDS: usize = 2 * RADIUS;
    let unit = |byte: u8| f32::from(byte) / 255.0;
    let (pixels, step) = rgb_bytes(small);
    let around = |start: usize, margin: usize, n: usize| {
        start.saturating_sub(margin)..(start + TILE + margin).min(n)
    };
    let tiles: Vec<(usize, usize)> = (0..h)
        .step_by(TILE)
        .flat_map(|ty| (0..w).step_by(TILE).map(move |tx| (tx, ty)))
        .collect();
    // Each tile's fit reads only the photo and the matte: the tiles are
    // fitted on every core.
    let tiles = tiles
        .into_par_iter()
        .map(|(tx, ty)| {
            let (xs, ys) = (around(tx, REACH, w), around(ty, REACH, h));
            let first = small_matte[ys.start * w + xs.start];
            let rows = |y: usize| &small_matte[y * w + xs.start..y * w + xs.end];
            if ys.clone().all(|y| rows(y).iter().all(|&m| m == first)) {
                return None;
            }
            let (xs, ys) = (around(tx, NEEDS, w), around(ty, NEEDS, h));
            let crop = |bytes: &[u8], step: usize, offset: usize| -> Vec<f32> {
                ys.clone()
                    .flat_map(|y| xs.clone().map(move |x| (y * w + x) * step + offset))
                    .map(|at| unit(bytes[at]))
                    .collect()
            };
            let colour = std::array::from_fn(|c| crop(&pixels, step, c));
            let (fit_a, fit_b) = linear_fits(&colour, crop(small_matte, 1, 0), xs.len(), ys.len());
            let mut tile = vec![[0.0; 4]; TILE * TILE].into_boxed_slice();
            for y in ty..(ty + TILE).min(h) {
                for x in tx..(tx + TILE).min(w) {
                    let from = (y - ys.start) * xs.len() + x - xs.start;
                    tile[(y - ty) * TILE + x - tx] =
                        [fit_a[0][from], fit_a[1][from], fit_a[2][from], fit_b[from]];
                }
            }
            Some(tile)
        })
        .collect();
    Fits {
        width: w,
        tiles_across: w.div_ceil(TILE),
        tiles,
        matte: small_matte,
    }
}

/// The guided filter's per-window fit `matte ≈ a · colour + b`, averaged
/// over the windows that cover each grid pixel.
fn linear_fits(
    colour: &[Vec<f32>; 3],
    matte: Vec<f32>,
    w: usize,
    h: usize,
) -> ([Vec<f32>; 3], Vec<f32>) {
    let window = BoxWindow { w, h, r: RADIUS };
    let mean_matte = window.mean(matte.clone());
    let mean: [Vec<f32>; 3] = std::array::from_fn(|c| window.mean(colour[c].clone()));
    let covariance = |x: &[f32], y: &[f32], mean_x: &[f32], mean_y: &[f32]| -> Vec<f32> {
        let product = window.mean_of_product(x, y);
        product
            .iter()
            .zip(mean_x.iter().zip(mean_y))
            .map(|(p, (mx, my))| p - mx * my)
            .collect()
    };
    let with_matte: [Vec<f32>; 3] =
        std::array::from_fn(|c| covariance(&colour[c], &matte, &mean[c], &mean_matte));
    let pairs = [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)];
    let between: Vec<Vec<f32>> = pairs
        .iter()
        .map(|&(c, d)| covariance(&colour[c], &colour[d], &mean[c], &mean[d]))
        .collect();

    let mut a: [Vec<f32>; 3] = std::array::from_fn(|_| vec![0.0; w * h]);
    let mut b = vec![0.0; w * h];
    for i in 0..w * h {
        let [xx, xy, xz, yy, yz, zz] = std::array::from_fn(|k| between[k][i]);
        let sigma = [
            [xx + EPSILON, xy, xz],
            [xy, yy + EPSILON, yz],
            [xz, yz, zz + EPSILON],
        ];
        let fit = solve_symmetric(
            sigma,
            [with_matte[0][i], with_matte[1][i], with_matte[2][i]],
        );
        for c in 0..3 {
            a[c][i] = fit[c];
        }
        b[i] = mean_matte[i] - (0..3).map(|c| fit[c] * mean[c][i]).sum::<f32>();
    }
    (a.map(|plane| window.mean(plane)), window.mean(b))
}

/// `m⁻¹ v` by cofactors; `m` is a covariance plus `EPSILON` on the diagonal,
/// so it is positive definite.
fn solve_symmetric(m: [[f32; 3]; 3], v: [f32; 3]) -> [f32; 3] {
    let cofactor = |r: usize, c: usize| {
        let (r0, r1) = ((r + 1) % 3, (r + 2) % 3);
        let (c0, c1) = ((c + 1) % 3, (c + 2) % 3);
        m[r0][c0] * m[r1][c1] - m[r0][c1] * m[r1][c0]
    };
    let det = (0..3).map(|c| m[0][c] * cofactor(0, c)).sum::<f32>();
    // The inverse is the transposed cofactor matrix over the determinant;
    // m is symmetric, so transposing changes nothing.
    std::array::from_fn(|r| (0..3).map(|c| cofactor(r, c) * v[c]).sum::<f32>() / det)
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::{GenericImageView, Rgb, RgbImage};

    /// Red left of `edge`, blue right of it, and the true matte to match.
    fn red_then_blue(w: u32, h: u32, edge: u32) -> (DynamicImage, Vec<u8>) {
        let photo = RgbImage::from_fn(w, h, |x, _| {
            if x < edge {
                Rgb([200, 30, 20])
            } else {
                Rgb([20, 40, 190])
            }
        });
        let matte = (0..w * h)
            .map(|i| if i % w < edge { 255 } else { 0 })
            .collect();
        (DynamicImage::ImageRgb8(photo), matte)
    }

    /// The whole matte refined, a row at a time.
    fn refine_edges(
        matte: &mut [u8],
        photo: &DynamicImage,
        small: &DynamicImage,
        small_matte: &[u8],
    ) {
        let Some(edges) = Edges::fit(photo.dimensions(), small, small_matte) else {
            return;
        };
        let (pixels, step) = rgb_bytes(photo);
        let rows = matte.chunks_exact_mut(photo.width() as usize);
        for (y, (row, px)) in rows
            .zip(pixels.chunks_exact(photo.width() as usize * step))
            .enumerate()
        {
            edges.refine_row(y, row, px, step);
        }
    }

    fn error(a: &[u8], b: &[u8]) -> u64 {
        a.iter()
            .zip(b)
            .map(|(&x, &y)| u64::from(x.abs_diff(y)))
            .sum()
    }

    #[test]
    fn an_edge_between_grid_pixels_follows_the_photo() {
        let (photo, truth) = red_then_blue(400, 40, 203);
        let small = crate::imaging::resize(&photo, 50, 5);
        let small_matte = crate::imaging::resize_gray(&truth, (400, 40), (50, 5));
        let mut matte = crate::imaging::resize_gray(&small_matte, (50, 5), (400, 40));
        let before = error(&matte, &truth);
        refine_edges(&mut matte, &photo, &small, &small_matte);
        let after = error(&matte, &truth);
        assert!(
            before > 1000,
            "the resized matte should blur the edge ({before})"
        );
        assert!(after * 5 < before, "refined {after}, resized {before}");
    }

    #[test]
    fn a_matte_as_fine_as_the_photo_is_left_alone() {
        let (photo, truth) = red_then_blue(60, 10, 31);
        let small = crate::imaging::resize(&photo, 50, 8);
        let small_matte = crate::imaging::resize_gray(&truth, (60, 10), (50, 8));
        let resized = crate::imaging::resize_gray(&small_matte, (50, 8), (60, 10));
        let mut matte = resized.clone();
        refine_edges(&mut matte, &photo, &small, &small_matte);
        assert_eq!(matte, resized);
    }

    #[test]
    fn solving_inverts_the_matrix() {
        let m = [[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]];
        let x = solve_symmetric(m, [1.0, 2.0, 3.0]);
        for r in 0..3 {
            let back: f32 = (0..3).map(|c| m[r][c] * x[c]).sum();
            assert!((back - [1.0, 2.0, 3.0][r]).abs() < 1e-5);
        }
    }
}
