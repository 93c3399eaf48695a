//! Schema migrations, numbered in `cutout_schema`. Each appliance runs them
//! on start under one advisory lock, so that several starting at once apply
//! each migration once.

use postgres::Client;

/// The lock's key: "cutout" in ASCII.
const MIGRATION_LOCK: i64 = 0x637574_6f7574;

const MIGRATIONS: &[&str] = &[
    // 1: what SQLite's migrations 1 to 4 made, and the shared request slots.
    "CREATE TABLE plans (
        name TEXT PRIMARY KEY,
        monthly_limit INTEGER,          -- NULL: unlimited
        concurrency INTEGER NOT NULL,
        api_access BOOLEAN NOT NULL
     );
     INSERT INTO plans VALUES ('free', 0, 1, false), ('pro', 500, 5, true), ('business', NULL, 50, true);
     CREATE TABLE accounts (
        id BIGSERIAL PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        plan TEXT NOT NULL REFERENCES plans (name),
        created_at BIGINT NOT NULL,
        suspended_at BIGINT,            -- NULL: active
        password_hash TEXT              -- argon2id; NULL: no dashboard login
     );
     CREATE TABLE api_keys (
        id BIGSERIAL PRIMARY KEY,
        account_id BIGINT NOT NULL REFERENCES accounts (id),
        prefix TEXT NOT NULL,
        hash TEXT NOT NULL UNIQUE,      -- SHA-256 of the key; the key itself is never stored
        label TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        last_used_at BIGINT,
        revoked_at BIGINT
     );
     CREATE INDEX api_keys_by_account ON api_keys (account_id);
     CREATE TABLE usage (
        account_id BIGINT NOT NULL REFERENCES accounts (id),
        month TEXT NOT NULL,            -- UTC calendar month, YYYY-MM
        count INTEGER NOT NULL,
        PRIMARY KEY (account_id, month)
     );
     CREATE TABLE admin (
        id INTEGER PRIMARY KEY CHECK (id = 1),      -- one operator
        password_hash TEXT NOT NULL,
        updated_at BIGINT NOT NULL
     );
     CREATE TABLE sessions (
        token_hash TEXT PRIMARY KEY,                -- SHA-256 of the cookie
        account_id BIGINT REFERENCES accounts (id), -- NULL: the operator
        csrf TEXT NOT NULL,
        expires_at BIGINT NOT NULL
     );
     CREATE INDEX sessions_by_account ON sessions (account_id);
     CREATE TABLE device_key (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        key TEXT NOT NULL               -- 256 random bits, hex; made on first use
     );
     -- Each running appliance, as it last said it was alive.
     CREATE TABLE appliances (
        id TEXT PRIMARY KEY,            -- random, new at each start
        seen_at TIMESTAMPTZ NOT NULL
     );
     -- A request in flight: one of its account's slots, and on a plan with
     -- a monthly limit one reserved image. Counted while its appliance lives.
     CREATE TABLE slots (
        id BIGSERIAL PRIMARY KEY,
        account_id BIGINT NOT NULL REFERENCES accounts (id),
        appliance TEXT NOT NULL REFERENCES appliances (id) ON DELETE CASCADE,
        reserved BOOLEAN NOT NULL,
        taken_at TIMESTAMPTZ NOT NULL DEFAULT statement_timestamp()
     );
     CREATE INDEX slots_by_account ON slots (account_id);
     CREATE INDEX slots_by_appliance ON slots (appliance);",
    // 2: SQLite's 5, keys seen over plain HTTP and the operator's switch
    // for it, which holds for every appliance on the store.
    "ALTER TABLE api_keys ADD COLUMN last_in_clear_at BIGINT;
     CREATE TABLE plain_http_api (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        api_on BOOLEAN NOT NULL,        -- no row: on
        updated_at BIGINT NOT NULL
     );",
    // 3: a slot marked charged by the statement that counts its image, so
    // that a charge whose answer was lost can be settled.
    "ALTER TABLE slots ADD COLUMN charged BOOLEAN NOT NULL DEFAULT false;",
];

/// Applies the migrations the database lacks.
pub fn migrate(client: &mut Client) -> Result<(), postgres::Error> {
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS cutout_schema (version INTEGER NOT NULL)")?;
    let version: i32 = tx
        .query_one("SELECT COALESCE(MAX(version), 0) FROM cutout_schema", &[])?
        .get(0);
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        tx.batch_execute(sql)?;
        tx.execute("INSERT INTO cutout_schema VALUES ($1)", &[&(i as i32 + 1)])?;
    }
    tx.commit()
}
