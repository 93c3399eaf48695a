//! Pure functions between pixels and tensors, tested without a model.

use super::manifest::{InputSpec, Normalise, OutputKind, Scale};
use image::DynamicImage;

/// Longest side a kept-aspect model input may have, in units of its short
/// side: a 10:1 panorama is squashed to 4:1 rather than run at 5120 pixels.
const MAX_ASPECT: u32 = 4;

/// The model input's width and height for an image of `width`×`height`.
pub fn input_size(spec: InputSpec, width: u32, height: u32) -> (u32, u32) {
    match spec {
        InputSpec::Squash { width, height } => (width, height),
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
                (short_in, long_in)
            } else {
                (long_in, short_in)
            }
        }
    }
}

/// NCHW f32 planes of an 8-bit RGB or RGBA image already at the model's
/// input size (alpha is not the model's business).
pub fn to_tensor(image: &DynamicImage, norm: &Normalise) -> Vec<f32> {
    let channels = usize::from(image.color().channel_count());
    debug_assert!(image.color().bytes_per_pixel() as usize == channels && channels >= 3);
    let pixels = image.as_bytes().chunks_exact(channels);
    let plane = pixels.len();
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
    let mut out = vec![0f32; plane * 3];
    for (i, px) in pixels.enumerate() {
        for c in 0..3 {
            out[c * plane + i] = (f32::from(px[c]) / divisor - norm.mean[c]) / norm.std[c];
        }
    }
    out
}

/// The model's first output as a one-byte-a-pixel matte.
pub fn matte_from_output(values: &[f32], kind: OutputKind) -> Vec<u8> {
    normalised(values, kind)
        .map(|v| (v * 255.0).round() as u8)
        .collect()
}

/// The model's output as alpha in [0, 1]: clamped, or stretched so that
/// its minimum is 0 and its maximum 1.
pub fn normalised(values: &[f32], kind: OutputKind) -> impl Iterator<Item = f32> + '_ {
    let (lo, hi) = match kind {
        OutputKind::Unit => (0.0, 1.0),
        OutputKind::Minmax => values
            .iter()
            .fold((f32::MAX, f32::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v))),
    };
    let range = if hi > lo { hi - lo } else { 1.0 };
    values
        .iter()
        .map(move |&v| ((v - lo) / range).clamp(0.0, 1.0))
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
        assert_eq!(input_size(spec, 4000, 3000), (672, 512));
        assert_eq!(input_size(spec, 3000, 4000), (512, 672));
        assert_eq!(input_size(spec, 100, 100), (512, 512));
        assert_eq!(
            input_size(spec, 10_000, 100),
            (384, 96),
            "at its own height, 4:1 at most"
        );
        assert_eq!(input_size(spec, 640, 480), (640, 480), "never upscaled");
        assert_eq!(input_size(spec, 800, 497), (800, 480));
        assert_eq!(
            input_size(spec, 300, 200),
            (768, 512),
            "too small: scaled up"
        );
        let fixed = InputSpec::Squash {
            width: 1024,
            height: 1024,
        };
        assert_eq!(input_size(fixed, 4000, 3000), (1024, 1024));
    }

    #[test]
    fn tensors_are_planar_and_normalised() {
        let rgba = image::RgbaImage::from_raw(2, 1, vec![255, 0, 51, 255, 0, 255, 102, 9]).unwrap();
        let img = DynamicImage::ImageRgba8(rgba);
        let norm = Normalise {
            scale: Scale::Fixed255,
            mean: [0.5; 3],
            std: [0.5; 3],
        };
        let close = |got: Vec<f32>, want: [f32; 6]| {
            assert!(
                got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-6),
                "{got:?} vs {want:?}"
            );
        };
        close(to_tensor(&img, &norm), [1.0, -1.0, -1.0, 1.0, -0.6, -0.2]);
        let by_max = Normalise {
            scale: Scale::ImageMax,
            mean: [0.0; 3],
            std: [1.0; 3],
        };
        close(to_tensor(&img, &by_max), [1.0, 0.0, 0.0, 1.0, 0.2, 0.4]);
        let rgb = DynamicImage::ImageRgb8(img.to_rgb8());
        close(to_tensor(&rgb, &by_max), [1.0, 0.0, 0.0, 1.0, 0.2, 0.4]);
    }

    #[test]
    fn outputs_become_bytes_clamped_or_stretched() {
        assert_eq!(
            matte_from_output(&[-0.2, 0.0, 0.5, 1.0, 1.3], OutputKind::Unit),
            [0, 0, 128, 255, 255]
        );
        assert_eq!(
            matte_from_output(&[1.0, 2.0, 3.0], OutputKind::Minmax),
            [0, 128, 255]
        );
        assert_eq!(matte_from_output(&[0.3, 0.3], OutputKind::Minmax), [0, 0]);
    }
}
