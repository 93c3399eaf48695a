//! The operator's pages: every account with its usage, one account's
//! settings, and the appliance's status.

use super::{
    csrf_field, field_error, key_table, page, plan_title, usage_summary, AccountView, Nav,
};
use crate::backdrops::{Backdrop, MAX_BACKDROPS, MAX_NAME_CHARS};
use crate::backup::schedule::{Last, Schedule};
use crate::backup::MIN_PASSPHRASE_CHARS;
use crate::domain::{utc_date, utc_datetime, Month};
use crate::pairing::PendingView;
use crate::store::{Account, Plan};
use maud::{html, Markup};
use std::time::Duration;

/// The "new account" form as last submitted, with what was wrong with it.
#[derive(Default)]
pub struct NewAccount {
    pub name: String,
    pub plan: String,
    pub name_error: Option<String>,
    pub password_error: Option<String>,
}

pub fn admin_accounts(
    csrf: &str,
    month: Month,
    accounts: &[(Account, u32)],
    plans: &[Plan],
    form: &NewAccount,
    flash: Option<&str>,
) -> Markup {
    let near_their_limit: Vec<&str> = accounts
        .iter()
        .filter(|(account, used)| nearly_spent(account, *used))
        .map(|(account, _)| account.name.as_str())
        .collect();
    let body = html! {
        section {
            h2 { "Usage in " (month) }
            @if !near_their_limit.is_empty() {
                p.bad role="alert" #quota-warning {
                    "Nearly or all used this month: " (near_their_limit.join(", "))
                    ". Their booths keep their photos' backgrounds once the month's images are spent: raise the plan, or correct the count (cutout usage set)."
                }
            }
            @if accounts.is_empty() {
                p.empty { "No accounts yet. Create the first one below; then give its user the name and password so they can sign in and make API keys." }
            } @else {
                div.scroll {
                    table {
                        thead { tr { th { "Account" } th { "Plan" } th.num { "Used" } th.num { "Limit" } th.num { "At a time" } th { "Status" } } }
                        tbody {
                            @for (account, used) in accounts {
                                tr {
                                    td { a href={ "/admin/accounts/" (account.name) } { (account.name) } }
                                    td { (plan_title(&account.plan.name)) }
                                    td.num { (used) }
                                    td.num { (account.plan.monthly_limit.map_or("none".to_owned(), |l| l.to_string())) }
                                    td.num { (account.plan.concurrency) }
                                    td {
                                        @if account.suspended { span.bad { "suspended" } }
                                        @else if account.plan.monthly_limit.is_some_and(|limit| *used >= limit) { span.bad { "month used up" } }
                                        @else if nearly_spent(account, *used) { span.bad { "month nearly used" } }
                                        @else if !account.has_login { "no sign-in yet" }
                                        @else { "active" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        section {
            h2 { "New account" }
            form.card method="post" action="/admin/accounts" {
                (csrf_field(csrf))
                label for="name" { "Name (the user signs in with it)" }
                input #name type="text" name="name" value=(form.name) required maxlength="64"
                    autocapitalize="none" pattern="[A-Za-z0-9._\\-]+" aria-describedby="name-error";
                (field_error("name-error", form.name_error.as_deref()))
                label for="plan" { "Plan" }
                (plan_select(plans, if form.plan.is_empty() { "pro" } else { &form.plan }))
                label for="password" { "Password for its user (optional; you can set it later)" }
                input #password type="password" name="password" autocomplete="new-password"
                    aria-describedby="password-error";
                (field_error("password-error", form.password_error.as_deref()))
                button type="submit" { "Create account" }
            }
        }
    };
    page("Accounts", &Nav::Admin { csrf }, flash, body)
}

/// Booths asking to pair: each with the code it shows, to compare before
/// approving it into an account.
pub fn admin_booths(
    csrf: &str,
    waiting: &[PendingView],
    accounts: &[&str],
    button: bool,
    flash: Option<&str>,
) -> Markup {
    let body = html! {
        section {
            h2 { "Booths asking to pair" }
            p {
                "A booth with no key asks from its own settings. Each shows a code: approve only a request whose code is the one on the booth's screen. Another code means something between the booth and this appliance is not this appliance; refuse it."
                @if button { " Instead of approving here, you can press the appliance's button within a minute of the booth's request, when it is the only one." }
            }
            @if waiting.is_empty() {
                p.empty { "No booth is asking. This page does not refresh itself: reload it once the booth shows its code." }
            } @else {
                div.scroll {
                    table {
                        thead { tr { th { "Booth" } th { "Address" } th { "Code" } th { "Asked" } th { "Answer" } } }
                        tbody {
                            @for booth in waiting {
                                tr data-pairing=(booth.handle) {
                                    td { (booth.name) }
                                    td { (booth.address) }
                                    td.code { (booth.code) }
                                    td { (utc_datetime(booth.asked)) }
                                    td {
                                        form.inline method="post" action={ "/admin/booths/" (booth.handle) "/approve" } {
                                            (csrf_field(csrf))
                                            label for={ "account-" (booth.handle) } { "Account" }
                                            select id={ "account-" (booth.handle) } name="account" required {
                                                @for account in accounts { option value=(account) { (account) } }
                                            }
                                            button type="submit" { "Approve" }
                                        }
                                        form.inline method="post" action={ "/admin/booths/" (booth.handle) "/refuse" } {
                                            (csrf_field(csrf))
                                            button.secondary type="submit" { "Refuse" }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
                @if accounts.is_empty() { p.bad { "There is no account to pair a booth into yet: create one under Accounts first." } }
            }
        }
    };
    page("Booths", &Nav::Admin { csrf }, flash, body)
}

/// Whether a tenth or less of the account's month is left (a booth
/// says the same on its screen).
fn nearly_spent(account: &Account, used: u32) -> bool {
    account
        .plan
        .monthly_limit
        .is_some_and(|limit| u64::from(used) * 10 >= u64::from(limit) * 9)
}

/// The backdrops every booth may name, each with its preview and a
/// delete button, and the form that adds one.
pub fn admin_backdrops(
    csrf: &str,
    backdrops: &[Backdrop],
    flash: Option<&str>,
    error: Option<&str>,
) -> Markup {
    let body = html! {
        section {
            h2 { "Backdrops" }
            p {
                "A backdrop is a background, and optionally an overlay (a PNG with transparency: a frame, a logo, a text), that a booth puts behind its guests. Every booth sees the same ones: the pibooth plugin offers them as themes the guest picks on the wait screen. The appliance puts the cut-out on the background and the overlay over it at the photo's full size, both scaled to cover it and cut to it, centred."
            }
            @if backdrops.is_empty() {
                p.empty { "No backdrop yet: add one below." }
            } @else {
                div.scroll {
                    table {
                        thead { tr { th { "Preview" } th { "Name" } th { "Size" } th { "Overlay" } th {} } }
                        tbody {
                            @for b in backdrops {
                                tr data-backdrop=(b.id) {
                                    td { img src={ "/admin/backdrops/" (b.id) "/preview" } alt={ "Preview of " (b.name) } width="160"; }
                                    td { (b.name) }
                                    td { (b.width) "×" (b.height) }
                                    td { @if b.overlay { "yes" } @else { "no" } }
                                    td {
                                        form.inline method="post" action={ "/admin/backdrops/" (b.id) "/delete" } {
                                            (csrf_field(csrf))
                                            button.secondary type="submit" { "Delete" }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        section {
            h2 { "Add a backdrop" }
            form.card #backdrop-form method="post" action="/admin/backdrops" enctype="multipart/form-data" {
                (csrf_field(csrf))
                label for="backdrop" { "Name" }
                input #backdrop type="text" name="backdrop" maxlength=(MAX_NAME_CHARS) required
                    aria-describedby="backdrop-error" autocomplete="off";
                label for="image_file" { "Background: a JPG, PNG or WEBP, at most 25 megapixels" }
                input #image_file type="file" name="image_file" accept="image/jpeg,image/png,image/webp" required;
                label for="bg_image_file" { "Overlay (optional): a PNG with transparency" }
                input #bg_image_file type="file" name="bg_image_file" accept="image/png";
                p { "The two files together at most 13 MB; at most " (MAX_BACKDROPS) " backdrops." }
                (field_error("backdrop-error", error))
                button type="submit" { "Add" }
            }
        }
    };
    page("Backdrops", &Nav::Admin { csrf }, flash, body)
}

pub fn admin_backup(csrf: &str, error: Option<&str>) -> Markup {
    let body = html! {
        section {
            h2 { "Backup" }
            p {
                "One file with everything a new SD card needs to take this appliance's place: the accounts, their keys and passwords (as stored: hashes), every month's counts, your password, the HTTPS certificate and its key (so that every paired booth's pin still holds), the backdrops and the configuration file. It holds a private key, so it is encrypted with a passphrase you choose (age, scrypt); keep the passphrase apart from the file. Taking it does not stop the service."
            }
            p {
                "To restore on a fresh card: install the package, stop the service, run "
                code { "sudo cutout restore FILE" }
                " and start it again. Paired booths go on working, unchanged."
            }
            form.card #backup-form method="post" action="/admin/backup" {
                (csrf_field(csrf))
                label for="passphrase" { "Passphrase (at least " (MIN_PASSPHRASE_CHARS) " characters)" }
                input #passphrase type="password" name="passphrase" minlength=(MIN_PASSPHRASE_CHARS)
                    required autocomplete="new-password" aria-describedby="backup-error";
                label for="passphrase_again" { "The same again" }
                input #passphrase_again type="password" name="passphrase_again" required autocomplete="new-password";
                (field_error("backup-error", error))
                button type="submit" { "Download a backup" }
            }
        }
    };
    page("Backup", &Nav::Admin { csrf }, None, body)
}

fn plan_select(plans: &[Plan], selected: &str) -> Markup {
    html! {
        select #plan name="plan" {
            @for plan in plans {
                option value=(plan.name) selected[plan.name == selected] {
                    (plan_title(&plan.name)) " · "
                    @match plan.monthly_limit {
                        Some(_) if !plan.api_access => "no API access",
                        Some(limit) => { (limit) " images a month" },
                        None => "unlimited",
                    }
                    ", " (plan.concurrency) " at a time"
                }
            }
        }
    }
}

/// What was wrong with the last submission of one of the account page's forms.
#[derive(Default)]
pub struct AccountForms {
    pub plan_error: Option<String>,
    pub password_error: Option<String>,
}

pub fn admin_account(
    csrf: &str,
    shown: &AccountView,
    plans: &[Plan],
    forms: &AccountForms,
    flash: Option<&str>,
) -> Markup {
    let (account, keys) = (&shown.account, &shown.keys);
    let base = format!("/admin/accounts/{}", account.name);
    let body = html! {
        (usage_summary(shown))
        section {
            h2 { "Plan" }
            form.card method="post" action={ (base) "/plan" } {
                (csrf_field(csrf))
                label for="plan" { "Plan" }
                (plan_select(plans, &account.plan.name))
                (field_error("plan-error", forms.plan_error.as_deref()))
                button type="submit" { "Change plan" }
            }
        }
        section {
            h2 { "Sign-in for " (account.name) }
            p {
                @if account.has_login { "The user can sign in. Setting a new password signs them out everywhere." }
                @else { "No password set: the user cannot sign in yet." }
            }
            form.card method="post" action={ (base) "/password" } {
                (csrf_field(csrf))
                label for="password" { "New password (8 characters or more)" }
                input #password type="password" name="password" autocomplete="new-password"
                    required aria-describedby="password-error";
                (field_error("password-error", forms.password_error.as_deref()))
                button type="submit" { "Set password" }
            }
        }
        section {
            h2 { "Suspension" }
            @if account.suspended {
                p { "The account is suspended: its keys get 403 " code { "account_suspended" } " and its user cannot sign in." }
                form.inline method="post" action={ (base) "/suspension" } {
                    (csrf_field(csrf))
                    input type="hidden" name="suspended" value="false";
                    button type="submit" { "Re-enable account" }
                }
            } @else {
                p { "Suspending stops every key of the account at once and signs its user out. Usage and keys are kept." }
                form.inline method="post" action={ (base) "/suspension" } {
                    (csrf_field(csrf))
                    input type="hidden" name="suspended" value="true";
                    button.danger type="submit" { "Suspend account" }
                }
            }
        }
        section {
            h2 { "API keys" }
            @if keys.is_empty() {
                p.empty { "No keys. The account's user makes them after signing in." }
            } @else {
                (key_table(keys, "Status", |key| html! {
                    (key.revoked_at.map_or("active".to_owned(), |t| format!("revoked {}", utc_date(t))))
                }))
            }
        }
    };
    page(&account.name, &Nav::Admin { csrf }, flash, body)
}

pub struct StatusView {
    pub model: String,
    /// `None` while the model loads or after it failed.
    pub engine: Option<&'static str>,
    pub model_state: String,
    pub model_load: Option<Duration>,
    pub database: String,
    pub queue_depth: usize,
    pub queue_capacity: usize,
    /// Bytes reserved by the cut-outs at work, and their budget.
    pub memory: (u64, u64),
    pub calls_today: u64,
    pub client_errors_today: u64,
    pub server_errors_today: u64,
    pub median_latency: Option<Duration>,
    pub latency_samples: usize,
    pub led: String,
    pub uptime: Duration,
    pub version: &'static str,
    pub cpu_celsius: Option<f64>,
    /// HTTPS's port and certificate fingerprint, when HTTPS is on.
    pub https: Option<(u16, String)>,
    /// Plain HTTP's port where it listens beside HTTPS, and whether the
    /// API takes keys there (the operator's switch).
    pub plain_http_api: Option<(u16, bool)>,
    /// The board found at start and the defaults it gave.
    pub board: Option<String>,
    /// Why the engine is not the configured one, when it is not.
    pub engine_note: Option<String>,
    /// The models killed for memory while loading, while the appliance
    /// serves without them.
    pub memory_note: Option<String>,
    /// `cutout bench`'s last report.
    pub bench: Option<crate::board::Report>,
    /// What `type=auto` serves, why, and what a larger budget would buy.
    pub ladder: Vec<String>,
    /// The backup schedule, and how its last backup went.
    pub backups: Option<(Schedule, Last)>,
    /// What the last restore replaced, while it is kept.
    pub replaced: Option<crate::backup::Replaced>,
}

pub fn status_page(csrf: &str, s: &StatusView, flash: Option<&str>) -> Markup {
    let body = html! {
        dl.facts {
            dt { "Model" } dd { (s.model) " · " (s.model_state) }
            dt { "Engine" }
            dd {
                (s.engine.unwrap_or("not loaded"))
                @if let Some(note) = &s.engine_note { p.note { (note) } }
            }
            @if let Some(board) = &s.board { dt { "Board" } dd { (board) } }
            @if let Some(note) = &s.memory_note {
                dt { "Killed for memory" }
                dd {
                    form.inline method="post" action="/admin/status/killed-for-memory" {
                        (csrf_field(csrf))
                        p.note { (note) }
                        button type="submit" { "Try them again at the next start" }
                    }
                }
            }
            dt { "Model load time" }
            dd { (s.model_load.map_or("not loaded".to_owned(), |d| format!("{:.2} s", d.as_secs_f64()))) }
            dt { "Database" } dd { (s.database) }
            dt { "Queue depth" } dd { (s.queue_depth) " of " (s.queue_capacity) }
            dt { "Requests' memory" } dd { (memory_use(s.memory)) }
            dt { "Calls today (UTC)" } dd { (s.calls_today) }
            dt { "Errors today" }
            dd { (s.client_errors_today + s.server_errors_today) " (" (s.client_errors_today) " refused as bad requests or over limits, " (s.server_errors_today) " server-side)" }
            dt { "Median latency" }
            dd {
                @match s.median_latency {
                    Some(d) => { (format!("{:.2} s", d.as_secs_f64())) " over the last " (s.latency_samples) " cut-outs" }
                    None => "no cut-outs yet",
                }
            }
            dt { "Status light" } dd { (s.led) }
            dt { "Uptime" } dd { (human_duration(s.uptime)) }
            dt { "Version" } dd { (s.version) }
            dt { "CPU temperature" }
            dd { (s.cpu_celsius.map_or("not reported by this machine".to_owned(), |c| format!("{c:.1} °C"))) }
            dt { "HTTPS" }
            dd {
                @match &s.https {
                    Some((port, fingerprint)) => {
                        "port " (port) "; booths pin the certificate by its SHA-256 fingerprint "
                        code.fingerprint { (fingerprint) }
                    }
                    None => "off (set [tls] listen in cutout.toml)",
                }
            }
            @if let Some((port, on)) = s.plain_http_api {
                dt { "API over plain HTTP" }
                dd {
                    form.inline method="post" action="/admin/status/plain-http" {
                        (csrf_field(csrf))
                        @if on {
                            "on, port " (port) ": keys sent there cross the LAN in clear (the keys pages show when each last did) "
                            input type="hidden" name="api" value="off";
                            button.danger type="submit" { "Switch off" }
                        } @else {
                            "off: keys sent to port " (port) " are refused with 403 " code { "plain_http_off" } " "
                            input type="hidden" name="api" value="on";
                            button type="submit" { "Switch on" }
                        }
                    }
                }
            }
            @if !s.ladder.is_empty() {
                dt { "type=auto" }
                dd.ladder { ul { @for line in &s.ladder { li { (line) } } } }
            }
            dt { "Backups" }
            dd {
                @match &s.backups {
                    Some((schedule, last)) => {
                        @match &last.made {
                            Some((at, file)) => { "last made " (utc_datetime(*at)) ": " code { (file.display()) } }
                            None => "none made yet",
                        }
                        "; one every " (human_duration(schedule.every)) " into " code { (schedule.dir.display()) } ", the newest " (schedule.keep) " kept"
                        @if let Some((at, why)) = &last.failed {
                            p.note { "The last one failed at " (utc_datetime(*at)) ": " (why) }
                        }
                    }
                    None => { "not scheduled: set " code { "[backup] dir" } " in cutout.toml, or take one on the Backup page" }
                }
            }
            @if let Some(r) = &s.replaced {
                dt { "Before the restore" }
                dd {
                    form.inline method="post" action="/admin/status/replaced" {
                        (csrf_field(csrf))
                        "the restore"
                        @if let Some(at) = r.restored_at { " at " (utc_datetime(at)) }
                        " replaced " (replaced_parts(r)) "; they are kept in " code { (r.dir.display()) }
                        " (" code { "sudo cutout restore --undo" } ", service stopped, puts them back) "
                        button.danger type="submit" { "Delete them" }
                    }
                }
            }
            dt { "Benchmark" }
            dd {
                @match &s.bench {
                    Some(report) => {
                        "last run " (crate::domain::utc_datetime(report.at_unix)) " UTC on " (report.board) ":"
                        ul.bench {
                            @for line in report.lines() { li { (line) } }
                            @if let Some(ladder) = &report.ladder {
                                @for row in &ladder.rows { li { (row.line()) } }
                            }
                        }
                        @if !report.rows.is_empty() {
                            @match &report.recommended {
                                Some((model, engine)) => { "Recommended: " code { "model = \"" (model) "\"" } ", " code { "engine = \"" (engine) "\"" } }
                                None => "No general model fits this board with room to spare.",
                            }
                        }
                    }
                    None => { "not run yet: " code { "sudo -u cutout cutout --config /etc/cutout/cutout.toml bench" } " times each installed model on this board" }
                }
            }
        }
    };
    page("Status", &Nav::Admin { csrf }, flash, body)
}

/// "the database, the HTTPS certificate and 3 backdrop(s)".
fn replaced_parts(r: &crate::backup::Replaced) -> String {
    let backdrops = format!("{} backdrop(s)", r.backdrops);
    let parts: Vec<&str> = [
        (r.database, "the database"),
        (r.certificate, "the HTTPS certificate"),
        (r.backdrops > 0, backdrops.as_str()),
        (r.config, "the configuration file"),
    ]
    .into_iter()
    .filter_map(|(present, name)| present.then_some(name))
    .collect();
    match parts.as_slice() {
        [] => "nothing".into(),
        [one] => (*one).into(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// "120 MiB reserved of 768 MiB (server.memory_budget_mib)", or that no
/// budget bounds it.
fn memory_use((reserved, budget): (u64, u64)) -> String {
    let mib = |bytes: u64| bytes.div_ceil(1 << 20);
    match budget {
        u64::MAX => format!("{} MiB reserved; no budget set", mib(reserved)),
        _ => format!(
            "{} MiB reserved of {} MiB (server.memory_budget_mib, less the spare photos kept)",
            mib(reserved),
            mib(budget)
        ),
    }
}

fn human_duration(d: Duration) -> String {
    let secs = d.as_secs();
    let (days, hours, minutes) = (secs / 86_400, secs % 86_400 / 3600, secs % 3600 / 60);
    match (days, hours) {
        (0, 0) => format!("{minutes} min"),
        (0, _) => format!("{hours} h {minutes} min"),
        _ => format!("{days} d {hours} h"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uptime_reads_in_the_largest_sensible_units() {
        assert_eq!(human_duration(Duration::from_secs(59)), "0 min");
        assert_eq!(human_duration(Duration::from_secs(3_720)), "1 h 2 min");
        assert_eq!(human_duration(Duration::from_secs(90_000)), "1 d 1 h");
    }
}
