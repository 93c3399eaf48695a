//! Building responses: JSON errors in the documented shape, and PNGs.

use crate::error::ApiError;
use std::io::Read;
use tiny_http::{Header, Response};

/// An answer: most are bytes in memory (`body`); a backup download is a file.
pub type Body = Response<Box<dyn Read + Send>>;

/// An answer of `bytes`, 200 unless changed.
pub fn body(bytes: Vec<u8>) -> Body {
    Response::from_data(bytes).boxed()
}

pub fn header(name: &str, value: impl ToString) -> Header {
    Header::from_bytes(name.as_bytes(), value.to_string().as_bytes())
        .expect("header names and values here are ASCII")
}

pub fn json(status: u16, value: &serde_json::Value) -> Body {
    body(value.to_string().into_bytes())
        .with_status_code(status)
        .with_header(header("Content-Type", "application/json"))
}

/// Each error's HTTP status: the one place that decides it. `ClientGone`
/// reaches no client; 499 is what the log and /metrics count it as
/// (nginx's status for it).
pub fn status(e: &ApiError) -> u16 {
    use ApiError::*;
    match e {
        MissingImageFile { .. }
        | UnknownField(_)
        | InvalidImageFileB64(_)
        | UnsupportedOption { .. }
        | InvalidSize
        | InvalidType
        | InvalidChannels
        | InvalidOption { .. }
        | InvalidImage(_)
        | ImageTooLarge { .. }
        | NeedsTooMuchMemory { .. }
        | ResolutionTooHigh { .. }
        | InvalidRequest(_)
        | Fetch { .. } => 400,
        MissingApiKey | InvalidApiKey => 401,
        QuotaExceeded { .. } => 402,
        PlanNotAllowed | AccountSuspended | PlainHttpOff { .. } => 403,
        NotFound => 404,
        MethodNotAllowed { .. } => 405,
        RequestTimeout => 408,
        FileTooLarge => 413,
        UnsupportedImageFormat => 415,
        TooManyConcurrentRequests { .. } => 429,
        HeaderTooLarge => 431,
        ClientGone => 499,
        Internal(_) => 500,
        Unavailable(_) => 503,
    }
}

/// Which routes answer: the contract's (`/api/...`), or remove.bg's own
/// (`/v1.0/...`), whose clients know four statuses of a refused call and
/// raise their typed errors by them: 400 for a bad parameter or an image
/// it cannot use, 402 out of credits, 403 for the key, 429 too many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routes {
    Contract,
    RemoveBg,
}

/// `e`'s status on `routes`.
pub fn status_on(e: &ApiError, routes: Routes) -> u16 {
    use ApiError::*;
    match (routes, e) {
        (Routes::RemoveBg, MissingApiKey | InvalidApiKey) => 403,
        (Routes::RemoveBg, FileTooLarge | UnsupportedImageFormat) => 400,
        _ => status(e),
    }
}

pub fn error(e: &ApiError) -> Body {
    error_on(e, Routes::Contract)
}

/// The error in remove.bg's body, `{"errors": [{title, code, detail}]}`,
/// with `source.parameter` naming the field where it is about one.
pub fn error_on(e: &ApiError, routes: Routes) -> Body {
    let mut error =
        serde_json::json!({ "title": e.title(), "code": e.code(), "detail": e.detail() });
    if let Some(field) = e.field() {
        error["source"] = serde_json::json!({ "parameter": field });
    }
    let mut response = json(
        status_on(e, routes),
        &serde_json::json!({ "errors": [error] }),
    );
    if let Some(secs) = e.retry_after() {
        response.add_header(header("Retry-After", secs));
    }
    if let ApiError::MethodNotAllowed { allow } = e {
        response.add_header(header("Allow", allow));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{OptionField, MAX_PIXELS_DECODED};
    use crate::fetch::FetchError;
    use crate::pages::REMOVE_BG_ERRORS;

    /// One of every error `POST /api/remove-bg` can answer (`ClientGone`
    /// reaches no client).
    fn remove_bg_errors() -> Vec<ApiError> {
        use ApiError::*;
        let options = OptionField::ALL.map(|field| InvalidOption {
            field,
            why: "x".into(),
        });
        options
            .into_iter()
            .chain([
                MissingApiKey,
                InvalidApiKey,
                PlanNotAllowed,
                AccountSuspended,
                PlainHttpOff { https_port: 8443 },
                QuotaExceeded { limit: 1 },
                TooManyConcurrentRequests { limit: 1 },
                MissingImageFile { found: None },
                UnknownField("x".into()),
                InvalidImageFileB64("x".into()),
                UnsupportedOption {
                    name: "x",
                    value: "y".into(),
                    offered: &["none"],
                },
                InvalidSize,
                InvalidType,
                InvalidChannels,
                InvalidImage("x".into()),
                ImageTooLarge {
                    width: 1,
                    height: 1,
                    most: MAX_PIXELS_DECODED,
                },
                NeedsTooMuchMemory {
                    width: 1,
                    height: 1,
                    need: 2,
                    at: "decoding the photo",
                    budget: 1,
                },
                ResolutionTooHigh {
                    width: 1,
                    height: 1,
                },
                InvalidRequest("x".into()),
                Fetch {
                    field: "image_url",
                    why: FetchError::NoneAllowed,
                },
                Fetch {
                    field: "image_url",
                    why: FetchError::Refused { host: "x".into() },
                },
                Fetch {
                    field: "image_url",
                    why: FetchError::Status(404),
                },
                RequestTimeout,
                HeaderTooLarge,
                FileTooLarge,
                UnsupportedImageFormat,
                Unavailable("x".into()),
                Internal(anyhow::anyhow!("x")),
            ])
            .collect()
    }

    #[test]
    fn the_documented_table_is_exactly_what_the_errors_answer() {
        // Two errors may share a code (an image too large in pixels or in
        // the memory it needs): one row documents both.
        let described: std::collections::BTreeSet<_> = remove_bg_errors()
            .iter()
            .map(|e| (status(e), e.code(), e.title()))
            .collect();
        let documented: Vec<_> = REMOVE_BG_ERRORS
            .iter()
            .map(|d| (d.status, d.code, d.title))
            .collect();
        for pair in &described {
            assert!(documented.contains(pair), "{pair:?} is not documented");
        }
        for pair in &documented {
            assert!(
                described.contains(pair),
                "{pair:?} is documented but never made"
            );
        }
        assert_eq!(described.len(), documented.len());
    }
}
