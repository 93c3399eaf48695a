//! What a cut-out holds at its peak, worked out from its photo's header and
//! its options before a pixel is decoded. The work queue reserves it
//! against the board's memory budget (`WorkQueue`), so that whatever the
//! requests at once ask for, together they stay within the board. Each
//! step's figure is an upper bound of what that step holds beside the idle
//! server; tests/api/memory.rs measures them. /docs has the table.

use crate::domain::Channels;
use crate::imaging::{Finish, Format, Header, Length};

const MIB: u64 = 1 << 20;

/// What a cut-out holds at its peak, and the step where it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Need {
    pub bytes: u64,
    pub at: &'static str,
}

/// The most bytes a cut-out of `photo` to `output` pixels, finished as
/// `finish` asks (the headers of its background and overlay images in
/// `background` and `overlay`), holds at once, where its model runs hold
/// `model_working` (`Pipeline::rung_working`).
pub fn need(
    photo: &Header,
    model_working: u64,
    output: (u32, u32),
    finish: &Finish,
    background: Option<&Header>,
    overlay: Option<&Header>,
) -> Need {
    let source = photo.pixels() * photo.channels();
    let out = u64::from(output.0) * u64::from(output.1);
    let resized = match out == photo.pixels() {
        true => 0,
        false => out * photo.channels(),
    };
    // The photo as the output has it: the original, or its scaled copy
    // (the original's memory goes back once scaled).
    let kept = if resized == 0 { source } else { resized };
    // Scaling the photo (to the model's input, or to the size asked) holds
    // each core's band of it beside it (`imaging::resize`).
    let scaling = if photo.alpha { source / 2 } else { source / 4 };
    let mut steps = vec![
        ("decoding the photo", photo.decoding),
        ("running the model", source + scaling + model_working),
    ];
    if resized > 0 {
        steps.push((
            "scaling the photo to the size asked",
            source + scaling + resized,
        ));
    }
    if finish.is_plain() {
        let samples = match finish.channels {
            Channels::Rgba => 4,
            Channels::Alpha => 1,
        };
        steps.push(("writing the PNG", kept + png(out * samples, output.1)));
    } else {
        steps.extend(finishing(out, output, finish, [background, overlay], kept));
    }
    let (at, bytes) = steps
        .into_iter()
        .max_by_key(|&(_, bytes)| bytes)
        .expect("steps");
    Need { bytes, at }
}

/// The steps of `imaging::finish` on a cut-out of `out` pixels (`size`),
/// made beside the photo (`kept` bytes) as an RGBA image, each with what
/// it holds then.
fn finishing(
    out: u64,
    size: (u32, u32),
    finish: &Finish,
    [background, overlay]: [Option<&Header>; 2],
    kept: u64,
) -> Vec<(&'static str, u64)> {
    let cut = out * 4;
    let mut steps = vec![("cutting out", kept + cut)];
    if finish.fill_enclosed {
        // One byte a pixel: how the walk reached it.
        steps.push(("filling what the subject encloses", cut + out));
    }
    if finish.shadow.is_some() {
        // The shadow's shape, and the blur's two planes.
        steps.push(("casting the shadow", cut + 3 * out));
    }
    // From the crop on, the canvas may be larger than the cut-out.
    let canvas = match &finish.crop {
        Some(margins) => {
            let side = |a: Length, b: Length, whole: u32| {
                let margin = |m: Length| match m {
                    Length::Px(px) => px.max(0.0) as u64,
                    Length::Percent(p) => {
                        (p.max(0.0) as f64 / 100.0 * f64::from(whole)).ceil() as u64
                    }
                };
                u64::from(whole) + margin(a) + margin(b)
            };
            let crop = side(margins.left, margins.right, size.0)
                * side(margins.top, margins.bottom, size.1);
            steps.push(("cropping", cut + crop * 4));
            crop
        }
        None => out,
    };
    let canvas_bytes = canvas * 4;
    if finish.placement.is_some() {
        // The subject alone, then scaled, then on a new canvas.
        steps.push(("placing the subject", canvas_bytes * 3));
    }
    if finish.channels == Channels::Rgba {
        // Each one's part that shows, scaled (in RGB, then RGBA) to the canvas.
        let layer = |image: &Header| {
            canvas_bytes
                + image
                    .decoding
                    .max(image.pixels() * image.channels() + canvas * 7)
        };
        if let Some(background) = background {
            steps.push(("putting the background behind", layer(background)));
        }
        if let Some(overlay) = overlay {
            steps.push(("putting the overlay over", layer(overlay)));
        }
    }
    steps.push((
        "encoding the result",
        canvas_bytes + encoding(canvas, finish),
    ));
    steps
}

/// What writing `pixels` of RGBA (or their alpha alone) as `finish` asks
/// holds beside them.
fn encoding(pixels: u64, finish: &Finish) -> u64 {
    let (rgb, grey) = (pixels * 3, pixels);
    match (finish.channels, finish.format) {
        // The PNG of RGBA, or of RGB where opaque, deflated from it.
        (Channels::Rgba, Format::Png | Format::Auto) => png(pixels * 4, 0),
        // RGB, then a JPEG no larger than it.
        (Channels::Rgba, Format::Jpg) => rgb + rgb,
        // RGB, the encoder's RGBA copy, its stream and the file.
        (Channels::Rgba, Format::Webp) => rgb + pixels * 4 + 2 * pixels * 4,
        // RGB, the matte, their JPEG and PNG, and the ZIP of both.
        (Channels::Rgba, Format::Zip) => rgb + grey + 2 * (rgb + png(grey, 0)),
        (Channels::Alpha, Format::Webp) => grey + pixels * 4 + 2 * pixels * 4,
        (Channels::Alpha, _) => grey + png(grey, 0),
    }
}

/// A PNG of `raw` bytes in `rows` rows, at most: fdeflate's fixed codes
/// take up to 9 bits a byte, and each row has its filter byte.
fn png(raw: u64, rows: u32) -> u64 {
    raw + raw / 8 + u64::from(rows) + MIB
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::imaging::{Background, Shadow, ShadowKind};

    /// U2NetP's on tract.
    const MODEL_WORKING: u64 = 70 * MIB;

    fn photo(width: u32, height: u32, alpha: bool, decoding: u64) -> Header {
        Header {
            width,
            height,
            alpha,
            decoding,
        }
    }

    #[test]
    fn a_plain_cut_out_peaks_where_its_largest_step_is() {
        // A 12 MP JPEG cut out at its size: the photo beside the model's
        // working memory, more than its PNG.
        let jpeg = photo(4000, 3000, false, 36_000_000 + 4 * MIB);
        let need = need(
            &jpeg,
            MODEL_WORKING,
            (4000, 3000),
            &Finish::default(),
            None,
            None,
        );
        assert_eq!(
            need,
            Need {
                bytes: 36_000_000 + 9_000_000 + MODEL_WORKING,
                at: "running the model"
            }
        );
        // 25 MP: the PNG of its cut-out, 100 MB of RGBA and an eighth more
        // at most, beside the photo.
        let large = photo(5000, 5000, false, 75_000_000 + 4 * MIB);
        let need = super::need(
            &large,
            MODEL_WORKING,
            (5000, 5000),
            &Finish::default(),
            None,
            None,
        );
        assert_eq!(need.at, "writing the PNG");
        assert_eq!(need.bytes, 75_000_000 + 112_500_000 + 5000 + MIB);
        // A progressive 50 MP JPEG: its coefficients.
        let progressive = photo(10_000, 5_000, false, 450_000_000);
        let need = super::need(
            &progressive,
            MODEL_WORKING,
            (7071, 3535),
            &Finish::default(),
            None,
            None,
        );
        assert_eq!(need.at, "decoding the photo");
    }

    #[test]
    fn each_option_adds_what_its_step_holds() {
        let jpeg = photo(5000, 5000, false, 75_000_000);
        let whole = Length::Percent(100.0);
        let roi = Finish {
            roi: Some(crate::imaging::Roi {
                left: Length::Px(0.0),
                top: Length::Px(0.0),
                right: whole,
                bottom: whole,
            }),
            ..Finish::default()
        };
        let finished = need(&jpeg, MODEL_WORKING, (5000, 5000), &roi, None, None);
        assert_eq!(finished.at, "encoding the result");
        // The fill's plane is a byte a pixel, under what encoding holds.
        let fill = Finish {
            fill_enclosed: true,
            ..roi.clone()
        };
        assert_eq!(
            need(&jpeg, MODEL_WORKING, (5000, 5000), &fill, None, None),
            finished
        );
        let shadow = Finish {
            shadow: Some(Shadow {
                kind: ShadowKind::Drop,
                opacity: 0.5,
            }),
            ..roi.clone()
        };
        assert_eq!(
            need(&jpeg, MODEL_WORKING, (5000, 5000), &shadow, None, None),
            finished
        );
        // A crop with margins of half the subject each side: a canvas of
        // four times the pixels.
        let half = Length::Percent(50.0);
        let crop = Finish {
            crop: Some(crate::imaging::Margins {
                top: half,
                right: half,
                bottom: half,
                left: half,
            }),
            ..roi.clone()
        };
        let cropped = need(&jpeg, MODEL_WORKING, (5000, 5000), &crop, None, None);
        assert_eq!(cropped.at, "encoding the result");
        assert!(cropped.bytes > 3 * finished.bytes, "{cropped:?}");
        // A background as large as the result costs its decoding besides.
        let with_background = Finish {
            background: Some(Background::Image(Vec::new())),
            ..Finish::default()
        };
        let background = photo(5000, 5000, false, 80_000_000);
        let behind = need(
            &jpeg,
            MODEL_WORKING,
            (5000, 5000),
            &with_background,
            Some(&background),
            None,
        );
        assert_eq!(behind.at, "putting the background behind");
        // A backdrop's overlay, larger still, is decoded once the background is gone.
        let overlay = photo(6000, 6000, true, 150_000_000);
        let framed = need(
            &jpeg,
            MODEL_WORKING,
            (5000, 5000),
            &with_background,
            Some(&background),
            Some(&overlay),
        );
        assert_eq!(framed.at, "putting the overlay over");
        assert!(framed.bytes > behind.bytes, "{framed:?} {behind:?}");
    }
}
