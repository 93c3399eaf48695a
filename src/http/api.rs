//! `POST /api/remove-bg`: authenticate, admit (concurrency and quota), read
//! the form, cut out, charge. Every failure returns before the charge, so
//! an error never costs the caller an image.

use super::multipart::read_form;
use super::respond::{self, header, Body};
use super::AppState;
use crate::domain::{ApiKey, Month, SizeMode};
use crate::error::ApiError;
use crate::limits::Refusal;
use tiny_http::Request;

pub struct Outcome {
    pub response: Body,
    pub account: Option<String>,
}

pub fn remove_bg(state: &AppState, request: &mut Request) -> Outcome {
    let mut account = None;
    let response = match handle(state, request, &mut account) {
        Ok(response) => response,
        Err(e) => {
            match &e {
                ApiError::Internal(cause) => log::error!("remove-bg failed: {cause:#}"),
                ApiError::Unavailable(why) => log::warn!("remove-bg refused: {why}"),
                _ => {}
            }
            respond::error(&e)
        }
    };
    Outcome { response, account }
}

fn header_value<'r>(request: &'r Request, name: &'static str) -> Option<&'r str> {
    request
        .headers()
        .iter()
        .find(|h| h.field.equiv(name))
        .map(|h| h.value.as_str())
}

fn handle(
    state: &AppState,
    request: &mut Request,
    account_name: &mut Option<String>,
) -> Result<Body, ApiError> {
    if state.is_stopping() {
        return Err(ApiError::Unavailable("shutting down".into()));
    }
    let key = header_value(request, "X-Api-Key").ok_or(ApiError::MissingApiKey)?;
    let key = ApiKey::parse(key.trim()).ok_or(ApiError::InvalidApiKey)?;
    let caller = state
        .store
        .authenticate(&key)
        .map_err(|e| ApiError::Unavailable(format!("database: {e}")))?;
    let caller = caller.ok_or(ApiError::InvalidApiKey)?;
    *account_name = Some(caller.account.name.clone());
    let plan = &caller.account.plan;
    if !plan.api_access {
        return Err(ApiError::PlanNotAllowed);
    }
    state
        .pipeline
        .inference
        .ready()
        .map_err(|e| ApiError::Unavailable(e.to_string()))?;

    let month = Month::of_unix(state.clock.now_unix());
    let permit = state
        .limiter
        .admit(
            caller.account.id,
            plan.concurrency,
            plan.monthly_limit,
            || state.store.usage(caller.account.id, month),
        )
        .map_err(|e| ApiError::Unavailable(format!("database: {e}")))?
        .map_err(|refusal| match refusal {
            Refusal::TooManyConcurrent { limit } => ApiError::TooManyConcurrentRequests { limit },
            Refusal::QuotaExceeded { limit } => ApiError::QuotaExceeded { limit },
        })?;

    let content_type = header_value(request, "Content-Type").map(str::to_owned);
    let content_length = request.body_length().map(|n| n as u64);
    let form = read_form(content_type.as_deref(), content_length, request.as_reader())?;
    let size = match form.size.as_deref() {
        None => SizeMode::Auto,
        Some(s) => SizeMode::parse(s.trim()).ok_or(ApiError::InvalidSize)?,
    };
    let image = form.image_file.ok_or(ApiError::MissingImageFile)?;
    let cut = state.pipeline.cut_out(&image, size)?;

    let now = state.clock.now_unix();
    let used = permit
        .charge(|| state.store.charge(&caller, month, now))
        .map_err(|e| {
            ApiError::Unavailable(format!("database: could not record the charge: {e}"))
        })?;

    // Content-Length rather than chunked: clients saving a file like to know its size.
    let mut response = tiny_http::Response::from_data(cut.png)
        .with_chunked_threshold(usize::MAX)
        .with_header(header("Content-Type", "image/png"))
        .with_header(header("X-Width", cut.width))
        .with_header(header("X-Height", cut.height));
    if let Some(limit) = plan.monthly_limit {
        response.add_header(header("X-RateLimit-Limit", limit));
        response.add_header(header("X-RateLimit-Remaining", limit.saturating_sub(used)));
        response.add_header(header("X-RateLimit-Reset", month.next().start_unix()));
    }
    Ok(response)
}
