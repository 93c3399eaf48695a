//! Signing in and out, and setting the operator password on a new
//! appliance (`app::setup`).

use super::*;
use crate::app::setup::{CodeRefused, BUTTON_SECONDS, CODE_TRIES};
use crate::backdrops::MAX_BACKDROPS;
use crate::error::MAX_IMAGE_BYTES;
use crate::http::form::{from_multer, read_multipart_with, text_of};
use crate::pages::RestoreForm;

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

/// The cookie of a browser waiting for the appliance's button.
const SETUP_WAIT_COOKIE: &str = "cutout_setup_wait";

/// `/setup`: with a token (the link, or what the code or the button gave)
/// the password form; without, how to show that you are at the appliance.
pub(super) fn setup_form(state: &AppState, request: &Request, now: i64) -> Handled {
    if state.store.admin_password_hash()?.is_some() {
        return Ok(setup_gone());
    }
    let setup = state.dashboard.setup.lock();
    if !setup.is_open() {
        return Ok(setup_gone());
    }
    let (csrf, set) = form_token(request);
    let waiting =
        session::cookie(request, SETUP_WAIT_COOKIE).and_then(|c| setup.button_wait(c, now));
    let mut page = match (query(request, "token"), waiting) {
        (Some(token), _) if setup.token_matches(&token, now) => {
            let restore = RestoreForm {
                has_accounts: !state.store.is_empty()?,
                error: None,
            };
            html(200, view::setup_page(&token, &csrf, None, restore))
        }
        (Some(_), _) => return Ok(setup_gone()),
        (None, Some(Ok(token))) => redirect(&format!("/setup?token={token}")),
        (None, waiting) => {
            let seconds_left = waiting.and_then(Result::err);
            html(
                200,
                view::setup_start_page(&csrf, state.button, seconds_left, None),
            )
        }
    };
    if let Some(set) = set {
        page.add_header(set);
    }
    Ok(page)
}

/// `POST /setup/code`: the code shown on the board's console.
pub(super) fn setup_code(state: &AppState, request: &mut Request, now: i64) -> Handled {
    let fields = Fields::read(request)?;
    if !form_token_matches(request, fields.csrf()) {
        return Err(Failure::BadCsrf);
    }
    if state.store.admin_password_hash()?.is_some() {
        return Ok(setup_gone());
    }
    let refused = state
        .dashboard
        .setup
        .lock()
        .token_for_code(fields.get("code"), now);
    let error = match refused {
        Ok(token) => return Ok(redirect(&format!("/setup?token={token}"))),
        Err(CodeRefused::Closed) => return Ok(setup_gone()),
        Err(CodeRefused::Wrong) => "That is not the code on the appliance's screen.".to_owned(),
        Err(CodeRefused::Replaced(code)) => {
            log::warn!(
                "{CODE_TRIES} wrong setup codes: the code was replaced; the new one is {code}"
            );
            state.show_setup_code(&code);
            "Too many wrong codes: the appliance shows a new one. Codes are taken again in a minute.".to_owned()
        }
        Err(CodeRefused::Paused(seconds)) => {
            format!(
                "Too many wrong codes: try the code the appliance shows now in {seconds} seconds."
            )
        }
    };
    let csrf = fields.csrf().unwrap_or_default();
    Ok(html(
        400,
        view::setup_start_page(csrf, state.button, None, Some(&error)),
    ))
}

/// `POST /setup/button`: this browser waits for a press of the button.
pub(super) fn setup_wait_for_button(state: &AppState, request: &mut Request, now: i64) -> Handled {
    let fields = Fields::read(request)?;
    if !form_token_matches(request, fields.csrf()) {
        return Err(Failure::BadCsrf);
    }
    if !state.button || state.store.admin_password_hash()?.is_some() {
        return Ok(setup_gone());
    }
    let mut setup = state.dashboard.setup.lock();
    if !setup.is_open() {
        return Ok(setup_gone());
    }
    let cookie = setup.wait_for_button(now);
    log::info!("a browser waits for the button to set the operator password");
    let mut response = redirect("/setup");
    response.add_header(session::set_cookie(
        request,
        SETUP_WAIT_COOKIE,
        &cookie,
        2 * BUTTON_SECONDS,
    ));
    Ok(response)
}

pub(super) fn setup_gone() -> Body {
    html(404, view::message_page("Setup link not valid", &Nav::Anonymous,
        "This setup link has been used, has expired or is not the current one. If the operator password is set, sign in as admin; to reset it, run `cutout admin set-password` on the appliance."))
}

pub(super) fn setup(state: &AppState, request: &mut Request, now: i64) -> Handled {
    let fields = Fields::read(request)?;
    if !form_token_matches(request, fields.csrf()) {
        return Err(Failure::BadCsrf);
    }
    let token = fields.get("token");
    // Held until the password is stored, so two submissions cannot both win.
    let mut setup = state.dashboard.setup.lock();
    if state.store.admin_password_hash()?.is_some() || !setup.token_matches(token, now) {
        return Ok(setup_gone());
    }
    let (password, confirm) = (fields.get("password"), fields.get("confirm"));
    let error = check_password_policy(password)
        .err()
        .or((password != confirm).then_some("The two passwords differ."));
    if let Some(error) = error {
        let csrf = fields.csrf().unwrap_or_default();
        let restore = RestoreForm {
            has_accounts: !state.store.is_empty()?,
            error: None,
        };
        return Ok(html(
            400,
            view::setup_page(token, csrf, Some(error), restore),
        ));
    }
    // Before the password is stored, so a failure leaves the link usable.
    let device = device_cookie_header(state, request, ADMIN_LOGIN)?;
    state
        .store
        .set_admin_password(&hash_password(password), now)?;
    setup.close();
    log::info!("operator password set through the setup page");
    let mut response = redirect("/admin");
    response.add_header(session::start(state, request, Principal::Admin, now)?);
    response.add_header(device);
    Ok(response)
}

/// The largest backup the setup page takes: the database and every
/// backdrop, each a background and an overlay of up to 10 MB.
const MAX_BACKUP_BYTES: u64 = 2 * MAX_BACKDROPS as u64 * MAX_IMAGE_BYTES + (64 << 20);

/// `POST /setup/restore`: the backup of the appliance this one replaces,
/// restored through setup behind the same proof of presence (the setup
/// link) as the password. It is checked whole here, and put in place as
/// the program starts again, at once: the running service holds the
/// database open.
pub(super) fn setup_restore(state: &AppState, request: &mut Request, now: i64) -> Handled {
    // The upload and the backup unpacked beside it are on disk at once.
    let size = request.body_length().unwrap_or(0) as u64;
    let needed = 2 * size + (64 << 20);
    match crate::backup::free_bytes(&state.data_dir) {
        Some(free) if free < needed => {
            let why = format!(
                "The appliance has {} MB free in its data directory; restoring this {} MB backup needs about {} MB (the upload and the backup unpacked beside it). Free some space, or run `sudo cutout restore FILE` on the appliance with the backup on a USB stick.",
                free / 1_000_000,
                size / 1_000_000,
                needed / 1_000_000
            );
            let page = view::message_page("Not enough free space", &Nav::Anonymous, &why);
            return Ok(html(507, page));
        }
        _ => {}
    }
    let upload = crate::backup::scratch_path(&state.data_dir, "upload", "");
    let content_type = header_value(request, "Content-Type")
        .unwrap_or_default()
        .to_owned();
    let limits = multer::SizeLimit::new().per_field(MAX_BACKUP_BYTES);
    let form = read_multipart_with(
        &content_type,
        request.as_reader(),
        MAX_BACKUP_BYTES,
        limits,
        |multipart| {
            // The file is written only for a form whose setup link holds.
            let allowed = |fields: &HashMap<String, String>| {
                let token = fields.get("token").map_or("", String::as_str);
                state.dashboard.setup.lock().token_matches(token, now)
            };
            restore_form(multipart, &upload, allowed)
        },
    );
    // Held until the restore is in place, so that a password set meanwhile
    // cannot be replaced by the backup's.
    let mut setup = state.dashboard.setup.lock();
    let checked = match &form {
        Ok(form) => check_restore(state, &setup, request, form, &upload, now),
        Err(_) => Err(Failure::BadForm),
    };
    let _ = std::fs::remove_file(&upload);
    let staged = match checked? {
        Ok(staged) => staged,
        Err(page) => return Ok(page),
    };
    staged
        .keep_for_next_start()
        .map_err(|e| Failure::Disk(std::io::Error::other(format!("{e:#}"))))?;
    setup.close();
    log::warn!("a backup was restored on the setup page: starting again to put it in place");
    state.restart();
    Ok(html(
        200,
        view::message_page(
            "Restored",
            &Nav::Anonymous,
            "The backup is whole and the appliance restarts with it now. In a minute, sign in as admin with the operator password of the appliance it came from.",
        ),
    ))
}

/// The restore form's text fields; its file written to `upload` as it
/// arrives if the fields before it are `allowed` (else the rest is not read).
async fn restore_form(
    mut multipart: multer::Multipart<'static>,
    upload: &std::path::Path,
    allowed: impl Fn(&HashMap<String, String>) -> bool,
) -> Result<HashMap<String, String>, ApiError> {
    use std::io::Write;
    let mut fields = HashMap::new();
    while let Some(mut field) = multipart.next_field().await.map_err(from_multer)? {
        match field.name() {
            Some("backup_file") if !allowed(&fields) => break,
            Some("backup_file") => {
                let mut file =
                    std::fs::File::create(upload).map_err(|e| ApiError::Internal(e.into()))?;
                while let Some(chunk) = field.chunk().await.map_err(from_multer)? {
                    file.write_all(&chunk)
                        .map_err(|e| ApiError::Internal(e.into()))?;
                }
            }
            Some(name @ ("csrf" | "token" | "passphrase" | "replace")) => {
                let name = name.to_owned();
                fields.insert(name, text_of(&mut field).await?);
            }
            _ => return Err(ApiError::InvalidRequest("an unknown field".into())),
        }
    }
    Ok(fields)
}

/// The upload checked whole (`backup::stage`), or the setup page again
/// with why not.
fn check_restore(
    state: &AppState,
    setup: &crate::app::setup::SetupState,
    request: &Request,
    form: &HashMap<String, String>,
    upload: &std::path::Path,
    now: i64,
) -> Result<Result<crate::backup::Staged, Body>, Failure> {
    let field = |name: &str| form.get(name).map_or("", String::as_str);
    if !form_token_matches(request, Some(field("csrf"))) {
        return Err(Failure::BadCsrf);
    }
    let token = field("token");
    if state.store.admin_password_hash()?.is_some() || !setup.token_matches(token, now) {
        return Ok(Err(setup_gone()));
    }
    let has_accounts = !state.store.is_empty()?;
    let refused = |why: &str| {
        let restore = RestoreForm {
            has_accounts,
            error: Some(why),
        };
        Ok(Err(html(
            400,
            view::setup_page(token, field("csrf"), None, restore),
        )))
    };
    if !upload.exists() {
        return refused("Choose the backup file.");
    }
    if has_accounts && field("replace") != "yes" {
        return refused(
            "This appliance already has accounts: tick the box to replace them with the backup's.",
        );
    }
    match crate::backup::stage(
        &state.backup_sources,
        crate::backup::passphrase_in(field("passphrase")),
        upload,
        true,
    ) {
        Ok(staged) => Ok(Ok(staged)),
        Err(e) => {
            let why = format!("{e:#}").replace(&upload.display().to_string(), "this file");
            let mut chars = why.chars();
            let why: String = chars
                .next()
                .into_iter()
                .flat_map(char::to_uppercase)
                .chain(chars)
                .collect();
            log::warn!("a restore on the setup page was refused: {why}");
            refused(&why)
        }
    }
}
