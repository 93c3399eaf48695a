//! `cutout store copy`: one appliance's SQLite accounts, keys, monthly
//! counts, operator password and plain-HTTP switch into a shared
//! PostgreSQL store, in one transaction. Running it again changes nothing:
//! what the shared store already has is kept (an account or key by its name
//! or hash), and a count becomes the larger of the two, so no charge is
//! lost and none is doubled.

use super::{PostgresStore, Result, SqliteStore};
use std::path::Path;

/// What a copy did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Copied {
    pub accounts: u64,
    pub keys: u64,
    pub counts: u64,
    pub admin_password: bool,
}

type Row = (String, String, i64, Option<i64>, Option<String>);
type KeyRow = (
    String,
    String,
    String,
    String,
    i64,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

/// Copies `sqlite_dir`'s `cutout.db` into the PostgreSQL store at `url`.
pub fn sqlite_to_postgres(
    sqlite_dir: &Path,
    url: &str,
    password_file: Option<&Path>,
) -> Result<Copied> {
    let from = SqliteStore::open(sqlite_dir)?;
    let (accounts, keys, counts, admin, plain_http_api) = from.read_all(|conn| {
        let accounts: Vec<Row> = conn
            .prepare("SELECT name, plan, created_at, suspended_at, password_hash FROM accounts")?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let keys: Vec<KeyRow> = conn
            .prepare(
                "SELECT a.name, k.prefix, k.hash, k.label, k.created_at, k.last_used_at, k.last_in_clear_at,
                 k.revoked_at FROM api_keys k JOIN accounts a ON a.id = k.account_id",
            )?
            .query_map([], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                ))
            })?
            .collect::<rusqlite::Result<_>>()?;
        let counts: Vec<(String, String, i64)> = conn
            .prepare("SELECT a.name, u.month, u.count FROM usage u JOIN accounts a ON a.id = u.account_id")?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let admin: Option<(String, i64)> = conn
            .prepare("SELECT password_hash, updated_at FROM admin WHERE id = 1")?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .next()
            .transpose()?;
        let plain_http_api: Option<(bool, i64)> = conn
            .prepare("SELECT api_on, updated_at FROM plain_http_api")?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .next()
            .transpose()?;
        Ok((accounts, keys, counts, admin, plain_http_api))
    })?;

    let to = PostgresStore::open(url, password_file)?;
    let mut client = to.client()?;
    let mut tx = client.transaction()?;
    let mut copied = Copied::default();
    for (name, plan, created_at, suspended_at, password_hash) in &accounts {
        copied.accounts += tx.execute(
            "INSERT INTO accounts (name, plan, created_at, suspended_at, password_hash)
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (name) DO NOTHING",
            &[name, plan, created_at, suspended_at, password_hash],
        )?;
    }
    for (account, prefix, hash, label, created_at, last_used_at, last_in_clear_at, revoked_at) in
        &keys
    {
        copied.keys += tx.execute(
            "INSERT INTO api_keys (account_id, prefix, hash, label, created_at, last_used_at,
                last_in_clear_at, revoked_at)
             SELECT id, $2, $3, $4, $5, $6, $7, $8 FROM accounts WHERE name = $1
             ON CONFLICT (hash) DO NOTHING",
            &[
                account,
                prefix,
                hash,
                label,
                created_at,
                last_used_at,
                last_in_clear_at,
                revoked_at,
            ],
        )?;
    }
    for (account, month, count) in &counts {
        copied.counts += tx.execute(
            "INSERT INTO usage (account_id, month, count)
             SELECT id, $2, $3 FROM accounts WHERE name = $1
             ON CONFLICT (account_id, month) DO UPDATE SET count = GREATEST(usage.count, excluded.count)
             WHERE usage.count < excluded.count",
            &[account, month, &(*count as i32)],
        )?;
    }
    if let Some((hash, updated_at)) = &admin {
        copied.admin_password = tx.execute(
            "INSERT INTO admin (id, password_hash, updated_at) VALUES (1, $1, $2) ON CONFLICT (id) DO NOTHING",
            &[hash, updated_at],
        )? == 1;
    }
    if let Some((on, updated_at)) = &plain_http_api {
        tx.execute(
            "INSERT INTO plain_http_api (id, api_on, updated_at) VALUES (1, $1, $2) ON CONFLICT (id) DO NOTHING",
            &[on, updated_at],
        )?;
    }
    tx.commit()?;
    Ok(copied)
}
