//! The dashboard over real sockets: first-start setup, signing in and out,
//! CSRF, throttling, what each kind of user may see and do, Try it, docs
//! and status.

use crate::helpers::*;
use cutout::domain::Month;
use std::sync::atomic::Ordering;
use std::thread;

#[test]
fn first_start_offers_a_one_time_setup_link_that_sets_the_admin_password() {
    let app = spawn_app();
    let token = app.state.dashboard.setup_token().expect("a setup token");
    let browser = Browser::new(&app);
    assert_eq!(browser.get("/setup?token=wrong").status, 404);

    let link = format!("/setup?token={token}");
    let csrf = browser.csrf(&link);
    let differ = browser.post(
        "/setup",
        &[
            ("csrf", &csrf),
            ("token", &token),
            ("password", "long enough 1"),
            ("confirm", "long enough 2"),
        ],
    );
    assert_eq!(differ.status, 400);
    assert!(differ.text().contains("The two passwords differ."));
    let short = browser.post(
        "/setup",
        &[
            ("csrf", &csrf),
            ("token", &token),
            ("password", "short"),
            ("confirm", "short"),
        ],
    );
    assert!(short.text().contains("at least 8 characters"));

    let done = browser.post(
        "/setup",
        &[
            ("csrf", &csrf),
            ("token", &token),
            ("password", ADMIN_PASSWORD),
            ("confirm", ADMIN_PASSWORD),
        ],
    );
    assert_eq!(
        (done.status, done.header("location")),
        (303, Some("/admin"))
    );
    assert_eq!(
        browser.get("/admin").status,
        200,
        "signed in as the operator"
    );
    assert_eq!(
        Browser::new(&app).get(&link).status,
        404,
        "the link works once"
    );
    assert!(app.state.dashboard.setup_token().is_none());
    assert_eq!(
        Browser::new(&app).sign_in("admin", ADMIN_PASSWORD).status,
        303
    );
}

#[test]
fn a_set_admin_password_disables_the_setup_link() {
    let app = spawn_app();
    let token = app.state.dashboard.setup_token().unwrap();
    app.set_admin_password(); // as `cutout admin set-password` does, while serving
    assert_eq!(
        Browser::new(&app)
            .get(&format!("/setup?token={token}"))
            .status,
        404
    );
}

#[test]
fn session_cookies_are_http_only_same_site_strict_and_secure_behind_tls() {
    let app = spawn_app();
    app.set_admin_password();
    let plain = Browser::new(&app).sign_in("admin", ADMIN_PASSWORD);
    for name in ["cutout_session", "cutout_device"] {
        let cookie = plain.set_cookie(name).unwrap();
        assert!(
            cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
            "{cookie}"
        );
        assert!(!cookie.contains("Secure"));
    }
    let device = plain.set_cookie("cutout_device").unwrap();
    assert!(
        device.starts_with("cutout_device=admin:") && device.contains("Max-Age=31536000"),
        "a year: {device}"
    );

    let proxied = Browser::new(&app).with_header("X-Forwarded-Proto", "https");
    let reply = proxied.sign_in("admin", ADMIN_PASSWORD);
    for name in ["cutout_session", "cutout_device"] {
        let cookie = reply.set_cookie(name).unwrap();
        assert!(cookie.contains("; Secure"), "{cookie}");
    }
}

#[test]
fn a_wrong_password_and_an_unknown_name_fail_alike() {
    let app = spawn_app();
    app.set_admin_password();
    app.account_with_login("booth", "pro");
    for (name, password) in [
        ("admin", "wrong password"),
        ("booth", "wrong password"),
        ("nobody", "whatever it is"),
    ] {
        let reply = Browser::new(&app).sign_in(name, password);
        assert_eq!(reply.status, 401, "{name}");
        assert!(reply.text().contains("Wrong name or password."));
        assert!(reply
            .header("set-cookie")
            .is_none_or(|c| !c.starts_with("cutout_session")));
    }
}

#[test]
fn sign_in_without_the_forms_csrf_cookie_is_refused() {
    let app = spawn_app();
    app.set_admin_password();
    let browser = Browser::new(&app);
    let csrf = browser.csrf("/login");
    let stranger = Browser::new(&app); // another site's page posting the form: no cookie
    let reply = stranger.post(
        "/login",
        &[
            ("csrf", &csrf),
            ("name", "admin"),
            ("password", ADMIN_PASSWORD),
        ],
    );
    assert_eq!(reply.status, 403);
    assert!(stranger.cookie("cutout_session").is_none());
}

#[test]
fn sign_in_is_throttled_after_five_failures_for_a_name() {
    let app = spawn_app();
    app.set_admin_password();
    for _ in 0..5 {
        assert_eq!(
            Browser::new(&app).sign_in("admin", "guess guess").status,
            401
        );
    }
    let locked = Browser::new(&app).sign_in("admin", ADMIN_PASSWORD);
    assert_eq!(locked.status, 429, "even the right password waits");
    assert!(
        locked.text().contains("Too many failed sign-ins"),
        "{}",
        locked.text()
    );
    assert!(locked.text().contains("Try again in 15 minutes"));

    app.now.fetch_add(15 * 60, Ordering::SeqCst);
    assert_eq!(
        Browser::new(&app).sign_in("admin", ADMIN_PASSWORD).status,
        303
    );
}

#[test]
fn parallel_guesses_at_one_name_check_no_more_passwords_than_the_limit() {
    // All 150 reach the throttle: past the default 64 connections from one
    // address, the connection limits would close some before it.
    let app = spawn_app_with(cutout::EngineSource::Ready(u2netp()), |s| {
        s.max_connections_per_address = 256;
    });
    app.set_admin_password();
    let statuses: Vec<u16> = thread::scope(|s| {
        let guesses: Vec<_> = (0..150)
            .map(|_| s.spawn(|| Browser::new(&app).sign_in("admin", "guess guess").status))
            .collect();
        guesses.into_iter().map(|g| g.join().unwrap()).collect()
    });
    let checked = statuses.iter().filter(|&&s| s == 401).count();
    let refused = statuses.iter().filter(|&&s| s == 429).count();
    assert_eq!((checked, refused), (5, 145), "{statuses:?}");
}

#[test]
fn a_stranger_cannot_lock_out_a_browser_that_signed_in_before() {
    let app = spawn_app();
    let operator = app.admin();
    let csrf = operator.csrf("/admin");
    assert_eq!(operator.post("/logout", &[("csrf", &csrf)]).status, 303);
    assert!(
        operator.cookie("cutout_device").is_some(),
        "kept on sign-out"
    );

    for name in ["ADMIN", "admin", "Admin"].into_iter().cycle().take(40) {
        let status = Browser::new(&app).sign_in(name, "guess guess").status;
        assert!(matches!(status, 401 | 429), "{status}");
    }
    let fresh = Browser::new(&app).sign_in("admin", ADMIN_PASSWORD);
    assert_eq!(fresh.status, 429, "a browser never seen before waits");
    let forged = Browser::new(&app);
    forged.set_cookie(
        "cutout_device",
        &format!("admin:{}:{}", "0".repeat(32), "0".repeat(64)),
    );
    assert_eq!(forged.sign_in("admin", ADMIN_PASSWORD).status, 429);

    let reply = operator.sign_in("admin", ADMIN_PASSWORD);
    assert_eq!(
        (reply.status, reply.header("location")),
        (303, Some("/admin")),
        "{}",
        reply.text()
    );
    assert_eq!(operator.get("/admin").status, 200);
}

#[test]
fn a_sign_in_that_cannot_read_the_device_key_fails_and_starts_no_session() {
    let app = spawn_app();
    let operator = app.admin();
    let db = rusqlite::Connection::open(app.data_dir().join("cutout.db")).unwrap();
    db.execute_batch("DROP TABLE device_key").unwrap();

    let fresh = Browser::new(&app);
    let reply = fresh.sign_in("admin", ADMIN_PASSWORD);
    assert_eq!(reply.status, 503, "{}", reply.text());
    assert!(reply.text().contains("Database unavailable"));
    assert!(fresh.cookie("cutout_session").is_none());
    let sessions: i64 = db
        .query_row("SELECT COUNT(*) FROM sessions", [], |r| r.get(0))
        .unwrap();
    assert_eq!(sessions, 1, "only the operator's first");

    let csrf = operator.csrf("/admin");
    operator.post("/logout", &[("csrf", &csrf)]);
    assert_eq!(operator.sign_in("admin", ADMIN_PASSWORD).status, 503);
}

#[test]
fn a_setup_that_cannot_read_the_device_key_sets_no_password() {
    let app = spawn_app();
    let token = app.state.dashboard.setup_token().unwrap();
    let db = rusqlite::Connection::open(app.data_dir().join("cutout.db")).unwrap();
    db.execute_batch("DROP TABLE device_key").unwrap();
    let browser = Browser::new(&app);
    let csrf = browser.csrf(&format!("/setup?token={token}"));
    let reply = browser.post(
        "/setup",
        &[
            ("csrf", &csrf),
            ("token", &token),
            ("password", ADMIN_PASSWORD),
            ("confirm", ADMIN_PASSWORD),
        ],
    );
    assert_eq!(reply.status, 503);
    assert!(app.store.admin_password_hash().unwrap().is_none());
    assert!(
        app.state.dashboard.setup_token().is_some(),
        "the link still works"
    );
}

#[test]
fn a_suspended_accounts_right_password_counts_as_a_failure() {
    let app = spawn_app();
    app.account_with_login("booth", "pro");
    app.store.set_suspended("booth", true, MID_MARCH).unwrap();
    for _ in 0..4 {
        assert_eq!(
            Browser::new(&app).sign_in("booth", "guess guess").status,
            401
        );
    }
    let right = Browser::new(&app).sign_in("booth", USER_PASSWORD);
    assert_eq!(right.status, 403);
    assert!(right
        .all_headers("set-cookie")
        .iter()
        .all(|c| !c.starts_with("cutout_session") && !c.starts_with("cutout_device")));
    let next = Browser::new(&app).sign_in("booth", USER_PASSWORD);
    assert_eq!(
        next.status, 429,
        "the right guess was counted, nothing reset"
    );
}

#[test]
fn failed_sign_ins_with_long_names_keep_the_log_and_memory_small() {
    let data = tempfile::tempdir().unwrap();
    let server = Server::start(data.path(), "warn", &[]);
    let long = "p".repeat(64_000); // a 64 KB form holds no more
    let fail = |source: [u8; 4], i: usize| {
        let name = format!("{}-{i:02}-{long}", source[3]);
        Browser::at(server.addr)
            .with_address(source.into())
            .sign_in(&name, "guess guess")
            .status
    };
    let log_before = std::fs::metadata(&server.log).unwrap().len();
    // The first password checks and 64 KB forms on each worker take arenas
    // and buffers whatever the throttle keeps: measure from after them, on
    // as many connections at once as below, so every worker has had one.
    thread::scope(|s| {
        for t in 0..10 {
            s.spawn(move || {
                for i in 0..2 {
                    assert_eq!(fail([127, 0, 0, 1], 10 * t + i), 401);
                }
            });
        }
    });
    let rss_before = server.rss_kib();
    // 1,000 failures, every one a password check: 20 (the address limit)
    // from each of 50 addresses, over 10 threads.
    let statuses: Vec<u16> = thread::scope(|s| {
        let threads: Vec<_> = (0..10u8)
            .map(|t| {
                s.spawn(move || {
                    let sources = (0..5u8).map(move |a| [127, 0, 1, 1 + 5 * t + a]);
                    let tries = sources.flat_map(|a| (0..20).map(move |i| (a, i)));
                    tries.map(|(a, i)| fail(a, i)).collect::<Vec<_>>()
                })
            })
            .collect();
        threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect()
    });
    let rss_grown = server.rss_kib().saturating_sub(rss_before);
    assert!(statuses.iter().all(|&s| s == 401), "{statuses:?}");
    assert_eq!(statuses.len(), 1000);
    assert_eq!(fail([127, 0, 1, 1], 99), 429, "the address limit");

    let log = std::fs::read_to_string(&server.log).unwrap();
    let grown = log.len() as u64 - log_before;
    // 1,020 lines of about 120 bytes; the names alone would be 64 MB.
    assert!(grown < 200 * 1024, "the log grew {grown} bytes");
    assert!(!log.contains(&long[..32]), "no raw name in the log");
    assert!(log.contains("failed sign-in for an unknown name (64006 bytes) from 127.0.1.50"));
    // The 1,000 names kept, as the old table did, would add 62 MiB; the
    // workers' allocator arenas alone grow 6-8 MiB on a loaded machine.
    assert!(rss_grown < 16 * 1024, "RSS grew {rss_grown} KiB");
    eprintln!("1,000 failures: the log grew {grown} bytes, RSS {rss_grown} KiB");
}

#[test]
fn signing_out_ends_the_session_on_the_server() {
    let app = spawn_app();
    let admin = app.admin();
    let stolen = admin.cookie("cutout_session").unwrap();
    let csrf = admin.csrf("/admin");
    let reply = admin.post("/logout", &[("csrf", &csrf)]);
    assert_eq!(
        (reply.status, reply.header("location")),
        (303, Some("/login?done=signed-out"))
    );
    assert!(
        admin.cookie("cutout_session").is_none(),
        "the cookie is cleared"
    );

    let replay = Browser::new(&app);
    replay.set_cookie("cutout_session", &stolen);
    assert_eq!(
        replay.get("/admin").header("location"),
        Some("/login"),
        "and the token is dead"
    );
}

#[test]
fn every_post_needs_the_sessions_csrf_token() {
    let app = spawn_app();
    let admin = app.admin();
    let other = Browser::new(&app).sign_in("admin", ADMIN_PASSWORD); // a second session
    assert_eq!(other.status, 303);
    let others_token = csrf_in(&Browser::new(&app).get("/login"));
    for csrf in ["", "0", others_token.as_str()] {
        let reply = admin.post(
            "/admin/accounts",
            &[("csrf", csrf), ("name", "sneaky"), ("plan", "pro")],
        );
        assert_eq!(reply.status, 403, "csrf {csrf:?}");
        assert!(reply.text().contains("This form has expired"));
    }
    assert!(app.store.account("sneaky").is_err());
    assert_eq!(admin.post("/logout", &[]).status, 403);
    assert_eq!(admin.get("/admin").status, 200, "still signed in");

    app.account_with_login("booth", "pro");
    let user = app.user("booth");
    assert_eq!(user.post("/account/keys", &[("label", "x")]).status, 403);
    let mut form = Multipart::new();
    form.file("image_file", &jpeg(64, 48));
    assert_eq!(user.post_multipart("/try", &form).status, 403);
    assert_eq!(app.store.keys("booth").unwrap().len(), 1);
    assert_eq!(app.used("booth"), 0);
}

#[test]
fn the_operator_creates_an_account_that_its_user_signs_in_to() {
    let app = spawn_app();
    let admin = app.admin();
    let csrf = admin.csrf("/admin");
    assert!(admin.get("/admin").text().contains("No accounts yet"));

    let bad = admin.post(
        "/admin/accounts",
        &[
            ("csrf", &csrf),
            ("name", "has space"),
            ("plan", "pro"),
            ("password", ""),
        ],
    );
    assert_eq!(bad.status, 400);
    assert!(bad.text().contains("Account names are 1 to 64 of"));
    let weak = admin.post(
        "/admin/accounts",
        &[
            ("csrf", &csrf),
            ("name", "booth"),
            ("plan", "pro"),
            ("password", "short"),
        ],
    );
    assert!(weak.text().contains("Use at least 8 characters."));
    assert!(app.store.account("booth").is_err(), "nothing half-made");

    let made = admin.post(
        "/admin/accounts",
        &[
            ("csrf", &csrf),
            ("name", "booth"),
            ("plan", "pro"),
            ("password", USER_PASSWORD),
        ],
    );
    assert_eq!(
        (made.status, made.header("location")),
        (303, Some("/admin/accounts/booth?done=created"))
    );
    let page = admin.get("/admin/accounts/booth?done=created").text();
    assert!(page.contains("Account created.") && page.contains("Pro"));
    let again = admin.post(
        "/admin/accounts",
        &[
            ("csrf", &csrf),
            ("name", "booth"),
            ("plan", "pro"),
            ("password", ""),
        ],
    );
    assert!(again
        .text()
        .contains("An account named booth already exists."));

    let user = app.user("booth");
    let home = user.get("/account").text();
    assert!(
        home.contains("0 of 500") && home.contains("2026-04-01 00:00 UTC"),
        "{home}"
    );
    assert!(home.contains("You have no active API keys"));
}

#[test]
fn the_operator_changes_plans_passwords_and_suspends() {
    let app = spawn_app();
    let key = app.account_with_login("booth", "pro");
    let admin = app.admin();
    let user = app.user("booth");
    let csrf = admin.csrf("/admin/accounts/booth");

    let reply = admin.post(
        "/admin/accounts/booth/plan",
        &[("csrf", &csrf), ("plan", "business")],
    );
    assert_eq!(reply.status, 303);
    assert_eq!(app.store.account("booth").unwrap().plan.name, "business");
    let reply = admin.post(
        "/admin/accounts/booth/plan",
        &[("csrf", &csrf), ("plan", "platinum")],
    );
    assert_eq!(reply.status, 400);
    assert!(reply.text().contains("Choose one of the listed plans."));

    admin.post(
        "/admin/accounts/booth/suspension",
        &[("csrf", &csrf), ("suspended", "true")],
    );
    assert!(admin.get("/admin").text().contains("suspended"));
    let refused = app.post_image(Some(&key), &jpeg(64, 48), None);
    assert_eq!(
        (refused.status, refused.error_code().as_str()),
        (403, "account_suspended")
    );
    assert_eq!(
        user.get("/account").header("location"),
        Some("/login"),
        "signed out"
    );
    let login = Browser::new(&app).sign_in("booth", USER_PASSWORD);
    assert_eq!(login.status, 403);
    assert!(login.text().contains("This account is suspended."));

    admin.post(
        "/admin/accounts/booth/suspension",
        &[("csrf", &csrf), ("suspended", "false")],
    );
    assert_eq!(app.post_image(Some(&key), &jpeg(64, 48), None).status, 200);
    let user = app.user("booth");

    let reply = admin.post(
        "/admin/accounts/booth/password",
        &[("csrf", &csrf), ("password", "a new password")],
    );
    assert_eq!(reply.status, 303);
    assert_eq!(
        user.get("/account").header("location"),
        Some("/login"),
        "old sessions end"
    );
    assert_eq!(
        Browser::new(&app).sign_in("booth", "a new password").status,
        303
    );
    assert_eq!(
        Browser::new(&app).sign_in("booth", USER_PASSWORD).status,
        401
    );
}

#[test]
fn an_account_user_can_never_see_or_touch_another_account() {
    let app = spawn_app();
    app.account_with_login("alpha", "pro");
    let beta_key = app.account_with_login("beta", "pro");
    let beta_prefix = &beta_key[..12];
    let alpha = app.user("alpha");

    let home = alpha.get("/account").text();
    assert!(!home.contains(beta_prefix) && !home.contains("beta"));
    assert_eq!(
        alpha
            .get(&format!("/account/keys/{beta_prefix}/revoke"))
            .status,
        404
    );
    let csrf = alpha.csrf("/account");
    let reply = alpha.post(
        &format!("/account/keys/{beta_prefix}/revoke"),
        &[("csrf", &csrf)],
    );
    assert_eq!(reply.status, 404);
    assert_eq!(
        app.post_image(Some(&beta_key), &jpeg(64, 48), None).status,
        200,
        "beta's key still works"
    );

    for path in ["/admin", "/admin/accounts/beta", "/admin/status"] {
        assert_eq!(alpha.get(path).status, 403, "{path}");
    }
    let reply = alpha.post(
        "/admin/accounts/beta/suspension",
        &[("csrf", &csrf), ("suspended", "true")],
    );
    assert_eq!(reply.status, 403);
    assert!(!app.store.account("beta").unwrap().suspended);

    let admin = app.admin();
    assert_eq!(
        admin.get("/account").status,
        403,
        "the operator has no account pages"
    );
    assert_eq!(
        Browser::new(&app).get("/account").header("location"),
        Some("/login")
    );
    assert_eq!(
        Browser::new(&app).get("/try").header("location"),
        Some("/login")
    );
}

#[test]
fn a_key_is_shown_once_works_and_stops_working_when_revoked() {
    let app = spawn_app();
    app.account_with_login("booth", "pro");
    let user = app.user("booth");
    let csrf = user.csrf("/account");

    let made = user.post("/account/keys", &[("csrf", &csrf), ("label", "Booth <2>")]);
    assert_eq!(made.status, 200);
    let html = made.text();
    let at = html.find("value=\"ck_").unwrap();
    let key = html[at + 7..at + 7 + 43].to_owned();
    assert!(html.contains("shown only this once") && html.contains("Booth &lt;2&gt;"));
    assert_eq!(app.post_image(Some(&key), &jpeg(64, 48), None).status, 200);
    let home = user.get("/account").text();
    assert!(!home.contains(&key), "never shown again");
    assert!(home.contains(&key[..12]) && home.contains("1 of 500"));

    let confirm = user.get(&format!("/account/keys/{}/revoke", &key[..12]));
    assert!(confirm.text().contains("This cannot be undone"));
    let reply = user.post(
        &format!("/account/keys/{}/revoke", &key[..12]),
        &[("csrf", &csrf_in(&confirm))],
    );
    assert_eq!(reply.header("location"), Some("/account?done=revoked"));
    let refused = app.post_image(Some(&key), &jpeg(64, 48), None);
    assert_eq!(
        (refused.status, refused.error_code().as_str()),
        (401, "invalid_api_key")
    );

    let (long, bidi, two_lines) = ("x".repeat(65), "invoice\u{202E}gpj.exe", "one\u{2028}two");
    for label in [long.as_str(), bidi, two_lines] {
        let reply = user.post("/account/keys", &[("csrf", &csrf), ("label", label)]);
        assert_eq!(reply.status, 400, "{label:?}");
        assert!(reply.text().contains(
            "Use at most 64 characters, on one line, without control or text-direction characters."
        ));
    }
    assert_eq!(app.store.keys("booth").unwrap().len(), 2, "no third key");
}

#[test]
fn no_account_may_be_named_dot_or_dot_dot() {
    let app = spawn_app();
    let admin = app.admin();
    let csrf = admin.csrf("/admin");
    for name in [".", ".."] {
        let reply = admin.post(
            "/admin/accounts",
            &[
                ("csrf", &csrf),
                ("name", name),
                ("plan", "pro"),
                ("password", ""),
            ],
        );
        assert_eq!(reply.status, 400, "{name}");
        assert!(reply.text().contains("may not be"));
        assert!(app.store.account(name).is_err());
    }
}

#[test]
fn try_it_goes_through_the_pipeline_and_the_quota() {
    let app = spawn_app();
    app.account_with_login("booth", "pro");
    let user = app.user("booth");
    let csrf = user.csrf("/try");
    let mut form = Multipart::new();
    form.text("csrf", &csrf)
        .file("image_file", &jpeg(120, 80))
        .text("size", "preview");

    let reply = user.post_multipart("/try", &form);
    assert_eq!(
        (reply.status, reply.header("location")),
        (303, Some("/try")),
        "{}",
        reply.text()
    );
    assert_eq!(app.used("booth"), 1);
    let page = user.get("/try").text();
    assert!(
        page.contains("/try/result?n=") && page.contains("120×80"),
        "{page}"
    );
    let png = user.get("/try/result");
    assert_eq!(png.header("content-type"), Some("image/png"));
    assert_eq!(png.png().dimensions(), (120, 80));
    assert_eq!(
        user.get("/try/original").header("content-type"),
        Some("image/jpeg")
    );
    let download = user.get("/try/result?download=1");
    assert_eq!(
        download.header("content-disposition"),
        Some("attachment; filename=\"cutout.png\"")
    );
    assert_eq!(
        Browser::new(&app).get("/try/result").status,
        303,
        "not without a session"
    );

    let mut styled = Multipart::new();
    styled
        .text("csrf", &csrf)
        .file("image_file", &jpeg(120, 80))
        .text("bg_color", "white")
        .text("crop", "true")
        .text("format", "jpg");
    assert_eq!(user.post_multipart("/try", &styled).status, 303);
    let jpeg_result = user.get("/try/result");
    assert_eq!(jpeg_result.header("content-type"), Some("image/jpeg"));
    let cropped = image::load_from_memory(&jpeg_result.body).unwrap();
    assert!(
        cropped.width() < 120 || cropped.height() < 80,
        "cropped to the subject"
    );
    assert!(user.get("/try").text().contains("cutout.jpg"));
    assert_eq!(
        user.get("/try/result?download=1")
            .header("content-disposition"),
        Some("attachment; filename=\"cutout.jpg\"")
    );
    assert_eq!(app.used("booth"), 2);

    let mut bad = Multipart::new();
    bad.text("csrf", &csrf).file("image_file", b"not an image");
    let refused = user.post_multipart("/try", &bad);
    assert_eq!(refused.status, 415);
    assert!(refused.text().contains("must be a JPEG, PNG or WEBP"));

    let month = Month::of_unix(MID_MARCH);
    app.store.set_usage("booth", month, 500).unwrap();
    let over = user.post_multipart("/try", &form);
    assert_eq!(over.status, 402);
    assert!(over.text().contains("Monthly quota exceeded"));
    assert_eq!(app.used("booth"), 500);
}

#[test]
fn the_docs_list_every_error_and_fill_in_the_users_key_prefix() {
    let app = spawn_app();
    let key = app.account_with_login("booth", "pro");
    let anonymous = Browser::new(&app).get("/docs").text();
    assert!(anonymous.contains("YOUR_API_KEY"));
    for error in cutout::pages::REMOVE_BG_ERRORS {
        assert!(anonymous.contains(error.code), "{}", error.code);
    }
    let page = app.user("booth").get("/docs").text();
    assert!(
        page.contains(&format!("{}…", &key[..12])),
        "prefix filled in"
    );
    assert!(page.contains("curl") && page.contains("import requests") && page.contains("fetch("));
    assert!(
        page.contains(&format!("http://{}/api/remove-bg", app.addr)),
        "the host the reader used"
    );
}

#[test]
fn the_status_page_shows_the_appliance() {
    let thermal = tempfile::tempdir().unwrap();
    let zone = thermal.path().join("thermal_zone0");
    std::fs::create_dir(&zone).unwrap();
    std::fs::write(zone.join("type"), "cpu-thermal\n").unwrap();
    std::fs::write(zone.join("temp"), "48312\n").unwrap();
    let dir = thermal.path().to_owned();
    let app = spawn_app_with(cutout::EngineSource::Ready(u2netp()), |s| {
        s.thermal_dir = dir
    });
    let key = app.account("booth", "pro");
    assert_eq!(app.post_image(Some(&key), &jpeg(64, 48), None).status, 200);
    assert_eq!(app.post_image(Some(&key), b"junk", None).status, 415);

    let page = app.admin().get("/admin/status").text();
    for expected in [
        "u2netp",
        "tract-onnx",
        "48.3 °C",
        "over the last 1 cut-outs",
        "writable",
        "the appliance is idle",
        env!("CARGO_PKG_VERSION"),
    ] {
        assert!(page.contains(expected), "{expected} in {page}");
    }
    assert!(page.contains("<dd>2</dd>"), "two calls today: {page}");
    assert!(page.contains("1 refused as bad requests"));
}

#[test]
fn the_status_page_shows_the_board_its_defaults_a_fallback_and_the_last_bench() {
    use cutout::board::{Board, Installed, LadderReport, Measurement, Report, Row, RungRow};
    let board = Board {
        name: "Raspberry Pi 4 Model B Rev 1.4".into(),
        memory: 1900 << 20,
        cores: 4,
        int8_dot_product: false,
    };
    let installed = Installed {
        onnxruntime: true,
        isnet_int8: false,
        isnet_int8_on_tract: false,
    };
    let defaults = board.defaults(&installed, None);
    let app = spawn_app_with(cutout::EngineSource::Ready(u2netp()), |s| {
        s.board = Some(defaults.found_on(&board));
        s.engine_note = Some("ONNX Runtime's library ended the process 2 times".into());
    });
    let page = app.admin().get("/admin/status").text();
    assert!(page.contains("not run yet"), "{page}");
    let report = Report {
        at_unix: MID_MARCH,
        board: "Raspberry Pi 4 Model B Rev 1.4, 4 cores".into(),
        memory_mib: 1900,
        rows: vec![Row {
            model: "u2netp".into(),
            engine: "tract".into(),
            outcome: Measurement::Measured {
                load_seconds: 0.4,
                seconds: 2.25,
                peak_mib: 240,
            },
        }],
        recommended: Some(("u2netp".into(), "tract".into())),
        ladder: Some(LadderReport {
            model: "isnet".into(),
            engine: "onnxruntime".into(),
            photo: "bench-photo.jpg".into(),
            rows: vec![
                RungRow {
                    subject: "auto".into(),
                    rung: "views".into(),
                    outcome: Measurement::Not("alone is over the budget already".into()),
                },
                RungRow {
                    subject: "auto".into(),
                    rung: "alone".into(),
                    outcome: Measurement::Measured {
                        load_seconds: 3.0,
                        seconds: 9.5,
                        peak_mib: 700,
                    },
                },
            ],
        }),
    };
    report.save(app.data_dir()).unwrap();
    let page = app.admin().get("/admin/status").text();
    for expected in [
        "Raspberry Pi 4 Model B Rev 1.4, 4 cores, 1900 MiB; so by default isnet on onnxruntime",
        "ended the process 2 times",
        "u2netp on tract: 2.25 s per 12 MP photo, peak 240 MiB",
        "model = &quot;u2netp&quot;",
        "type=auto as alone: 9.50 s per photo at most, peak 700 MiB",
        "type=auto as views: not measured: alone is over the budget already",
        "2026-03-15",
    ] {
        assert!(page.contains(expected), "{expected} in {page}");
    }
}

#[test]
fn every_page_forbids_framing_and_foreign_content() {
    let app = spawn_app();
    for path in [
        "/login",
        "/docs",
        "/assets/style.css",
        "/api/openapi.json",
        "/healthz",
    ] {
        let reply = Browser::new(&app).get(path);
        assert_eq!(reply.status, 200, "{path}");
        let csp = reply.header("content-security-policy").unwrap();
        assert!(csp.contains("default-src 'self'") && csp.contains("frame-ancestors 'none'"));
        assert!(
            !csp.contains("http") && !csp.contains('*'),
            "same origin only: {csp}"
        );
        assert_eq!(reply.header("x-content-type-options"), Some("nosniff"));
    }
    let html = Browser::new(&app).get("/login").text();
    assert!(
        !html.contains("<script>") && !html.contains("style="),
        "no inline code"
    );
}

#[test]
fn people_get_a_not_found_page_and_programs_json() {
    let app = spawn_app();
    let page = Browser::new(&app).get("/nowhere");
    assert_eq!(page.status, 404);
    assert!(page
        .header("content-type")
        .unwrap()
        .starts_with("text/html"));
    assert_eq!(
        app.request("GET", "/nowhere", &[], b"").error_code(),
        "not_found"
    );
}
