//! Building responses: JSON errors in the documented shape, and PNGs.

use crate::error::ApiError;
use std::io::Cursor;
use tiny_http::{Header, Response};

pub type Body = Response<Cursor<Vec<u8>>>;

pub fn header(name: &str, value: impl ToString) -> Header {
    Header::from_bytes(name.as_bytes(), value.to_string().as_bytes())
        .expect("header names and values here are ASCII")
}

pub fn json(status: u16, value: &serde_json::Value) -> Body {
    Response::from_data(value.to_string().into_bytes())
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
        | ResolutionTooHigh { .. }
        | InvalidRequest(_) => 400,
        MissingApiKey | InvalidApiKey => 401,
        QuotaExceeded { .. } => 402,
        PlanNotAllowed | AccountSuspended => 403,
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

pub fn error(e: &ApiError) -> Body {
    let body = serde_json::json!({
        "errors": [{ "title": e.title(), "code": e.code(), "detail": e.detail() }]
    });
    let mut response = json(status(e), &body);
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
                QuotaExceeded { limit: 1 },
                TooManyConcurrentRequests { limit: 1 },
                MissingImageFile { found: None },
                UnknownField("x".into()),
                InvalidImageFileB64("x".into()),
                UnsupportedOption {
                    name: "x",
                    value: "y".into(),
                    offered: &[],
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
                ResolutionTooHigh {
                    width: 1,
                    height: 1,
                },
                InvalidRequest("x".into()),
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
        let described: Vec<_> = remove_bg_errors()
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
