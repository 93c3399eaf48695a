//! How big the returned image is, from the input's size and the `size` field.

use crate::domain::SizeMode;
use crate::error::MAX_PIXELS_OUTPUT;

const MAX_PIXELS_PREVIEW: u64 = 250_000;
const MAX_PIXELS_MEDIUM: u64 = 1_500_000;
const MAX_PIXELS_HD: u64 = 4_000_000;

#[derive(Debug, PartialEq, Eq)]
pub enum GeometryError {
    /// `size=full` on an input above 25 MP.
    ResolutionTooHigh,
}

/// The output's width and height for an input of `width`×`height`.
pub fn output_size(width: u32, height: u32, mode: SizeMode) -> Result<(u32, u32), GeometryError> {
    match mode {
        SizeMode::Preview => Ok(fit_within(width, height, MAX_PIXELS_PREVIEW)),
        SizeMode::Medium => Ok(fit_within(width, height, MAX_PIXELS_MEDIUM)),
        SizeMode::Hd => Ok(fit_within(width, height, MAX_PIXELS_HD)),
        SizeMode::Auto => Ok(fit_within(width, height, MAX_PIXELS_OUTPUT)),
        SizeMode::Full if u64::from(width) * u64::from(height) > MAX_PIXELS_OUTPUT => {
            Err(GeometryError::ResolutionTooHigh)
        }
        SizeMode::Full => Ok((width, height)),
    }
}

/// The largest size with the same aspect that has at most `max_pixels`
/// pixels; never larger than the input, never zero.
pub fn fit_within(width: u32, height: u32, max_pixels: u64) -> (u32, u32) {
    let pixels = u64::from(width) * u64::from(height);
    if pixels <= max_pixels {
        return (width, height);
    }
    let scale = (max_pixels as f64 / pixels as f64).sqrt();
    let mut w = ((f64::from(width) * scale).floor() as u32).clamp(1, width);
    let mut h = ((f64::from(height) * scale).floor() as u32).clamp(1, height);
    // Floating point can land one pixel over; step the longer side down.
    while u64::from(w) * u64::from(h) > max_pixels {
        if w >= h && w > 1 {
            w -= 1;
        } else {
            h -= 1;
        }
    }
    (w, h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn full_refuses_above_25_megapixels_and_auto_scales_down() {
        assert_eq!(output_size(5000, 5000, SizeMode::Full), Ok((5000, 5000)));
        assert_eq!(
            output_size(5001, 5000, SizeMode::Full),
            Err(GeometryError::ResolutionTooHigh)
        );
        let (w, h) = output_size(8000, 6000, SizeMode::Auto).unwrap();
        assert!(u64::from(w) * u64::from(h) <= 25_000_000);
        assert_eq!((w, h), (5773, 4330));
    }

    #[test]
    fn preview_of_a_small_image_is_not_upscaled() {
        assert_eq!(output_size(300, 200, SizeMode::Preview), Ok((300, 200)));
        assert_eq!(output_size(1000, 500, SizeMode::Preview), Ok((707, 353)));
    }

    proptest! {
        #[test]
        fn fitting_keeps_aspect_and_bounds(w in 1u32..20_000, h in 1u32..20_000, max in 1u64..30_000_000) {
            let (fw, fh) = fit_within(w, h, max);
            prop_assert!(fw >= 1 && fh >= 1 && fw <= w && fh <= h);
            if u64::from(w) * u64::from(h) <= max {
                prop_assert_eq!((fw, fh), (w, h));
            } else {
                prop_assert!(u64::from(fw) * u64::from(fh) <= max.max(u64::from(fw.max(fh))));
                // Aspect kept: both sides are within two pixels (flooring,
                // then one step down) of one scale of the input. Compared as
                // ratios of the sides instead, a short side's pixel of
                // rounding is more than 1% of it (84 px wide of 136).
                if fw > 1 && fh > 1 {
                    let scales = |fitted: u32, side: u32| {
                        (f64::from(fitted) - 2.0) / f64::from(side)..=(f64::from(fitted) + 2.0) / f64::from(side)
                    };
                    let (across, down) = (scales(fw, w), scales(fh, h));
                    prop_assert!(across.start() <= down.end() && down.start() <= across.end());
                }
            }
        }
    }
}
