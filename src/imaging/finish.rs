//! What is done to a cut-out once its matte is made: remove.bg's output
//! options. In order: the region of interest, the crop to the subject with
//! its margins, the subject scaled and placed on the canvas, a background
//! behind it, and the file it is written as. Each works on the whole cut-out
//! in memory; a request that asks for none of them takes the banded path
//! from the matte straight to the PNG (`cut_out_png`).

use super::{decode_at_most, png, resize, DecodeError, Extent, Foreground};
use crate::domain::Channels;
use crate::error::MAX_PIXELS_OUTPUT;
use image::imageops::{self, FilterType};
use image::{DynamicImage, GrayImage, Luma, RgbaImage};
use rayon::prelude::*;

/// The options, parsed (`http::options`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Finish {
    pub channels: Channels,
    pub format: Format,
    pub roi: Option<Roi>,
    /// `crop=true`, with its margins.
    pub crop: Option<Margins>,
    pub placement: Option<Placement>,
    pub background: Option<Background>,
    /// An image file put over the result (a backdrop's frame: a PNG
    /// with transparency), scaled to cover it as a background is.
    pub overlay: Option<Vec<u8>>,
    /// The name of the backdrop the background and overlay come from,
    /// which an error about them names.
    pub backdrop: Option<String>,
    pub shadow: Option<Shadow>,
    /// remove.bg's `semitransparency=false` for a car: what the subject
    /// encloses (a car's windows) is made opaque.
    pub fill_enclosed: bool,
}

impl Finish {
    /// Whether the banded PNG path makes what was asked for.
    pub fn is_plain(&self) -> bool {
        *self
            == Finish {
                channels: self.channels,
                ..Finish::default()
            }
    }
}

/// The file the result is written as.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Format {
    /// What the API answered before remove.bg's `format`, and does when the
    /// field is absent: a PNG, whatever the result holds.
    #[default]
    Png,
    /// remove.bg's `auto`: a PNG where the result has transparency, else a JPEG.
    Auto,
    Jpg,
    Webp,
    /// remove.bg's ZIP: `color.jpg`, the colours, and `alpha.png`, the matte.
    Zip,
}

/// A length in pixels or a percentage of some whole.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Length {
    Px(f32),
    Percent(f32),
}

impl Length {
    fn of(self, whole: u32) -> f32 {
        match self {
            Length::Px(n) => n,
            Length::Percent(p) => p / 100.0 * whole as f32,
        }
    }
}

/// remove.bg's `roi`: only what lies inside may be the subject. Pixels
/// count in the uploaded photo; percentages of its width and height.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Roi {
    pub left: Length,
    pub top: Length,
    pub right: Length,
    pub bottom: Length,
}

impl Roi {
    /// Why it does not fit a `width`×`height` photo: a corner in pixels
    /// past the photo's edge.
    pub fn outside(&self, width: u32, height: u32) -> Option<String> {
        let corners = [
            ("x1", self.left, width, "width"),
            ("y1", self.top, height, "height"),
            ("x2", self.right, width, "width"),
            ("y2", self.bottom, height, "height"),
        ];
        corners
            .iter()
            .find_map(|(name, length, whole, side)| match length {
                Length::Px(px) if *px > *whole as f32 => Some(format!(
                    "{name} is {px}px, past the photo's {whole}px {side}"
                )),
                _ => None,
            })
    }
}

/// remove.bg's `crop_margin`, around the subject's box; percentages of
/// the subject's height (top, bottom) or width (left, right).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Margins {
    pub top: Length,
    pub right: Length,
    pub bottom: Length,
    pub left: Length,
}

/// remove.bg's `scale` and `position`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Placement {
    /// The subject's box fitted into this fraction of the canvas, aspect
    /// kept; `None`: its size is kept.
    pub scale: Option<f32>,
    pub position: Position,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Position {
    /// Where the subject's centre was.
    Original,
    /// The box's left edge at `x` of the room beside it (0 left, 0.5
    /// centred, 1 right), its top at `y` of the room above and below.
    At { x: f32, y: f32 },
}

/// remove.bg's `add_shadow`, as its `shadow_type` and `shadow_opacity` say.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shadow {
    pub kind: ShadowKind,
    /// 0 to 1.
    pub opacity: f32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShadowKind {
    /// remove.bg's `drop`: the silhouette, softened, behind the subject and
    /// down to its right, as if lit from the upper left.
    Drop,
    /// remove.bg's `3D` and `car`: the silhouette laid flat where the
    /// subject meets the ground, softened, as if lit from above.
    Ground,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Background {
    /// RGBA.
    Colour([u8; 4]),
    /// An image file as uploaded, decoded with the photo's limits but at
    /// most `MAX_PIXELS_OUTPUT` pixels, the most a result has.
    Image(Vec<u8>),
}

/// The file made, and what the response says of it.
#[derive(Debug)]
pub struct Finished {
    pub bytes: Vec<u8>,
    pub media_type: &'static str,
    pub width: u32,
    pub height: u32,
    /// The subject's box in the result; `None` if nothing was kept.
    pub foreground: Option<Foreground>,
}

#[derive(Debug, PartialEq)]
pub enum FinishError {
    /// The format holds at most `most` pixels a side.
    TooLarge { format: &'static str, most: u32 },
    /// The background image cannot be decoded.
    Background(DecodeError),
    /// The overlay cannot be decoded.
    Overlay(DecodeError),
}

/// JPEG at quality 90 with chroma halved both ways (4:2:0): on a 12 MP
/// cut-out, 21% smaller and 44% faster than 90 at full chroma (the
/// encoder's default there) for 1.6 dB of PSNR (BENCHMARKS.md, "Formats").
const JPEG_QUALITY: u8 = 90;
const JPEG_MAX_SIDE: u32 = u16::MAX as u32;
const WEBP_MAX_SIDE: u32 = 16383;
const WHITE: [u8; 4] = [255; 4];

/// Applies `finish` to `cut` (the cut-out of a photo `source` pixels in
/// size, colours kept under transparent pixels: `cut_out_image`).
pub fn finish(
    mut cut: RgbaImage,
    source: (u32, u32),
    finish: &Finish,
) -> Result<Finished, FinishError> {
    if let Some(roi) = &finish.roi {
        keep_inside(&mut cut, roi, source);
    }
    if finish.fill_enclosed {
        fill_enclosed(&mut cut);
    }
    // Before the crop, which keeps it as part of what is seen.
    if let Some(shadow) = finish.shadow {
        cast(&mut cut, shadow);
    }
    let mut subject = foreground_of(&cut);
    if let (Some(margins), Some(box_)) = (&finish.crop, subject) {
        (cut, subject) = crop(&cut, box_, margins);
    }
    if let (Some(placement), Some(box_)) = (&finish.placement, subject) {
        (cut, subject) = place(&cut, box_, placement);
    }
    let (width, height) = cut.dimensions();
    let (bytes, media_type) = match finish.channels {
        Channels::Alpha => encode_matte(&cut, finish.format)?,
        Channels::Rgba => {
            match &finish.background {
                Some(Background::Colour(colour)) => put_on(&mut cut, |_, _| *colour),
                Some(Background::Image(file)) => {
                    let image =
                        decode_at_most(file, MAX_PIXELS_OUTPUT).map_err(FinishError::Background)?;
                    let behind = covering(image, (width, height));
                    put_on(&mut cut, |x, y| behind.get_pixel(x, y).0);
                }
                None => {}
            }
            if let Some(file) = &finish.overlay {
                let image =
                    decode_at_most(file, MAX_PIXELS_OUTPUT).map_err(FinishError::Overlay)?;
                let front = covering(image, (width, height));
                cut.par_chunks_mut(width as usize * 4)
                    .zip(front.par_chunks(width as usize * 4))
                    .for_each(|(row, front)| {
                        for (px, f) in row.chunks_exact_mut(4).zip(front.chunks_exact(4)) {
                            let mixed = over(f.try_into().unwrap(), px.try_into().unwrap());
                            px.copy_from_slice(&mixed);
                        }
                    });
            }
            encode(cut, finish.format)?
        }
    };
    Ok(Finished {
        bytes,
        media_type,
        width,
        height,
        foreground: subject,
    })
}

/// Makes every pixel outside the region of interest transparent.
fn keep_inside(cut: &mut RgbaImage, roi: &Roi, source: (u32, u32)) {
    let (width, height) = cut.dimensions();
    let (sx, sy) = (
        width as f32 / source.0 as f32,
        height as f32 / source.1 as f32,
    );
    let to = |length: Length, whole: u32, scale: f32, size: u32| {
        ((length.of(whole) * scale).round().max(0.0) as u32).min(size)
    };
    let (left, right) = (
        to(roi.left, source.0, sx, width),
        to(roi.right, source.0, sx, width),
    );
    let (top, bottom) = (
        to(roi.top, source.1, sy, height),
        to(roi.bottom, source.1, sy, height),
    );
    for (y, row) in cut.rows_mut().enumerate() {
        let inside_rows = (top as usize..bottom as usize).contains(&y);
        for (x, px) in row.enumerate() {
            if !(inside_rows && (left..right).contains(&(x as u32))) {
                px[3] = 0;
            }
        }
    }
}

/// Makes opaque every pixel short of `SOLID` that the subject's solid
/// pixels enclose, which no path of such pixels joins to the photo's edge:
/// a car's windows, which show what is behind it. The colours under them
/// are the photo's, kept under transparent pixels. The soft rim around the
/// subject touches the background, so it stays as it is.
///
/// The open pixels reached from the edge are walked depth first with no
/// stack: each pixel reached keeps the direction it was reached from, and
/// the walk goes back that way once a pixel has no new neighbour. So it
/// holds one byte a pixel whatever the matte's shape; a stack of positions
/// held twenty on a matte open everywhere.
fn fill_enclosed(cut: &mut RgbaImage) {
    const SOLID: u8 = 224;
    let (width, height) = (cut.width() as usize, cut.height() as usize);
    let alpha = |i: usize| cut.as_raw()[i * 4 + 3];
    let mut reached = vec![Reached::Not; width * height];
    let next = |i: usize, reached: &[Reached]| {
        let (x, y) = (i % width, i / width);
        let neighbours = [
            (x > 0).then(|| (i - 1, Reached::FromRight)),
            (x + 1 < width).then(|| (i + 1, Reached::FromLeft)),
            (y > 0).then(|| (i - width, Reached::FromBelow)),
            (y + 1 < height).then(|| (i + width, Reached::FromAbove)),
        ];
        neighbours
            .into_iter()
            .flatten()
            .find(|&(n, _)| reached[n] == Reached::Not && alpha(n) < SOLID)
    };
    let edge = (0..width)
        .flat_map(|x| [x, (height - 1) * width + x])
        .chain((0..height).flat_map(|y| [y * width, y * width + width - 1]));
    for start in edge {
        if reached[start] != Reached::Not || alpha(start) >= SOLID {
            continue;
        }
        reached[start] = Reached::Edge;
        let mut at = start;
        loop {
            if let Some((n, from)) = next(at, &reached) {
                reached[n] = from;
                at = n;
                continue;
            }
            at = match reached[at] {
                Reached::FromLeft => at - 1,
                Reached::FromRight => at + 1,
                Reached::FromAbove => at - width,
                Reached::FromBelow => at + width,
                Reached::Edge | Reached::Not => break,
            };
        }
    }
    for (px, reached) in cut.chunks_exact_mut(4).zip(reached) {
        if reached == Reached::Not && px[3] < SOLID {
            px[3] = 255;
        }
    }
}

/// How `fill_enclosed`'s walk reached a pixel: the way back.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reached {
    Not,
    Edge,
    FromLeft,
    FromRight,
    FromAbove,
    FromBelow,
}

/// Puts `shadow` behind the subject: black, its alpha the subject's own
/// moved (or flattened) and blurred, by sizes relative to the subject's
/// box so that it looks the same at any resolution.
fn cast(cut: &mut RgbaImage, shadow: Shadow) {
    let Some(subject) = foreground_of(cut) else {
        return;
    };
    let (width, height) = cut.dimensions();
    let size = subject.width.max(subject.height) as f32;
    let alpha = GrayImage::from_fn(width, height, |x, y| Luma([cut.get_pixel(x, y)[3]]));
    let (shape, softness) = match shadow.kind {
        ShadowKind::Drop => {
            let offset = (size * 0.03).max(1.0) as i64;
            let mut moved = GrayImage::new(width, height);
            imageops::replace(&mut moved, &alpha, offset, offset);
            (moved, size * 0.015)
        }
        ShadowKind::Ground => {
            let flat = (subject.height / 10).max(1);
            let silhouette = imageops::crop_imm(
                &alpha,
                subject.left,
                subject.top,
                subject.width,
                subject.height,
            )
            .to_image();
            let laid = imageops::resize(&silhouette, subject.width, flat, FilterType::Triangle);
            let mut ground = GrayImage::new(width, height);
            // Half under the subject's lowest pixels, half in front of them.
            let top = i64::from(subject.top + subject.height) - i64::from(flat / 2) - 1;
            imageops::replace(&mut ground, &laid, i64::from(subject.left), top);
            (ground, size * 0.02)
        }
    };
    drop(alpha);
    let soft = imageops::fast_blur(&shape, softness.max(0.5));
    drop(shape);
    let scale = shadow.opacity.clamp(0.0, 1.0);
    let width = cut.width() as usize;
    cut.par_chunks_mut(width * 4)
        .zip(soft.par_chunks(width))
        .for_each(|(row, shade)| {
            for (px, &shade) in row.chunks_exact_mut(4).zip(shade) {
                let alpha = (f32::from(shade) * scale + 0.5) as u8;
                // Where no shadow falls, the pixel and its hidden colour stay.
                if alpha > 0 {
                    let shaded = over(px.try_into().unwrap(), [0, 0, 0, alpha]);
                    px.copy_from_slice(&shaded);
                }
            }
        });
}

/// The box of the pixels seen (`SEEN_FROM`).
fn foreground_of(cut: &RgbaImage) -> Option<Foreground> {
    let extent = Extent::default();
    let rows = cut
        .as_raw()
        .par_chunks(cut.width() as usize * 4)
        .enumerate();
    rows.for_each(|(y, row)| extent.include_row(y, row));
    extent.foreground()
}

/// The subject's box with `margins` around it, as the cut-out has it
/// there; past the photo, transparent pixels.
fn crop(
    cut: &RgbaImage,
    subject: Foreground,
    margins: &Margins,
) -> (RgbaImage, Option<Foreground>) {
    let side = |length: Length, whole: u32| length.of(whole).round().max(0.0) as u32;
    let (top, bottom) = (
        side(margins.top, subject.height),
        side(margins.bottom, subject.height),
    );
    let (left, right) = (
        side(margins.left, subject.width),
        side(margins.right, subject.width),
    );
    let mut out = RgbaImage::new(left + subject.width + right, top + subject.height + bottom);
    // The region in the photo, and the part of it inside the photo.
    let (x0, y0) = (
        i64::from(subject.left) - i64::from(left),
        i64::from(subject.top) - i64::from(top),
    );
    let (x1, y1) = (x0 + i64::from(out.width()), y0 + i64::from(out.height()));
    let inside = |start: i64, end: i64, size: u32| (start.max(0), end.min(i64::from(size)));
    let (from_x, to_x) = inside(x0, x1, cut.width());
    let (from_y, to_y) = inside(y0, y1, cut.height());
    let shown = Foreground {
        left: from_x as u32,
        top: from_y as u32,
        width: (to_x - from_x) as u32,
        height: (to_y - from_y) as u32,
    };
    copy_box(
        cut,
        shown,
        &mut out,
        ((from_x - x0) as u32, (from_y - y0) as u32),
    );
    let moved = Foreground {
        left,
        top,
        ..subject
    };
    (out, Some(moved))
}

/// The subject's box scaled and moved on a transparent canvas of the same size.
fn place(
    cut: &RgbaImage,
    subject: Foreground,
    placement: &Placement,
) -> (RgbaImage, Option<Foreground>) {
    let (width, height) = cut.dimensions();
    let factor = placement.scale.map_or(1.0, |scale| {
        scale * (width as f32 / subject.width as f32).min(height as f32 / subject.height as f32)
    });
    let new_width = ((subject.width as f32 * factor).round() as u32).clamp(1, width);
    let new_height = ((subject.height as f32 * factor).round() as u32).clamp(1, height);
    let (room_x, room_y) = (width - new_width, height - new_height);
    let (left, top) = match placement.position {
        Position::Original => {
            let centre = |start: u32, length: u32, new_length: u32, room: u32| {
                let start = start as f32 + (length as f32 - new_length as f32) / 2.0;
                (start.round().max(0.0) as u32).min(room)
            };
            (
                centre(subject.left, subject.width, new_width, room_x),
                centre(subject.top, subject.height, new_height, room_y),
            )
        }
        Position::At { x, y } => (
            (x * room_x as f32).round() as u32,
            (y * room_y as f32).round() as u32,
        ),
    };
    let mut alone = RgbaImage::new(subject.width, subject.height);
    copy_box(cut, subject, &mut alone, (0, 0));
    let alone = DynamicImage::ImageRgba8(alone);
    let scaled = resize(&alone, new_width, new_height).into_rgba8();
    let mut out = RgbaImage::new(width, height);
    let whole = Foreground {
        left: 0,
        top: 0,
        width: new_width,
        height: new_height,
    };
    copy_box(&scaled, whole, &mut out, (left, top));
    // Resampling may leave the box's outer rows faint or empty.
    let box_ = foreground_of(&out);
    (out, box_)
}

/// Copies `from`'s pixels in `box_` to `to`, its corner at `at`.
fn copy_box(from: &RgbaImage, box_: Foreground, to: &mut RgbaImage, at: (u32, u32)) {
    let row_bytes = box_.width as usize * 4;
    let (from_width, to_width) = (from.width() as usize, to.width() as usize);
    let (src, dst) = (from.as_raw(), &mut **to);
    for row in 0..box_.height as usize {
        let s = ((box_.top as usize + row) * from_width + box_.left as usize) * 4;
        let d = ((at.1 as usize + row) * to_width + at.0 as usize) * 4;
        dst[d..d + row_bytes].copy_from_slice(&src[s..s + row_bytes]);
    }
}

/// `image` scaled to cover `size`, its centre kept: a background of another
/// shape is cropped, never stretched. Only the part that shows is scaled,
/// so a sliver of a background never becomes a vast canvas.
fn covering(image: DynamicImage, size: (u32, u32)) -> RgbaImage {
    let (w, h) = (image.width(), image.height());
    let scale = (f64::from(size.0) / f64::from(w)).max(f64::from(size.1) / f64::from(h));
    let shown = |side: u32, whole: u32| ((f64::from(side) / scale).round() as u32).clamp(1, whole);
    let (part_w, part_h) = (shown(size.0, w), shown(size.1, h));
    let part = image.crop_imm((w - part_w) / 2, (h - part_h) / 2, part_w, part_h);
    drop(image);
    resize(&part, size.0, size.1).into_rgba8()
}

/// Puts the cut-out over a background whose pixel at (x, y) is
/// `behind(x, y)`: "over" compositing, so a see-through background stays so.
fn put_on(cut: &mut RgbaImage, behind: impl Fn(u32, u32) -> [u8; 4] + Sync) {
    let width = cut.width() as usize;
    cut.par_chunks_mut(width * 4)
        .enumerate()
        .for_each(|(y, row)| {
            for (x, px) in row.chunks_exact_mut(4).enumerate() {
                let mixed = over(px.try_into().unwrap(), behind(x as u32, y as u32));
                px.copy_from_slice(&mixed);
            }
        });
}

/// `front` over `back`, both RGBA with straight alpha.
fn over(front: [u8; 4], back: [u8; 4]) -> [u8; 4] {
    match (front[3], back[3]) {
        (255, _) => front,
        (0, _) => back,
        (fa, ba) => {
            let fa = f32::from(fa) / 255.0;
            let ba = f32::from(ba) / 255.0 * (1.0 - fa);
            let alpha = fa + ba;
            let mix = |c: usize| {
                let value = (f32::from(front[c]) * fa + f32::from(back[c]) * ba) / alpha;
                (value + 0.5) as u8
            };
            [mix(0), mix(1), mix(2), (alpha * 255.0 + 0.5) as u8]
        }
    }
}

/// Whether a `format` file holds an image of `cut`'s size.
fn fits(cut: &RgbaImage, format: &'static str) -> Result<(), FinishError> {
    let most = match format {
        "webp" => WEBP_MAX_SIDE,
        _ => JPEG_MAX_SIDE,
    };
    match cut.width().max(cut.height()) > most {
        true => Err(FinishError::TooLarge { format, most }),
        false => Ok(()),
    }
}

/// The cut-out as `format` says.
fn encode(mut cut: RgbaImage, format: Format) -> Result<(Vec<u8>, &'static str), FinishError> {
    let opaque = cut.par_chunks(4).all(|px| px[3] == 255);
    let format = match format {
        Format::Auto if opaque => Format::Jpg,
        Format::Auto => Format::Png,
        chosen => chosen,
    };
    Ok(match format {
        Format::Zip => {
            fits(&cut, "jpg")?;
            let colour = rgb_of(&cut);
            let matte = alpha_of(&cut);
            let (width, height) = cut.dimensions();
            let files = [
                (
                    "color.jpg",
                    encode_jpeg(&colour, width, height, jpeg_encoder::ColorType::Rgb),
                ),
                (
                    "alpha.png",
                    encode_png(&matte, width, height, png::Colour::Grey),
                ),
            ];
            (super::zip::stored(&files), "application/zip")
        }
        Format::Jpg => {
            fits(&cut, "jpg")?;
            if !opaque {
                put_on(&mut cut, |_, _| WHITE);
            }
            let (width, height) = cut.dimensions();
            let rgb = rgb_of(&cut);
            let jpeg = encode_jpeg(&rgb, width, height, jpeg_encoder::ColorType::Rgb);
            (jpeg, "image/jpeg")
        }
        Format::Webp => {
            fits(&cut, "webp")?;
            clear_hidden(&mut cut);
            let (width, height) = cut.dimensions();
            let (pixels, colour) = match opaque {
                true => (rgb_of(&cut), image::ExtendedColorType::Rgb8),
                false => (cut.into_raw(), image::ExtendedColorType::Rgba8),
            };
            (encode_webp(&pixels, width, height, colour), "image/webp")
        }
        Format::Png | Format::Auto => {
            clear_hidden(&mut cut);
            let (width, height) = cut.dimensions();
            let png = match opaque {
                true => encode_png_rgb(&cut),
                false => encode_png(cut.as_raw(), width, height, png::Colour::Rgba),
            };
            (png, "image/png")
        }
    })
}

/// The matte alone, in grey, as `format` says (a matte is never guessed
/// opaque: `auto` is a PNG).
fn encode_matte(cut: &RgbaImage, format: Format) -> Result<(Vec<u8>, &'static str), FinishError> {
    let (width, height) = cut.dimensions();
    let matte = alpha_of(cut);
    Ok(match format {
        Format::Jpg => {
            fits(cut, "jpg")?;
            let jpeg = encode_jpeg(&matte, width, height, jpeg_encoder::ColorType::Luma);
            (jpeg, "image/jpeg")
        }
        Format::Webp => {
            fits(cut, "webp")?;
            let webp = encode_webp(&matte, width, height, image::ExtendedColorType::L8);
            (webp, "image/webp")
        }
        Format::Png | Format::Auto | Format::Zip => (
            encode_png(&matte, width, height, png::Colour::Grey),
            "image/png",
        ),
    })
}

/// Transparent pixels' colour set to 0: nobody sees it, and the file is
/// smaller for it.
fn clear_hidden(cut: &mut RgbaImage) {
    cut.par_chunks_mut(4)
        .filter(|px| px[3] == 0)
        .for_each(|px| px.copy_from_slice(&[0; 4]));
}

fn rgb_of(cut: &RgbaImage) -> Vec<u8> {
    let mut rgb = vec![0; cut.as_raw().len() / 4 * 3];
    rgb.par_chunks_mut(3)
        .zip(cut.par_chunks(4))
        .for_each(|(rgb, rgba)| rgb.copy_from_slice(&rgba[..3]));
    rgb
}

fn alpha_of(cut: &RgbaImage) -> Vec<u8> {
    cut.par_chunks(4).map(|px| px[3]).collect()
}

/// An RGB PNG of an opaque cut-out, its rows taken from the RGBA ones as
/// they are deflated: no RGB copy of the whole is made.
fn encode_png_rgb(cut: &RgbaImage) -> Vec<u8> {
    let (width, height) = cut.dimensions();
    let row_bytes = width as usize * 4;
    png::encode_rows(
        width,
        height,
        png::Colour::Rgb,
        png::rows_a_band(width),
        |rows, band| {
            for y in rows {
                let rgba = &cut.as_raw()[y * row_bytes..][..row_bytes];
                band.push_with(|rgb| {
                    for (to, from) in rgb.chunks_exact_mut(3).zip(rgba.chunks_exact(4)) {
                        to.copy_from_slice(&from[..3]);
                    }
                });
            }
        },
    )
}

fn encode_png(pixels: &[u8], width: u32, height: u32, colour: png::Colour) -> Vec<u8> {
    png::encode_pixels(width, height, colour, pixels, png::rows_a_band(width))
}

/// Sides were checked against `JPEG_MAX_SIDE`.
fn encode_jpeg(pixels: &[u8], width: u32, height: u32, colour: jpeg_encoder::ColorType) -> Vec<u8> {
    let mut out = Vec::new();
    let mut encoder = jpeg_encoder::Encoder::new(&mut out, JPEG_QUALITY);
    encoder.set_sampling_factor(jpeg_encoder::SamplingFactor::F_2_2);
    encoder
        .encode(pixels, width as u16, height as u16, colour)
        .expect("encoding a checked image into memory");
    out
}

/// Lossless: image's WebP encoder has no lossy mode. Sides were checked
/// against `WEBP_MAX_SIDE`.
fn encode_webp(
    pixels: &[u8],
    width: u32,
    height: u32,
    colour: image::ExtendedColorType,
) -> Vec<u8> {
    let mut out = Vec::new();
    image::codecs::webp::WebPEncoder::new_lossless(&mut out)
        .encode(pixels, width, height, colour)
        .expect("encoding a checked image into memory");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 40×30 photo of grey with an opaque red 10×6 block at (8, 5) and a
    /// half-transparent rim around it; colours kept under the transparent.
    fn cut() -> RgbaImage {
        RgbaImage::from_fn(40, 30, |x, y| {
            let inside = |m: u32| (8 - m..18 + m).contains(&x) && (5 - m..11 + m).contains(&y);
            match (inside(0), inside(1)) {
                (true, _) => image::Rgba([200, 10, 10, 255]),
                (false, true) => image::Rgba([200, 10, 10, 128]),
                _ => image::Rgba([90, 90, 90, 0]),
            }
        })
    }

    fn box_(left: u32, top: u32, width: u32, height: u32) -> Option<Foreground> {
        Some(Foreground {
            left,
            top,
            width,
            height,
        })
    }

    fn decoded(finished: &Finished) -> RgbaImage {
        image::load_from_memory(&finished.bytes)
            .unwrap()
            .into_rgba8()
    }

    #[test]
    fn a_crop_is_the_subjects_box_and_its_margins_with_transparency_past_the_photo() {
        let margins = Margins {
            top: Length::Px(10.0),
            right: Length::Percent(50.0),
            bottom: Length::Px(0.0),
            left: Length::Px(2.0),
        };
        let finish_ = Finish {
            crop: Some(margins),
            ..Finish::default()
        };
        let done = finish(cut(), (40, 30), &finish_).unwrap();
        // The box with its rim is 12×8 at (7, 4); 6 px right is 50% of 12.
        assert_eq!((done.width, done.height), (2 + 12 + 6, 10 + 8));
        assert_eq!(done.foreground, box_(2, 10, 12, 8));
        let image = decoded(&done);
        assert_eq!(image.get_pixel(0, 0).0, [0; 4], "above the photo");
        assert_eq!(image.get_pixel(3, 11).0, [200, 10, 10, 255]);
        assert_eq!(image.get_pixel(2, 10).0[3], 128);
    }

    #[test]
    fn what_the_subject_encloses_is_made_opaque_and_its_rim_and_the_rest_stay() {
        // A frame (a car's body) around a window, a soft rim outside it.
        let mut cut = RgbaImage::from_fn(60, 40, |x, y| {
            let within = |m: u32| (10 - m..50 + m).contains(&x) && (10 - m..30 + m).contains(&y);
            let window = (20..40).contains(&x) && (15..25).contains(&y);
            match (within(0), within(1), window) {
                (true, _, true) => image::Rgba([30, 60, 90, 100]),
                (true, _, false) => image::Rgba([200, 10, 10, 255]),
                (false, true, _) => image::Rgba([200, 10, 10, 120]),
                _ => image::Rgba([90, 90, 90, 0]),
            }
        });
        cut.put_pixel(25, 17, image::Rgba([30, 60, 90, 0]));
        fill_enclosed(&mut cut);
        assert_eq!(cut.get_pixel(30, 20).0, [30, 60, 90, 255], "the window");
        assert_eq!(cut.get_pixel(25, 17).0, [30, 60, 90, 255], "all of it");
        assert_eq!(cut.get_pixel(9, 20).0[3], 120, "the rim");
        assert_eq!(cut.get_pixel(2, 2).0[3], 0, "the background");
        assert_eq!(cut.get_pixel(12, 12).0, [200, 10, 10, 255], "the body");
    }

    /// `fill_enclosed` as a breadth-first search with a queue would do it.
    fn filled_by_search(cut: &RgbaImage) -> RgbaImage {
        let (w, h) = (cut.width() as i64, cut.height() as i64);
        let open = |x: i64, y: i64| cut.get_pixel(x as u32, y as u32)[3] < 224;
        let mut outside = vec![false; (w * h) as usize];
        let mut queue: std::collections::VecDeque<(i64, i64)> = (0..w)
            .flat_map(|x| [(x, 0), (x, h - 1)])
            .chain((0..h).flat_map(|y| [(0, y), (w - 1, y)]))
            .collect();
        while let Some((x, y)) = queue.pop_front() {
            if x < 0 || y < 0 || x >= w || y >= h || outside[(y * w + x) as usize] || !open(x, y) {
                continue;
            }
            outside[(y * w + x) as usize] = true;
            queue.extend([(x - 1, y), (x + 1, y), (x, y - 1), (x, y + 1)]);
        }
        let mut filled = cut.clone();
        for (i, px) in filled.pixels_mut().enumerate() {
            if !outside[i] && px[3] < 224 {
                px[3] = 255;
            }
        }
        filled
    }

    #[test]
    fn the_walk_fills_what_a_search_fills_on_mazes_checkerboards_rings_and_noise() {
        let mut seed = 12345u32;
        let mut noise = |share: u32| {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            if (seed >> 16) % 100 < share {
                255
            } else {
                (seed >> 8) as u8 % 224
            }
        };
        let mattes: Vec<(&str, RgbaImage)> = vec![
            (
                "open",
                RgbaImage::from_pixel(37, 23, image::Rgba([1, 2, 3, 0])),
            ),
            (
                "solid",
                RgbaImage::from_pixel(37, 23, image::Rgba([1, 2, 3, 255])),
            ),
            (
                "checkerboard",
                RgbaImage::from_fn(64, 48, |x, y| {
                    image::Rgba([0, 0, 0, if (x / 3 + y / 3) % 2 == 0 { 255 } else { 0 }])
                }),
            ),
            (
                "rings",
                RgbaImage::from_fn(61, 61, |x, y| {
                    let d = (x as i32 - 30).abs().max((y as i32 - 30).abs());
                    image::Rgba([0, 0, 0, if d % 4 == 1 { 255 } else { 9 }])
                }),
            ),
            (
                "comb",
                RgbaImage::from_fn(50, 40, |x, y| {
                    let wall = x % 2 == 1 && (if x % 4 == 1 { y > 0 } else { y < 39 });
                    image::Rgba([0, 0, 0, if wall { 255 } else { 0 }])
                }),
            ),
            (
                "sparse noise",
                RgbaImage::from_fn(80, 60, |_, _| image::Rgba([0, 0, 0, noise(30)])),
            ),
            (
                "dense noise",
                RgbaImage::from_fn(80, 60, |_, _| image::Rgba([0, 0, 0, noise(55)])),
            ),
            (
                "one pixel",
                RgbaImage::from_pixel(1, 1, image::Rgba([0, 0, 0, 5])),
            ),
            (
                "one row",
                RgbaImage::from_fn(9, 1, |x, _| image::Rgba([0, 0, 0, (x % 2) as u8 * 255])),
            ),
        ];
        for (name, matte) in mattes {
            let mut walked = matte.clone();
            fill_enclosed(&mut walked);
            assert!(walked == filled_by_search(&matte), "{name}");
        }
    }

    #[test]
    fn a_shadow_darkens_where_it_falls_and_leaves_the_subject_as_it_was() {
        let subject = |x: u32, y: u32| (30..60).contains(&x) && (20..70).contains(&y);
        let plain = RgbaImage::from_fn(100, 100, |x, y| match subject(x, y) {
            true => image::Rgba([200, 10, 10, 255]),
            false => image::Rgba([90, 90, 90, 0]),
        });
        let shadowed = |kind, opacity| {
            let mut cut = plain.clone();
            cast(&mut cut, Shadow { kind, opacity });
            cut
        };
        let alpha = |cut: &RgbaImage, x, y| cut.get_pixel(x, y)[3];
        for kind in [ShadowKind::Ground, ShadowKind::Drop] {
            assert!(shadowed(kind, 0.0) == plain, "{kind:?} at opacity 0");
            let cut = shadowed(kind, 1.0);
            for (x, y, px) in cut.enumerate_pixels() {
                if subject(x, y) {
                    assert_eq!(px.0, [200, 10, 10, 255], "{kind:?} covered the subject");
                } else if px[3] > 0 {
                    assert_eq!(&px.0[..3], &[0, 0, 0], "{kind:?}: a shadow is black");
                }
            }
            assert_eq!(alpha(&cut, 5, 5), 0, "{kind:?} far from the subject");
            let half = shadowed(kind, 0.5);
            let (x, y) = match kind {
                ShadowKind::Ground => (45, 71),
                ShadowKind::Drop => (61, 45),
            };
            assert!(alpha(&cut, x, y) > 60, "{kind:?}: {}", alpha(&cut, x, y));
            assert!(alpha(&half, x, y).abs_diff(alpha(&cut, x, y) / 2) <= 1);
        }
        let ground = shadowed(ShadowKind::Ground, 1.0);
        assert_eq!(alpha(&ground, 45, 15), 0, "nothing above the subject");
        assert_eq!(alpha(&ground, 65, 45), 0, "nor beside it");
        let drop = shadowed(ShadowKind::Drop, 1.0);
        assert!(
            alpha(&drop, 61, 45) > alpha(&drop, 28, 45),
            "down and to the right"
        );
        assert!(alpha(&drop, 45, 71) > alpha(&drop, 45, 18));
    }

    #[test]
    fn a_background_colour_fills_where_the_matte_was_0_and_mixes_at_the_rim() {
        let finish_ = Finish {
            background: Some(Background::Colour([0, 255, 0, 255])),
            ..Finish::default()
        };
        let done = finish(cut(), (40, 30), &finish_).unwrap();
        let image = decoded(&done);
        assert_eq!(image.get_pixel(0, 0).0, [0, 255, 0, 255]);
        assert_eq!(image.get_pixel(10, 7).0, [200, 10, 10, 255]);
        let rim = image.get_pixel(7, 4).0;
        assert_eq!(rim[3], 255);
        assert!(
            rim[0].abs_diff(100) <= 1 && rim[1].abs_diff(132) <= 1,
            "{rim:?}"
        );
        assert_eq!(
            done.foreground,
            box_(7, 4, 12, 8),
            "the subject, not the background"
        );
    }

    #[test]
    fn scale_fits_the_subject_into_that_share_of_the_canvas_where_position_says() {
        let placement = Placement {
            scale: Some(0.5),
            position: Position::At { x: 0.0, y: 1.0 },
        };
        let finish_ = Finish {
            placement: Some(placement),
            ..Finish::default()
        };
        let done = finish(cut(), (40, 30), &finish_).unwrap();
        assert_eq!((done.width, done.height), (40, 30));
        // 12×8 into 20×15: width-bound, ×5/3 = 20×13, bottom left.
        let found = done.foreground.unwrap();
        assert_eq!((found.left, found.top + found.height), (0, 30));
        assert!(
            found.width.abs_diff(20) <= 1 && found.height.abs_diff(13) <= 1,
            "{found:?}"
        );
    }

    #[test]
    fn the_region_of_interest_clears_all_outside_it() {
        let roi = Roi {
            left: Length::Percent(0.0),
            top: Length::Px(0.0),
            right: Length::Px(12.0),
            bottom: Length::Percent(100.0),
        };
        let finish_ = Finish {
            roi: Some(roi),
            ..Finish::default()
        };
        let done = finish(cut(), (80, 60), &finish_).unwrap();
        // 12 px of the 80 px upload are 6 px of this 40 px cut-out.
        assert_eq!(done.foreground, None);
        let done = finish(cut(), (40, 30), &finish_).unwrap();
        assert_eq!(done.foreground, box_(7, 4, 5, 8));
    }

    #[test]
    fn each_format_is_what_it_says_and_auto_takes_jpeg_only_when_opaque() {
        let as_ = |format, background| {
            let finish_ = Finish {
                format,
                background,
                ..Finish::default()
            };
            let done = finish(cut(), (40, 30), &finish_).unwrap();
            (done.media_type, done.bytes)
        };
        let green = || Some(Background::Colour([0, 255, 0, 255]));
        assert_eq!(as_(Format::Auto, None).0, "image/png");
        assert_eq!(as_(Format::Auto, green()).0, "image/jpeg");
        let (kind, jpeg) = as_(Format::Jpg, None);
        assert_eq!(kind, "image/jpeg");
        let jpeg = image::load_from_memory(&jpeg).unwrap();
        assert_eq!(jpeg.color(), image::ColorType::Rgb8);
        assert!(
            jpeg.to_rgb8().get_pixel(0, 0).0.iter().all(|&c| c > 245),
            "white behind"
        );
        let (kind, webp) = as_(Format::Webp, None);
        assert_eq!(kind, "image/webp");
        let webp = image::load_from_memory(&webp).unwrap().into_rgba8();
        let mut expected = cut();
        clear_hidden(&mut expected);
        assert_eq!(webp, expected, "lossless");
        assert_eq!(as_(Format::Zip, None).0, "application/zip");
    }

    #[test]
    fn a_background_image_covers_the_canvas_cropped_not_stretched() {
        // Left half blue, right half yellow, twice as wide as the canvas's shape.
        let wide = RgbaImage::from_fn(120, 30, |x, _| match x < 60 {
            true => image::Rgba([0, 0, 255, 255]),
            false => image::Rgba([255, 255, 0, 255]),
        });
        let covered = covering(DynamicImage::ImageRgba8(wide), (40, 30));
        assert_eq!(covered.dimensions(), (40, 30));
        assert_eq!(covered.get_pixel(5, 5).0, [0, 0, 255, 255]);
        assert_eq!(covered.get_pixel(35, 5).0, [255, 255, 0, 255]);
        // A sliver 5,000 times as wide as high, behind a square: its middle
        // 2x2 pixels, scaled, not all of it scaled to 200,000x40 first.
        let sliver = RgbaImage::from_fn(10_000, 2, |x, _| match x < 5_000 {
            true => image::Rgba([0, 0, 255, 255]),
            false => image::Rgba([255, 255, 0, 255]),
        });
        let covered = covering(DynamicImage::ImageRgba8(sliver), (40, 40));
        assert_eq!(covered.dimensions(), (40, 40));
        assert_eq!(covered.get_pixel(2, 20).0, [0, 0, 255, 255]);
        assert_eq!(covered.get_pixel(37, 20).0, [255, 255, 0, 255]);
    }

    #[test]
    fn over_keeps_a_see_through_background_see_through() {
        assert_eq!(over([10, 20, 30, 0], [1, 2, 3, 0]), [1, 2, 3, 0]);
        assert_eq!(over([200, 0, 0, 128], [0, 0, 200, 0]), [200, 0, 0, 128]);
        let half = over([255, 0, 0, 128], [0, 0, 255, 128]);
        assert_eq!(half[3], 192);
    }
}
