//! Try it: a photo through the API's steps, with the signed-in user as
//! the caller.

use super::*;

pub(super) fn try_page(
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
pub(super) fn try_it(cx: &Ctx, request: &mut Request, account: Account) -> Handled {
    let started = Instant::now();
    let caller = Caller {
        account,
        key_id: None,
    };
    let tried = match admit_and_read_form(cx.state, &caller, request) {
        Ok((_, form)) if !cx.auth.csrf_matches(form.csrf.as_deref()) => {
            return Err(Failure::BadCsrf)
        }
        Ok((admission, form)) => {
            cut_out_form(cx, &caller, admission, form, &|| request.client_gone())
        }
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
            try_page(
                cx,
                &caller.account,
                None,
                Some(&why),
                crate::http::respond::status(&e),
            )
        }
    }
}

pub(super) fn cut_out_form(
    cx: &Ctx,
    caller: &Caller,
    admission: Admission<'_>,
    mut form: Form,
    client_gone: &dyn Fn() -> bool,
) -> Result<TryResult, ApiError> {
    if form.image_url.is_some() || form.bg_image_url.is_some() {
        return Err(ApiError::InvalidRequest(
            "Try it takes the photo and the background as files, not URLs".into(),
        ));
    }
    let size = parse_size(form.size.as_deref())?;
    let subject = parse_subject(form.subject.as_deref())?;
    let image = form.take_image()?;
    let original_type = imaging::format_of(&image)?.to_mime_type();
    let channels = parse_channels(form.channels.as_deref())?;
    let finish = parse_finish(&mut form, channels)?;
    let done =
        admission.cut_out_and_charge(caller, &image, (size, subject), &finish, client_gone)?;
    Ok(TryResult {
        serial: 0,
        original: image,
        original_type,
        result: done.cut.bytes,
        result_type: done.cut.media_type,
        width: done.cut.width,
        height: done.cut.height,
        at: cx.now,
    })
}
