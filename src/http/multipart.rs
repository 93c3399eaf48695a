//! Reads the multipart form of `POST /api/remove-bg` (and of Try it) with multer. The body
//! is read under a hard cap (10 MiB of image plus room for the rest of the
//! form): reading stops the moment a body passes it, and a declared length
//! over it is refused before a byte is read.

use crate::error::{ApiError, MAX_IMAGE_BYTES};
use bytes::Bytes;
use futures_util::stream;
use multer::{Constraints, Multipart, SizeLimit};
use std::io::{self, Read};

/// Room for the other fields and the part headers beside a full-size image.
const FORM_OVERHEAD: u64 = 64 * 1024;
const MAX_FIELD_BYTES: u64 = 4 * 1024;
const MAX_BODY_BYTES: u64 = MAX_IMAGE_BYTES + FORM_OVERHEAD;

#[derive(Debug, Default)]
pub struct Form {
    pub image_file: Option<Bytes>,
    pub size: Option<String>,
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
    let mut data = Vec::with_capacity(content_length.unwrap_or(0) as usize);
    body.take(MAX_BODY_BYTES + 1)
        .read_to_end(&mut data)
        .map_err(from_io)?;
    if data.len() as u64 > MAX_BODY_BYTES {
        return Err(ApiError::FileTooLarge);
    }
    let limits = SizeLimit::new()
        .per_field(MAX_FIELD_BYTES)
        .for_field("image_file", MAX_IMAGE_BYTES);
    let body = stream::once(async move { Ok::<_, io::Error>(Bytes::from(data)) });
    let mut multipart =
        Multipart::with_constraints(body, boundary, Constraints::new().size_limit(limits));
    // multer is async, but the body is already in memory: nothing here waits.
    futures_executor::block_on(async {
        let mut form = Form::default();
        while let Some(mut field) = multipart.next_field().await.map_err(from_multer)? {
            match field.name() {
                Some("image_file") => {
                    if form.image_file.is_some() {
                        return Err(ApiError::InvalidRequest(
                            "the form has more than one image_file part".into(),
                        ));
                    }
                    form.image_file = Some(field.bytes().await.map_err(from_multer)?);
                }
                Some("size") => form.size = Some(field.text().await.map_err(from_multer)?),
                Some("csrf") => form.csrf = Some(field.text().await.map_err(from_multer)?),
                // Unknown fields are read past, so newer clients still work.
                _ => while field.chunk().await.map_err(from_multer)?.is_some() {},
            }
        }
        Ok(form)
    })
}

fn from_io(e: io::Error) -> ApiError {
    match e.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => ApiError::RequestTimeout,
        _ => ApiError::InvalidRequest("the body ended before the form was complete".into()),
    }
}

fn from_multer(e: multer::Error) -> ApiError {
    match e {
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
    fn reads_the_image_and_the_size_and_skips_other_fields() {
        let b = body(&[
            ("other", b"x"),
            ("image_file", b"\x89PNG..."),
            ("size", b"preview"),
        ]);
        let form = read_form(Some(CT), None, &b[..]).unwrap();
        assert_eq!(form.image_file.as_deref(), Some(&b"\x89PNG..."[..]));
        assert_eq!(form.size.as_deref(), Some("preview"));
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
