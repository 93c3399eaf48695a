//! A new appliance's operator password, set by whoever shows physical
//! access and nobody else: the code on the board's console, or a press of
//! its button (the real binary, its button a sysfs-style value file) while
//! one browser waits.

use crate::helpers::*;
use cutout::app::setup::CODE_TRIES;
use std::sync::atomic::Ordering;

fn with_console() -> (TestApp, tempfile::TempDir) {
    let console = tempfile::tempdir().unwrap();
    let path = console.path().join("tty1");
    std::fs::write(&path, "").unwrap();
    let app = spawn_app_with(cutout::EngineSource::Ready(u2netp()), |s| {
        s.setup_console = Some(path);
    });
    (app, console)
}

/// The last code the console shows.
fn console_code(console: &tempfile::TempDir) -> String {
    let text = std::fs::read_to_string(console.path().join("tty1")).unwrap();
    let line = text
        .lines()
        .rev()
        .find(|l| l.contains("type this code:"))
        .expect(&text);
    line.rsplit(' ').next().unwrap().to_owned()
}

fn set_password(browser: &Browser, location: &str) -> Reply {
    let token = location.strip_prefix("/setup?token=").expect(location);
    let csrf = browser.csrf(location);
    browser.post(
        "/setup",
        &[
            ("csrf", &csrf),
            ("token", token),
            ("password", ADMIN_PASSWORD),
            ("confirm", ADMIN_PASSWORD),
        ],
    )
}

#[test]
fn the_code_on_the_console_opens_setup() {
    let (app, console) = with_console();
    let code = console_code(&console);
    let text = std::fs::read_to_string(console.path().join("tty1")).unwrap();
    assert!(text.contains("/setup"), "{text}");
    let browser = Browser::new(&app);
    let start = browser.get("/setup");
    assert_eq!(start.status, 200);
    assert!(start.text().contains("The code on the screen"));
    assert!(
        !start.text().contains("Wait for the button"),
        "no button configured"
    );
    let csrf = csrf_in(&start);
    let wrong = browser.post("/setup/code", &[("csrf", &csrf), ("code", "2222-2222")]);
    assert_eq!(wrong.status, 400);
    assert!(wrong.text().contains("not the code"));
    let typed = code.to_lowercase().replace('-', " ");
    let right = browser.post("/setup/code", &[("csrf", &csrf), ("code", &typed)]);
    assert_eq!(right.status, 303);
    let done = set_password(&browser, right.header("location").unwrap());
    assert_eq!(done.header("location"), Some("/admin"));
    assert!(app.store.admin_password_hash().unwrap().is_some());
    let after = Browser::new(&app);
    let csrf = csrf_in(&after.get("/login"));
    assert_eq!(
        after
            .post("/setup/code", &[("csrf", &csrf), ("code", &code)])
            .status,
        404
    );
}

#[test]
fn wrong_codes_replace_the_code_on_the_console_and_pause_guessing() {
    let (app, console) = with_console();
    let first = console_code(&console);
    let browser = Browser::new(&app);
    let csrf = browser.csrf("/setup");
    for _ in 0..CODE_TRIES {
        browser.post("/setup/code", &[("csrf", &csrf), ("code", "2222-2222")]);
    }
    let second = console_code(&console);
    assert_ne!(first, second, "a new code on the console");
    let paused = browser.post("/setup/code", &[("csrf", &csrf), ("code", &second)]);
    assert!(paused.text().contains("in 60 seconds"), "{}", paused.text());
    assert_eq!(
        browser
            .post("/setup/code", &[("csrf", &csrf), ("code", &first)])
            .status,
        400
    );
    app.now.fetch_add(60, Ordering::SeqCst);
    assert_eq!(
        browser
            .post("/setup/code", &[("csrf", &csrf), ("code", &first)])
            .status,
        400,
        "the old code is gone"
    );
    assert_eq!(
        browser
            .post("/setup/code", &[("csrf", &csrf), ("code", &second)])
            .status,
        303
    );
}

#[test]
fn without_the_link_the_code_or_the_button_no_request_sets_the_password() {
    let app = spawn_app();
    let lan = Browser::new(&app).with_address("127.0.0.9".parse().unwrap());
    let csrf = lan.csrf("/login");
    let password = [("password", ADMIN_PASSWORD), ("confirm", ADMIN_PASSWORD)];
    let tries: Vec<(&str, Vec<(&str, &str)>)> = vec![
        (
            "/setup",
            vec![("csrf", &csrf), ("token", ""), password[0], password[1]],
        ),
        (
            "/setup",
            vec![
                ("csrf", &csrf),
                ("token", "guess"),
                password[0],
                password[1],
            ],
        ),
        ("/setup/code", vec![("csrf", &csrf), ("code", "")]),
        ("/setup/button", vec![("csrf", &csrf)]),
        (
            "/login",
            vec![("csrf", &csrf), ("name", "admin"), password[0]],
        ),
        (
            "/admin/accounts",
            vec![("csrf", &csrf), ("name", "x"), ("plan", "pro")],
        ),
        (
            "/admin/accounts/x/password",
            vec![("csrf", &csrf), password[0]],
        ),
        (
            "/admin/booths/x/approve",
            vec![("csrf", &csrf), ("account", "x")],
        ),
        ("/account/password", vec![("csrf", &csrf), password[0]]),
        ("/logout", vec![("csrf", &csrf)]),
        ("/api/pair", vec![("name", "admin")]),
    ];
    for (path, fields) in &tries {
        let reply = lan.post(path, fields);
        assert!(
            reply.status >= 400 || reply.header("location") == Some("/login"),
            "{path}: {}",
            reply.status
        );
    }
    for path in [
        "/setup",
        "/setup?token=",
        "/admin",
        "/admin/booths",
        "/setup/code",
        "/setup/button",
    ] {
        let reply = lan.get(path);
        assert!(
            reply
                .header("location")
                .is_none_or(|l| !l.contains("token=")),
            "{path}"
        );
    }
    app.state.button_pressed();
    assert!(
        lan.get("/setup").header("location").is_none(),
        "a press without a button configured"
    );
    assert!(app.store.admin_password_hash().unwrap().is_none());
    // After setup, the same routes still set nothing.
    app.set_admin_password();
    let hash = app.store.admin_password_hash().unwrap();
    for (path, fields) in &tries {
        lan.post(path, fields);
    }
    assert_eq!(app.store.admin_password_hash().unwrap(), hash);
}

/// The binary with a button (a value file that reads 1 while pressed).
fn appliance_with_button() -> (Server, tempfile::TempDir, std::path::PathBuf) {
    let data = tempfile::tempdir().unwrap();
    let button = data.path().join("button-value");
    std::fs::write(&button, "0").unwrap();
    let env = [("CUTOUT_BUTTON_VALUE_FILE", button.display().to_string())];
    let server = Server::start_with(data.path(), &models_dir(), "info", &[], &env);
    (server, data, button)
}

/// Held and then released for 0.3 s each: shorter than the button's
/// reading interval would be a bounce, not a press.
pub fn press(button: &std::path::Path) {
    for value in ["1", "0"] {
        std::fs::write(button, value).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
}

#[test]
fn a_press_of_the_button_opens_setup_to_the_one_browser_waiting_for_it() {
    let (server, _data, button) = appliance_with_button();
    let operator = Browser::at(server.addr);
    let start = operator.get("/setup");
    assert!(start.text().contains("Wait for the button"));
    let waits = operator.post("/setup/button", &[("csrf", &csrf_in(&start))]);
    assert_eq!(waits.header("location"), Some("/setup"));
    let waiting = operator.get("/setup");
    assert!(waiting.text().contains("Press the appliance's button now"));
    assert!(waiting.text().contains("http-equiv=\"refresh\""));

    // A second browser waiting at the same time: the press opens neither.
    let stranger = Browser::at(server.addr).with_address("127.0.0.7".parse().unwrap());
    stranger.post("/setup/button", &[("csrf", &stranger.csrf("/setup"))]);
    press(&button);
    server.log_once_it_says("none was let in");
    assert!(operator.get("/setup").header("location").is_none());
    assert!(stranger.get("/setup").header("location").is_none());

    // The operator asks again (the stranger's wait is still on): still more
    // than one, so the stranger is not let in by the operator's press.
    let again = Browser::at(server.addr);
    again.post("/setup/button", &[("csrf", &again.csrf("/setup"))]);
    press(&button);
    wait_until("the second refusal is logged", || {
        server
            .log_once_it_says("none was let in")
            .matches("none was let in")
            .count()
            == 2
    });
    assert!(stranger.get("/setup").header("location").is_none());
}

#[test]
fn with_the_button_a_new_appliance_is_set_up_from_a_browser_alone() {
    let (server, _data, button) = appliance_with_button();
    let operator = Browser::at(server.addr);
    operator.post("/setup/button", &[("csrf", &operator.csrf("/setup"))]);
    press(&button);
    server.log_once_it_says("setup is open for a minute");
    let opened = operator.get("/setup");
    assert_eq!(opened.status, 303);
    let location = opened.header("location").unwrap().to_owned();
    assert!(
        Browser::at(server.addr)
            .get("/setup")
            .header("location")
            .is_none(),
        "open to that browser alone"
    );
    let done = set_password(&operator, &location);
    assert_eq!(done.header("location"), Some("/admin"));
    assert_eq!(operator.get("/admin").status, 200);
    assert_eq!(
        Browser::at(server.addr).get(&location).status,
        404,
        "used once"
    );
}
