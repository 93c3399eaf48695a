//! The operator's pages: accounts, plans, suspensions, usage, status.

use super::*;
use crate::app::NoTurn;
use crate::backdrops::BackdropError;
use crate::http::form::{read_form, MAX_BODY_BYTES};

pub(super) fn admin(cx: &Ctx, request: &mut Request, method: &Method, rest: &[&str]) -> Handled {
    let get = matches!(method, Method::Get | Method::Head);
    let post = *method == Method::Post;
    match rest {
        [] | [""] if get => accounts_page(cx, &NewAccount::default(), flash(request), 200),
        ["status"] if get => status_page(cx, flash(request)),
        ["status", "replaced"] if post => {
            cx.fields(request)?;
            let dir = cx.state.data_dir.join(crate::backup::REPLACED);
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => log::info!("operator deleted {}", dir.display()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Failure::Disk(e)),
            }
            Ok(redirect("/admin/status?done=replaced-deleted"))
        }
        ["status", "killed-for-memory"] if post => {
            cx.fields(request)?;
            cx.state.forget_killed_for_memory().map_err(Failure::Disk)?;
            log::info!(
                "operator cleared the models killed for memory: tried again at the next start"
            );
            Ok(redirect("/admin/status?done=killed-forgotten"))
        }
        ["status", "plain-http"] if post => {
            let to = if cx.fields(request)?.get("api") == "on" {
                "on"
            } else {
                "off"
            };
            cx.state.store.set_plain_http_api(to == "on", cx.now)?;
            log::info!("operator switched the API over plain HTTP {to}");
            Ok(redirect(&format!("/admin/status?done=plain-http-{to}")))
        }
        ["booths"] if get => booths_page(cx, flash(request), None),
        ["backup"] if get => Ok(html(200, view::admin_backup(cx.csrf(), None))),
        ["backup"] if post => download_backup(cx, &cx.fields(request)?),
        ["backdrops"] if get => backdrops_page(cx, flash(request), None),
        ["backdrops"] if post => add_backdrop(cx, request),
        ["backdrops", id, "preview"] if get => match cx.state.backdrops().preview(id) {
            Ok(jpeg) => Ok(body(jpeg)
                .with_header(header("Content-Type", "image/jpeg"))
                .with_header(header("Cache-Control", "no-store"))),
            Err(BackdropError::Io(e)) => Err(Failure::Disk(e)),
            Err(_) => Err(Failure::NotFound),
        },
        ["backdrops", id, "delete"] if post => {
            cx.fields(request)?;
            match cx.state.backdrops().remove(id) {
                Ok(_) => Ok(redirect("/admin/backdrops?done=backdrop-deleted")),
                Err(BackdropError::Io(e)) => Err(Failure::Disk(e)),
                Err(_) => Err(Failure::NotFound),
            }
        }
        ["booths", handle, action @ ("approve" | "refuse")] if post => {
            let fields = cx.fields(request)?;
            answer_booth(cx, handle, action, fields.get("account"))
        }
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

/// The backup as a download: written beside the data, opened, removed
/// (the open file stays readable), and sent from the file as it is read,
/// so its size costs no memory.
fn download_backup(cx: &Ctx, fields: &Fields) -> Handled {
    let [passphrase, again] =
        ["passphrase", "passphrase_again"].map(|f| crate::backup::passphrase_in(fields.get(f)));
    let refused =
        |status: u16, why: &str| Ok(html(status, view::admin_backup(cx.csrf(), Some(why))));
    if let Err(why) = crate::backup::check_passphrase(passphrase) {
        return refused(400, &format!("{why}."));
    }
    if passphrase != again {
        return refused(400, "The two passphrases differ.");
    }
    let sources = &cx.state.backup_sources;
    let path = crate::backup::scratch_path(&sources.data_dir, "download", ".cutout-backup");
    let taken = crate::backup::take(sources, passphrase, &path, cx.now)
        .and_then(|_| Ok(std::fs::File::open(&path)?));
    let _ = std::fs::remove_file(&path);
    let file = taken.map_err(|e| Failure::Disk(std::io::Error::other(format!("{e:#}"))))?;
    log::warn!("operator downloaded a backup");
    let name = format!(
        "cutout-{}-{}.cutout-backup",
        crate::discovery::hostname(),
        crate::domain::utc_date(cx.now)
    );
    // Its length from the open file's metadata, so clients see the size.
    Ok(tiny_http::Response::from_file(file)
        .boxed()
        .with_header(header("Content-Type", "application/octet-stream"))
        .with_header(header(
            "Content-Disposition",
            format!("attachment; filename=\"{name}\""),
        ))
        .with_header(header("Cache-Control", "no-store")))
}

fn backdrops_page(cx: &Ctx, flash: Option<&str>, error: Option<(u16, &str)>) -> Handled {
    let backdrops = cx.state.backdrops().list().map_err(|e| match e {
        BackdropError::Io(e) => Failure::Disk(e),
        other => Failure::Disk(std::io::Error::other(other.to_string())),
    })?;
    let page = view::admin_backdrops(cx.csrf(), &backdrops, flash, error.map(|(_, why)| why));
    Ok(html(error.map_or(200, |(status, _)| status), page))
}

/// The upload form: its fields as the API's form reads them (`image_file`
/// the background, `bg_image_file` the overlay, `backdrop` the name).
/// Its files and their decoding are held as a cut-out's are: in the work
/// queue, within the memory budget.
fn add_backdrop(cx: &Ctx, request: &mut Request) -> Handled {
    let content_type = header_value(request, "Content-Type").map(str::to_owned);
    let length = request.body_length().map(|n| n as u64);
    let queue = &cx.state.pipeline.queue;
    let Some(mut place) = queue.join(length.unwrap_or(MAX_BODY_BYTES).min(MAX_BODY_BYTES)) else {
        return backdrops_page(cx, None, Some((503, BUSY)));
    };
    let form = match read_form(content_type.as_deref(), length, request.as_reader()) {
        Ok(form) => form,
        Err(e) => {
            let why = format!("{}: {}", e.title(), e.detail());
            return backdrops_page(cx, None, Some((crate::http::respond::status(&e), &why)));
        }
    };
    if !cx.auth.csrf_matches(form.csrf.as_deref()) {
        return Err(Failure::BadCsrf);
    }
    let Some(background) = form.image_file.as_deref().filter(|b| !b.is_empty()) else {
        return backdrops_page(cx, None, Some((400, "Choose a background image.")));
    };
    let overlay = form.bg_image_file.as_deref().filter(|o| !o.is_empty());
    let name = form.backdrop.as_deref().unwrap_or("");
    let refused = |refused: BackdropError| match refused {
        BackdropError::Io(e) => Err(Failure::Disk(e)),
        refused => backdrops_page(cx, None, Some((400, &sentence(&refused.to_string())))),
    };
    let need = match crate::backdrops::adding_needs(background, overlay) {
        Ok(need) => need,
        Err(e) => return refused(e),
    };
    match place.wait_for_turn(need) {
        Ok(()) => {}
        Err(NoTurn::NeverFits { budget }) => {
            let why = format!(
                "Checking these images and making their preview needs about {} MiB of memory, and this appliance gives its requests \
                 {} MiB of its board's memory (server.memory_budget_mib): upload smaller images.",
                need.div_ceil(MIB),
                budget / MIB
            );
            return backdrops_page(cx, None, Some((400, &why)));
        }
        Err(NoTurn::Busy) => return backdrops_page(cx, None, Some((503, BUSY))),
    }
    match cx.state.backdrops().add(name, background, overlay) {
        Ok(_) => Ok(redirect("/admin/backdrops?done=backdrop-added")),
        Err(e) => refused(e),
    }
}

const MIB: u64 = 1 << 20;
const BUSY: &str = "The appliance is busy with cut-outs: upload the backdrop again in a minute.";

/// `why` as a sentence: a capital first, a full stop last.
fn sentence(why: &str) -> String {
    let mut chars = why.chars();
    let first = chars
        .next()
        .map(|c| c.to_uppercase().to_string())
        .unwrap_or_default();
    format!("{first}{}.", chars.as_str())
}

fn booths_page(cx: &Ctx, flash: Option<&str>, error: Option<&str>) -> Handled {
    let waiting = cx.state.pairings.waiting(cx.now);
    let accounts = cx.state.store.accounts(Month::of_unix(cx.now))?;
    let names: Vec<_> = accounts.iter().map(|(a, _)| a.name.as_str()).collect();
    let page = view::admin_booths(
        cx.csrf(),
        &waiting,
        &names,
        cx.state.button,
        flash.or(error),
    );
    Ok(html(if error.is_some() { 404 } else { 200 }, page))
}

/// The operator's answer to a booth's request. Approving issues the booth
/// a key on the account chosen; a request no longer waiting (answered,
/// expired) gets nothing.
fn answer_booth(cx: &Ctx, handle: &str, action: &str, account: &str) -> Handled {
    let gone = "That request is no longer waiting: it was answered or has expired.";
    match action {
        "approve" => match cx.state.approve_pairing(handle, account, cx.now) {
            Ok(Some(_)) => Ok(redirect("/admin/booths?done=paired")),
            Ok(None) => booths_page(cx, None, Some(gone)),
            Err(StoreError::NoSuchAccount(_)) => {
                booths_page(cx, None, Some("Choose one of the listed accounts."))
            }
            Err(e) => Err(e.into()),
        },
        _ if cx.state.pairings.refuse(handle, cx.now) => Ok(redirect("/admin/booths?done=refused")),
        _ => booths_page(cx, None, Some(gone)),
    }
}

pub(super) fn accounts_page(
    cx: &Ctx,
    form: &NewAccount,
    flash: Option<&str>,
    status: u16,
) -> Handled {
    let month = Month::of_unix(cx.now);
    let accounts = cx.state.store.accounts(month)?;
    let plans = cx.state.store.plans()?;
    let page = view::admin_accounts(cx.csrf(), month, &accounts, &plans, form, flash);
    Ok(html(status, page))
}

pub(super) fn create_account(cx: &Ctx, fields: &Fields) -> Handled {
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

pub(super) fn account_page(
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

fn status_page(cx: &Ctx, flash: Option<&str>) -> Handled {
    Ok(html(
        200,
        view::status_page(cx.csrf(), &status_view(cx)?, flash),
    ))
}

pub(super) fn status_view(cx: &Ctx) -> Result<StatusView, Failure> {
    let (state, now) = (cx.state, cx.now);
    let model = state.pipeline.default_model();
    let inference = &model.inference;
    let today = state.stats.today(now);
    let (median_latency, latency_samples) = state.stats.median_latency();
    let queue = &state.pipeline.queue;
    Ok(StatusView {
        model: model.spec.name.clone(),
        engine: inference.engine_name(),
        model_state: match inference.ready() {
            Ok(()) => "loaded".into(),
            Err(e) => e.to_string(),
        },
        model_load: state.stats.model_load(),
        database: match state.database_writable() {
            Ok(()) => format!("{}: writable", state.store.describe()),
            Err(e) => format!("{}: not writable: {e}", state.store.describe()),
        },
        queue_depth: queue.depth(),
        queue_capacity: queue.capacity(),
        memory: queue.memory(),
        calls_today: today.calls,
        client_errors_today: today.client_errors,
        server_errors_today: today.server_errors,
        median_latency,
        latency_samples,
        led: led_description(state),
        uptime: state.stats.uptime(),
        version: env!("CARGO_PKG_VERSION"),
        cpu_celsius: state.cpu_celsius(),
        https: state
            .tls
            .as_ref()
            .map(|t| (t.addr.port(), t.fingerprint.clone())),
        plain_http_api: match state.plain_http_beside_https() {
            Some(port) => Some((port, state.store.plain_http_api()?)),
            None => None,
        },
        board: state.board.clone(),
        engine_note: state.engine_note.clone(),
        memory_note: state.memory_note.clone(),
        bench: crate::board::Report::load(&state.data_dir),
        replaced: crate::backup::replaced(&state.data_dir),
        backups: state
            .backups
            .as_ref()
            .map(|b| (b.schedule.clone(), b.last())),
        ladder: state
            .ladder
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone(),
    })
}

pub(super) fn led_description(state: &AppState) -> String {
    let shows = state.led_state().name();
    match state.led_backend.as_str() {
        "none" => format!("no LED configured (the appliance is {shows})"),
        backend => format!("{shows} ({backend} LED)"),
    }
}
