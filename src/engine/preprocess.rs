//! Pure functions between pixels and tensors, tested without a model.

use super::manifest::{InputSpec, Normalise, OutputKind, Scale};
use image::DynamicImage;
use rayon::prelude::*;

/// Longest side a kept-aspect model input may have, in units of its short
/// side: a 10:1 panorama is squashed to 4:1 rather than run at 5120 pixels.
const MAX_ASPECT: u32 = 4;

/// Where an image goes in the model's input: the input's size, and the
/// rectangle the scaled image fills (the rest is padding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputLayout {
    pub input: (u32, u32),
    /// x, y, width, height.
    pub image: (u32, u32, u32, u32),
}

impl InputLayout {
    fn whole(width: u32, height: u32) -> InputLayout {
        InputLayout {
            input: (width, height),
            image: (0, 0, width, height),
        }
    }

    /// The image's size inside the input.
    pub fn image_size(&self) -> (u32, u32) {
        (self.image.2, self.image.3)
    }
}

/// Where an image of `width`×`height` goes in the model's input.
pub fn input_layout(spec: InputSpec, width: u32, height: u32) -> InputLayout {
    match spec {
        InputSpec::Squash { width, height } => InputLayout::whole(width, height),
        InputSpec::Letterbox {
            width: in_w,
            height: in_h,
        } => {
            let scale =
                (f64::from(in_w) / f64::from(width)).min(f64::from(in_h) / f64::from(height));
            let fit =
                |side: u32, bound: u32| ((f64::from(side) * scale).round() as u32).clamp(1, bound);
            let (w, h) = (fit(width, in_w), fit(height, in_h));
            InputLayout {
                input: (in_w, in_h),
                image: ((in_w - w) / 2, (in_h - h) / 2, w, h),
            }
        }
        InputSpec::Aspect {
            short_side,
            multiple,
        } => {
            // MODNet's own rule: an image whose sides straddle `short_side`
            // runs at its own size (never upscaled); any other is scaled so
            // that its short side is `short_side`.
            let (short, long) = (width.min(height), width.max(height));
            let scale = if short <= short_side && long >= short_side {
                1.0
            } else {
                f64::from(short_side) / f64::from(short)
            };
            let floor = |v: f64| ((v as u32) / multiple).max(1) * multiple;
            let short_in = floor(f64::from(short) * scale);
            let long_in = floor(f64::from(long) * scale).min(short_in * MAX_ASPECT);
            if width <= height {
                InputLayout::whole(short_in, long_in)
            } else {
                InputLayout::whole(long_in, short_in)
            }
        }
        InputSpec::Padded {
            long_side,
            multiple,
        } => {
            let scale = f64::from(long_side) / f64::from(width.max(height));
            let fit = |side: u32| ((f64::from(side) * scale).round() as u32).clamp(1, long_side);
            let (w, h) = (fit(width), fit(height));
            let (in_w, in_h) = (w.next_multiple_of(multiple), h.next_multiple_of(multiple));
            InputLayout {
                input: (in_w, in_h),
                image: ((in_w - w) / 2, (in_h - h) / 2, w, h),
            }
        }
    }
}

/// NCHW f32 planes of the model input: `image` (8-bit RGB or RGBA, already
/// at `layout`'s image size; alpha is not the model's business) on mid grey.
pub fn to_tensor(image: &DynamicImage, norm: &Normalise, layout: InputLayout) -> Vec<f32> {
    let channels = usize::from(image.color().channel_count());
    debug_assert!(image.color().bytes_per_pixel() as usize == channels && channels >= 3);
    debug_assert_eq!((image.width(), image.height()), layout.image_size());
    let pixels = image.as_bytes().chunks_exact(channels);
    let divisor = match norm.scale {
        Scale::Fixed255 => 255.0,
        Scale::ImageMax => {
            let max = pixels
                .clone()
                .flat_map(|p| &p[..3])
                .max()
                .copied()
                .unwrap_or(0);
            f32::from(max.max(1))
        }
    };
    let (in_w, in_h) = (layout.input.0 as usize, layout.input.1 as usize);
    let (x0, y0, w, h) = (
        layout.image.0 as usize,
        layout.image.1 as usize,
        layout.image.2 as usize,
        layout.image.3 as usize,
    );
    let plane = in_w * in_h;
    let mut out = vec![0f32; plane * 3];
    let [red, green, blue] = planes_of(&mut out, plane);
    // Row by row on every core, so a pixel's layout needs no division.
    let rows = red
        .par_chunks_exact_mut(in_w)
        .zip(green.par_chunks_exact_mut(in_w))
        .zip(blue.par_chunks_exact_mut(in_w))
        .enumerate();
    rows.for_each(|(y, ((red, green), blue))| {
        let mut row = [red, green, blue];
        for (c, plane_row) in row.iter_mut().enumerate() {
            plane_row.fill((0.5 - norm.mean[c]) / norm.std[c]);
        }
        let Some(src_y) = y.checked_sub(y0).filter(|&src_y| src_y < h) else {
            return;
        };
        let src = &image.as_bytes()[src_y * w * channels..][..w * channels];
        for (x, px) in src.chunks_exact(channels).enumerate() {
            for (c, plane_row) in row.iter_mut().enumerate() {
                plane_row[x0 + x] = (f32::from(px[c]) / divisor - norm.mean[c]) / norm.std[c];
            }
        }
    });
    out
}

/// A CHW tensor's three planes, each `plane` values long.
fn planes_of(tensor: &mut [f32], plane: usize) -> [&mut [f32]; 3] {
    let (red, rest) = tensor.split_at_mut(plane);
    let (green, blue) = rest.split_at_mut(plane);
    [red, green, blue]
}

/// The model's first output as a one-byte-a-pixel matte of the image's
/// part of the input, before levels.
pub fn matte_from_output(values: &[f32], output: OutputKind, layout: InputLayout) -> Vec<u8> {
    let (x0, y0, w, h) = layout.image;
    let row = layout.input.0 as usize;
    let rows = (y0 as usize..(y0 + h) as usize)
        .flat_map(|y| &values[y * row + x0 as usize..y * row + (x0 + w) as usize]);
    let range = output_range(values, output);
    rows.map(|&v| (range.unit(v) * 255.0).round() as u8)
        .collect()
}

/// `matte` with alpha at or below `low` made 0, at or above `high` 1, and
/// stretched linearly between.
pub fn apply_levels(matte: &mut [u8], [low, high]: [f32; 2]) {
    let table: [u8; 256] = std::array::from_fn(|a| {
        let alpha = a as f32 / 255.0;
        (((alpha - low) / (high - low)).clamp(0.0, 1.0) * 255.0).round() as u8
    });
    for a in matte {
        *a = table[usize::from(*a)];
    }
}

/// What the model's raw values map onto alpha 0 and 1.
#[derive(Clone, Copy)]
pub struct OutputRange {
    low: f32,
    span: f32,
}

impl OutputRange {
    /// `v` as alpha in [0, 1].
    pub fn unit(self, v: f32) -> f32 {
        ((v - self.low) / self.span).clamp(0.0, 1.0)
    }
}

/// The output as it is (`Unit`), or stretched so that its minimum is 0 and
/// its maximum 1 (`Minmax`).
pub fn output_range(values: &[f32], kind: OutputKind) -> OutputRange {
    let (low, high) = match kind {
        OutputKind::Unit => (0.0, 1.0),
        OutputKind::Minmax => values
            .iter()
            .fold((f32::MAX, f32::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v))),
    };
    let span = if high > low { high - low } else { 1.0 };
    OutputRange { low, span }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aspect_inputs_scale_the_short_side_unless_the_image_straddles_it() {
        let spec = InputSpec::Aspect {
            short_side: 512,
            multiple: 32,
        };
        let size = |w, h| input_layout(spec, w, h).input;
        assert_eq!(size(4000, 3000), (672, 512));
        assert_eq!(size(3000, 4000), (512, 672));
        assert_eq!(size(100, 100), (512, 512));
        assert_eq!(
            size(10_000, 100),
            (384, 96),
            "at its own height, 4:1 at most"
        );
        assert_eq!(size(640, 480), (640, 480), "never upscaled");
        assert_eq!(size(800, 497), (800, 480));
        assert_eq!(size(300, 200), (768, 512), "too small: scaled up");
        assert_eq!(
            input_layout(spec, 800, 497).image,
            (0, 0, 800, 480),
            "the image fills the input"
        );
    }

    #[test]
    fn fixed_inputs_squash_or_letterbox() {
        let squash = InputSpec::Squash {
            width: 1024,
            height: 1024,
        };
        assert_eq!(input_layout(squash, 4000, 3000).image, (0, 0, 1024, 1024));
        let letterbox = InputSpec::Letterbox {
            width: 1024,
            height: 1024,
        };
        assert_eq!(
            input_layout(letterbox, 4000, 3000).image,
            (0, 128, 1024, 768)
        );
        assert_eq!(input_layout(letterbox, 480, 640).image, (128, 0, 768, 1024));
        assert_eq!(
            input_layout(letterbox, 1024, 1024).image,
            (0, 0, 1024, 1024)
        );
        assert_eq!(
            input_layout(letterbox, 20_000, 1).image,
            (0, 511, 1024, 1),
            "never an empty image"
        );
    }

    #[test]
    fn padded_inputs_fit_the_long_side_and_pad_to_the_next_multiple() {
        let padded = InputSpec::Padded {
            long_side: 1024,
            multiple: 256,
        };
        let at = |w, h| input_layout(padded, w, h);
        // 4:3 fills its input; 3:2 (683 rows) is centred in 768.
        assert_eq!(at(4000, 3000).input, (1024, 768));
        assert_eq!(at(4000, 3000).image, (0, 0, 1024, 768));
        assert_eq!(
            at(481, 321).input,
            (1024, 768),
            "small photos are scaled up"
        );
        assert_eq!(at(481, 321).image, (0, 42, 1024, 683));
        assert_eq!(at(321, 481).image, (42, 0, 683, 1024));
        assert_eq!(at(1024, 1024).image, (0, 0, 1024, 1024));
        assert_eq!(at(20_000, 1).input, (1024, 256), "never an empty image");
        assert_eq!(at(20_000, 1).image, (0, 127, 1024, 1));
    }

    #[test]
    fn tensors_are_planar_normalised_and_padded_with_grey() {
        let rgba = image::RgbaImage::from_raw(2, 1, vec![255, 0, 51, 255, 0, 255, 102, 9]).unwrap();
        let img = DynamicImage::ImageRgba8(rgba);
        let norm = Normalise {
            scale: Scale::Fixed255,
            mean: [0.5; 3],
            std: [0.5; 3],
        };
        let close = |got: Vec<f32>, want: &[f32]| {
            assert!(
                got.len() == want.len() && got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-6),
                "{got:?} vs {want:?}"
            );
        };
        let whole = InputLayout::whole(2, 1);
        close(
            to_tensor(&img, &norm, whole),
            &[1.0, -1.0, -1.0, 1.0, -0.6, -0.2],
        );
        let by_max = Normalise {
            scale: Scale::ImageMax,
            mean: [0.0; 3],
            std: [1.0; 3],
        };
        close(
            to_tensor(&img, &by_max, whole),
            &[1.0, 0.0, 0.0, 1.0, 0.2, 0.4],
        );
        let rgb = DynamicImage::ImageRgb8(img.to_rgb8());
        close(
            to_tensor(&rgb, &by_max, whole),
            &[1.0, 0.0, 0.0, 1.0, 0.2, 0.4],
        );
        let boxed = InputLayout {
            input: (2, 2),
            image: (0, 1, 2, 1),
        };
        close(
            to_tensor(&img, &norm, boxed),
            &[
                0.0, 0.0, 1.0, -1.0, 0.0, 0.0, -1.0, 1.0, 0.0, 0.0, -0.6, -0.2,
            ],
        );
    }

    #[test]
    fn outputs_become_bytes_clamped_stretched_and_cropped() {
        let row = |n| InputLayout::whole(n, 1);
        assert_eq!(
            matte_from_output(&[-0.2, 0.0, 0.5, 1.0, 1.3], OutputKind::Unit, row(5)),
            [0, 0, 128, 255, 255]
        );
        assert_eq!(
            matte_from_output(&[1.0, 2.0, 3.0], OutputKind::Minmax, row(3)),
            [0, 128, 255]
        );
        assert_eq!(
            matte_from_output(&[0.3, 0.3], OutputKind::Minmax, row(2)),
            [0, 0]
        );
        let boxed = InputLayout {
            input: (3, 2),
            image: (1, 1, 2, 1),
        };
        assert_eq!(
            matte_from_output(&[9.0, 9.0, 9.0, 9.0, 1.0, 3.0], OutputKind::Minmax, boxed),
            [0, 64],
            "the image's part, stretched by the whole output's range"
        );
    }

    #[test]
    fn levels_clear_the_low_fill_the_high_and_stretch_between() {
        let mut matte = [0, 25, 102, 179, 230, 255];
        apply_levels(&mut matte, [0.1, 0.7]);
        assert_eq!(matte, [0, 0, 128, 255, 255, 255]);
    }
}
