//! Reads the multipart form of `POST /api/remove-bg` (and of Try it) with
//! multer, as the body arrives: multer parses each chunk as it is read, so a
//! request holds its image once, not the body and a copy. The body is read
//! under a hard cap (10 MiB of image plus room for the rest of the form):
//! reading stops the moment a body passes it, and a declared length over it
//! is refused before a byte is read.

use crate::error::{ApiError, MAX_IMAGE_BYTES};
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
pub const MAX_BODY_BYTES: u64 = MAX_IMAGE_BYTES + FORM_OVERHEAD;
const READ_CHUNK: usize = 64 * 1024;

#[derive(Debug, Default)]
pub struct Form {
    pub image_file: Option<Vec<u8>>,
    pub size: Option<String>,
    pub subject: Option<String>,
    /// The dashboard's Try it form carries its CSRF token here.
    pub csrf: Option<String>,
}

/// Parses the body as `multipart/form-data`. `content_length`, when the
/// client sent one, lets an oversized body be refused before it is read.
pub fn read_form(
    content_type: Option<&str>,
    content_length: Option<u64>,
    body: impl Read,
) -> Result<Form, ApiError> {
    let content_type = content_type.unwrap_or_default();
    if !content_type
        .trim_start()
        .to_ascii_lowercase()
        .starts_with("multipart/form-data")
    {
        return Err(ApiError::InvalidRequest(
            "Content-Type must be multipart/form-data".into(),
        ));
    }
    let boundary = multer::parse_boundary(content_type)
        .map_err(|_| ApiError::InvalidRequest("the Content-Type has no valid boundary".into()))?;
    if content_length.is_some_and(|n| n > MAX_BODY_BYTES) {
        return Err(ApiError::FileTooLarge);
    }
    let limits = SizeLimit::new()
        .whole_stream(MAX_BODY_BYTES)
        .per_field(MAX_FIELD_BYTES)
        .for_field("image_file", MAX_IMAGE_BYTES);
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
    let multipart =
        Multipart::with_constraints(chunks, boundary, Constraints::new().size_limit(limits));
    let image_capacity = content_length.unwrap_or(0).min(MAX_IMAGE_BYTES) as usize;
    let mut parse = pin!(parse(multipart, image_capacity));
    // multer is async; here it is driven by hand: each time it waits for
    // more of the body, the next chunk is read from the socket and fed in.
    let mut body = body.take(MAX_BODY_BYTES + 1);
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
        match field.name() {
            Some("image_file") => {
                if form.image_file.is_some() {
                    return Err(ApiError::InvalidRequest(
                        "the form has more than one image_file part".into(),
                    ));
                }
                form.image_file = Some(all_of(&mut field, image_capacity).await?);
            }
            Some("size") => form.size = Some(field.text().await.map_err(from_multer)?),
            Some("type") => form.subject = Some(field.text().await.map_err(from_multer)?),
            Some("csrf") => form.csrf = Some(field.text().await.map_err(from_multer)?),
            // Unknown fields are read past, so newer clients still work.
            _ => while field.chunk().await.map_err(from_multer)?.is_some() {},
        }
    }
    Ok(form)
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

fn from_multer(e: multer::Error) -> ApiError {
    match e {
        multer::Error::StreamSizeExceeded { .. } => ApiError::FileTooLarge,
        multer::Error::StreamReadFailed(e) => match e.downcast::<io::Error>() {
            Ok(e) => from_io(*e),
            Err(other) => ApiError::InvalidRequest(other.to_string()),
        },
        multer::Error::FieldSizeExceeded { field_name, .. }
            if field_name.as_deref() == Some("image_file") =>
        {
            ApiError::FileTooLarge
        }
        multer::Error::IncompleteStream | multer::Error::IncompleteFieldData { .. } => {
            ApiError::InvalidRequest("the body ended before the form was complete".into())
        }
        other => ApiError::InvalidRequest(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn reads_the_image_size_and_type_and_skips_other_fields() {
        let b = body(&[
            ("other", b"x"),
            ("image_file", b"\x89PNG..."),
            ("size", b"preview"),
            ("type", b"person"),
        ]);
        let form = read_form(Some(CT), None, &b[..]).unwrap();
        assert_eq!(form.image_file.as_deref(), Some(&b"\x89PNG..."[..]));
        assert_eq!(form.size.as_deref(), Some("preview"));
        assert_eq!(form.subject.as_deref(), Some("person"));
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
            read_form(Some("application/json"), None, &b"{}"[..]),
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
