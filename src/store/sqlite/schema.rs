//! Schema migrations, numbered by SQLite's `user_version`.

use rusqlite::Connection;

const MIGRATIONS: &[&str] = &[
    // 1: plans, accounts, keys, usage.
    "CREATE TABLE plans (
        name TEXT PRIMARY KEY,
        monthly_limit INTEGER,          -- NULL: unlimited
        concurrency INTEGER NOT NULL,
        api_access INTEGER NOT NULL
     );
     INSERT INTO plans VALUES ('free', 0, 1, 0), ('pro', 500, 5, 1), ('business', NULL, 50, 1);
     CREATE TABLE accounts (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        plan TEXT NOT NULL REFERENCES plans (name),
        created_at INTEGER NOT NULL
     );
     CREATE TABLE api_keys (
        id INTEGER PRIMARY KEY,
        account_id INTEGER NOT NULL REFERENCES accounts (id),
        prefix TEXT NOT NULL,
        hash TEXT NOT NULL UNIQUE,      -- SHA-256 of the key; the key itself is never stored
        label TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        last_used_at INTEGER,
        revoked_at INTEGER
     );
     CREATE INDEX api_keys_by_account ON api_keys (account_id);
     CREATE TABLE usage (
        account_id INTEGER NOT NULL REFERENCES accounts (id),
        month TEXT NOT NULL,            -- UTC calendar month, YYYY-MM
        count INTEGER NOT NULL,
        PRIMARY KEY (account_id, month)
     );",
    // 2: dashboard logins and sessions, suspension.
    "ALTER TABLE accounts ADD COLUMN suspended_at INTEGER;   -- NULL: active
     ALTER TABLE accounts ADD COLUMN password_hash TEXT;     -- argon2id; NULL: no dashboard login
     CREATE TABLE admin (
        id INTEGER PRIMARY KEY CHECK (id = 1),      -- one operator
        password_hash TEXT NOT NULL,
        updated_at INTEGER NOT NULL
     );
     CREATE TABLE sessions (
        token_hash TEXT PRIMARY KEY,                -- SHA-256 of the cookie; the token itself is never stored
        account_id INTEGER REFERENCES accounts (id),  -- NULL: the operator
        csrf TEXT NOT NULL,
        expires_at INTEGER NOT NULL
     );
     CREATE INDEX sessions_by_account ON sessions (account_id);",
    // 3: one row rewritten to prove the database takes writes again after
    // a write failed (a lock alone does not touch the disk).
    "CREATE TABLE write_probe (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        written_at INTEGER NOT NULL
     );",
    // 4: the key that signs device cookies (a browser's proof that it
    // signed in as a name before), kept so that they outlive a restart.
    "CREATE TABLE device_key (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        key TEXT NOT NULL               -- 256 random bits, hex; made on first use
     );",
    // 5: keys seen over plain HTTP, and the operator's switch for it.
    "ALTER TABLE api_keys ADD COLUMN last_in_clear_at INTEGER;
     CREATE TABLE plain_http_api (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        api_on INTEGER NOT NULL,        -- no row: on
        updated_at INTEGER NOT NULL
     );",
];

/// The schema `migrate` brings a database to.
pub fn latest() -> usize {
    MIGRATIONS.len()
}

pub fn migrate(conn: &mut Connection) -> rusqlite::Result<()> {
    let version: usize = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(version) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", i + 1)?;
        tx.commit()?;
    }
    Ok(())
}
