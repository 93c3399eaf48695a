//! One suite for both stores: each case runs on SQLite in a temporary
//! directory and on PostgreSQL in a database of its own on the throw-away
//! server (helpers/postgres.rs).

use crate::helpers::*;
use cutout::config::StoreSettings;
use cutout::domain::{AccountName, ApiKey, Month};
use cutout::store::{PostgresStore, Principal, Refusal, SqliteStore, Store, StoreError};
use std::sync::{Arc, Barrier};
use std::thread;

const NOW: i64 = MID_MARCH;

fn march() -> Month {
    Month::of_unix(NOW)
}

fn account(store: &dyn Store, name: &str, plan: &str) -> String {
    store
        .create_account(&AccountName::parse(name).unwrap(), plan, NOW)
        .unwrap();
    store
        .create_key(name, "test", NOW)
        .unwrap()
        .expose()
        .to_owned()
}

fn caller(store: &dyn Store, key: &str) -> cutout::store::Caller {
    store
        .authenticate(&ApiKey::parse(key).unwrap())
        .unwrap()
        .expect("an active key")
}

/// Each case as two tests: `case::sqlite` and `case::postgres`.
macro_rules! on_both_stores {
    ($(fn $name:ident($store:ident: Arc<dyn Store>) $body:block)*) => {$(
        mod $name {
            use super::*;

            fn case($store: Arc<dyn Store>) $body

            #[test]
            fn sqlite() {
                let dir = tempfile::tempdir().unwrap();
                case(Arc::new(SqliteStore::open(dir.path()).unwrap()));
            }

            #[test]
            fn postgres() {
                let url = shared_postgres().database_with_password();
                case(Arc::new(PostgresStore::open(&url, None).unwrap()));
            }
        }
    )*};
}

on_both_stores! {
    fn accounts_plans_and_keys(store: Arc<dyn Store>) {
        let key = account(store.as_ref(), "acme", "pro");
        assert!(!store.is_empty().unwrap());
        for same in ["acme", "ACME", "Acme"] {
            let name = AccountName::parse(same).unwrap();
            assert!(matches!(
                store.create_account(&name, "pro", NOW),
                Err(StoreError::AccountExists(_))
            ), "{same}");
        }
        let other = AccountName::parse("other").unwrap();
        match store.create_account(&other, "gold", NOW) {
            Err(e @ StoreError::NoSuchPlan(..)) => {
                assert_eq!(e.to_string(), "no plan named \"gold\" (plans: free, pro, business)")
            }
            r => panic!("expected NoSuchPlan, got {r:?}"),
        }
        let plans: Vec<_> = store.plans().unwrap().into_iter().map(|p| (p.name, p.monthly_limit, p.concurrency, p.api_access)).collect();
        assert_eq!(
            plans,
            [("free".into(), Some(0), 1, false), ("pro".into(), Some(500), 5, true), ("business".into(), None, 50, true)]
        );

        let who = caller(store.as_ref(), &key);
        assert_eq!((who.account.name.as_str(), who.account.plan.name.as_str()), ("acme", "pro"));
        store.set_plan("acme", "business").unwrap();
        assert_eq!(caller(store.as_ref(), &key).account.plan.monthly_limit, None);
        assert!(matches!(store.set_plan("nobody", "pro"), Err(StoreError::NoSuchAccount(_))));

        store.set_usage("acme", march(), 7).unwrap();
        let listed: Vec<_> = store.accounts(march()).unwrap().into_iter().map(|(a, used)| (a.name, used)).collect();
        assert_eq!(listed, [("acme".to_owned(), 7)]);
        assert_eq!(store.account_by_id(who.account.id).unwrap().name, "acme");

        let second = store.create_key("acme", "booth 2", NOW).unwrap();
        let keys = store.keys("acme").unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!(keys[1].label, "booth 2");
        store.revoke_key(&keys[0].prefix, NOW + 1).unwrap();
        assert!(store.authenticate(&ApiKey::parse(&key).unwrap()).unwrap().is_none());
        assert!(matches!(store.revoke_key(&keys[0].prefix, NOW), Err(StoreError::NoSuchKey(_))));
        assert_eq!(store.keys_of(who.account.id).unwrap()[0].revoked_at, Some(NOW + 1));
        // Another account's key is as unknown as one that does not exist.
        account(store.as_ref(), "rival", "pro");
        let rival = store.account("rival").unwrap();
        assert!(matches!(
            store.revoke_key_of(rival.id, second.prefix(), NOW),
            Err(StoreError::NoSuchKey(_))
        ));
        store.revoke_key_of(who.account.id, second.prefix(), NOW).unwrap();
        assert!(store.authenticate(&second).unwrap().is_none());
    }

    fn with_3_images_left_exactly_3_of_8_parallel_admissions_get_in(store: Arc<dyn Store>) {
        let key = account(store.as_ref(), "acme", "pro");
        store.set_usage("acme", march(), 497).unwrap();
        let who = caller(store.as_ref(), &key);
        let start = Arc::new(Barrier::new(8));
        let outcomes: Vec<_> = (0..8)
            .map(|_| {
                let (store, who, start) = (store.clone(), who.clone(), start.clone());
                thread::spawn(move || {
                    start.wait();
                    match store.admit(&who.account, march()).unwrap() {
                        Ok(slot) => Ok(store.charge(slot, &who, march(), NOW).unwrap()),
                        Err(refusal) => Err(refusal),
                    }
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        let mut counts: Vec<u32> = outcomes.iter().filter_map(|o| o.as_ref().ok().copied()).collect();
        counts.sort();
        assert_eq!(counts, [498, 499, 500]);
        for refused in outcomes.iter().filter_map(|o| o.as_ref().err()) {
            assert_eq!(refused, &Refusal::QuotaExceeded { limit: 500 });
        }
        assert_eq!(store.usage(who.account.id, march()).unwrap(), 500);
        assert_eq!(store.in_flight(who.account.id).unwrap(), 0);
    }

    fn a_slot_dropped_uncharged_costs_nothing_and_frees_its_place(store: Arc<dyn Store>) {
        let key = account(store.as_ref(), "acme", "pro");
        store.set_usage("acme", march(), 495).unwrap();
        let who = caller(store.as_ref(), &key);
        let slots: Vec<_> = (0..5)
            .map(|_| store.admit(&who.account, march()).unwrap().expect("a slot"))
            .collect();
        assert_eq!(store.in_flight(who.account.id).unwrap(), 5);
        assert_eq!(
            store.admit(&who.account, march()).unwrap().err(),
            Some(Refusal::TooManyConcurrent { limit: 5 })
        );
        drop(slots);
        assert_eq!(store.in_flight(who.account.id).unwrap(), 0);
        assert_eq!(store.usage(who.account.id, march()).unwrap(), 495);
        // The five reservations were given back: all five images can be had.
        for n in 496..=500 {
            let slot = store.admit(&who.account, march()).unwrap().expect("a slot");
            assert_eq!(store.charge(slot, &who, march(), NOW).unwrap(), n);
        }
        assert_eq!(
            store.admit(&who.account, march()).unwrap().err(),
            Some(Refusal::QuotaExceeded { limit: 500 })
        );
        assert_eq!(store.keys("acme").unwrap()[0].last_used_at, Some(NOW));
    }

    fn business_accounts_have_50_slots_and_no_monthly_limit(store: Arc<dyn Store>) {
        let key = account(store.as_ref(), "big", "business");
        let who = caller(store.as_ref(), &key);
        store.set_usage("big", march(), 1_000_000).unwrap();
        let slots: Vec<_> = (0..50)
            .map(|_| store.admit(&who.account, march()).unwrap().expect("a slot"))
            .collect();
        assert_eq!(
            store.admit(&who.account, march()).unwrap().err(),
            Some(Refusal::TooManyConcurrent { limit: 50 })
        );
        let mut slots = slots.into_iter();
        let slot = slots.next().unwrap();
        assert_eq!(store.charge(slot, &who, march(), NOW).unwrap(), 1_000_001);
        assert_eq!(store.in_flight(who.account.id).unwrap(), 49);
    }

    fn sessions_passwords_and_suspension(store: Arc<dyn Store>) {
        account(store.as_ref(), "acme", "pro");
        let acme = store.account("acme").unwrap();
        assert!(!acme.has_login);
        store.set_account_password("acme", "hash-1").unwrap();
        let (login, hash) = store.account_login("acme").unwrap().unwrap();
        assert!(login.has_login);
        assert_eq!(hash.as_deref(), Some("hash-1"));
        assert!(store.account_login("nobody").unwrap().is_none());

        store.create_session("s-user", Principal::Account(acme.id), "csrf-1", NOW + 60, NOW).unwrap();
        let session = store.session("s-user", NOW).unwrap().unwrap();
        assert_eq!((session.principal, session.csrf.as_str()), (Principal::Account(acme.id), "csrf-1"));
        assert!(store.session("s-user", NOW + 60).unwrap().is_none(), "expired");
        store.set_suspended("acme", true, NOW).unwrap();
        assert!(store.account("acme").unwrap().suspended);
        assert!(store.session("s-user", NOW).unwrap().is_none(), "ended by the suspension");
        store.set_suspended("acme", false, NOW).unwrap();
        assert!(!store.account("acme").unwrap().suspended);

        assert_eq!(store.admin_password_hash().unwrap(), None);
        store.set_admin_password("admin-hash", NOW).unwrap();
        store.create_session("s-admin", Principal::Admin, "csrf-2", NOW + 60, NOW).unwrap();
        assert_eq!(store.session("s-admin", NOW).unwrap().unwrap().principal, Principal::Admin);
        store.end_session("s-admin").unwrap();
        assert!(store.session("s-admin", NOW).unwrap().is_none());
        store.create_session("s-admin-2", Principal::Admin, "csrf-3", NOW + 60, NOW).unwrap();
        store.set_admin_password("admin-hash-2", NOW).unwrap();
        assert!(store.session("s-admin-2", NOW).unwrap().is_none(), "a new password ends the old sessions");
        assert_eq!(store.admin_password_hash().unwrap().as_deref(), Some("admin-hash-2"));

        let device_key = store.device_key().unwrap();
        assert_eq!(device_key.len(), 64);
        assert_eq!(store.device_key().unwrap(), device_key);
    }

    fn keys_seen_in_clear_and_the_plain_http_switch(store: Arc<dyn Store>) {
        let key = account(store.as_ref(), "acme", "pro");
        let other = store.create_key("acme", "kiosk", NOW).unwrap();
        let who = caller(store.as_ref(), &key);
        store.key_came_in_clear(who.key_id.unwrap(), NOW + 5).unwrap();
        let seen: Vec<_> = store.keys("acme").unwrap().into_iter().map(|k| (k.prefix, k.last_in_clear_at)).collect();
        let prefix = ApiKey::parse(&key).unwrap().prefix().to_owned();
        assert_eq!(seen, [(prefix, Some(NOW + 5)), (other.prefix().to_owned(), None)]);
        let in_clear = |store: &dyn Store| store.keys("acme").unwrap()[0].last_in_clear_at;
        store.key_came_in_clear(who.key_id.unwrap(), NOW + 30).unwrap();
        assert_eq!(in_clear(store.as_ref()), Some(NOW + 5), "within the minute: not written");
        store.key_came_in_clear(who.key_id.unwrap(), NOW + 65).unwrap();
        assert_eq!(in_clear(store.as_ref()), Some(NOW + 65));

        assert!(store.plain_http_api().unwrap(), "on until switched off");
        store.set_plain_http_api(false, NOW).unwrap();
        assert!(!store.plain_http_api().unwrap());
        store.set_plain_http_api(true, NOW + 1).unwrap();
        assert!(store.plain_http_api().unwrap());
    }

    fn it_says_what_it_is_and_that_it_takes_writes(store: Arc<dyn Store>) {
        store.check_writable().unwrap();
        store.probe_write(NOW).unwrap();
        let described = store.describe();
        assert!(
            described.starts_with("SQLite, ") && described.ends_with("cutout.db")
                || described.starts_with("PostgreSQL, 127.0.0.1:") && described.ends_with(" (shared)"),
            "{described}"
        );
        assert!(!described.contains(PASSWORD));
    }
}

#[test]
fn two_appliances_opening_one_new_database_at_once_both_start() {
    let url = shared_postgres().database_with_password();
    let start = Arc::new(Barrier::new(4));
    let opened: Vec<_> = (0..4)
        .map(|_| {
            let (url, start) = (url.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                PostgresStore::open(&url, None).map(|_| ())
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    for result in opened {
        result.unwrap();
    }
}

#[test]
fn the_password_may_come_from_a_file_and_a_wrong_one_is_refused() {
    let server = shared_postgres();
    let url = server.database();
    let settings = StoreSettings {
        url: Some(url.clone()),
        password_file: Some(server.password_file()),
    };
    let store = cutout::store::open(&settings, std::path::Path::new("/nonexistent")).unwrap();
    assert!(store.describe().starts_with("PostgreSQL"));

    let wrong = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(wrong.path(), "wrong\n").unwrap();
    let refused = PostgresStore::open(&url, Some(wrong.path())).err().unwrap();
    assert!(refused.to_string().contains("password"), "{refused}");
    assert!(
        PostgresStore::open(&url, None).is_err(),
        "no password at all"
    );
}

#[test]
fn store_copy_moves_a_board_into_the_shared_store_and_again_changes_nothing() {
    let board = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::open(board.path()).unwrap();
    let key = account(&sqlite, "acme", "pro");
    let revoked = sqlite.create_key("acme", "old", NOW).unwrap();
    sqlite.revoke_key(revoked.expose(), NOW).unwrap();
    sqlite.set_usage("acme", march(), 42).unwrap();
    sqlite.set_admin_password("admin-hash", NOW).unwrap();
    let in_clear = caller(&sqlite, &key).key_id.unwrap();
    sqlite.key_came_in_clear(in_clear, NOW + 7).unwrap();
    sqlite.set_plain_http_api(false, NOW).unwrap();
    drop(sqlite);

    let url = shared_postgres().database_with_password();
    let shared = PostgresStore::open(&url, None).unwrap();
    account(&shared, "already-there", "business");
    shared.set_usage("already-there", march(), 9).unwrap();

    let copied = cutout::store::sqlite_to_postgres(board.path(), &url, None).unwrap();
    assert_eq!(
        (
            copied.accounts,
            copied.keys,
            copied.counts,
            copied.admin_password
        ),
        (1, 2, 1, true)
    );
    let acme = caller(&shared, &key);
    assert_eq!(shared.usage(acme.account.id, march()).unwrap(), 42);
    assert!(
        shared.authenticate(&revoked).unwrap().is_none(),
        "revoked stays revoked"
    );
    assert_eq!(
        shared.admin_password_hash().unwrap().as_deref(),
        Some("admin-hash")
    );
    let in_clear: Vec<_> = shared
        .keys("acme")
        .unwrap()
        .iter()
        .map(|k| k.last_in_clear_at)
        .collect();
    assert_eq!(in_clear, [Some(NOW + 7), None]);
    assert!(
        !shared.plain_http_api().unwrap(),
        "the board's switch comes along"
    );

    // Calls on the shared store since the copy are kept when it runs again.
    let slot = shared.admit(&acme.account, march()).unwrap().unwrap();
    shared.charge(slot, &acme, march(), NOW).unwrap();
    let again = cutout::store::sqlite_to_postgres(board.path(), &url, None).unwrap();
    assert_eq!(
        (
            again.accounts,
            again.keys,
            again.counts,
            again.admin_password
        ),
        (0, 0, 0, false)
    );
    assert_eq!(shared.usage(acme.account.id, march()).unwrap(), 43);
    let already = shared.account("already-there").unwrap();
    assert_eq!(shared.usage(already.id, march()).unwrap(), 9);
    assert_eq!(shared.accounts(march()).unwrap().len(), 2);
}
