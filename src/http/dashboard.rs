//! The dashboard's routes: sign-in and setup, the operator's pages, the
//! account user's pages and Try it, the API docs, and the embedded assets.
//! Who may see what is decided here, once per route, from the session.

use super::api::{admit, cut_out_and_charge, parse_size, parse_subject, read_request_form};
use super::multipart::Form;
use super::respond::{header, Body};
use super::session::{self, form_token, form_token_matches, header_value, Auth};
use super::throttle::{device_cookie, device_nonce, Attempt, DEVICE_COOKIE, DEVICE_COOKIE_SECONDS};
use super::tries::TryResult;
use super::AppState;
use crate::dashboard::{
    self as view, openapi, AccountForms, AccountView, KeyNotice, Nav, NewAccount, StatusView,
    TryView,
};
use crate::domain::{AccountName, KeyLabel, Month, ACCOUNT_NAME_RULE, ADMIN_LOGIN, KEY_LABEL_RULE};
use crate::error::ApiError;
use crate::imaging;
use crate::limits::Permit;
use crate::pipeline::Place;
use crate::secrets::{check_password_policy, constant_time_eq, hash_password, verify_password};
use crate::store::{Account, Caller, Principal, StoreError};
use maud::Markup;
use std::collections::HashMap;
use std::io::Read;
use std::time::Instant;
use tiny_http::{Method, Request, Response};

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
            Response::from_data(text.as_bytes().to_vec())
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
        ["setup"] if get => setup_form(state, request),
        ["setup"] if post => setup(state, request, now),
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
            (503, "Database unavailable", "The appliance cannot read or write its database right now. Try again in a moment; if it persists, check the appliance's disk.")
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
    Response::from_data(markup.into_string().into_bytes())
        .with_status_code(status)
        .with_header(header("Content-Type", "text/html; charset=utf-8"))
        .with_header(header("Cache-Control", "no-store"))
}

fn redirect(location: &str) -> Body {
    Response::from_data(Vec::new())
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
        _ => return None,
    })
}

// ---- signing in and out ----

fn login_form(request: &Request, name: &str, error: Option<&str>, status: u16) -> Body {
    let (csrf, set) = form_token(request);
    let flash = if error.is_none() {
        flash(request)
    } else {
        None
    };
    let mut page = html(status, view::login_page(&csrf, name, error, flash));
    if let Some(set) = set {
        page.add_header(set);
    }
    page
}

fn sign_in(state: &AppState, request: &mut Request, now: i64) -> Handled {
    let fields = Fields::read(request)?;
    if !form_token_matches(request, fields.csrf()) {
        return Err(Failure::BadCsrf);
    }
    let (name, password) = (fields.get("name").trim(), fields.get("password"));
    let device = match session::cookie(request, DEVICE_COOKIE) {
        Some(cookie) => device_nonce(&state.store.device_key()?, cookie, name),
        None => None,
    };
    let address = request.remote_addr().map(|a| a.ip());
    let attempt = Attempt {
        name,
        address,
        device,
    };
    // Counted before the password is checked, so parallel guesses cannot
    // all pass the limit before the first of them fails.
    let ticket = match state.dashboard.throttle.begin(&attempt, now) {
        Ok(ticket) => ticket,
        Err(wait) => {
            let minutes = (wait + 59) / 60;
            let why = format!("Too many failed sign-ins for this name or from this device. Try again in {minutes} minute{}.", if minutes == 1 { "" } else { "s" });
            return Ok(login_form(request, name, Some(&why), 429));
        }
    };
    let login = if name == ADMIN_LOGIN {
        Some((Principal::Admin, state.store.admin_password_hash()?, false))
    } else {
        state
            .store
            .account_login(name)?
            .map(|(a, hash)| (Principal::Account(a.id), hash, a.suspended))
    };
    let right = verify_password(password, login.as_ref().and_then(|l| l.1.as_deref()));
    let from = address.map_or("-".into(), |a| a.to_string());
    let known = login.is_some();
    let Some((principal, _, suspended)) = login.filter(|_| right) else {
        // A known name is safe to log (the AccountName rule); an unknown
        // one may be a password typed into the wrong field, or 64 KB.
        let who = if known {
            name.to_owned()
        } else {
            format!("an unknown name ({} bytes)", name.len())
        };
        log::warn!("failed sign-in for {who} from {from}");
        return Ok(login_form(
            request,
            name,
            Some("Wrong name or password."),
            401,
        ));
    };
    if suspended {
        // Still counted: otherwise a suspended account could be guessed
        // without limit, the 403 telling when the guess was right.
        log::warn!("refused sign-in to suspended account {name} from {from}");
        return Ok(login_form(
            request,
            name,
            Some("This account is suspended. Ask the appliance's operator to re-enable it."),
            403,
        ));
    }
    state.dashboard.throttle.succeeded(ticket);
    // Before the session is stored, so a failure leaves none behind.
    let device = device_cookie_header(state, request, name)?;
    let cookie = session::start(state, request, principal, now)?;
    log::info!("{name} signed in");
    let mut response = redirect(if principal == Principal::Admin {
        "/admin"
    } else {
        "/account"
    });
    response.add_header(cookie);
    response.add_header(device);
    response.add_header(session::set_cookie(request, session::FORM_COOKIE, "", 0));
    Ok(response)
}

/// Marks this browser as one that signed in as `name`: its later attempts
/// count only against itself (see throttle.rs).
fn device_cookie_header(
    state: &AppState,
    request: &Request,
    name: &str,
) -> Result<tiny_http::Header, Failure> {
    let value = device_cookie(&state.store.device_key()?, name);
    Ok(session::set_cookie(
        request,
        DEVICE_COOKIE,
        &value,
        DEVICE_COOKIE_SECONDS,
    ))
}

fn sign_out(state: &AppState, request: &mut Request, auth: Option<&Auth>) -> Handled {
    let fields = Fields::read(request)?;
    let Some(auth) = auth else {
        return Ok(redirect("/login"));
    };
    if !auth.csrf_matches(fields.csrf()) {
        return Err(Failure::BadCsrf);
    }
    state.store.end_session(&auth.token_hash)?;
    state.dashboard.tries.forget(&auth.token_hash);
    let mut response = redirect("/login?done=signed-out");
    response.add_header(session::set_cookie(request, session::SESSION_COOKIE, "", 0));
    Ok(response)
}

/// Whether `token` is the one-time link printed at first start, and no
/// operator password is set yet (by the link or by the CLI).
fn setup_token_matches(
    state: &AppState,
    expected: &Option<String>,
    token: &str,
) -> Result<bool, Failure> {
    Ok(state.store.admin_password_hash()?.is_none()
        && expected
            .as_deref()
            .is_some_and(|e| constant_time_eq(e, token)))
}

fn setup_token(state: &AppState) -> std::sync::MutexGuard<'_, Option<String>> {
    state
        .dashboard
        .setup_token
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

fn setup_form(state: &AppState, request: &Request) -> Handled {
    let token = query(request, "token").unwrap_or_default();
    if !setup_token_matches(state, &setup_token(state), &token)? {
        return Ok(setup_gone());
    }
    let (csrf, set) = form_token(request);
    let mut page = html(200, view::setup_page(&token, &csrf, None));
    if let Some(set) = set {
        page.add_header(set);
    }
    Ok(page)
}

fn setup_gone() -> Body {
    html(404, view::message_page("Setup link not valid", &Nav::Anonymous,
        "This setup link has been used or is not the current one. If the operator password is set, sign in as admin; to reset it, run `cutout admin set-password` on the appliance."))
}

fn setup(state: &AppState, request: &mut Request, now: i64) -> Handled {
    let fields = Fields::read(request)?;
    if !form_token_matches(request, fields.csrf()) {
        return Err(Failure::BadCsrf);
    }
    let token = fields.get("token");
    // Held until the password is stored, so two submissions cannot both win.
    let mut expected = setup_token(state);
    let valid = setup_token_matches(state, &expected, token)?;
    if !valid {
        return Ok(setup_gone());
    }
    let (password, confirm) = (fields.get("password"), fields.get("confirm"));
    let error = check_password_policy(password)
        .err()
        .or((password != confirm).then_some("The two passwords differ."));
    if let Some(error) = error {
        let csrf = fields.csrf().unwrap_or_default();
        return Ok(html(400, view::setup_page(token, csrf, Some(error))));
    }
    // Before the password is stored, so a failure leaves the link usable.
    let device = device_cookie_header(state, request, ADMIN_LOGIN)?;
    state
        .store
        .set_admin_password(&hash_password(password), now)?;
    *expected = None;
    log::info!("operator password set through the setup link");
    let mut response = redirect("/admin");
    response.add_header(session::start(state, request, Principal::Admin, now)?);
    response.add_header(device);
    Ok(response)
}

// ---- the operator ----

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

fn admin(cx: &Ctx, request: &mut Request, method: &Method, rest: &[&str]) -> Handled {
    let get = matches!(method, Method::Get | Method::Head);
    let post = *method == Method::Post;
    match rest {
        [] | [""] if get => accounts_page(cx, &NewAccount::default(), flash(request), 200),
        ["status"] if get => Ok(html(200, view::status_page(cx.csrf(), &status_view(cx)))),
        ["accounts"] if post => create_account(cx, &cx.fields(request)?),
        ["accounts", name] if get => {
            account_page(cx, name, &AccountForms::default(), flash(request), 200)
        }
        ["accounts", name, action] if post => {
            let fields = cx.fields(request)?;
            let (store, account) = (&cx.state.store, cx.state.store.account(name)?);
            let done = match *action {
                "plan" => match store.set_plan(&account.name, fields.get("plan")) {
                    Err(StoreError::NoSuchPlan(..)) => {
                        let forms = AccountForms {
                            plan_error: Some("Choose one of the listed plans.".into()),
                            ..Default::default()
                        };
                        return account_page(cx, name, &forms, None, 400);
                    }
                    other => other.map(|()| "plan")?,
                },
                "password" => {
                    let password = fields.get("password");
                    if let Err(why) = check_password_policy(password) {
                        let forms = AccountForms {
                            password_error: Some(why.into()),
                            ..Default::default()
                        };
                        return account_page(cx, name, &forms, None, 400);
                    }
                    store.set_account_password(&account.name, &hash_password(password))?;
                    log::info!("operator set the password of account {}", account.name);
                    "password"
                }
                "suspension" => {
                    let suspend = fields.get("suspended") == "true";
                    store.set_suspended(&account.name, suspend, cx.now)?;
                    let done = if suspend { "suspended" } else { "enabled" };
                    log::info!("operator {done} account {}", account.name);
                    done
                }
                _ => return Err(Failure::NotFound),
            };
            Ok(redirect(&format!(
                "/admin/accounts/{}?done={done}",
                account.name
            )))
        }
        _ => Err(Failure::NotFound),
    }
}

fn accounts_page(cx: &Ctx, form: &NewAccount, flash: Option<&str>, status: u16) -> Handled {
    let month = Month::of_unix(cx.now);
    let accounts = cx.state.store.accounts(month)?;
    let plans = cx.state.store.plans()?;
    let page = view::admin_accounts(cx.csrf(), month, &accounts, &plans, form, flash);
    Ok(html(status, page))
}

fn create_account(cx: &Ctx, fields: &Fields) -> Handled {
    let store = &cx.state.store;
    let mut form = NewAccount {
        name: fields.get("name").trim().to_owned(),
        plan: fields.get("plan").to_owned(),
        ..Default::default()
    };
    let password = fields.get("password");
    let name = AccountName::parse(&form.name);
    if name.is_none() {
        form.name_error = Some(ACCOUNT_NAME_RULE.into());
    }
    if !password.is_empty() {
        form.password_error = check_password_policy(password).err().map(Into::into);
    }
    if let (Some(name), None) = (&name, &form.password_error) {
        match store.create_account(name, &form.plan, cx.now) {
            Ok(_) => {
                if !password.is_empty() {
                    store.set_account_password(name.as_str(), &hash_password(password))?;
                }
                log::info!("operator created account {name} on plan {}", form.plan);
                return Ok(redirect(&format!("/admin/accounts/{name}?done=created")));
            }
            Err(StoreError::AccountExists(_)) => {
                form.name_error = Some(format!("An account named {name} already exists."))
            }
            Err(StoreError::NoSuchPlan(..)) => {
                form.name_error = Some("Choose one of the listed plans.".into())
            }
            Err(e) => return Err(e.into()),
        }
    }
    accounts_page(cx, &form, None, 400)
}

fn account_page(
    cx: &Ctx,
    name: &str,
    forms: &AccountForms,
    flash: Option<&str>,
    status: u16,
) -> Handled {
    let store = &cx.state.store;
    let account = store.account(name)?;
    let month = Month::of_unix(cx.now);
    let shown = AccountView {
        used: store.usage(account.id, month)?,
        keys: store.keys_of(account.id)?,
        account,
        month,
    };
    let plans = store.plans()?;
    let page = view::admin_account(cx.csrf(), &shown, &plans, forms, flash);
    Ok(html(status, page))
}

fn status_view(cx: &Ctx) -> StatusView {
    let (state, now) = (cx.state, cx.now);
    let model = state.pipeline.default_model();
    let inference = &model.inference;
    let today = state.stats.today(now);
    let (median_latency, latency_samples) = state.stats.median_latency();
    let queue = &state.pipeline.queue;
    StatusView {
        model: model.spec.name.clone(),
        engine: inference.engine_name(),
        model_state: match inference.ready() {
            Ok(()) => "loaded".into(),
            Err(e) => e.to_string(),
        },
        model_load: state.stats.model_load(),
        database: match state.database_writable() {
            Ok(()) => "writable".into(),
            Err(e) => format!("not writable: {e}"),
        },
        queue_depth: queue.depth(),
        queue_capacity: queue.capacity(),
        calls_today: today.calls,
        client_errors_today: today.client_errors,
        server_errors_today: today.server_errors,
        median_latency,
        latency_samples,
        led: led_description(state),
        uptime: state.stats.uptime(),
        version: env!("CARGO_PKG_VERSION"),
        cpu_celsius: cpu_celsius(&state.thermal_dir),
        https: state
            .tls
            .as_ref()
            .map(|t| (t.addr.port(), t.fingerprint.clone())),
        board: state.board.clone(),
        engine_note: state.engine_note.clone(),
        bench: crate::bench::Report::load(&state.data_dir),
    }
}

fn led_description(state: &AppState) -> String {
    let shows = state.led_state().name();
    match state.led_backend.as_str() {
        "none" => format!("no LED configured (the appliance is {shows})"),
        backend => format!("{shows} ({backend} LED)"),
    }
}

/// The CPU's temperature from Linux's thermal zones: the zone named for the
/// CPU (or SoC) if there is one, else the first.
fn cpu_celsius(thermal_dir: &std::path::Path) -> Option<f64> {
    let mut zones: Vec<_> = std::fs::read_dir(thermal_dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("thermal_zone"))
        })
        .collect();
    zones.sort();
    let kind = |p: &std::path::PathBuf| {
        std::fs::read_to_string(p.join("type"))
            .unwrap_or_default()
            .to_lowercase()
    };
    let zone = zones
        .iter()
        .find(|p| {
            ["cpu", "soc", "x86_pkg"]
                .iter()
                .any(|k| kind(p).contains(k))
        })
        .or(zones.first())?;
    let millis: f64 = std::fs::read_to_string(zone.join("temp"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(millis / 1000.0)
}

// ---- the account user ----

fn user(
    cx: &Ctx,
    request: &mut Request,
    account_id: i64,
    method: &Method,
    path: (&str, &[&str]),
) -> Handled {
    let (state, now) = (cx.state, cx.now);
    let account = state.store.account_by_id(account_id)?;
    let get = matches!(method, Method::Get | Method::Head);
    let post = *method == Method::Post;
    match path {
        ("account", []) if get => home(cx, account, None, None, flash(request), 200),
        ("account", ["keys"]) if post => {
            let fields = cx.fields(request)?;
            let Some(label) = KeyLabel::parse(fields.get("label")) else {
                return home(cx, account, None, Some(KEY_LABEL_RULE), None, 400);
            };
            let key = state
                .store
                .create_key_for(account.id, label.as_str(), now)?;
            log::info!("account {} created key {}", account.name, key.prefix());
            let notice = KeyNotice {
                key: &key,
                label: label.as_str(),
            };
            home(cx, account, Some(notice), None, None, 200)
        }
        ("account", ["keys", prefix, "revoke"]) if get => {
            let keys = state.store.keys_of(account.id)?;
            let key = keys
                .iter()
                .find(|k| k.prefix == *prefix && k.revoked_at.is_none())
                .ok_or(Failure::NotFound)?;
            Ok(html(
                200,
                view::revoke_confirm(cx.csrf(), &account.name, key),
            ))
        }
        ("account", ["keys", prefix, "revoke"]) if post => {
            cx.fields(request)?;
            state.store.revoke_key_of(account.id, prefix, now)?;
            log::info!("account {} revoked key {prefix}", account.name);
            Ok(redirect("/account?done=revoked"))
        }
        ("try", []) if get => {
            let result = state
                .dashboard
                .tries
                .with(&cx.auth.token_hash, now, |r| TryView {
                    serial: r.serial,
                    width: r.width,
                    height: r.height,
                });
            try_page(cx, &account, result.as_ref(), None, 200)
        }
        ("try", []) if post => try_it(cx, request, account),
        ("try", [file @ ("original" | "result.png")]) if get => {
            let download = query(request, "download").is_some();
            let tries = &state.dashboard.tries;
            tries
                .with(&cx.auth.token_hash, now, |r| {
                    let (bytes, content_type) = match *file {
                        "original" => (&r.original, r.original_type),
                        _ => (&r.png, "image/png"),
                    };
                    let mut response = Response::from_data(bytes.clone())
                        .with_header(header("Content-Type", content_type))
                        .with_header(header("Cache-Control", "no-store"));
                    if download {
                        let disposition = "attachment; filename=\"cutout.png\"";
                        response.add_header(header("Content-Disposition", disposition));
                    }
                    response
                })
                .ok_or(Failure::NotFound)
        }
        _ => Err(Failure::NotFound),
    }
}

fn home(
    cx: &Ctx,
    account: Account,
    new_key: Option<KeyNotice>,
    label_error: Option<&str>,
    flash: Option<&str>,
    status: u16,
) -> Handled {
    let month = Month::of_unix(cx.now);
    let shown = AccountView {
        used: cx.state.store.usage(account.id, month)?,
        keys: cx.state.store.keys_of(account.id)?,
        account,
        month,
    };
    let page = view::account_home(cx.csrf(), &shown, new_key, label_error, flash);
    Ok(html(status, page))
}

fn try_page(
    cx: &Ctx,
    account: &Account,
    result: Option<&TryView>,
    error: Option<&str>,
    status: u16,
) -> Handled {
    let used = cx.state.store.usage(account.id, Month::of_unix(cx.now))?;
    let page = view::try_page(cx.csrf(), account, used, result, error);
    Ok(html(status, page))
}

/// Try it: the API's steps with the signed-in user as the caller. Success
/// redirects to the result, so reloading the page does not pay again.
fn try_it(cx: &Ctx, request: &mut Request, account: Account) -> Handled {
    let started = Instant::now();
    let caller = Caller {
        account,
        key_id: None,
    };
    let admitted = admit(cx.state, &caller)
        .and_then(|permit| Ok((permit, read_request_form(cx.state, request)?)));
    let tried = match admitted {
        Ok((_, (_, form))) if !cx.auth.csrf_matches(form.csrf.as_deref()) => {
            return Err(Failure::BadCsrf)
        }
        Ok((permit, (place, form))) => cut_out_form(cx, &caller, permit, place, form),
        Err(e) => Err(e),
    };
    match tried {
        Ok(result) => {
            cx.state.dashboard.tries.put(&cx.auth.token_hash, result);
            let took = started.elapsed().as_millis();
            log::info!(
                "account {} tried an image in {took} ms",
                caller.account.name
            );
            Ok(redirect("/try"))
        }
        Err(e) => {
            if let ApiError::Internal(cause) = &e {
                log::error!("try it failed: {cause:#}");
            }
            let why = format!("{}: {}", e.title(), e.detail());
            try_page(cx, &caller.account, None, Some(&why), e.status())
        }
    }
}

fn cut_out_form(
    cx: &Ctx,
    caller: &Caller,
    permit: Permit,
    place: Place<'_>,
    form: Form,
) -> Result<TryResult, ApiError> {
    let size = parse_size(form.size.as_deref())?;
    let subject = parse_subject(form.subject.as_deref())?;
    let image = form.image_file.ok_or(ApiError::MissingImageFile)?;
    let original_type = imaging::format_of(&image)?.to_mime_type();
    let done = cut_out_and_charge(cx.state, permit, place, caller, &image, size, subject)?;
    Ok(TryResult {
        serial: 0,
        original: image,
        original_type,
        png: done.cut.png,
        width: done.cut.width,
        height: done.cut.height,
        at: cx.now,
    })
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
    Response::from_data(body).with_header(header("Content-Type", "application/json"))
}
