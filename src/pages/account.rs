//! An account user's pages: the account with its keys, revoking a key, and
//! Try it.

use super::{csrf_field, field_error, key_table, page, usage_summary, AccountView, Nav};
use crate::domain::{utc_date, ApiKey};
use crate::store::{Account, KeyRecord};
use maud::{html, Markup};

/// Shown once, right after a key is made.
pub struct KeyNotice<'a> {
    pub key: &'a ApiKey,
    pub label: &'a str,
}

pub fn account_home(
    csrf: &str,
    shown: &AccountView,
    new_key: Option<KeyNotice>,
    label_error: Option<&str>,
    flash: Option<&str>,
) -> Markup {
    let (account, keys) = (&shown.account, &shown.keys);
    let active = keys.iter().filter(|k| k.revoked_at.is_none()).count();
    let body = html! {
        (usage_summary(shown))
        @if let Some(notice) = new_key {
            section.new-key role="status" {
                h2 { "Your new key" @if !notice.label.is_empty() { " “" (notice.label) "”" } }
                p { strong { "Copy it now: it is shown only this once." } " Only a fingerprint of it is stored, so nobody can show it again." }
                div.copy-row {
                    input #new-key type="text" readonly value=(notice.key.expose()) aria-label="New API key";
                    button type="button" data-copy="new-key" { "Copy" }
                }
            }
        }
        section {
            h2 { "API keys" }
            @if active == 0 {
                p.empty { "You have no active API keys. Create one below and put it in your booth's or kiosk's settings; each key can be revoked on its own." }
            }
            @if !keys.is_empty() {
                (key_table(keys, "", |key| html! {
                    @match key.revoked_at {
                        Some(t) => { "revoked " (utc_date(t)) }
                        None => { a.danger href={ "/account/keys/" (key.prefix) "/revoke" } { "Revoke" } }
                    }
                }))
            }
            form.card method="post" action="/account/keys" {
                (csrf_field(csrf))
                label for="label" { "Label (where the key will be used, e.g. “Booth 2”)" }
                input #label type="text" name="label" maxlength="64" aria-describedby="label-error";
                (field_error("label-error", label_error))
                button type="submit" { "Create key" }
            }
        }
    };
    page(
        "Your account",
        &Nav::User {
            account: &account.name,
            csrf,
        },
        flash,
        body,
    )
}

pub fn revoke_confirm(csrf: &str, account: &str, key: &KeyRecord) -> Markup {
    let body = html! {
        div.card {
            p {
                "Revoke the key " code { (key.prefix) "…" }
                @if !key.label.is_empty() { " (“" (key.label) "”)" } "?"
            }
            p { "Anything still using it gets " code { "401 invalid_api_key" } " from the next call on. This cannot be undone; you can always create a new key." }
            form.inline method="post" action={ "/account/keys/" (key.prefix) "/revoke" } {
                (csrf_field(csrf))
                button.danger type="submit" { "Revoke key" }
            }
            " "
            a.button.secondary href="/account" { "Cancel" }
        }
    };
    page("Revoke a key", &Nav::User { account, csrf }, None, body)
}

/// A finished try: the images are served from `/try/original` and
/// `/try/result`; `serial` makes each try's URLs new.
pub struct TryView {
    pub serial: u64,
    pub width: u32,
    pub height: u32,
    pub media_type: &'static str,
}

/// The name a downloaded result is saved under.
pub fn result_file_name(media_type: &str) -> &'static str {
    match media_type {
        "image/jpeg" => "cutout.jpg",
        "image/webp" => "cutout.webp",
        _ => "cutout.png",
    }
}

pub fn try_page(
    csrf: &str,
    account: &Account,
    used: u32,
    result: Option<&TryView>,
    error: Option<&str>,
) -> Markup {
    let left = account
        .plan
        .monthly_limit
        .map(|limit| limit.saturating_sub(used));
    let body = html! {
        p {
            "Send a photo through the same service your booths call. Each successful try counts as one image"
            @match left { Some(left) => { " (" (left) " left this month)." } None => "." }
        }
        form.card #try-form method="post" action="/try" enctype="multipart/form-data" {
            (csrf_field(csrf))
            label.dropzone for="image_file" {
                span { "Drop a JPG, PNG or WEBP here (at most 10 MB), or choose one" }
                input #image_file type="file" name="image_file" accept="image/jpeg,image/png,image/webp"
                    required aria-describedby="try-error";
                span.filename {}
            }
            label for="size" { "Size" }
            select #size name="size" {
                option value="auto" selected { "auto: photo's size, at most 25 MP" }
                option value="preview" { "preview: at most 0.25 MP" }
                option value="full" { "full: photo's size, refused above 25 MP" }
            }
            label for="type" { "Subject" }
            select #type name="type" {
                option value="auto" selected { "auto: the appliance's default model" }
                option value="person" { "person: MODNet, soft hair edges" }
                option value="general" { "general: IS-Net, any object" }
            }
            label for="bg_color" { "Background colour" }
            input #bg_color type="text" name="bg_color" placeholder="none: transparent; or white, #00ff00, 81d4fa"
                maxlength="32" autocomplete="off";
            label for="crop" {
                input #crop type="checkbox" name="crop" value="true";
                " Crop to the subject"
            }
            label for="format" { "Format" }
            select #format name="format" {
                option value="png" selected { "PNG: transparency kept" }
                option value="jpg" { "JPEG: smaller, on white where nothing is behind" }
                option value="webp" { "WEBP: lossless, transparency kept" }
            }
            (field_error("try-error", error))
            button type="submit" { "Remove background" }
        }
        @if let Some(result) = result {
            section.result {
                h2 { "Result" }
                div.compare {
                    figure {
                        img src={ "/try/original?n=" (result.serial) } alt="The photo you sent";
                        figcaption { "Original" }
                    }
                    figure {
                        div.checker {
                            img #cutout src={ "/try/result?n=" (result.serial) } alt="The cut-out";
                        }
                        figcaption { "Cut-out, " (result.width) "×" (result.height) }
                    }
                }
                @let name = result_file_name(result.media_type);
                a.button href={ "/try/result?download=1&n=" (result.serial) } download=(name) { "Download " (name) }
            }
        }
    };
    page(
        "Try it",
        &Nav::User {
            account: &account.name,
            csrf,
        },
        None,
        body,
    )
}
