//! Backdrops: a background image and an optional overlay, named, shared by
//! every booth, kept in the data directory (`backdrops/<id>/`). A request
//! names one (`backdrop`) and the appliance puts the cut-out on its
//! background, under its overlay, at the result's size.
//!
//! Each is written whole into a fresh directory and renamed into place, so
//! a refused or interrupted upload leaves the store as it was.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{MAX_IMAGE_BYTES, MAX_PIXELS_OUTPUT};
use image::ImageFormat;

use crate::imaging;

/// Enough for a season of events; each may hold 20 MB.
pub const MAX_BACKDROPS: usize = 24;
pub const MAX_NAME_CHARS: usize = 40;
const BACKGROUND: &str = "background";
const OVERLAY: &str = "overlay.png";
const NAME: &str = "name";
const PREVIEW: &str = "preview.jpg";
/// The dashboard's preview: this wide, made once when the backdrop is added.
const PREVIEW_WIDTH: u32 = 320;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Backdrop {
    /// Its directory's name, from its name: what a request may also give.
    pub id: String,
    pub name: String,
    pub width: u32,
    pub height: u32,
    pub overlay: bool,
    /// Its files' size.
    pub bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Background,
    Overlay,
}

/// A backdrop's files, as a request uses them.
pub struct Files {
    pub background: Vec<u8>,
    pub overlay: Option<Vec<u8>>,
}

#[derive(Debug, thiserror::Error)]
pub enum BackdropError {
    #[error("{0}")]
    Invalid(String),
    #[error("there is no backdrop named {0:?}")]
    Unknown(String),
    #[error("reading or writing the backdrops: {0}")]
    Io(#[from] io::Error),
}

fn invalid(why: impl Into<String>) -> BackdropError {
    BackdropError::Invalid(why.into())
}

pub struct Backdrops {
    dir: PathBuf,
}

impl Backdrops {
    pub fn in_data_dir(data_dir: &Path) -> Backdrops {
        Backdrops {
            dir: data_dir.join("backdrops"),
        }
    }

    /// Every backdrop, by name; one whose files cannot be read is logged and left out.
    pub fn list(&self) -> Result<Vec<Backdrop>, BackdropError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let mut all = Vec::new();
        for entry in entries {
            let path = entry?.path();
            let Some(id) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if id.starts_with('.') {
                continue; // an upload being written, or one left by a power cut
            }
            match self.read(id) {
                Ok(backdrop) => all.push(backdrop),
                Err(e) => log::warn!("backdrop {}: {e}", path.display()),
            }
        }
        all.sort_by_key(|b| b.name.to_lowercase());
        Ok(all)
    }

    fn read(&self, id: &str) -> Result<Backdrop, BackdropError> {
        let dir = self.dir.join(id);
        let name = fs::read_to_string(dir.join(NAME))?;
        let background = fs::read(dir.join(BACKGROUND))?;
        let header = imaging::header(&background, MAX_PIXELS_OUTPUT)
            .map_err(|e| invalid(format!("its background: {e}")))?;
        let overlay = match fs::metadata(dir.join(OVERLAY)) {
            Ok(file) => Some(file.len()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e.into()),
        };
        Ok(Backdrop {
            id: id.to_owned(),
            name,
            width: header.width,
            height: header.height,
            overlay: overlay.is_some(),
            bytes: background.len() as u64 + overlay.unwrap_or(0),
        })
    }

    /// The backdrop named `name` (or whose id it is), without regard to case.
    pub fn find(&self, name: &str) -> Result<Backdrop, BackdropError> {
        // Names equal but for case have the same id, so only that directory
        // is read, not every backdrop's files for each request.
        let wanted = name.trim();
        let id = id_of(wanted);
        match self.read(&id) {
            _ if id.is_empty() => Err(BackdropError::Unknown(wanted.to_owned())),
            Err(BackdropError::Io(e)) if e.kind() == io::ErrorKind::NotFound => {
                Err(BackdropError::Unknown(wanted.to_owned()))
            }
            other => other,
        }
    }

    pub fn files(&self, backdrop: &Backdrop) -> Result<Files, BackdropError> {
        let dir = self.dir.join(&backdrop.id);
        let overlay = match fs::read(dir.join(OVERLAY)) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e.into()),
        };
        Ok(Files {
            background: fs::read(dir.join(BACKGROUND))?,
            overlay,
        })
    }

    /// Adds a backdrop, or says what is wrong and changes nothing: a name
    /// that is empty, too long or taken, a background that is not a JPG,
    /// PNG or WEBP image of at most 10 MB and 25 megapixels, an overlay
    /// that is not such a PNG with transparency, one backdrop too many.
    pub fn add(
        &self,
        name: &str,
        background: &[u8],
        overlay: Option<&[u8]>,
    ) -> Result<Backdrop, BackdropError> {
        let name = name.trim();
        let id = id_of(name);
        if name.is_empty() || id.trim_matches('-').is_empty() {
            return Err(invalid("give the backdrop a name with a letter or a digit"));
        }
        if name.chars().count() > MAX_NAME_CHARS || name.chars().any(char::is_control) {
            return Err(invalid(format!(
                "a backdrop's name is at most {MAX_NAME_CHARS} characters, on one line"
            )));
        }
        check_image("the background", background)?;
        if let Some(overlay) = overlay {
            let header = check_image("the overlay", overlay)?;
            let shows_through = || {
                imaging::decode_at_most(overlay, MAX_PIXELS_OUTPUT)
                    .is_ok_and(|image| image.into_rgba8().pixels().any(|px| px[3] < 255))
            };
            if imaging::format_of(overlay).ok() != Some(ImageFormat::Png)
                || !header.alpha
                || !shows_through()
            {
                return Err(invalid(
                    "the overlay must be a PNG with transparency, where the picture shows through",
                ));
            }
        }
        let existing = self.list()?;
        if let Some(taken) = existing
            .iter()
            .find(|b| b.id == id || b.name.eq_ignore_ascii_case(name))
        {
            return Err(invalid(format!(
                "the name {name:?} is taken by the backdrop {:?}: delete that one first, or choose another",
                taken.name
            )));
        }
        if existing.len() >= MAX_BACKDROPS {
            return Err(invalid(format!(
                "there are {MAX_BACKDROPS} backdrops already, the most the appliance keeps: delete one first"
            )));
        }
        fs::create_dir_all(&self.dir)?;
        let writing = self.dir.join(format!(".{id}.writing"));
        let _ = fs::remove_dir_all(&writing);
        let written = (|| {
            fs::create_dir(&writing)?;
            fs::write(writing.join(BACKGROUND), background)?;
            if let Some(overlay) = overlay {
                fs::write(writing.join(OVERLAY), overlay)?;
            }
            fs::write(writing.join(NAME), name)?;
            fs::write(writing.join(PREVIEW), preview(background, overlay)?)?;
            fs::rename(&writing, self.dir.join(&id))
        })();
        if let Err(e) = written {
            let _ = fs::remove_dir_all(&writing);
            return Err(e.into());
        }
        log::info!("backdrop {name:?} added");
        self.read(&id)
    }

    /// The backdrop's preview, a small JPEG: its overlay over its background.
    pub fn preview(&self, id: &str) -> Result<Vec<u8>, BackdropError> {
        self.file(id, PREVIEW)
    }

    /// One of the backdrop's images as uploaded, for a booth to keep (an
    /// `Unknown` error for a backdrop without an overlay).
    pub fn image(&self, id: &str, part: Part) -> Result<Vec<u8>, BackdropError> {
        self.file(
            id,
            match part {
                Part::Background => BACKGROUND,
                Part::Overlay => OVERLAY,
            },
        )
    }

    fn file(&self, id: &str, file: &str) -> Result<Vec<u8>, BackdropError> {
        if id.starts_with('.') || id.contains('/') {
            return Err(BackdropError::Unknown(id.to_owned()));
        }
        match fs::read(self.dir.join(id).join(file)) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                Err(BackdropError::Unknown(id.to_owned()))
            }
            other => Ok(other?),
        }
    }

    pub fn remove(&self, id: &str) -> Result<Backdrop, BackdropError> {
        let backdrop = self
            .list()?
            .into_iter()
            .find(|b| b.id == id)
            .ok_or_else(|| BackdropError::Unknown(id.to_owned()))?;
        // Renamed away first: a request reading it meanwhile finds it whole or not at all.
        let going = self.dir.join(format!(".{id}.removing"));
        fs::rename(self.dir.join(id), &going)?;
        fs::remove_dir_all(&going)?;
        log::info!("backdrop {:?} deleted", backdrop.name);
        Ok(backdrop)
    }
}

/// The overlay over the background, `PREVIEW_WIDTH` wide, as a JPEG.
fn preview(background: &[u8], overlay: Option<&[u8]>) -> io::Result<Vec<u8>> {
    let unreadable = |e: imaging::DecodeError| io::Error::other(e.to_string());
    let image = imaging::decode_at_most(background, MAX_PIXELS_OUTPUT).map_err(unreadable)?;
    let height = (u64::from(image.height()) * u64::from(PREVIEW_WIDTH) / u64::from(image.width()))
        .max(1) as u32;
    let mut small = imaging::resize(&image, PREVIEW_WIDTH, height).into_rgba8();
    drop(image);
    if let Some(overlay) = overlay {
        let front = imaging::decode_at_most(overlay, MAX_PIXELS_OUTPUT).map_err(unreadable)?;
        // Cut to the background's shape, centred, as a request covers the result with it.
        let (w, h) = (u64::from(front.width()), u64::from(front.height()));
        let (part_w, part_h) = match w * u64::from(height) > h * u64::from(PREVIEW_WIDTH) {
            true => (h * u64::from(PREVIEW_WIDTH) / u64::from(height), h),
            false => (w, w * u64::from(height) / u64::from(PREVIEW_WIDTH)),
        };
        let (part_w, part_h) = (part_w.max(1) as u32, part_h.max(1) as u32);
        let part = front.crop_imm(
            (front.width() - part_w) / 2,
            (front.height() - part_h) / 2,
            part_w,
            part_h,
        );
        let front = imaging::resize(&part, PREVIEW_WIDTH, height).into_rgba8();
        for (back, front) in small.pixels_mut().zip(front.pixels()) {
            let a = u16::from(front[3]);
            for c in 0..3 {
                back[c] =
                    ((u16::from(front[c]) * a + u16::from(back[c]) * (255 - a) + 127) / 255) as u8;
            }
        }
    }
    let mut jpeg = Vec::new();
    image::DynamicImage::ImageRgba8(small)
        .into_rgb8()
        .write_to(&mut io::Cursor::new(&mut jpeg), ImageFormat::Jpeg)
        .map_err(io::Error::other)?;
    Ok(jpeg)
}

/// The most memory adding this backdrop holds at once beside its files:
/// the background decoded and scaled for the preview, or the overlay
/// decoded, its RGBA copy (checking that it shows through) and the part of
/// it cut for the preview, whichever is more. A file that `add` would
/// refuse is refused here, with the same words.
pub fn adding_needs(background: &[u8], overlay: Option<&[u8]>) -> Result<u64, BackdropError> {
    let back = check_image("the background", background)?;
    // `imaging::resize` holds each core's band beside its source: at most half.
    let scaling = back.pixels() * back.channels() / 2;
    let front = match overlay {
        Some(overlay) => {
            let front = check_image("the overlay", overlay)?;
            front.decoding + front.pixels() * 4 * 3 / 2
        }
        None => 0,
    };
    Ok((back.decoding + scaling).max(front))
}

fn check_image(what: &str, bytes: &[u8]) -> Result<imaging::Header, BackdropError> {
    if bytes.len() as u64 > MAX_IMAGE_BYTES {
        return Err(invalid(format!("{what} is over 10 MB")));
    }
    imaging::header(bytes, MAX_PIXELS_OUTPUT).map_err(|e| {
        invalid(format!(
            "{what} is not a JPG, PNG or WEBP image the appliance takes: {e}"
        ))
    })
}

/// A name as a directory: its letters and digits in lower case, anything
/// else a hyphen.
fn id_of(name: &str) -> String {
    name.trim()
        .chars()
        .map(|c| match c.is_alphanumeric() {
            true => c.to_lowercase().next().unwrap_or(c),
            false => '-',
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png(width: u32, height: u32, alpha: u8) -> Vec<u8> {
        let image = image::RgbaImage::from_pixel(width, height, image::Rgba([10, 200, 30, alpha]));
        let mut bytes = Vec::new();
        image::DynamicImage::ImageRgba8(image)
            .write_to(&mut io::Cursor::new(&mut bytes), image::ImageFormat::Png)
            .unwrap();
        bytes
    }

    fn jpeg(width: u32, height: u32) -> Vec<u8> {
        let image = image::RgbImage::from_pixel(width, height, image::Rgb([200, 100, 50]));
        let mut bytes = Vec::new();
        image::DynamicImage::ImageRgb8(image)
            .write_to(&mut io::Cursor::new(&mut bytes), image::ImageFormat::Jpeg)
            .unwrap();
        bytes
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .map(|d| {
                d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    #[test]
    fn adds_lists_finds_and_removes_a_backdrop_with_its_overlay() {
        let data = tempfile::tempdir().unwrap();
        let backdrops = Backdrops::in_data_dir(data.path());
        assert_eq!(backdrops.list().unwrap(), vec![]);
        let beach = backdrops
            .add(" Beach at Dusk ", &jpeg(64, 48), Some(&png(32, 32, 0)))
            .unwrap();
        assert_eq!(
            beach,
            Backdrop {
                id: "beach-at-dusk".into(),
                name: "Beach at Dusk".into(),
                width: 64,
                height: 48,
                overlay: true,
                bytes: (jpeg(64, 48).len() + png(32, 32, 0).len()) as u64,
            }
        );
        backdrops.add("Été", &png(8, 8, 255), None).unwrap();
        let names: Vec<String> = backdrops
            .list()
            .unwrap()
            .into_iter()
            .map(|b| b.name)
            .collect();
        assert_eq!(names, ["Beach at Dusk", "Été"]);
        assert_eq!(backdrops.find("beach at dusk").unwrap(), beach);
        assert_eq!(backdrops.find("beach-at-dusk").unwrap(), beach);
        let preview =
            image::load_from_memory(&backdrops.preview("beach-at-dusk").unwrap()).unwrap();
        assert_eq!((preview.width(), preview.height()), (PREVIEW_WIDTH, 240));
        assert!(matches!(
            backdrops.preview("../x"),
            Err(BackdropError::Unknown(_))
        ));
        let files = backdrops.files(&beach).unwrap();
        assert_eq!(files.background, jpeg(64, 48));
        assert_eq!(files.overlay, Some(png(32, 32, 0)));
        backdrops.remove("beach-at-dusk").unwrap();
        assert!(matches!(
            backdrops.find("Beach at Dusk"),
            Err(BackdropError::Unknown(_))
        ));
        assert_eq!(entries(&data.path().join("backdrops")), ["été"]);
    }

    #[test]
    fn refuses_each_bad_backdrop_and_leaves_the_store_as_it_was() {
        let data = tempfile::tempdir().unwrap();
        let backdrops = Backdrops::in_data_dir(data.path());
        backdrops.add("Party", &jpeg(16, 16), None).unwrap();
        let before = entries(&data.path().join("backdrops"));
        let long = "x".repeat(MAX_NAME_CHARS + 1);
        let over_10_mb = {
            let mut bytes = jpeg(16, 16);
            bytes.resize(MAX_IMAGE_BYTES as usize + 1, 0);
            bytes
        };
        type Case<'a> = (&'a str, &'a [u8], Option<&'a [u8]>, &'a str);
        let cases: [Case; 8] = [
            ("", &jpeg(8, 8), None, "a name with a letter or a digit"),
            ("!!!", &jpeg(8, 8), None, "a name with a letter or a digit"),
            (&long, &jpeg(8, 8), None, "at most 40 characters"),
            ("two\nlines", &jpeg(8, 8), None, "on one line"),
            (
                "Text",
                b"<html>not an image</html>",
                None,
                "the background is not a JPG, PNG or WEBP",
            ),
            ("Big", &over_10_mb, None, "the background is over 10 MB"),
            (
                "Opaque",
                &jpeg(8, 8),
                Some(&png(8, 8, 255)),
                "the overlay must be a PNG with transparency",
            ),
            (
                "PARTY",
                &jpeg(8, 8),
                None,
                "the name \"PARTY\" is taken by the backdrop \"Party\"",
            ),
        ];
        for (name, background, overlay, why) in cases {
            let refused = backdrops.add(name, background, overlay).unwrap_err();
            assert!(
                matches!(refused, BackdropError::Invalid(_)),
                "{name:?}: {refused}"
            );
            assert!(refused.to_string().contains(why), "{name:?}: {refused}");
            assert_eq!(entries(&data.path().join("backdrops")), before, "{name:?}");
        }
    }

    #[test]
    fn refuses_one_backdrop_too_many() {
        let data = tempfile::tempdir().unwrap();
        let backdrops = Backdrops::in_data_dir(data.path());
        for n in 0..MAX_BACKDROPS {
            backdrops.add(&format!("b{n}"), &jpeg(8, 8), None).unwrap();
        }
        let refused = backdrops.add("one more", &jpeg(8, 8), None).unwrap_err();
        assert!(
            refused.to_string().contains("delete one first"),
            "{refused}"
        );
        assert_eq!(backdrops.list().unwrap().len(), MAX_BACKDROPS);
    }

    #[test]
    fn an_upload_left_half_written_by_a_power_cut_is_not_a_backdrop_and_is_replaced() {
        let data = tempfile::tempdir().unwrap();
        let backdrops = Backdrops::in_data_dir(data.path());
        let half = data.path().join("backdrops/.party.writing");
        fs::create_dir_all(&half).unwrap();
        fs::write(half.join(BACKGROUND), b"half").unwrap();
        assert_eq!(backdrops.list().unwrap(), vec![]);
        backdrops.add("Party", &jpeg(8, 8), None).unwrap();
        assert_eq!(entries(&data.path().join("backdrops")), ["party"]);
    }
}
