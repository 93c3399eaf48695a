//! remove.bg's output options, from the form's text to `imaging::Finish`.
//! Every value is checked here, before the photo waits its turn: a bad one
//! costs the caller nothing, and its error names the field and what it takes.

use super::form::Form;
use crate::domain::Channels;
use crate::error::{ApiError, OptionField};
use crate::imaging::{
    Background, Finish, Format, Length, Margins, Placement, Position, Roi, Shadow, ShadowKind,
};

/// The most margin a side may have (remove.bg's limits).
const MAX_MARGIN_PX: f32 = 500.0;
const MAX_MARGIN_PERCENT: f32 = 50.0;
/// remove.bg's default `shadow_opacity`.
const DEFAULT_SHADOW_OPACITY: u8 = 50;
/// The smallest `scale`: a tenth of the canvas.
const MIN_SCALE_PERCENT: f32 = 10.0;

/// The form's output options; takes `bg_image_file` out of it.
pub fn parse_finish(form: &mut Form, channels: Channels) -> Result<Finish, ApiError> {
    let format = parse_format(form.format.as_deref())?;
    let crop = parse_crop(form.crop.as_deref(), form.crop_margin.as_deref())?;
    let roi = form.roi.as_deref().map(parse_roi).transpose()?.flatten();
    let placement = parse_placement(form.scale.as_deref(), form.position.as_deref())?;
    let colour = form
        .bg_color
        .as_deref()
        .map(parse_colour)
        .transpose()?
        .flatten();
    // bg_image_url is fetched by `http::api` once every option is known good.
    let url = form.bg_image_url.as_ref().map(|_| OptionField::BgImageUrl);
    let background = match (colour, form.bg_image_file.take(), url) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) | (_, Some(_), Some(_)) => {
            return Err(invalid(
                url.unwrap_or(OptionField::BgColor),
                "send one of bg_color, bg_image_file and bg_image_url",
            ))
        }
        (Some(colour), None, None) => Some(Background::Colour(colour)),
        (None, Some(file), None) => Some(Background::Image(file)),
        (None, None, _) => None,
    };
    if form.backdrop.is_some() {
        let brought = match (&background, url) {
            (Some(Background::Colour(_)), _) => Some("bg_color"),
            (Some(Background::Image(_)), _) => Some("bg_image_file"),
            (None, Some(_)) => Some("bg_image_url"),
            (None, None) => None,
        };
        if let Some(field) = brought {
            return Err(invalid(
                OptionField::Backdrop,
                format!("a backdrop brings its own background: send it without {field}"),
            ));
        }
        if channels == Channels::Alpha {
            return Err(invalid(
                OptionField::Backdrop,
                "channels=alpha asks for the matte alone, which has no colours",
            ));
        }
    }
    if channels == Channels::Alpha {
        let field = match (&background, format) {
            (Some(Background::Colour(_)), _) => Some(OptionField::BgColor),
            (Some(Background::Image(_)), _) => Some(OptionField::BgImageFile),
            (None, Format::Zip) => Some(OptionField::Format),
            (None, _) => url,
        };
        if let Some(field) = field {
            return Err(invalid(
                field,
                "channels=alpha asks for the matte alone, which has no colours",
            ));
        }
    }
    let car = form
        .subject
        .as_deref()
        .is_some_and(|s| s.trim().starts_with("car"));
    let fill_enclosed = parse_semitransparency(form.semitransparency.as_deref(), car)?;
    let shadow = parse_shadow(
        form.add_shadow.as_deref(),
        form.shadow_type.as_deref(),
        form.shadow_opacity.as_deref(),
    )?;
    Ok(Finish {
        channels,
        format,
        roi,
        crop,
        placement,
        background,
        // A backdrop's, read by `http::api` once every option is known good.
        overlay: None,
        backdrop: None,
        shadow,
        fill_enclosed,
    })
}

/// remove.bg's `semitransparency`: `true` (its default), or `false`, which
/// remove.bg applies to car windows alone (it changes nothing for other
/// subjects there, nor here): for the car kinds, what the car encloses is
/// made opaque.
fn parse_semitransparency(value: Option<&str>, car: bool) -> Result<bool, ApiError> {
    match value.map(str::trim) {
        None | Some("true") => Ok(false),
        Some("false") => Ok(car),
        Some(_) => Err(invalid(
            OptionField::Semitransparency,
            "it takes true or false",
        )),
    }
}

/// `add_shadow` with its `shadow_type` and `shadow_opacity`, each checked
/// even where `add_shadow` leaves them unused.
fn parse_shadow(
    add: Option<&str>,
    kind: Option<&str>,
    opacity: Option<&str>,
) -> Result<Option<Shadow>, ApiError> {
    let add = match add.map(str::trim) {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => return Err(invalid(OptionField::AddShadow, "it takes true or false")),
    };
    let kind = match kind.map(str::trim) {
        None | Some("car" | "3D") => ShadowKind::Ground,
        Some("drop") => ShadowKind::Drop,
        Some(_) => return Err(invalid(OptionField::ShadowType, "it takes car, 3D or drop")),
    };
    let opacity = match opacity.map(|o| o.trim().parse::<u8>()) {
        None => DEFAULT_SHADOW_OPACITY,
        Some(Ok(percent @ 0..=100)) => percent,
        Some(_) => {
            return Err(invalid(
                OptionField::ShadowOpacity,
                "it takes a whole number from 0 to 100",
            ))
        }
    };
    Ok(add.then_some(Shadow {
        kind,
        opacity: f32::from(opacity) / 100.0,
    }))
}

fn invalid(field: OptionField, why: impl Into<String>) -> ApiError {
    ApiError::InvalidOption {
        field,
        why: why.into(),
    }
}

fn parse_format(format: Option<&str>) -> Result<Format, ApiError> {
    Ok(match format.map(str::trim) {
        None | Some("png") => Format::Png,
        Some("auto") => Format::Auto,
        Some("jpg" | "jpeg") => Format::Jpg,
        Some("webp") => Format::Webp,
        Some("zip") => Format::Zip,
        Some(_) => {
            return Err(invalid(
                OptionField::Format,
                "it takes auto, png, jpg, webp or zip",
            ))
        }
    })
}

/// `bg_color`: a hex colour with or without `#` (`81d4fa`, `fff`, with
/// alpha `81d4fa80`) or a CSS colour; empty is none.
fn parse_colour(text: &str) -> Result<Option<[u8; 4]>, ApiError> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    let bare_hex =
        matches!(text.len(), 3 | 4 | 6 | 8) && text.bytes().all(|b| b.is_ascii_hexdigit());
    let text = match bare_hex {
        true => format!("#{text}"),
        false => text.to_owned(),
    };
    if let Some(why) = out_of_range(&text) {
        return Err(invalid(OptionField::BgColor, why));
    }
    csscolorparser::parse(&text)
        .map(|colour| Some(colour.to_rgba8()))
        .map_err(|_| {
            invalid(
                OptionField::BgColor,
                "it takes a hex colour (81d4fa, fff, 81d4fa80) or a CSS colour name (green)",
            )
        })
}

/// Why a functional colour (`rgb(…)`, `hsl(…)`) is out of range: the
/// parser clamps what CSS allows past the range, and a value such as
/// `rgb(1e308,0,0)` is more likely a mistake than red. Channels of `rgb`
/// take 0 to 255, percentages 0% to 100%, anything else -360 to 360.
fn out_of_range(text: &str) -> Option<&'static str> {
    let (function, arguments) = text.split_once('(')?;
    let rgb = function.trim().to_ascii_lowercase().starts_with("rgb");
    let arguments = arguments.trim_end().strip_suffix(')').unwrap_or(arguments);
    let numbers = arguments
        .split(|c: char| c == ',' || c == '/' || c.is_whitespace())
        .filter(|part| !part.is_empty());
    for (i, part) in numbers.enumerate() {
        let lower = part.to_ascii_lowercase();
        let (number, percent) = match lower.strip_suffix('%') {
            Some(number) => (number, true),
            None => (
                lower.trim_end_matches(|c: char| c.is_ascii_alphabetic()),
                false,
            ),
        };
        let Ok(value) = number.parse::<f64>() else {
            continue;
        };
        let fits = match (percent, rgb && i < 3) {
            (true, _) => (0.0..=100.0).contains(&value),
            (false, true) => (0.0..=255.0).contains(&value),
            (false, false) => (-360.0..=360.0).contains(&value),
        };
        if !fits {
            return Some(
                "a value of it is out of range: rgb channels take 0 to 255, percentages 0% to 100%",
            );
        }
    }
    None
}

/// `crop` and its `crop_margin`: `None` unless `crop=true`.
fn parse_crop(crop: Option<&str>, margin: Option<&str>) -> Result<Option<Margins>, ApiError> {
    let crop = match crop.map(str::trim) {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => return Err(invalid(OptionField::Crop, "it takes true or false")),
    };
    let margins = margin.map(parse_margins).transpose()?;
    let some_margin = margins.is_some_and(|m| {
        [m.top, m.right, m.bottom, m.left]
            .iter()
            .any(|side| !matches!(side, Length::Px(0.0) | Length::Percent(0.0)))
    });
    if some_margin && !crop {
        return Err(invalid(
            OptionField::CropMargin,
            "a margin goes around a crop: send crop=true with it",
        ));
    }
    let none = Margins {
        top: Length::Px(0.0),
        right: Length::Px(0.0),
        bottom: Length::Px(0.0),
        left: Length::Px(0.0),
    };
    Ok(crop.then(|| margins.unwrap_or(none)))
}

/// 1, 2 (top and bottom, left and right) or 4 (top, right, bottom, left)
/// lengths, CSS's order.
fn parse_margins(text: &str) -> Result<Margins, ApiError> {
    let bad = || {
        invalid(
            OptionField::CropMargin,
            format!(
                "it takes 1, 2 or 4 lengths such as 30px or 10%, each at most {MAX_MARGIN_PX}px or {MAX_MARGIN_PERCENT}%"
            ),
        )
    };
    let sides = text
        .split_whitespace()
        .map(|side| match parse_length(side) {
            Some(Length::Px(n)) if n <= MAX_MARGIN_PX => Ok(Length::Px(n)),
            Some(Length::Percent(p)) if p <= MAX_MARGIN_PERCENT => Ok(Length::Percent(p)),
            _ => Err(bad()),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let [top, right, bottom, left] = match sides[..] {
        [all] => [all; 4],
        [vertical, horizontal] => [vertical, horizontal, vertical, horizontal],
        [top, right, bottom, left] => [top, right, bottom, left],
        _ => return Err(bad()),
    };
    Ok(Margins {
        top,
        right,
        bottom,
        left,
    })
}

/// `x1 y1 x2 y2`; `None` for the whole photo, remove.bg's default.
fn parse_roi(text: &str) -> Result<Option<Roi>, ApiError> {
    let bad = |why: &str| invalid(OptionField::Roi, why);
    let corners = text
        .split_whitespace()
        .map(|corner| match parse_length(corner) {
            Some(Length::Percent(p)) if p > 100.0 => None,
            other => other,
        })
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| {
            bad("each of x1 y1 x2 y2 is a length such as 120px or 30% (at most 100%)")
        })?;
    let [left, top, right, bottom] = corners[..] else {
        return Err(bad("it takes four lengths: x1 y1 x2 y2"));
    };
    let before = |a: Length, b: Length| match (a, b) {
        (Length::Px(a), Length::Px(b)) | (Length::Percent(a), Length::Percent(b)) => a < b,
        _ => true,
    };
    if !before(left, right) || !before(top, bottom) {
        return Err(bad("x1 must be left of x2 and y1 above y2"));
    }
    let whole = [left, top, right, bottom]
        == [
            Length::Percent(0.0),
            Length::Percent(0.0),
            Length::Percent(100.0),
            Length::Percent(100.0),
        ];
    Ok((!whole).then_some(Roi {
        left,
        top,
        right,
        bottom,
    }))
}

/// `scale` and `position`: `None` leaves the subject where and as it is.
/// A scale without a position centres the subject, as remove.bg does.
fn parse_placement(
    scale: Option<&str>,
    position: Option<&str>,
) -> Result<Option<Placement>, ApiError> {
    let scale = match scale.map(str::trim) {
        None | Some("original") => None,
        Some(text) => match parse_length(text) {
            Some(Length::Percent(p)) if (MIN_SCALE_PERCENT..=100.0).contains(&p) => Some(p / 100.0),
            _ => {
                return Err(invalid(
                    OptionField::Scale,
                    format!("it takes original or a percentage from {MIN_SCALE_PERCENT}% to 100%"),
                ))
            }
        },
    };
    let centre = Position::At { x: 0.5, y: 0.5 };
    let position = match position.map(str::trim) {
        None => None,
        Some("original") => Some(Position::Original),
        Some("center") => Some(centre),
        Some(text) => {
            let fraction = |part: &str| match parse_length(part) {
                Some(Length::Percent(p)) if p <= 100.0 => Some(p / 100.0),
                _ => None,
            };
            let parts: Vec<Option<f32>> = text.split_whitespace().map(fraction).collect();
            let at = match parts[..] {
                [Some(both)] => Some(Position::At { x: both, y: both }),
                [Some(x), Some(y)] => Some(Position::At { x, y }),
                _ => None,
            };
            Some(at.ok_or_else(|| {
                invalid(
                    OptionField::Position,
                    "it takes original, center, or one or two percentages from 0% to 100% (horizontal, vertical)",
                )
            })?)
        }
    };
    Ok(match (scale, position) {
        (None, None | Some(Position::Original)) => None,
        (scale, position) => Some(Placement {
            scale,
            position: position.unwrap_or(centre),
        }),
    })
}

/// `120px`, `120` (pixels too) or `30%`: a finite number, not negative.
fn parse_length(text: &str) -> Option<Length> {
    let (number, make): (&str, fn(f32) -> Length) = match text.strip_suffix('%') {
        Some(number) => (number, Length::Percent),
        None => (text.strip_suffix("px").unwrap_or(text), Length::Px),
    };
    let value: f32 = number.parse().ok()?;
    (value.is_finite() && value >= 0.0 && !number.starts_with('+')).then(|| make(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_out_of_range_are_refused_not_clamped() {
        for bad in [
            "rgb(1e308,0,0)",
            "rgb(256 0 0)",
            "rgba(0,0,0,200%)",
            "hsl(1e9,50%,50%)",
            "rgb(-1,0,0)",
        ] {
            assert!(parse_colour(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_colour("rgb(255, 0, 0)").unwrap(),
            Some([255, 0, 0, 255])
        );
        assert!(parse_colour("rgba(0 0 255 / 50%)").is_ok());
        assert!(parse_colour("hsl(120deg, 100%, 25%)").is_ok());
        assert_eq!(parse_colour("green").unwrap(), Some([0, 128, 0, 255]));
    }

    #[test]
    fn lengths_are_pixels_or_percentages_never_negative_or_infinite() {
        assert_eq!(parse_length("30px"), Some(Length::Px(30.0)));
        assert_eq!(parse_length("30"), Some(Length::Px(30.0)));
        assert_eq!(parse_length("12.5%"), Some(Length::Percent(12.5)));
        for bad in ["-1px", "inf", "NaN%", "px", "%", "1e999", "3 px", "+4"] {
            assert_eq!(parse_length(bad), None, "{bad}");
        }
    }

    #[test]
    fn margins_take_one_two_or_four_sides_in_css_order_within_the_limits() {
        let sides = |text| {
            let m = parse_margins(text).unwrap();
            [m.top, m.right, m.bottom, m.left]
        };
        let (px, percent) = (Length::Px, Length::Percent);
        assert_eq!(
            sides("10px 20%"),
            [px(10.0), percent(20.0), px(10.0), percent(20.0)]
        );
        assert_eq!(sides("1 2 3 4"), [px(1.0), px(2.0), px(3.0), px(4.0)]);
        for bad in ["", "1 2 3", "501px", "51%", "1 2 3 4 5"] {
            assert!(parse_margins(bad).is_err(), "{bad:?}");
        }
        assert!(
            parse_crop(None, Some("10px")).is_err(),
            "a margin without a crop"
        );
        assert_eq!(parse_crop(Some("false"), Some("0px")).ok(), Some(None));
    }

    #[test]
    fn colours_are_hex_with_or_without_hash_and_css_names() {
        assert_eq!(
            parse_colour("81d4fa").ok(),
            Some(Some([0x81, 0xd4, 0xfa, 255]))
        );
        assert_eq!(parse_colour("#fff").ok(), Some(Some([255; 4])));
        assert_eq!(parse_colour("00ff0080").ok(), Some(Some([0, 255, 0, 128])));
        assert_eq!(parse_colour("green").ok(), Some(Some([0, 128, 0, 255])));
        assert_eq!(parse_colour("").ok(), Some(None));
        assert!(parse_colour("greenish").is_err());
        assert!(parse_colour("#12345").is_err());
    }

    #[test]
    fn roi_is_four_corners_in_order_and_the_whole_photo_is_none() {
        assert_eq!(parse_roi("0% 0% 100% 100%").ok(), Some(None));
        assert!(parse_roi("10px 20px 30% 40%").unwrap().is_some());
        for bad in ["0 0 10", "10px 0 5px 10px", "0 0 101% 10", "a b c d"] {
            assert!(parse_roi(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_scale_centres_the_subject_unless_a_position_is_given() {
        let centre = Position::At { x: 0.5, y: 0.5 };
        assert_eq!(parse_placement(None, None).ok(), Some(None));
        assert_eq!(
            parse_placement(Some("original"), Some("original")).ok(),
            Some(None)
        );
        let scaled = parse_placement(Some("50%"), None).unwrap().unwrap();
        assert_eq!((scaled.scale, scaled.position), (Some(0.5), centre));
        let moved = parse_placement(None, Some("0% 100%")).unwrap().unwrap();
        assert_eq!(
            (moved.scale, moved.position),
            (None, Position::At { x: 0.0, y: 1.0 })
        );
        for (scale, position) in [
            (Some("9%"), None),
            (Some("101%"), None),
            (Some("50px"), None),
            (None, Some("left")),
            (None, Some("10% 20% 30%")),
        ] {
            assert!(
                parse_placement(scale, position).is_err(),
                "{scale:?} {position:?}"
            );
        }
    }
}
