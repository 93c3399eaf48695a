//! The dashboard's routes: sign-in and setup (`sign_in`), the operator's
//! pages (`admin`), the account user's pages (`account`) and Try it
//! (`try_it`), the API docs, and the embedded assets. Who may see what is
//! decided here, once per route, from the session.

mod account;
mod admin;
mod sign_in;
mod try_it;

use super::api::{admit_and_read_form, parse_channels, parse_finish, parse_size, parse_subject};
use super::form::Form;
use super::respond::{body, header, Body};
use super::session::{self, form_token, form_token_matches, header_value, Auth};
use crate::app::throttle::{
    device_cookie, device_nonce, Attempt, DEVICE_COOKIE, DEVICE_COOKIE_SECONDS,
};
use crate::app::tries::TryResult;
use crate::app::{Admission, AppState};
use crate::domain::{AccountName, KeyLabel, Month, ACCOUNT_NAME_RULE, ADMIN_LOGIN, KEY_LABEL_RULE};
use crate::error::ApiError;
use crate::imaging;
use crate::pages::{
    self as view, openapi, AccountForms, AccountView, KeyNotice, Nav, NewAccount, StatusView,
    TryView,
};
use crate::secrets::{check_password_policy, hash_password, verify_password};
use crate::store::{Account, Caller, Principal, StoreError};
use account::*;
use admin::*;
use maud::Markup;
use sign_in::*;
use std::collections::HashMap;
use std::io::Read;
use std::time::Instant;
use tiny_http::{Method, Request};
use try_it::*;

/// URL-encoded forms are small; anything bigger is not one of ours.
const MAX_FORM_BYTES: u64 = 64 * 1024;

/// Why a dashboard request ends without its page.
enum Failure {
    SignIn,
    Forbidden(&'static str),
    NotFound,
    BadCsrf,
    BadForm,
    Store(StoreError),
    /// The data directory's backdrops cannot be read or written.
    Disk(std::io::Error),
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Failure {
        match e {
            StoreError::NoSuchAccount(_) | StoreError::NoSuchKey(_) => Failure::NotFound,
            e => Failure::Store(e),
        }
    }
}

type Handled = Result<Body, Failure>;

/// The response for a dashboard path, or `None` when `path` is not one.
pub fn route(state: &AppState, method: &Method, path: &str, request: &mut Request) -> Option<Body> {
    let now = state.clock.now_unix();
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let get = matches!(method, Method::Get | Method::Head);
    let post = *method == Method::Post;
    // Assets are the same for everyone: no session lookup (a database
    // query) for each stylesheet, script and icon.
    let asset = match segments.as_slice() {
        ["assets", "style.css"] if get => Some(("text/css; charset=utf-8", view::STYLE_CSS)),
        ["assets", "app.js"] if get => Some(("text/javascript; charset=utf-8", view::APP_JS)),
        ["favicon.svg"] if get => Some(("image/svg+xml", view::FAVICON_SVG)),
        _ => None,
    };
    if let Some((content_type, text)) = asset {
        return Some(
            body(text.as_bytes().to_vec())
                .with_header(header("Content-Type", content_type))
                .with_header(header("Cache-Control", "public, max-age=300")),
        );
    }
    let auth = match session::auth(state, request, now) {
        Ok(auth) => auth,
        Err(e) => return Some(failure(None, Failure::Store(e))),
    };
    let auth = auth.as_ref();
    let result = match segments.as_slice() {
        [""] if get => Ok(redirect(match auth.map(|a| a.principal) {
            None => "/login",
            Some(Principal::Admin) => "/admin",
            Some(Principal::Account(_)) => "/account",
        })),
        ["login"] if get && auth.is_some() => Ok(redirect("/")),
        ["login"] if get => Ok(login_form(request, "", None, 200)),
        ["login"] if post => sign_in(state, request, now),
        ["logout"] if post => sign_out(state, request, auth),
        ["setup"] if get => setup_form(state, request, now),
        ["setup"] if post => setup(state, request, now),
        ["setup", "code"] if post => setup_code(state, request, now),
        ["setup", "button"] if post => setup_wait_for_button(state, request, now),
        ["setup", "restore"] if post => setup_restore(state, request, now),
        ["docs"] if get => docs(state, request, auth),
        ["admin", rest @ ..] => match auth {
            Some(auth) if auth.principal == Principal::Admin => {
                admin(&Ctx { state, auth, now }, request, method, rest)
            }
            Some(_) => Err(Failure::Forbidden(
                "This page is for the appliance's operator.",
            )),
            None => Err(Failure::SignIn),
        },
        [first @ ("account" | "try"), rest @ ..] => match auth.map(|a| (a, a.principal)) {
            Some((auth, Principal::Account(id))) => user(
                &Ctx { state, auth, now },
                request,
                id,
                method,
                (first, rest),
            ),
            Some(_) => Err(Failure::Forbidden(
                "This page is for account users. As the operator, manage accounts under Accounts.",
            )),
            None => Err(Failure::SignIn),
        },
        _ => return None,
    };
    Some(result.unwrap_or_else(|f| failure(auth, f)))
}

fn failure(auth: Option<&Auth>, failure: Failure) -> Body {
    let nav = nav_for(auth, None);
    let (status, title, message) = match failure {
        Failure::SignIn => return redirect("/login"),
        Failure::Forbidden(why) => (403, "Not for you", why),
        Failure::NotFound => (404, "Not found", "There is nothing here. It may have been removed, or the address is mistyped."),
        Failure::BadCsrf => (403, "Form expired", "This form has expired or came from another site. Go back, reload the page and try again."),
        Failure::BadForm => (400, "Bad form", "The form could not be read. Reload the page and try again."),
        Failure::Store(e) => {
            log::error!("dashboard: {e}");
            (503, "Database unavailable", "The appliance cannot read or write its database right now. Try again in a moment; if it persists, check the appliance's disk, or the PostgreSQL server it shares.")
        }
        Failure::Disk(e) => {
            log::error!("dashboard: backdrops: {e}");
            (503, "Disk unavailable", "The appliance cannot read or write its backdrops in its data directory right now. If it persists, check the appliance's disk (is it full?).")
        }
    };
    html(status, view::message_page(title, &nav, message))
}

fn nav_for<'a>(auth: Option<&'a Auth>, account: Option<&'a str>) -> Nav<'a> {
    match auth {
        None => Nav::Anonymous,
        Some(a) if a.principal == Principal::Admin => Nav::Admin { csrf: &a.csrf },
        Some(a) => Nav::User {
            account: account.unwrap_or(""),
            csrf: &a.csrf,
        },
    }
}

// ---- responses ----

pub fn html(status: u16, markup: Markup) -> Body {
    body(markup.into_string().into_bytes())
        .with_status_code(status)
        .with_header(header("Content-Type", "text/html; charset=utf-8"))
        .with_header(header("Cache-Control", "no-store"))
}

fn redirect(location: &str) -> Body {
    body(Vec::new())
        .with_status_code(303)
        .with_header(header("Location", location))
        .with_header(header("Cache-Control", "no-store"))
}

// ---- reading requests ----

/// The fields of an `application/x-www-form-urlencoded` body; the first of
/// a repeated name wins.
struct Fields(HashMap<String, String>);

impl Fields {
    fn read(request: &mut Request) -> Result<Fields, Failure> {
        let urlencoded = header_value(request, "Content-Type").is_some_and(|t| {
            t.trim()
                .to_ascii_lowercase()
                .starts_with("application/x-www-form-urlencoded")
        });
        if !urlencoded
            || request
                .body_length()
                .is_some_and(|n| n as u64 > MAX_FORM_BYTES)
        {
            return Err(Failure::BadForm);
        }
        let mut body = Vec::new();
        request
            .as_reader()
            .take(MAX_FORM_BYTES + 1)
            .read_to_end(&mut body)
            .map_err(|_| Failure::BadForm)?;
        if body.len() as u64 > MAX_FORM_BYTES {
            return Err(Failure::BadForm);
        }
        let mut fields = HashMap::new();
        for (k, v) in form_urlencoded::parse(&body) {
            fields
                .entry(k.into_owned())
                .or_insert_with(|| v.into_owned());
        }
        Ok(Fields(fields))
    }

    fn get(&self, name: &str) -> &str {
        self.0.get(name).map_or("", String::as_str)
    }

    fn csrf(&self) -> Option<&str> {
        self.0.get("csrf").map(String::as_str)
    }
}

fn query(request: &Request, name: &str) -> Option<String> {
    let (_, query) = request.url().split_once('?')?;
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// What a finished action says on the page it leads to. Only these fixed
/// texts: nothing from the address is ever echoed.
fn flash(request: &Request) -> Option<&'static str> {
    Some(match query(request, "done")?.as_str() {
        "created" => "Account created.",
        "plan" => "Plan changed. The new limits apply from the next call.",
        "password" => {
            "Password set. The user was signed out everywhere and signs in with the new one."
        }
        "suspended" => "Account suspended. Its keys are refused from now on.",
        "enabled" => "Account re-enabled. Its keys work again.",
        "revoked" => "Key revoked. Calls with it now get 401 invalid_api_key.",
        "signed-out" => "You are signed out.",
        "paired" => "Booth paired. It collects its key at its next poll, within seconds.",
        "refused" => "Request refused. The booth gets nothing.",
        "backdrop-added" => "Backdrop added. Booths offer it from their next guest.",
        "replaced-deleted" => {
            "Deleted what the restore replaced. The restore can no longer be undone."
        }
        "killed-forgotten" => {
            "The next start loads those models again. Restart the service when memory is free."
        }
        "plain-http-off" => {
            "Plain HTTP is off for the API. Keys sent there now get 403 plain_http_off."
        }
        "plain-http-on" => {
            "Plain HTTP is on for the API again. Keys sent there cross the LAN in clear."
        }
        "backdrop-deleted" => {
            "Backdrop deleted. A booth that names it now gets its photos cut out on no background."
        }
        _ => return None,
    })
}

// ---- a signed-in request ----

/// A signed-in request's context.
struct Ctx<'a> {
    state: &'a AppState,
    auth: &'a Auth,
    now: i64,
}

impl Ctx<'_> {
    fn csrf(&self) -> &str {
        &self.auth.csrf
    }

    /// The posted URL-encoded form, once its CSRF token checks out.
    fn fields(&self, request: &mut Request) -> Result<Fields, Failure> {
        let fields = Fields::read(request)?;
        if self.auth.csrf_matches(fields.csrf()) {
            Ok(fields)
        } else {
            Err(Failure::BadCsrf)
        }
    }
}

// ---- for everyone ----

fn docs(state: &AppState, request: &Request, auth: Option<&Auth>) -> Handled {
    let scheme = if session::is_https(request) {
        "https"
    } else {
        "http"
    };
    let host = header_value(request, "Host").map_or_else(|| state.listen.clone(), str::to_owned);
    let base_url = format!("{scheme}://{host}");
    let (account, prefix) = match auth.map(|a| a.principal) {
        Some(Principal::Account(id)) => {
            let account = state.store.account_by_id(id)?;
            let keys = state.store.keys_of(id)?;
            let newest = keys
                .iter()
                .rev()
                .find(|k| k.revoked_at.is_none())
                .map(|k| k.prefix.clone());
            (Some(account.name), newest)
        }
        _ => (None, None),
    };
    let nav = nav_for(auth, account.as_deref());
    Ok(html(
        200,
        view::docs_page(&nav, &base_url, prefix.as_deref()),
    ))
}

pub fn openapi_json() -> Body {
    let body =
        serde_json::to_vec_pretty(&openapi::document(env!("CARGO_PKG_VERSION"))).expect("JSON");
    super::respond::body(body).with_header(header("Content-Type", "application/json"))
}
