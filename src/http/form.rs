//! Reads the form of `POST /api/remove-bg` (and of Try it): multipart, read
//! with multer as the body arrives (multer parses each chunk as it is read,
//! so a request holds its image once, not the body and a copy); or, as
//! remove.bg's clients also send it, `application/x-www-form-urlencoded` or
//! JSON with the image in base64 (`image_file_b64`). The body is read under
//! a hard cap (10 MiB of image, in base64, plus room for the rest of the
//! form): reading stops the moment a body passes it, and a declared length
//! over it is refused before a byte is read.

use crate::domain::REMOVE_BG_OPTIONS;
use crate::error::{ApiError, MAX_IMAGE_BYTES};
use base64::Engine as _;
use bytes::Bytes;
use futures_util::stream;
use multer::{Constraints, Field, Multipart, SizeLimit};
use std::future::Future;
use std::io::{self, Read};
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

/// Room for the other fields and the part headers beside a full-size image.
const FORM_OVERHEAD: u64 = 64 * 1024;
const MAX_FIELD_BYTES: u64 = 4 * 1024;
/// The largest image in base64: four characters for every three bytes.
const MAX_IMAGE_B64_BYTES: u64 = MAX_IMAGE_BYTES.div_ceil(3) * 4;
pub const MAX_BODY_BYTES: u64 = MAX_IMAGE_B64_BYTES + FORM_OVERHEAD;
const READ_CHUNK: usize = 64 * 1024;

#[derive(Debug, Default)]
pub struct Form {
    pub image_file: Option<Vec<u8>>,
    pub size: Option<String>,
    pub subject: Option<String>,
    /// remove.bg's `channels`: `rgba` or `alpha`.
    pub channels: Option<String>,
    /// remove.bg's output options, as sent (`http::options` reads them).
    pub format: Option<String>,
    pub bg_color: Option<String>,
    pub crop: Option<String>,
    pub crop_margin: Option<String>,
    pub roi: Option<String>,
    pub scale: Option<String>,
    pub position: Option<String>,
    /// The image to put behind the subject, a second file part.
    pub bg_image_file: Option<Vec<u8>>,
    /// remove.bg's URLs of the photo and of the background, fetched from
    /// where the operator allows (`fetch`).
    pub image_url: Option<String>,
    pub bg_image_url: Option<String>,
    /// remove.bg's `semitransparency` (`http::options` reads it).
    pub semitransparency: Option<String>,
    /// remove.bg's shadow (`http::options` reads them).
    pub add_shadow: Option<String>,
    pub shadow_type: Option<String>,
    pub shadow_opacity: Option<String>,
    /// The name of one of the appliance's backdrops (`backdrops`).
    pub backdrop: Option<String>,
    /// The dashboard's Try it form carries its CSRF token here.
    pub csrf: Option<String>,
    /// The first file part under another name than image_file (`file`,
    /// `image`, `photo`), for the error that says what to call it.
    pub misnamed_file: Option<String>,
    /// The image in base64, as remove.bg's JSON and urlencoded forms send it.
    image_file_b64: Option<String>,
}

impl Form {
    /// The image, or the error that says what the form had instead.
    pub fn take_image(&mut self) -> Result<Vec<u8>, ApiError> {
        self.image_file
            .take()
            .ok_or_else(|| ApiError::MissingImageFile {
                found: self.misnamed_file.take(),
            })
    }

    /// Whether `name` is a text field this API reads (as some clients send
    /// them, possibly as a file part).
    fn knows(name: &str) -> bool {
        Form::default().field(name).is_some() || remove_bg_option(name).is_some()
    }

    /// Where the text field `name` is kept.
    fn field(&mut self, name: &str) -> Option<&mut Option<String>> {
        Some(match name {
            "size" => &mut self.size,
            "type" => &mut self.subject,
            "channels" => &mut self.channels,
            "format" => &mut self.format,
            "bg_color" => &mut self.bg_color,
            "crop" => &mut self.crop,
            "crop_margin" => &mut self.crop_margin,
            "roi" => &mut self.roi,
            "scale" => &mut self.scale,
            "position" => &mut self.position,
            "csrf" => &mut self.csrf,
            "image_url" => &mut self.image_url,
            "bg_image_url" => &mut self.bg_image_url,
            "semitransparency" => &mut self.semitransparency,
            "add_shadow" => &mut self.add_shadow,
            "shadow_type" => &mut self.shadow_type,
            "shadow_opacity" => &mut self.shadow_opacity,
            "backdrop" => &mut self.backdrop,
            "image_file_b64" => &mut self.image_file_b64,
            _ => return None,
        })
    }

    /// A text field by name: one this API knows, or one of remove.bg's
    /// options at a value it takes, or a refusal that names it.
    fn set(&mut self, name: &str, value: String) -> Result<(), ApiError> {
        if let Some((name, offered)) = remove_bg_option(name) {
            if !offered.contains(&value.trim()) {
                let value = value.chars().take(MAX_NAME_SHOWN).collect();
                return Err(ApiError::UnsupportedOption {
                    name,
                    value,
                    offered,
                });
            }
            return Ok(());
        }
        if let Some(field) = self.field(name) {
            if name != "image_file_b64" && value.len() > MAX_FIELD_BYTES as usize {
                return Err(ApiError::InvalidRequest(format!(
                    "the {name} field is over {MAX_FIELD_BYTES} bytes"
                )));
            }
            *field = Some(value);
            return Ok(());
        }
        Err(match name {
            "image_file" | "bg_image_file" => ApiError::InvalidRequest(format!(
                "{name} must be a file part of a multipart form{}",
                match name {
                    "image_file" => "; send the image in base64 as image_file_b64",
                    _ => "",
                }
            )),
            name => unknown_field(name),
        })
    }

    /// `image_file_b64` decoded into `image_file`: one of the two, never both.
    fn decode_image_b64(&mut self) -> Result<(), ApiError> {
        let Some(encoded) = self.image_file_b64.take() else {
            return Ok(());
        };
        if self.image_file.is_some() {
            return Err(ApiError::InvalidRequest(
                "send the image as image_file or as image_file_b64, not both".into(),
            ));
        }
        // A data URL's head, and the line breaks of MIME-style base64, are
        // not part of the image.
        let encoded = match encoded.split_once(";base64,") {
            Some((head, data)) if head.starts_with("data:") => data,
            _ => encoded.as_str(),
        };
        let compact: Vec<u8> = encoded
            .bytes()
            .filter(|b| !b.is_ascii_whitespace())
            .collect();
        if compact.len() as u64 > MAX_IMAGE_B64_BYTES {
            return Err(ApiError::FileTooLarge);
        }
        let image = base64::engine::general_purpose::STANDARD
            .decode(&compact)
            .map_err(|e| ApiError::InvalidImageFileB64(e.to_string()))?;
        if image.len() as u64 > MAX_IMAGE_BYTES {
            return Err(ApiError::FileTooLarge);
        }
        self.image_file = Some(image);
        Ok(())
    }
}

/// remove.bg's option `name`, with the values taken.
fn remove_bg_option(name: &str) -> Option<(&'static str, &'static [&'static str])> {
    REMOVE_BG_OPTIONS.iter().find(|o| o.0 == name).copied()
}

fn unknown_field(name: &str) -> ApiError {
    ApiError::UnknownField(name.chars().take(MAX_NAME_SHOWN).collect())
}

/// A field name as an error repeats it: at most this many characters.
const MAX_NAME_SHOWN: usize = 64;

/// Parses the body as `multipart/form-data`. `content_length`, when the
/// client sent one, lets an oversized body be refused before it is read.
pub fn read_form(
    content_type: Option<&str>,
    content_length: Option<u64>,
    body: impl Read,
) -> Result<Form, ApiError> {
    let content_type = content_type.unwrap_or_default();
    let media = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    if content_length.is_some_and(|n| n > MAX_BODY_BYTES) {
        return Err(ApiError::FileTooLarge);
    }
    let mut form = match media.as_str() {
        "multipart/form-data" => read_multipart(content_type, content_length, body)?,
        "application/x-www-form-urlencoded" => {
            let body = read_whole(body)?;
            let mut form = Form::default();
            for (name, value) in form_urlencoded::parse(&body) {
                form.set(&name, value.into_owned())?;
            }
            form
        }
        "application/json" => {
            let body = read_whole(body)?;
            let fields: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&body)
                .map_err(|e| ApiError::InvalidRequest(format!("the body is not a JSON object: {e}")))?;
            let mut form = Form::default();
            for (name, value) in fields {
                let value = match value {
                    serde_json::Value::String(text) => text,
                    serde_json::Value::Bool(_) | serde_json::Value::Number(_) => value.to_string(),
                    _ => {
                        let name: String = name.chars().take(MAX_NAME_SHOWN).collect();
                        return Err(ApiError::InvalidRequest(format!(
                            "the {name} field must be a string, number or boolean"
                        )));
                    }
                };
                form.set(&name, value)?;
            }
            form
        }
        _ => {
            return Err(ApiError::InvalidRequest(
                "Content-Type must be multipart/form-data, application/x-www-form-urlencoded or application/json".into(),
            ))
        }
    };
    form.decode_image_b64()?;
    Ok(form)
}

/// A urlencoded or JSON body, whole, under the cap.
fn read_whole(body: impl Read) -> Result<Vec<u8>, ApiError> {
    let mut data = Vec::new();
    body.take(MAX_BODY_BYTES + 1)
        .read_to_end(&mut data)
        .map_err(from_io)?;
    if data.len() as u64 > MAX_BODY_BYTES {
        return Err(ApiError::FileTooLarge);
    }
    Ok(data)
}

fn read_multipart(
    content_type: &str,
    content_length: Option<u64>,
    body: impl Read,
) -> Result<Form, ApiError> {
    // Every part may be as large as an image, so that a file part under
    // another name is read past and named, not refused as too large; the
    // text fields are held to MAX_FIELD_BYTES as they are read.
    let limits = SizeLimit::new()
        .whole_stream(MAX_BODY_BYTES)
        .per_field(MAX_IMAGE_BYTES)
        .for_field("image_file_b64", MAX_IMAGE_B64_BYTES);
    let image_capacity = content_length.unwrap_or(0).min(MAX_IMAGE_BYTES) as usize;
    read_multipart_with(content_type, body, MAX_BODY_BYTES, limits, |multipart| {
        parse(multipart, image_capacity)
    })
}

/// Runs `parse` over a `multipart/form-data` body of at most `most` bytes,
/// read from `body` as the parser asks for it.
pub fn read_multipart_with<T, F: Future<Output = Result<T, ApiError>>>(
    content_type: &str,
    body: impl Read,
    most: u64,
    limits: SizeLimit,
    parse: impl FnOnce(Multipart<'static>) -> F,
) -> Result<T, ApiError> {
    let boundary = multer::parse_boundary(content_type)
        .map_err(|_| ApiError::InvalidRequest("the Content-Type has no valid boundary".into()))?;
    let feed = Arc::new(Mutex::new(Feed::Empty));
    let chunks = {
        let feed = feed.clone();
        stream::poll_fn(move |_| {
            let mut feed = feed.lock().unwrap();
            match std::mem::take(&mut *feed) {
                Feed::Empty => Poll::Pending,
                Feed::Chunk(chunk) => Poll::Ready(Some(Ok(chunk))),
                Feed::Failed(e) => Poll::Ready(Some(Err(e))),
                Feed::Ended => {
                    *feed = Feed::Ended;
                    Poll::Ready(None)
                }
            }
        })
    };
    let multipart = Multipart::with_constraints(
        chunks,
        boundary,
        Constraints::new().size_limit(limits.whole_stream(most)),
    );
    let mut parse = pin!(parse(multipart));
    // multer is async; here it is driven by hand: each time it waits for
    // more of the body, the next chunk is read from the socket and fed in.
    let mut body = body.take(most + 1);
    let mut context = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(form) = parse.as_mut().poll(&mut context) {
            return form;
        }
        let mut feed = feed.lock().unwrap();
        if !matches!(*feed, Feed::Empty) {
            return Err(ApiError::Internal(anyhow::anyhow!(
                "the form parser waits, yet has the body's next part or its end"
            )));
        }
        *feed = read_chunk(&mut body);
    }
}

/// What the body has for the parser next.
#[derive(Default)]
enum Feed {
    #[default]
    Empty,
    Chunk(Bytes),
    Failed(io::Error),
    Ended,
}

fn read_chunk(body: &mut impl Read) -> Feed {
    let mut chunk = vec![0; READ_CHUNK];
    loop {
        match body.read(&mut chunk) {
            Ok(0) => return Feed::Ended,
            Ok(n) => {
                chunk.truncate(n);
                return Feed::Chunk(chunk.into());
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Feed::Failed(e),
        }
    }
}

async fn parse(mut multipart: Multipart<'_>, image_capacity: usize) -> Result<Form, ApiError> {
    let mut form = Form::default();
    while let Some(mut field) = multipart.next_field().await.map_err(from_multer)? {
        let name = field.name().map(str::to_owned);
        match name.as_deref() {
            Some(name @ ("image_file" | "bg_image_file")) => {
                let (part, capacity) = match name {
                    "image_file" => (&mut form.image_file, image_capacity),
                    _ => (&mut form.bg_image_file, 0),
                };
                if part.is_some() {
                    return Err(ApiError::InvalidRequest(format!(
                        "the form has more than one {name} part"
                    )));
                }
                *part = Some(all_of(&mut field, capacity).await?);
            }
            name if field.file_name().is_some() && !name.is_some_and(Form::knows) => {
                let name: String = name.unwrap_or("").chars().take(MAX_NAME_SHOWN).collect();
                form.misnamed_file.get_or_insert(name);
                while field.chunk().await.map_err(from_multer)?.is_some() {}
            }
            name => {
                let name = name.unwrap_or("").to_owned();
                // Named before its value is read: an unknown field is
                // refused as unknown, however long its value.
                if !Form::knows(&name) {
                    return Err(unknown_field(&name));
                }
                let value = text_of(&mut field).await?;
                form.set(&name, value)?;
            }
        }
    }
    Ok(form)
}

/// A text field, at most MAX_FIELD_BYTES of UTF-8 (an image in base64 as
/// large as an image may be).
pub async fn text_of(field: &mut Field<'_>) -> Result<String, ApiError> {
    let name: String = field
        .name()
        .unwrap_or("")
        .chars()
        .take(MAX_NAME_SHOWN)
        .collect();
    let most = match name.as_str() {
        "image_file_b64" => MAX_IMAGE_B64_BYTES,
        _ => MAX_FIELD_BYTES,
    };
    let mut data = Vec::new();
    while let Some(chunk) = field.chunk().await.map_err(from_multer)? {
        if (data.len() + chunk.len()) as u64 > most {
            return Err(ApiError::InvalidRequest(format!(
                "the {name} field is over {most} bytes"
            )));
        }
        data.extend_from_slice(&chunk);
    }
    String::from_utf8(data)
        .map_err(|_| ApiError::InvalidRequest(format!("the {name} field is not UTF-8")))
}

/// A field's bytes in one buffer, sized from the declared body length so
/// that it does not grow by doubling.
async fn all_of(field: &mut Field<'_>, capacity: usize) -> Result<Vec<u8>, ApiError> {
    let mut data = Vec::with_capacity(capacity);
    while let Some(chunk) = field.chunk().await.map_err(from_multer)? {
        data.extend_from_slice(&chunk);
    }
    Ok(data)
}

fn from_io(e: io::Error) -> ApiError {
    match e.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => ApiError::RequestTimeout,
        _ => ApiError::InvalidRequest("the body ended before the form was complete".into()),
    }
}

pub fn from_multer(e: multer::Error) -> ApiError {
    match e {
        multer::Error::StreamSizeExceeded { .. } => ApiError::FileTooLarge,
        multer::Error::StreamReadFailed(e) => match e.downcast::<io::Error>() {
            Ok(e) => from_io(*e),
            Err(other) => ApiError::InvalidRequest(other.to_string()),
        },
        multer::Error::FieldSizeExceeded { .. } => ApiError::FileTooLarge,
        multer::Error::IncompleteStream | multer::Error::IncompleteFieldData { .. } => {
            ApiError::InvalidRequest("the body ended before the form was complete".into())
        }
        other => ApiError::InvalidRequest(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_remove_bg_documents_is_known() {
        for (name, _) in crate::pages::REMOVE_BG_FIELDS {
            let file_part = matches!(*name, "image_file" | "bg_image_file");
            assert!(file_part || Form::knows(name), "{name}");
        }
    }

    #[test]
    fn the_body_cap_is_the_13_4_mib_the_file_too_large_error_names() {
        let mib = MAX_BODY_BYTES as f64 / f64::from(1 << 20);
        assert_eq!(format!("{mib:.1}"), "13.4");
        assert!(ApiError::FileTooLarge.detail().contains("13.4 MiB"));
    }

    const CT: &str = "multipart/form-data; boundary=XyZ";

    fn body(parts: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, data) in parts {
            out.extend_from_slice(format!("--XyZ\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"f\"\r\n\r\n").as_bytes());
            out.extend_from_slice(data);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"--XyZ--\r\n");
        out
    }

    /// Parts without a filename: text fields.
    fn text_body(parts: &[(&str, &[u8])]) -> Vec<u8> {
        String::from_utf8(body(parts))
            .unwrap()
            .replace("; filename=\"f\"", "")
            .into_bytes()
    }

    #[test]
    fn reads_the_image_size_and_type() {
        let mut b = body(&[("image_file", b"\x89PNG...")]);
        b.truncate(b.len() - b"--XyZ--\r\n".len());
        b.extend(text_body(&[("size", b"preview"), ("type", b"person")]));
        let mut form = read_form(Some(CT), None, &b[..]).unwrap();
        assert_eq!(form.size.as_deref(), Some("preview"));
        assert_eq!(form.subject.as_deref(), Some("person"));
        assert_eq!(form.take_image().unwrap(), b"\x89PNG...");
    }

    #[test]
    fn a_file_part_under_another_name_is_named_in_the_error_however_large() {
        let big = vec![7u8; 5 << 20];
        for name in ["file", "image", "photo"] {
            let b = body(&[(name, &big), ("second", b"x")]);
            let mut form = read_form(Some(CT), None, &b[..]).unwrap();
            match form.take_image() {
                Err(ApiError::MissingImageFile { found }) => {
                    assert_eq!(found.as_deref(), Some(name))
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn an_unknown_field_or_a_remove_bg_option_not_offered_is_refused_by_name() {
        let b = text_body(&[("sise", b"auto")]);
        match read_form(Some(CT), None, &b[..]) {
            Err(ApiError::UnknownField(name)) => assert_eq!(name, "sise"),
            other => panic!("{other:?}"),
        }
        let long = "n".repeat(5000);
        let b = text_body(&[(&long, b"x")]);
        match read_form(Some(CT), None, &b[..]) {
            Err(ApiError::UnknownField(name)) => assert_eq!(name.len(), MAX_NAME_SHOWN),
            other => panic!("{other:?}"),
        }
        for (option, offered) in REMOVE_BG_OPTIONS {
            let b = text_body(&[(option, b"x")]);
            match read_form(Some(CT), None, &b[..]) {
                Err(e @ ApiError::UnsupportedOption { .. }) => {
                    assert!(e.detail().starts_with(option), "{}", e.detail())
                }
                other => panic!("{option}: {other:?}"),
            }
            for value in *offered {
                let b = text_body(&[(option, value.as_bytes())]);
                assert!(
                    read_form(Some(CT), None, &b[..]).is_ok(),
                    "{option}={value}"
                );
            }
        }
    }

    #[test]
    fn a_text_field_over_4_kib_is_refused() {
        let b = text_body(&[("size", &[b'a'; 4097])]);
        match read_form(Some(CT), None, &b[..]) {
            Err(ApiError::InvalidRequest(why)) => assert!(why.contains("size field"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_image_of_exactly_10_mib_passes_and_one_byte_more_does_not() {
        let max = vec![7u8; MAX_IMAGE_BYTES as usize];
        let form = read_form(Some(CT), None, &body(&[("image_file", &max)])[..]).unwrap();
        assert_eq!(form.image_file.unwrap().len(), max.len());
        let over = vec![7u8; MAX_IMAGE_BYTES as usize + 1];
        assert!(matches!(
            read_form(Some(CT), None, &body(&[("image_file", &over)])[..]),
            Err(ApiError::FileTooLarge)
        ));
    }

    /// Hands out at most `step` bytes a read, then fails with `end` if set.
    struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
        end: Option<io::ErrorKind>,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.data.is_empty() {
                return self.end.map_or(Ok(0), |kind| Err(kind.into()));
            }
            let n = self.step.min(buf.len()).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    #[test]
    fn a_body_arriving_in_small_pieces_reads_the_same() {
        let image: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let b = body(&[("size", b"full"), ("image_file", &image), ("x", b"y")]);
        for step in [1, 7, 4096, 65_537] {
            let trickle = Trickle {
                data: &b,
                step,
                end: None,
            };
            let form = read_form(Some(CT), Some(b.len() as u64), trickle).unwrap();
            assert_eq!(form.image_file.as_deref(), Some(&image[..]), "step {step}");
            assert_eq!(form.size.as_deref(), Some("full"));
        }
    }

    #[test]
    fn a_body_that_stops_coming_is_a_timeout_and_one_that_ends_early_is_invalid() {
        let b = body(&[("image_file", &[1; 5000])]);
        let cut = &b[..3000];
        let stalled = Trickle {
            data: cut,
            step: 100,
            end: Some(io::ErrorKind::TimedOut),
        };
        assert!(matches!(
            read_form(Some(CT), None, stalled),
            Err(ApiError::RequestTimeout)
        ));
        let ended = Trickle {
            data: cut,
            step: 100,
            end: None,
        };
        assert!(matches!(
            read_form(Some(CT), None, ended),
            Err(ApiError::InvalidRequest(_))
        ));
    }

    #[test]
    fn refuses_what_is_not_a_well_formed_form() {
        let two = body(&[("image_file", b"a"), ("image_file", b"b")]);
        assert!(matches!(
            read_form(Some(CT), None, &two[..]),
            Err(ApiError::InvalidRequest(_))
        ));
        assert!(matches!(
            read_form(Some("application/json"), None, &b"[]"[..]),
            Err(ApiError::InvalidRequest(_))
        ));
        assert!(matches!(
            read_form(Some("multipart/form-data"), None, &b""[..]),
            Err(ApiError::InvalidRequest(_))
        ));
        assert!(matches!(
            read_form(Some(CT), None, &b"--XyZ\r\nContent-Disp"[..]),
            Err(ApiError::InvalidRequest(_))
        ));
        assert!(matches!(
            read_form(Some(CT), Some(20 << 20), &b""[..]),
            Err(ApiError::FileTooLarge)
        ));
    }
}
