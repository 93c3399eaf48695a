//! Several appliances sharing one PostgreSQL store: the quota, the
//! concurrency slots, keys and dashboard sessions hold across them as on
//! one; an appliance killed mid-request frees its slots within the stated
//! bound; the database going away costs 503s, never a charge or a free
//! cut-out, and service comes back by itself.

use crate::helpers::*;
use cutout::config::StoreSettings;
use cutout::domain::Month;
use cutout::store::{PostgresStore, Store, DEAD_AFTER, HEARTBEAT};
use cutout::EngineSource;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

fn on_postgres(url: &str) -> impl FnOnce(&mut cutout::config::Settings) + '_ {
    move |s| {
        s.store = StoreSettings {
            url: Some(url.to_owned()),
            password_file: None,
        }
    }
}

/// `n` appliances in this process on one store, serving U2NetP.
fn fleet(url: &str, n: usize) -> Vec<Arc<TestApp>> {
    (0..n)
        .map(|_| {
            Arc::new(spawn_app_with(
                EngineSource::Ready(u2netp()),
                on_postgres(url),
            ))
        })
        .collect()
}

fn march() -> Month {
    Month::of_unix(MID_MARCH)
}

fn post_in_parallel(addrs: &[std::net::SocketAddr], key: &str, n: usize) -> Vec<Reply> {
    let image = Arc::new(jpeg(64, 48));
    (0..n)
        .map(|i| {
            let (addr, key, image) = (addrs[i % addrs.len()], key.to_owned(), image.clone());
            thread::spawn(move || {
                let mut form = Multipart::new();
                form.file("image_file", &image);
                post_form(addr, Some(&key), &form)
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect()
}

#[test]
fn with_3_images_left_exactly_3_of_8_calls_through_haproxy_to_3_appliances_succeed() {
    let url = shared_postgres().database_with_password();
    let apps = fleet(&url, 3);
    let key = apps[0].account("acme", "pro");
    apps[1].store.set_usage("acme", march(), 497).unwrap();
    let balancer = Haproxy::round_robin(&apps.iter().map(|a| a.addr).collect::<Vec<_>>());

    let replies = post_in_parallel(&[balancer.addr], &key, 8);
    let statuses: Vec<u16> = replies.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        3,
        "{statuses:?}"
    );
    for r in replies.iter().filter(|r| r.status != 200) {
        assert_eq!((r.status, r.error_code().as_str()), (402, "quota_exceeded"));
    }
    assert_eq!(apps[2].used("acme"), 500);
    // Each appliance answered some of them: the balancer spread the calls.
    for app in &apps {
        assert!(app.state.stats.today(MID_MARCH).calls > 0);
    }
}

#[test]
fn a_pro_account_has_5_slots_across_all_appliances() {
    let url = shared_postgres().database_with_password();
    let gate = Arc::new(Gate::default());
    let apps: Vec<Arc<TestApp>> = (0..3)
        .map(|_| {
            let engine = EngineSource::Ready(Arc::new(GatedEngine(gate.clone())));
            Arc::new(spawn_app_with(engine, on_postgres(&url)))
        })
        .collect();
    let key = apps[0].account("acme", "pro");
    let held: Vec<_> = (0..5)
        .map(|i| {
            let (app, key) = (apps[i % 3].clone(), key.clone());
            thread::spawn(move || app.post_image(Some(&key), &jpeg(64, 48), None))
        })
        .collect();
    wait_until("5 calls are in flight over 3 appliances", || {
        apps[2].in_flight("acme") == 5
    });
    for app in &apps {
        let refused = app.post_image(Some(&key), &jpeg(64, 48), None);
        assert_eq!(
            (refused.status, refused.error_code().as_str()),
            (429, "too_many_concurrent_requests")
        );
        assert_eq!(refused.header("retry-after"), Some("1"));
    }
    gate.open();
    for reply in held {
        assert_eq!(reply.join().unwrap().status, 200);
    }
    assert_eq!(apps[1].in_flight("acme"), 0);
    assert_eq!(apps[0].used("acme"), 5, "the refused calls cost nothing");
}

#[test]
fn a_key_revoked_on_one_appliance_is_refused_by_the_others_at_once() {
    let url = shared_postgres().database_with_password();
    let apps = fleet(&url, 2);
    apps[0].account_with_login("booth", "pro");
    let user = apps[0].user("booth");
    let made = user.post(
        "/account/keys",
        &[("csrf", &user.csrf("/account")), ("label", "booth 1")],
    );
    let html = made.text();
    let at = html.find("value=\"ck_").unwrap();
    let key = html[at + 7..at + 7 + 43].to_owned();
    assert_eq!(
        apps[1].post_image(Some(&key), &jpeg(64, 48), None).status,
        200
    );

    let path = format!("/account/keys/{}/revoke", &key[..12]);
    let confirm = user.get(&path);
    let revoked = user.post(&path, &[("csrf", &csrf_in(&confirm))]);
    assert_eq!(revoked.header("location"), Some("/account?done=revoked"));
    let refused = apps[1].post_image(Some(&key), &jpeg(64, 48), None);
    assert_eq!(
        (refused.status, refused.error_code().as_str()),
        (401, "invalid_api_key")
    );
}

#[test]
fn a_dashboard_session_made_through_one_appliance_works_through_the_others() {
    let url = shared_postgres().database_with_password();
    let apps = fleet(&url, 2);
    apps[0].set_admin_password();
    let operator = apps[0].admin();
    let elsewhere = Browser::new(&apps[1]);
    elsewhere.set_cookie(
        "cutout_session",
        &operator.cookie("cutout_session").unwrap(),
    );
    let page = elsewhere.get("/admin");
    assert_eq!(page.status, 200, "{}", page.text());
    let status = elsewhere.get("/admin/status").text();
    assert!(
        status.contains(&format!(
            "PostgreSQL, 127.0.0.1:{}/",
            shared_postgres().port
        )) && status.contains("(shared): writable"),
        "the Status page names the store and its health: {status}"
    );
    // The form's CSRF token from one appliance is good on the other.
    let csrf = operator.csrf("/admin");
    let created = elsewhere.post(
        "/admin/accounts",
        &[
            ("csrf", &csrf),
            ("name", "kiosk"),
            ("plan", "business"),
            ("password", ""),
        ],
    );
    assert!(created.status < 400, "{}", created.text());
    assert_eq!(
        apps[0].store.account("kiosk").unwrap().plan.name,
        "business"
    );
    // Signing out on one ends the session on both.
    assert_eq!(operator.post("/logout", &[("csrf", &csrf)]).status, 303);
    assert_ne!(elsewhere.get("/admin").status, 200);
}

/// A call whose body is not all sent: it holds its slot on `addr` until the
/// connection goes.
fn call_left_hanging(addr: std::net::SocketAddr, key: &str) -> std::net::TcpStream {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "POST /api/remove-bg HTTP/1.1\r\nHost: x\r\nX-Api-Key: {key}\r\n\
         Content-Type: multipart/form-data; boundary=b\r\nContent-Length: 100000\r\n\r\n--b\r\n"
    )
    .unwrap();
    stream
}

#[test]
fn an_appliance_killed_with_calls_in_flight_frees_their_slots_within_the_bound() {
    let url = shared_postgres().database_with_password();
    let store = PostgresStore::open(&url, None).unwrap();
    let key = {
        store
            .create_account(
                &cutout::domain::AccountName::parse("acme").unwrap(),
                "pro",
                MID_MARCH,
            )
            .unwrap();
        store
            .create_key("acme", "k", MID_MARCH)
            .unwrap()
            .expose()
            .to_owned()
    };
    let acme = store.account("acme").unwrap().id;
    let now = Month::of_unix(cutout::clock::Clock::default().now_unix());
    let env = [("CUTOUT_STORE_URL", url.clone())];
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = Server::start_with(a_dir.path(), &models_dir(), "warn", &[], &env);
    let b = Server::start_with(b_dir.path(), &models_dir(), "warn", &[], &env);

    let mut form = Multipart::new();
    form.file("image_file", &jpeg(64, 48));
    for _ in 0..2 {
        assert_eq!(post_form(a.addr, Some(&key), &form).status, 200);
    }
    let _hanging: Vec<_> = (0..5).map(|_| call_left_hanging(a.addr, &key)).collect();
    wait_until("5 calls hold slots on appliance A", || {
        store.in_flight(acme).unwrap() == 5
    });
    assert_eq!(post_form(b.addr, Some(&key), &form).status, 429);

    a.kill_9();
    let killed = Instant::now();
    let bound = DEAD_AFTER + HEARTBEAT + Duration::from_secs(3);
    let reply = loop {
        let reply = post_form(b.addr, Some(&key), &form);
        if reply.status != 429 || killed.elapsed() > bound {
            break reply;
        }
        thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(reply.status, 200, "slots free within {bound:?} of the kill");
    assert!(
        killed.elapsed() > DEAD_AFTER - HEARTBEAT,
        "freed when A went quiet, not before"
    );
    assert_eq!(
        store.usage(acme, now).unwrap(),
        3,
        "no charge lost or doubled"
    );
    drop(b);
}

#[test]
fn postgres_stopped_under_load_costs_503s_and_no_charge_and_service_resumes_by_itself() {
    let server = Postgres::start();
    let url = server.database_with_password();
    let apps = fleet(&url, 2);
    let key = apps[0].account("big", "business");
    let served = Arc::new(Mutex::new(Vec::<Reply>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let load: Vec<_> = (0..3)
        .map(|i| {
            let (addr, key, served, stop) =
                (apps[i % 2].addr, key.clone(), served.clone(), stop.clone());
            thread::spawn(move || {
                let mut form = Multipart::new();
                form.file("image_file", &jpeg(64, 48));
                while !stop.load(Ordering::SeqCst) {
                    let reply = post_form(addr, Some(&key), &form);
                    served.lock().unwrap().push(reply);
                }
            })
        })
        .collect();
    let count = |status: u16| {
        served
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.status == status)
            .count()
    };
    wait_until("calls are served", || count(200) >= 5);
    server.stop();
    wait_until("calls get 503 while PostgreSQL is down", || count(503) >= 5);
    let ready = request(apps[1].addr, "GET", "/readyz", &[], b"");
    assert_eq!(ready.status, 503, "{}", ready.text());
    assert!(ready.text().contains("database"), "{}", ready.text());
    let before_restart = count(200);
    server.start_again();
    wait_until("calls are served again", || {
        count(200) >= before_restart + 5
    });
    stop.store(true, Ordering::SeqCst);
    for t in load {
        t.join().unwrap();
    }

    let served = served.lock().unwrap();
    for r in served.iter().filter(|r| r.status != 200) {
        assert_eq!(
            (r.status, r.error_code().as_str()),
            (503, "service_unavailable"),
            "{}",
            r.text()
        );
        assert_eq!(r.header("retry-after"), Some("5"));
    }
    let ok = served.iter().filter(|r| r.status == 200).count();
    // A charge the database wrote as it stopped, without answering, is
    // taken back by its appliance's next heartbeat once it is back.
    wait_until("every cut-out served is charged once, no other", || {
        apps[0].used("big") as usize == ok
    });
    thread::sleep(2 * HEARTBEAT);
    assert_eq!(apps[0].used("big") as usize, ok, "and stays so");
    // Each server checks the database at most every two seconds, so the
    // other one may say so a moment after the first serves again.
    wait_until("the other server is ready again", || {
        request(apps[1].addr, "GET", "/readyz", &[], b"").status == 200
    });
}

/// A charge whose statement breaks with its connection: the database may
/// have written it (only the answer was lost) or not. Its call gets 503
/// either way, so the heartbeat settles it by its slot: a written one is
/// taken back, one never written leaves no trace, and no slot stays taken.
#[test]
fn a_charge_the_database_wrote_without_answering_is_taken_back_and_one_never_sent_costs_nothing() {
    let server = shared_postgres();
    let relay = PgRelay::to(([127, 0, 0, 1], server.port).into());
    let direct = server.database_with_password();
    let url = direct.replace(&format!(":{}/", server.port), &format!(":{}/", relay.port));
    let store = PostgresStore::open(&url, None).unwrap();
    let watcher = PostgresStore::open(&direct, None).unwrap();
    let name = cutout::domain::AccountName::parse("acme").unwrap();
    store.create_account(&name, "pro", MID_MARCH).unwrap();
    let key = store.create_key("acme", "k", MID_MARCH).unwrap();
    let caller = store.authenticate(&key).unwrap().unwrap();
    let account = store.account("acme").unwrap();
    let month = march();
    let charge = |loss: Loss| {
        let slot = store.admit(&account, month).unwrap().unwrap();
        assert_eq!(watcher.in_flight(account.id).unwrap(), 1);
        relay.lose("INSERT INTO usage", loss);
        let failed = store.charge(slot, &caller, month, MID_MARCH);
        assert!(relay.lost(), "{loss:?}: the relay saw the charge");
        assert!(failed.is_err(), "{loss:?}: the charge failed: {failed:?}");
    };

    charge(Loss::Answer);
    assert_eq!(
        watcher.usage(account.id, month).unwrap(),
        1,
        "the database wrote it"
    );
    assert_eq!(watcher.in_flight(account.id).unwrap(), 0, "charged");
    wait_until("the written charge is taken back", || {
        watcher.usage(account.id, month).unwrap() == 0
    });

    charge(Loss::Statement);
    assert_eq!(watcher.usage(account.id, month).unwrap(), 0);
    wait_until("the slot of the charge never sent is freed", || {
        watcher.in_flight(account.id).unwrap() == 0
    });
    thread::sleep(2 * HEARTBEAT);
    assert_eq!(
        watcher.usage(account.id, month).unwrap(),
        0,
        "nothing taken back"
    );

    // And a charge that is answered is counted once, its slot freed.
    let slot = store.admit(&account, month).unwrap().unwrap();
    assert_eq!(store.charge(slot, &caller, month, MID_MARCH).unwrap(), 1);
    assert_eq!(watcher.in_flight(account.id).unwrap(), 0);
    thread::sleep(2 * HEARTBEAT);
    assert_eq!(watcher.usage(account.id, month).unwrap(), 1);
}

#[test]
fn a_board_moves_into_the_shared_store_from_the_command_line() {
    let board = tempfile::tempdir().unwrap();
    let key = cli_account(board.path(), "acme", "pro");
    let url = shared_postgres().database_with_password();
    let from = format!("sqlite:{}", board.path().display());
    let copy = ["store", "copy", "--from", &from, "--to", &url];
    assert!(
        cutout_cli(board.path(), &copy).starts_with("copied 1 accounts, 1 keys, 0 monthly counts;")
    );
    assert!(
        cutout_cli(board.path(), &copy).starts_with("copied 0 accounts, 0 keys, 0 monthly counts;")
    );

    let config = board.path().join("cutout.toml");
    std::fs::write(&config, format!("[store]\nurl = \"{url}\"\n")).unwrap();
    let config = config.to_str().unwrap();
    let migrated = cutout_cli(board.path(), &["--config", config, "store", "migrate"]);
    assert!(migrated.starts_with("PostgreSQL, 127.0.0.1:"), "{migrated}");
    assert!(!migrated.contains(PASSWORD));
    assert!(cutout_cli(board.path(), &["--config", config, "account", "list"]).contains("acme"));
    let store = PostgresStore::open(&url, None).unwrap();
    assert!(store
        .authenticate(&cutout::domain::ApiKey::parse(&key).unwrap())
        .unwrap()
        .is_some());

    let refused = std::process::Command::new(cutout_binary())
        .args(["store", "copy", "--from", "/no/such/dir", "--to", &url])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("sqlite:DIR"));
}

#[test]
fn a_fleet_appliances_backup_holds_its_own_parts_and_names_pg_dump_for_the_accounts() {
    let server = shared_postgres();
    let url = server.database();
    let shared = PostgresStore::open(&url, Some(&server.password_file())).unwrap();
    shared
        .create_account(
            &cutout::domain::AccountName::parse("acme").unwrap(),
            "pro",
            0,
        )
        .unwrap();
    let root = tempfile::tempdir().unwrap();
    let config = format!(
        "[store]\nurl = \"{url}\"\npassword_file = \"{}\"\n",
        server.password_file().display()
    );
    let appliance = |name: &str| {
        let data = root.path().join(name);
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(data.join("cutout.toml"), &config).unwrap();
        data
    };
    let old = appliance("old-card");
    let background = root.path().join("beach.jpg");
    std::fs::write(&background, jpeg(320, 240)).unwrap();
    cutout_cli(
        &old,
        &["backdrop", "add", "Beach", background.to_str().unwrap()],
    );

    let file = root.path().join("fleet.cutout-backup");
    let out = crate::backup::cutout(&old, &["backup", file.to_str().unwrap()], &[]);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{out:?}");
    assert!(!old.join("cutout.db").exists(), "no SQLite database made");
    assert!(
        said.contains("1 backdrop(s)") && said.contains("configuration file"),
        "{said}"
    );
    assert!(!said.contains(PASSWORD), "{said}");

    // The command it names backs up the accounts, run as printed.
    let dump = said.split('`').nth(1).expect("a command in backquotes");
    assert!(dump.starts_with("pg_dump "), "{said}");
    let words: Vec<_> = dump.split_whitespace().collect();
    let dumped = std::process::Command::new(words[0])
        .args(&words[1..])
        .current_dir(root.path())
        .env("PGPASSWORD", PASSWORD)
        .output()
        .unwrap();
    assert!(dumped.status.success(), "{dumped:?}");
    let listed = std::process::Command::new("pg_restore")
        .args(["--list", "cutout-accounts.pgdump"])
        .current_dir(root.path())
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.contains("TABLE DATA public api_keys"), "{listed}");

    // Restored on a new card of the same fleet: its own parts back, the
    // accounts where they were.
    let new = appliance("new-card");
    let out = crate::backup::cutout(&new, &["restore", file.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout)
        .contains("no accounts (they are in the shared PostgreSQL store"));
    assert!(cutout_cli(&new, &["backdrop", "list"]).contains("Beach"));
    assert!(!new.join("cutout.db").exists());
    let config_arg = new.join("cutout.toml");
    let accounts = cutout_cli(
        &new,
        &["--config", config_arg.to_str().unwrap(), "account", "list"],
    );
    assert!(accounts.contains("acme"), "{accounts}");
}
