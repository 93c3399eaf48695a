//! Dashboard sessions: the cookie, who it belongs to, and CSRF tokens.
//!
//! A session is a 256-bit random token in an `HttpOnly`, `SameSite=Strict`
//! cookie (`Secure` behind TLS); the database keeps only its SHA-256 and the
//! session's CSRF token, which every form of a signed-in page carries. The
//! sign-in and setup forms, which come before any session, carry a token
//! that must match a cookie of their own (double submit).

use super::respond::header;
use crate::app::AppState;
use crate::secrets::{constant_time_eq, random_token, sha256_hex};
use crate::store::{Principal, StoreError};
use tiny_http::{Header, Request};

pub const SESSION_COOKIE: &str = "cutout_session";
/// The CSRF token of the forms shown before signing in.
pub const FORM_COOKIE: &str = "cutout_form";
pub const SESSION_SECONDS: i64 = 12 * 3600;

/// A signed-in visitor.
pub struct Auth {
    pub principal: Principal,
    pub csrf: String,
    pub token_hash: String,
}

impl Auth {
    pub fn csrf_matches(&self, submitted: Option<&str>) -> bool {
        submitted.is_some_and(|s| constant_time_eq(s, &self.csrf))
    }
}

pub fn header_value<'r>(request: &'r Request, name: &'static str) -> Option<&'r str> {
    request
        .headers()
        .iter()
        .find(|h| h.field.equiv(name))
        .map(|h| h.value.as_str())
}

pub fn cookie<'r>(request: &'r Request, name: &str) -> Option<&'r str> {
    request
        .headers()
        .iter()
        .filter(|h| h.field.equiv("Cookie"))
        .flat_map(|h| h.value.as_str().split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// Served over TLS, directly or behind a reverse proxy that says so.
pub fn is_https(request: &Request) -> bool {
    request.secure()
        || header_value(request, "X-Forwarded-Proto")
            .is_some_and(|p| p.eq_ignore_ascii_case("https"))
}

/// A `Set-Cookie` header; `max_age` 0 deletes the cookie.
pub fn set_cookie(request: &Request, name: &str, value: &str, max_age: i64) -> Header {
    let secure = if is_https(request) { "; Secure" } else { "" };
    header(
        "Set-Cookie",
        format!("{name}={value}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}"),
    )
}

/// The visitor's live session, if the cookie names one.
pub fn auth(state: &AppState, request: &Request, now: i64) -> Result<Option<Auth>, StoreError> {
    let Some(token) = cookie(request, SESSION_COOKIE) else {
        return Ok(None);
    };
    let token_hash = sha256_hex(token);
    Ok(state.store.session(&token_hash, now)?.map(|s| Auth {
        principal: s.principal,
        csrf: s.csrf,
        token_hash,
    }))
}

/// Starts a session for `principal`; returns the cookie to set.
pub fn start(
    state: &AppState,
    request: &Request,
    principal: Principal,
    now: i64,
) -> Result<Header, StoreError> {
    let token = random_token();
    state.store.create_session(
        &sha256_hex(&token),
        principal,
        &random_token(),
        now + SESSION_SECONDS,
        now,
    )?;
    Ok(set_cookie(request, SESSION_COOKIE, &token, SESSION_SECONDS))
}

/// The token for a form shown before signing in: the visitor's form cookie,
/// or a new one with the cookie that carries it.
pub fn form_token(request: &Request) -> (String, Option<Header>) {
    match cookie(request, FORM_COOKIE).filter(|t| t.len() == 64) {
        Some(token) => (token.to_owned(), None),
        None => {
            let token = random_token();
            let set = set_cookie(request, FORM_COOKIE, &token, SESSION_SECONDS);
            (token, Some(set))
        }
    }
}

/// Whether a pre-sign-in form's token matches its cookie.
pub fn form_token_matches(request: &Request, submitted: Option<&str>) -> bool {
    match (cookie(request, FORM_COOKIE), submitted) {
        (Some(cookie), Some(submitted)) => {
            cookie.len() == 64 && constant_time_eq(cookie, submitted)
        }
        _ => false,
    }
}
