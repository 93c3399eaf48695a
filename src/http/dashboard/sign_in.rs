//! Signing in and out, and the one-time setup link.

use super::*;

pub(super) fn login_form(request: &Request, name: &str, error: Option<&str>, status: u16) -> Body {
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

pub(super) fn sign_in(state: &AppState, request: &mut Request, now: i64) -> Handled {
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
    let pending = match state.dashboard.throttle.begin(&attempt, now) {
        Ok(pending) => pending,
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
    state.dashboard.throttle.succeeded(pending);
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
pub(super) fn device_cookie_header(
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

pub(super) fn sign_out(state: &AppState, request: &mut Request, auth: Option<&Auth>) -> Handled {
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
pub(super) fn setup_token_matches(
    state: &AppState,
    expected: &Option<String>,
    token: &str,
) -> Result<bool, Failure> {
    Ok(state.store.admin_password_hash()?.is_none()
        && expected
            .as_deref()
            .is_some_and(|e| constant_time_eq(e, token)))
}

pub(super) fn setup_form(state: &AppState, request: &Request) -> Handled {
    let token = query(request, "token").unwrap_or_default();
    if !setup_token_matches(state, &state.dashboard.setup_token_lock(), &token)? {
        return Ok(setup_gone());
    }
    let (csrf, set) = form_token(request);
    let mut page = html(200, view::setup_page(&token, &csrf, None));
    if let Some(set) = set {
        page.add_header(set);
    }
    Ok(page)
}

pub(super) fn setup_gone() -> Body {
    html(404, view::message_page("Setup link not valid", &Nav::Anonymous,
        "This setup link has been used or is not the current one. If the operator password is set, sign in as admin; to reset it, run `cutout admin set-password` on the appliance."))
}

pub(super) fn setup(state: &AppState, request: &mut Request, now: i64) -> Handled {
    let fields = Fields::read(request)?;
    if !form_token_matches(request, fields.csrf()) {
        return Err(Failure::BadCsrf);
    }
    let token = fields.get("token");
    // Held until the password is stored, so two submissions cannot both win.
    let mut expected = state.dashboard.setup_token_lock();
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
