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

pub fn error(e: &ApiError) -> Body {
    let body = serde_json::json!({
        "errors": [{ "title": e.title(), "code": e.code(), "detail": e.detail() }]
    });
    let mut response = json(e.status(), &body);
    if let Some(secs) = e.retry_after() {
        response.add_header(header("Retry-After", secs));
    }
    if let ApiError::MethodNotAllowed { allow } = e {
        response.add_header(header("Allow", allow));
    }
    response
}
