//! An upgrade over a database of every earlier schema (fixtures/schema-vN.sql,
//! as that version's migrations and writes left it): this version migrates it
//! on start and nothing is lost: the booth's key cuts out and its March count
//! goes on from 7, February's 480 stay, the revoked key stays revoked, and
//! from schema 2 the operator's and the booth owner's passwords still sign in,
//! from schema 4 the key of device cookies stays.

use crate::helpers::*;
use cutout::domain::Month;
use cutout::EngineSource;

const FIXTURES: [(usize, &str); 4] = [
    (1, include_str!("fixtures/schema-v1.sql")),
    (2, include_str!("fixtures/schema-v2.sql")),
    (3, include_str!("fixtures/schema-v3.sql")),
    (4, include_str!("fixtures/schema-v4.sql")),
];
const BOOTH_KEY: &str = "ck_3e0c97de72178faea1a5abcb6e59db56d3a61983";
/// 2026-02-15T12:00:00Z
const MID_FEBRUARY: i64 = 1_771_156_800;

/// The app started on a data directory holding the schema-`version` database.
fn app_over(version: usize, sql: &str) -> TestApp {
    let data = tempfile::tempdir().unwrap();
    let db = rusqlite::Connection::open(data.path().join("cutout.db")).unwrap();
    db.execute_batch(sql).unwrap();
    let found: usize = db
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(found, version, "the fixture's own schema");
    drop(db);
    spawn_app_in(data, EngineSource::Ready(u2netp()), |_| {})
}

#[test]
fn a_database_of_every_earlier_schema_is_migrated_with_nothing_lost() {
    assert_eq!(
        cutout::store::SqliteStore::schema_version(),
        5,
        "a new migration needs its fixture here"
    );
    for (version, sql) in FIXTURES {
        let app = app_over(version, sql);
        let db = rusqlite::Connection::open(app.data_dir().join("cutout.db")).unwrap();
        let migrated: usize = db
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(
            migrated,
            cutout::store::SqliteStore::schema_version(),
            "schema {version}"
        );
        let check: String = db
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok", "schema {version}");

        let reply = app.post_image(Some(BOOTH_KEY), &jpeg(64, 48), None);
        assert_eq!(reply.status, 200, "schema {version}: {}", reply.text());
        assert_eq!(
            app.used("booth"),
            8,
            "schema {version}: March's count goes on"
        );
        let booth = app.store.account("booth").unwrap();
        assert_eq!(booth.plan.name, "pro");
        assert_eq!(
            app.store
                .usage(booth.id, Month::of_unix(MID_FEBRUARY))
                .unwrap(),
            480
        );
        assert_eq!(app.used("studio"), 1200, "schema {version}");
        let keys = app.store.keys("booth").unwrap();
        let revoked: Vec<_> = keys
            .iter()
            .map(|k| (k.label.as_str(), k.revoked_at.is_some()))
            .collect();
        assert_eq!(
            revoked,
            [("booth 1", false), ("old booth", true)],
            "schema {version}"
        );

        if version >= 2 {
            let admin = Browser::new(&app).sign_in("admin", "fixture operator password");
            assert_eq!(admin.status, 303, "schema {version}: {}", admin.text());
            let owner = Browser::new(&app).sign_in("booth", "booth dashboard password");
            assert_eq!(owner.status, 303, "schema {version}: {}", owner.text());
            assert!(
                app.store.account("studio").unwrap().suspended,
                "schema {version}"
            );
        } else {
            assert_eq!(app.store.admin_password_hash().unwrap(), None);
        }
        if version >= 4 {
            assert!(
                app.store.device_key().unwrap().starts_with("5f0c4b1e"),
                "schema {version}"
            );
        }
        // The call above came over plain HTTP: noted from schema 5 on.
        let in_clear: Vec<_> = keys.iter().map(|k| k.last_in_clear_at.is_some()).collect();
        assert_eq!(in_clear, [true, false], "schema {version}");
        assert!(app.store.plain_http_api().unwrap(), "schema {version}");
    }
}
