//! The dashboard's HTML: server-rendered pages for the operator and for
//! account users, with every asset embedded. Pure functions from view data
//! to markup; maud escapes every value, so nothing a user typed can become
//! markup. The handlers that call these live in `http::dashboard`.

mod account;
mod admin;
mod docs;
pub mod openapi;

pub use account::{account_home, result_file_name, revoke_confirm, try_page, KeyNotice, TryView};
pub use admin::{
    admin_account, admin_accounts, admin_backdrops, admin_backup, admin_booths, status_page,
    AccountForms, NewAccount, StatusView,
};
pub use docs::{docs_page, Documented, REMOVE_BG_ERRORS, REMOVE_BG_FIELDS};

use crate::domain::{utc_date, utc_datetime, Month};
use crate::store::{Account, KeyRecord};
use maud::{html, Markup, DOCTYPE};

pub const STYLE_CSS: &str = include_str!("assets/style.css");
pub const APP_JS: &str = include_str!("assets/app.js");
pub const FAVICON_SVG: &str = include_str!("assets/favicon.svg");

/// An account as its pages show it.
pub struct AccountView {
    pub account: Account,
    pub used: u32,
    pub month: Month,
    pub keys: Vec<KeyRecord>,
}

/// Who is looking, for the header's links and the sign-out form.
pub enum Nav<'a> {
    Anonymous,
    Admin { csrf: &'a str },
    User { account: &'a str, csrf: &'a str },
}

/// The frame every page shares.
pub fn page(title: &str, nav: &Nav, flash: Option<&str>, body: Markup) -> Markup {
    frame(title, nav, flash, None, body)
}

/// `page`, reloaded by the browser every `refresh` seconds when set.
fn frame(
    title: &str,
    nav: &Nav,
    flash: Option<&str>,
    refresh: Option<u32>,
    body: Markup,
) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                @if let Some(seconds) = refresh { meta http-equiv="refresh" content=(seconds); }
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · cutout" }
                link rel="icon" href="/favicon.svg" type="image/svg+xml";
                link rel="stylesheet" href="/assets/style.css";
                script src="/assets/app.js" defer {}
            }
            body {
                header.top {
                    a.brand href="/" { "cutout" }
                    nav {
                        @match nav {
                            Nav::Anonymous => { a href="/docs" { "API docs" } }
                            Nav::Admin { csrf } => {
                                a href="/admin" { "Accounts" }
                                a href="/admin/booths" { "Booths" }
                                a href="/admin/backdrops" { "Backdrops" }
                                a href="/admin/status" { "Status" }
                                a href="/admin/backup" { "Backup" }
                                a href="/docs" { "API docs" }
                                (sign_out(csrf))
                            }
                            Nav::User { account, csrf } => {
                                a href="/account" { "Account" }
                                a href="/try" { "Try it" }
                                a href="/docs" { "API docs" }
                                @if !account.is_empty() { span.who { (account) } }
                                (sign_out(csrf))
                            }
                        }
                    }
                }
                main {
                    h1 { (title) }
                    @if let Some(flash) = flash {
                        p.notice role="status" { (flash) }
                    }
                    (body)
                }
            }
        }
    }
}

fn sign_out(csrf: &str) -> Markup {
    html! {
        form.inline method="post" action="/logout" {
            (csrf_field(csrf))
            button.link type="submit" { "Sign out" }
        }
    }
}

pub fn csrf_field(token: &str) -> Markup {
    html! { input type="hidden" name="csrf" value=(token); }
}

/// A message in words, right under the field it is about.
fn field_error(id: &str, error: Option<&str>) -> Markup {
    html! {
        @if let Some(error) = error {
            p.field-error id=(id) role="alert" { (error) }
        }
    }
}

pub fn login_page(csrf: &str, name: &str, error: Option<&str>, flash: Option<&str>) -> Markup {
    let body = html! {
        form.card method="post" action="/login" {
            (csrf_field(csrf))
            label for="name" { "Name" }
            input #name type="text" name="name" value=(name) autocomplete="username"
                autocapitalize="none" required autofocus;
            label for="password" { "Password" }
            input #password type="password" name="password" autocomplete="current-password"
                required aria-describedby="login-error";
            (field_error("login-error", error))
            button type="submit" { "Sign in" }
            p.hint { "The operator signs in as " code { "admin" } ". Account users sign in with the account name and the password the operator gave them." }
        }
    };
    page("Sign in", &Nav::Anonymous, flash, body)
}

/// What the setup page's restore form needs: whether a restore replaces
/// accounts made here already, and why the last try was refused.
#[derive(Default)]
pub struct RestoreForm<'a> {
    pub has_accounts: bool,
    pub error: Option<&'a str>,
}

pub fn setup_page(token: &str, csrf: &str, error: Option<&str>, restore: RestoreForm) -> Markup {
    let body = html! {
        p { "No operator password is set yet. Choose one now: this link works once." }
        form.card method="post" action="/setup" {
            (csrf_field(csrf))
            input type="hidden" name="token" value=(token);
            p { "Name: " code { "admin" } }
            label for="password" { "New password (8 characters or more)" }
            input #password type="password" name="password" autocomplete="new-password"
                minlength="8" required autofocus aria-describedby="setup-error";
            label for="confirm" { "The same password again" }
            input #confirm type="password" name="confirm" autocomplete="new-password" required;
            (field_error("setup-error", error))
            button type="submit" { "Set password and sign in" }
        }
        form.card method="post" action="/setup/restore" enctype="multipart/form-data" {
            h2 { "Or bring back the appliance this one replaces" }
            p { "Its backup (from its Backup page, or " code { "cutout backup" } ") brings back its accounts, keys, this month's counts, operator password, backdrops and HTTPS certificate: booths paired with it go on working with this one, unchanged. The appliance then restarts; sign in with the old operator password." }
            (csrf_field(csrf))
            input type="hidden" name="token" value=(token);
            label for="backup_file" { "Backup file" }
            input #backup_file type="file" name="backup_file" required aria-describedby="restore-error";
            label for="passphrase" { "Its passphrase" }
            input #passphrase type="password" name="passphrase" autocomplete="off" required;
            @if restore.has_accounts {
                label { input type="checkbox" name="replace" value="yes"; " Replace the accounts this appliance already has" }
            }
            (field_error("restore-error", restore.error))
            button type="submit" { "Restore and restart" }
        }
    };
    page("Set up the operator account", &Nav::Anonymous, None, body)
}

/// How a person at the appliance shows it, before any password is set:
/// the code on the board's screen, or the button. `waiting`: this browser
/// asked for the button, with so many seconds left.
pub fn setup_start_page(
    csrf: &str,
    button: bool,
    waiting: Option<i64>,
    error: Option<&str>,
) -> Markup {
    let body = html! {
        p { "No operator password is set yet. Show that you are at the appliance, then choose one." }
        form.card method="post" action="/setup/code" {
            (csrf_field(csrf))
            label for="code" { "The code on the screen plugged into the appliance (also in its journal)" }
            input.setup-code #code type="text" name="code" autocomplete="off" autocapitalize="characters"
                spellcheck="false" required autofocus[waiting.is_none()] aria-describedby="code-error";
            (field_error("code-error", error))
            button type="submit" { "Continue" }
        }
        @if button {
            @match waiting {
                Some(seconds) => {
                    section.card role="status" {
                        p { strong { "Press the appliance's button now." } " This page checks every 2 seconds; " (seconds) " seconds left." }
                        p.hint { "If another browser is waiting too, the press lets neither in: ask again from this one alone." }
                    }
                }
                None => {
                    form.card method="post" action="/setup/button" {
                        (csrf_field(csrf))
                        p { "No screen? Press the appliance's button within a minute after this:" }
                        button type="submit" { "Wait for the button" }
                    }
                }
            }
        }
    };
    let refresh = waiting.map(|_| 2);
    frame(
        "Set up the operator account",
        &Nav::Anonymous,
        None,
        refresh,
        body,
    )
}

/// A page that says what went wrong, in words.
pub fn message_page(title: &str, nav: &Nav, message: &str) -> Markup {
    let body = html! {
        p { (message) }
        p { a href="/" { "Back to the start page" } }
    };
    page(title, nav, None, body)
}

/// Images used this month against the plan, and when the count resets.
fn usage_summary(shown: &AccountView) -> Markup {
    let (account, used) = (&shown.account, shown.used);
    let reset = shown.month.next().start_unix();
    html! {
        dl.facts {
            dt { "Plan" } dd { (plan_title(&account.plan.name)) }
            dt { "Images this month" }
            dd {
                @match account.plan.monthly_limit {
                    Some(limit) => {
                        (used) " of " (limit)
                        progress value=(used.min(limit)) max=(limit) { (used) " of " (limit) }
                    }
                    None => { (used) " (no monthly limit)" }
                }
            }
            dt { "Count resets" } dd { (utc_datetime(reset)) }
            dt { "Requests at a time" } dd { (account.plan.concurrency) }
            @if account.suspended {
                dt { "Status" } dd.bad { "Suspended" }
            }
        }
    }
}

/// An account's keys, one row (on a phone, one card) each; `last` fills
/// the last column, headed `last_heading`.
fn key_table(
    keys: &[KeyRecord],
    last_heading: &str,
    last: impl Fn(&KeyRecord) -> Markup,
) -> Markup {
    html! {
        div.scroll {
            table.stack {
                thead { tr { th { "Prefix" } th { "Label" } th { "Created" } th { "Last used" } th { "Last in clear" } th { (last_heading) } } }
                tbody {
                    @for key in keys {
                        tr.revoked[key.revoked_at.is_some()] {
                            td data-label="Prefix" { code { (key.prefix) "…" } }
                            td data-label="Label" { (key.label) }
                            td data-label="Created" { (utc_date(key.created_at)) }
                            td data-label="Last used" { (date_or(key.last_used_at, "never")) }
                            td data-label="Last in clear" { (date_or(key.last_in_clear_at, "never")) }
                            td { (last(key)) }
                        }
                    }
                }
            }
        }
    }
}

fn plan_title(name: &str) -> String {
    let mut chars = name.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

fn date_or(unix: Option<i64>, otherwise: &str) -> String {
    unix.map_or_else(|| otherwise.to_owned(), utc_datetime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_users_typed_is_escaped() {
        let html = login_page("t", "<script>alert(1)</script>\"", Some("<b>"), None).into_string();
        assert!(!html.contains("<script>alert"));
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;&quot;"));
        assert!(html.contains("&lt;b&gt;"));
    }

    #[test]
    fn plan_names_are_capitalised_for_people() {
        assert_eq!(plan_title("pro"), "Pro");
        assert_eq!(plan_title(""), "");
    }
}
