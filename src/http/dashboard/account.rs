//! The account user's pages: the account's plan, usage and API keys.

use super::*;

pub(super) fn user(
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
                    media_type: r.result_type,
                });
            try_page(cx, &account, result.as_ref(), None, 200)
        }
        ("try", []) if post => try_it(cx, request, account),
        ("try", [file @ ("original" | "result")]) if get => {
            let download = query(request, "download").is_some();
            let tries = &state.dashboard.tries;
            tries
                .with(&cx.auth.token_hash, now, |r| {
                    let (bytes, content_type) = match *file {
                        "original" => (&r.original, r.original_type),
                        _ => (&r.result, r.result_type),
                    };
                    let mut response = body(bytes.clone())
                        .with_header(header("Content-Type", content_type))
                        .with_header(header("Cache-Control", "no-store"));
                    if download {
                        let name = crate::pages::result_file_name(r.result_type);
                        let disposition = format!("attachment; filename=\"{name}\"");
                        response.add_header(header("Content-Disposition", disposition));
                    }
                    response
                })
                .ok_or(Failure::NotFound)
        }
        _ => Err(Failure::NotFound),
    }
}

pub(super) fn home(
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
