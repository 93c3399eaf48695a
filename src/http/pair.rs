//! `POST /api/pair` and `GET /api/pair/{id}`: a booth without a key asks
//! to pair, then polls until the operator has answered (`pairing`). HTTPS
//! only: the booth's code comes from the certificate it saw, and its key
//! must not cross the LAN in clear. Errors have the API's shape,
//! `{"errors": [{title, code, detail}]}`.

use super::respond::{self, header, Body};
use super::session::header_value;
use crate::app::AppState;
use crate::pairing::{AskError, Poll, BUTTON_SECONDS};
use serde_json::json;
use std::io::Read;
use tiny_http::Request;

/// A booth's name and nonce fit in far less.
const MAX_BODY_BYTES: u64 = 4096;

fn error(status: u16, code: &str, title: &str, detail: &str) -> Body {
    respond::json(
        status,
        &json!({ "errors": [{ "title": title, "code": code, "detail": detail }] }),
    )
}

/// The appliance's certificate's SHA-256, when this request came over HTTPS.
fn certificate_sha256<'s>(state: &'s AppState, request: &Request) -> Result<&'s [u8], Body> {
    let over_https = state.tls.as_ref().filter(|_| request.secure());
    let Some(tls) = over_https else {
        return Err(error(
            403,
            "https_required",
            "HTTPS required",
            "Pair over the appliance's HTTPS port (DNS-SD's https_port): the code and the key depend on its certificate.",
        ));
    };
    Ok(&tls.certificate_sha256)
}

pub fn ask(state: &AppState, request: &mut Request) -> Body {
    let certificate = match certificate_sha256(state, request) {
        Ok(sha256) => sha256,
        Err(refused) => return refused,
    };
    let invalid = |detail: &str| {
        error(
            400,
            "invalid_pairing_request",
            "Invalid pairing request",
            detail,
        )
    };
    let json_body = header_value(request, "Content-Type").is_some_and(|t| {
        t.trim()
            .to_ascii_lowercase()
            .starts_with("application/json")
    });
    if !json_body {
        return invalid(
            "Send JSON: {\"name\": \"the booth's name\", \"nonce\": \"32 random hex digits\"}.",
        );
    }
    let mut body = Vec::new();
    let read = request
        .as_reader()
        .take(MAX_BODY_BYTES + 1)
        .read_to_end(&mut body);
    if read.is_err() || body.len() as u64 > MAX_BODY_BYTES {
        return invalid("The body is larger than a pairing request (4 KiB at most).");
    }
    let Ok(fields) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return invalid("The body is not JSON.");
    };
    let field = |name| fields.get(name).and_then(|v| v.as_str());
    let (Some(name), Some(nonce)) = (field("name"), field("nonce")) else {
        return invalid("Both name and nonce are needed, as strings.");
    };
    let Some(address) = request.remote_addr().map(|a| a.ip()) else {
        return invalid("The client's address is unknown.");
    };
    let now = state.clock.now_unix();
    match state.pairings.ask(name, nonce, address, certificate, now) {
        Ok(id) => respond::json(
            202,
            &json!({
                "id": id,
                "expires_in": state.pairings.expire_seconds(),
                "button_seconds": BUTTON_SECONDS,
            }),
        ),
        Err(AskError::Invalid(why)) => invalid(why),
        Err(AskError::TooMany { retry_after }) => error(
            429,
            "too_many_pairing_requests",
            "Too many pairing requests",
            "This address, or all booths together, asked to pair too often; try again later.",
        )
        .with_header(header("Retry-After", retry_after)),
    }
}

pub fn poll(state: &AppState, request: &Request, id: &str) -> Body {
    if let Err(refused) = certificate_sha256(state, request) {
        return refused;
    }
    match state.pairings.poll(id, state.clock.now_unix()) {
        Poll::Pending { expires_in } => respond::json(
            202,
            &json!({ "status": "pending", "expires_in": expires_in }),
        ),
        Poll::Approved { key, account } => respond::json(
            200,
            &json!({ "status": "approved", "api_key": key.expose(), "account": account }),
        ),
        Poll::Refused => error(
            403,
            "pairing_refused",
            "Pairing refused",
            "The operator refused this booth.",
        ),
        Poll::Unknown => error(
            404,
            "pairing_unknown",
            "No such pairing request",
            "It expired, was never made, or its key was collected already; ask again.",
        ),
    }
}
