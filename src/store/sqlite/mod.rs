//! The store of one appliance: a SQLite file in the data directory, and its
//! request slots in memory. One connection behind a mutex: every statement
//! here is short, and requests spend their time in the model, not here.

mod limits;
mod schema;

use super::{
    check_plan, Account, Caller, KeyRecord, Plan, Principal, Refusal, Result, Session, Slot,
    SlotKind, Store, StoreError,
};
use crate::domain::{AccountName, ApiKey, Month};
use crate::secrets::random_token;
use limits::Limiter;
pub(super) use limits::Permit;
use rusqlite::{params, Connection, OptionalExtension};
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

/// Below this much free space the data directory counts as full: SQLite
/// needs room for its write-ahead log, and failing a call before its
/// cut-out is cheaper than failing its charge after.
const MIN_FREE_BYTES: u64 = 8 * 1024 * 1024;

pub struct SqliteStore {
    conn: Mutex<Connection>,
    data_dir: std::path::PathBuf,
    /// Slots live in memory: they are this process's alone.
    limiter: Limiter,
}

const ACCOUNT_COLUMNS: &str =
    "a.id, a.name, p.name, p.monthly_limit, p.concurrency, p.api_access, \
     a.suspended_at IS NOT NULL, a.password_hash IS NOT NULL";
/// The column after `ACCOUNT_COLUMNS`.
const NEXT: usize = 8;

fn account_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Account> {
    Ok(Account {
        id: row.get(0)?,
        name: row.get(1)?,
        plan: Plan {
            name: row.get(2)?,
            monthly_limit: row.get(3)?,
            concurrency: row.get(4)?,
            api_access: row.get(5)?,
        },
        suspended: row.get(6)?,
        has_login: row.get(7)?,
    })
}

impl SqliteStore {
    /// Opens (creating if needed) `data_dir/cutout.db` and brings its schema up to date.
    pub fn open(data_dir: &Path) -> Result<SqliteStore> {
        std::fs::create_dir_all(data_dir)
            .map_err(|e| StoreError::Io(data_dir.display().to_string(), e))?;
        let mut conn = Connection::open(data_dir.join("cutout.db"))?;
        conn.busy_timeout(Duration::from_secs(5))?;
        // WAL: readers do not block the writer. FULL: every commit is on
        // the disk before the call is answered, so a power cut or a file
        // system that turns read-only after an I/O error loses no charge a
        // client saw (NORMAL lost them: tests/api/disk.rs). It costs one
        // fsync per image, small beside the cut-out.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        schema::migrate(&mut conn)?;
        Ok(SqliteStore {
            conn: Mutex::new(conn),
            data_dir: data_dir.to_owned(),
            limiter: Limiter::default(),
        })
    }

    /// The schema this version brings a database to (SQLite's `user_version`).
    pub fn schema_version() -> usize {
        schema::latest()
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves SQLite consistent (it rolls
        // back), so a poisoned lock is still safe to use.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `read` over one consistent view of the database (`store copy`).
    pub(super) fn read_all<T>(
        &self,
        read: impl FnOnce(&rusqlite::Transaction<'_>) -> rusqlite::Result<T>,
    ) -> Result<T> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        Ok(read(&tx)?)
    }

    /// Counts one image for the caller in `month`, in one transaction with
    /// the key's last-used time; returns the month's new count.
    fn record_charge(&self, caller: &Caller, month: Month, now: i64) -> Result<u32> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let count = tx.query_row(
            "INSERT INTO usage (account_id, month, count) VALUES (?1, ?2, 1)
             ON CONFLICT (account_id, month) DO UPDATE SET count = count + 1 RETURNING count",
            params![caller.account.id, month.to_string()],
            |r| r.get(0),
        )?;
        if let Some(key_id) = caller.key_id {
            tx.execute(
                "UPDATE api_keys SET last_used_at = ?2 WHERE id = ?1",
                params![key_id, now],
            )?;
        }
        tx.commit()?;
        Ok(count)
    }
}

impl Store for SqliteStore {
    fn describe(&self) -> String {
        format!("SQLite, {}", self.data_dir.join("cutout.db").display())
    }

    fn plans(&self) -> Result<Vec<Plan>> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT name, monthly_limit, concurrency, api_access FROM plans ORDER BY concurrency",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok(Plan {
                name: r.get(0)?,
                monthly_limit: r.get(1)?,
                concurrency: r.get(2)?,
                api_access: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn create_account(&self, name: &AccountName, plan: &str, now: i64) -> Result<Account> {
        check_plan(self.plans()?, plan)?;
        let inserted = self.conn().execute(
            // Names are unique regardless of case: Alice and alice are one account.
            "INSERT INTO accounts (name, plan, created_at) SELECT ?1, ?2, ?3 \
             WHERE NOT EXISTS (SELECT 1 FROM accounts WHERE lower(name) = lower(?1)) \
             ON CONFLICT (name) DO NOTHING",
            params![name.as_str(), plan, now],
        )?;
        if inserted == 0 {
            return Err(StoreError::AccountExists(name.to_string()));
        }
        self.account(name.as_str())
    }

    fn account(&self, name: &str) -> Result<Account> {
        self.conn()
            .query_row(
                &format!("SELECT {ACCOUNT_COLUMNS} FROM accounts a JOIN plans p ON p.name = a.plan WHERE a.name = ?1"),
                [name],
                account_from_row,
            )
            .optional()?
            .ok_or_else(|| StoreError::NoSuchAccount(name.to_owned()))
    }

    fn account_by_id(&self, id: i64) -> Result<Account> {
        self.conn()
            .query_row(
                &format!("SELECT {ACCOUNT_COLUMNS} FROM accounts a JOIN plans p ON p.name = a.plan WHERE a.id = ?1"),
                [id],
                account_from_row,
            )
            .optional()?
            .ok_or_else(|| StoreError::NoSuchAccount(format!("#{id}")))
    }

    fn accounts(&self, month: Month) -> Result<Vec<(Account, u32)>> {
        let conn = self.conn();
        let mut stmt = conn.prepare(&format!(
            "SELECT {ACCOUNT_COLUMNS}, COALESCE(u.count, 0) FROM accounts a JOIN plans p ON p.name = a.plan
             LEFT JOIN usage u ON u.account_id = a.id AND u.month = ?1 ORDER BY a.name"
        ))?;
        let rows = stmt.query_map([month.to_string()], |r| {
            Ok((account_from_row(r)?, r.get(NEXT)?))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn set_plan(&self, name: &str, plan: &str) -> Result<()> {
        check_plan(self.plans()?, plan)?;
        match self.conn().execute(
            "UPDATE accounts SET plan = ?2 WHERE name = ?1",
            params![name, plan],
        )? {
            0 => Err(StoreError::NoSuchAccount(name.to_owned())),
            _ => Ok(()),
        }
    }

    fn set_suspended(&self, name: &str, suspended: bool, now: i64) -> Result<()> {
        let account = self.account(name)?;
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute(
            "UPDATE accounts SET suspended_at = ?2 WHERE id = ?1",
            params![account.id, suspended.then_some(now)],
        )?;
        if suspended {
            tx.execute("DELETE FROM sessions WHERE account_id = ?1", [account.id])?;
        }
        tx.commit()?;
        Ok(())
    }

    fn set_account_password(&self, name: &str, password_hash: &str) -> Result<()> {
        let account = self.account(name)?;
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute(
            "UPDATE accounts SET password_hash = ?2 WHERE id = ?1",
            params![account.id, password_hash],
        )?;
        tx.execute("DELETE FROM sessions WHERE account_id = ?1", [account.id])?;
        tx.commit()?;
        Ok(())
    }

    fn account_login(&self, name: &str) -> Result<Option<(Account, Option<String>)>> {
        Ok(self
            .conn()
            .query_row(
                &format!("SELECT {ACCOUNT_COLUMNS}, a.password_hash FROM accounts a JOIN plans p ON p.name = a.plan WHERE a.name = ?1"),
                [name],
                |r| Ok((account_from_row(r)?, r.get(NEXT)?)),
            )
            .optional()?)
    }

    fn admin_password_hash(&self) -> Result<Option<String>> {
        Ok(self
            .conn()
            .query_row("SELECT password_hash FROM admin WHERE id = 1", [], |r| {
                r.get(0)
            })
            .optional()?)
    }

    fn set_admin_password(&self, password_hash: &str, now: i64) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute(
            "INSERT INTO admin (id, password_hash, updated_at) VALUES (1, ?1, ?2)
             ON CONFLICT (id) DO UPDATE SET password_hash = excluded.password_hash, updated_at = excluded.updated_at",
            params![password_hash, now],
        )?;
        tx.execute("DELETE FROM sessions WHERE account_id IS NULL", [])?;
        tx.commit()?;
        Ok(())
    }

    /// The key that signs device cookies, made on first use. Not made by the
    /// migration: SQLite's `randomblob` is not documented as fit for keys.
    fn device_key(&self) -> Result<String> {
        const SELECT: &str = "SELECT key FROM device_key WHERE id = 1";
        let conn = self.conn();
        if let Some(key) = conn.query_row(SELECT, [], |r| r.get(0)).optional()? {
            return Ok(key);
        }
        // `OR IGNORE`: should another process (the command line) have just
        // made one, the first key stays.
        conn.execute(
            "INSERT OR IGNORE INTO device_key (id, key) VALUES (1, ?1)",
            [random_token()],
        )?;
        Ok(conn.query_row(SELECT, [], |r| r.get(0))?)
    }

    fn create_session(
        &self,
        token_hash: &str,
        principal: Principal,
        csrf: &str,
        expires_at: i64,
        now: i64,
    ) -> Result<()> {
        let account_id = principal.account_id();
        let conn = self.conn();
        conn.execute("DELETE FROM sessions WHERE expires_at <= ?1", [now])?;
        conn.execute(
            "INSERT INTO sessions (token_hash, account_id, csrf, expires_at) VALUES (?1, ?2, ?3, ?4)",
            params![token_hash, account_id, csrf, expires_at],
        )?;
        Ok(())
    }

    fn session(&self, token_hash: &str, now: i64) -> Result<Option<Session>> {
        Ok(self
            .conn()
            .query_row(
                "SELECT s.account_id, s.csrf FROM sessions s LEFT JOIN accounts a ON a.id = s.account_id
                 WHERE s.token_hash = ?1 AND s.expires_at > ?2 AND a.suspended_at IS NULL",
                params![token_hash, now],
                |r| {
                    Ok(Session {
                        principal: Principal::of_account_id(r.get(0)?),
                        csrf: r.get(1)?,
                    })
                },
            )
            .optional()?)
    }

    fn end_session(&self, token_hash: &str) -> Result<()> {
        self.conn()
            .execute("DELETE FROM sessions WHERE token_hash = ?1", [token_hash])?;
        Ok(())
    }

    fn create_key_for(&self, account_id: i64, label: &str, now: i64) -> Result<ApiKey> {
        let key = ApiKey::generate();
        self.conn().execute(
            "INSERT INTO api_keys (account_id, prefix, hash, label, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![account_id, key.prefix(), key.hash(), label, now],
        )?;
        Ok(key)
    }

    fn keys_of(&self, account_id: i64) -> Result<Vec<KeyRecord>> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT prefix, label, created_at, last_used_at, last_in_clear_at, revoked_at
             FROM api_keys WHERE account_id = ?1 ORDER BY id",
        )?;
        let rows = stmt.query_map([account_id], |r| {
            Ok(KeyRecord {
                prefix: r.get(0)?,
                label: r.get(1)?,
                created_at: r.get(2)?,
                last_used_at: r.get(3)?,
                last_in_clear_at: r.get(4)?,
                revoked_at: r.get(5)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn revoke_key(&self, key_or_prefix: &str, now: i64) -> Result<()> {
        let conn = self.conn();
        let ids: Vec<i64> = match ApiKey::parse(key_or_prefix) {
            Some(key) => conn
                .prepare("SELECT id FROM api_keys WHERE hash = ?1 AND revoked_at IS NULL")?
                .query_map([key.hash()], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?,
            None if key_or_prefix.len() >= 4 => conn
                .prepare("SELECT id FROM api_keys WHERE substr(prefix, 1, ?2) = ?1 AND revoked_at IS NULL")?
                .query_map(params![key_or_prefix, key_or_prefix.len()], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?,
            None => vec![],
        };
        match ids.as_slice() {
            [] => Err(StoreError::NoSuchKey(key_or_prefix.to_owned())),
            [id] => {
                conn.execute(
                    "UPDATE api_keys SET revoked_at = ?2 WHERE id = ?1",
                    params![id, now],
                )?;
                Ok(())
            }
            _ => Err(StoreError::AmbiguousKey(key_or_prefix.to_owned())),
        }
    }

    fn revoke_key_of(&self, account_id: i64, prefix: &str, now: i64) -> Result<()> {
        match self.conn().execute(
            "UPDATE api_keys SET revoked_at = ?3 WHERE account_id = ?1 AND prefix = ?2 AND revoked_at IS NULL",
            params![account_id, prefix, now],
        )? {
            0 => Err(StoreError::NoSuchKey(prefix.to_owned())),
            _ => Ok(()),
        }
    }

    fn authenticate(&self, key: &ApiKey) -> Result<Option<Caller>> {
        Ok(self
            .conn()
            .query_row(
                &format!(
                    "SELECT {ACCOUNT_COLUMNS}, k.id FROM api_keys k JOIN accounts a ON a.id = k.account_id
                     JOIN plans p ON p.name = a.plan WHERE k.hash = ?1 AND k.revoked_at IS NULL"
                ),
                [key.hash()],
                |r| Ok(Caller { account: account_from_row(r)?, key_id: Some(r.get(NEXT)?) }),
            )
            .optional()?)
    }

    fn key_came_in_clear(&self, key_id: i64, now: i64) -> Result<()> {
        self.conn().execute(
            "UPDATE api_keys SET last_in_clear_at = ?2 WHERE id = ?1
             AND (last_in_clear_at IS NULL OR last_in_clear_at <= ?2 - 60)",
            params![key_id, now],
        )?;
        Ok(())
    }

    fn plain_http_api(&self) -> Result<bool> {
        let on = self
            .conn()
            .query_row("SELECT api_on FROM plain_http_api", [], |r| r.get(0))
            .optional()?;
        Ok(on.unwrap_or(true))
    }

    fn set_plain_http_api(&self, on: bool, now: i64) -> Result<()> {
        self.conn().execute(
            "INSERT INTO plain_http_api (id, api_on, updated_at) VALUES (1, ?1, ?2)
             ON CONFLICT (id) DO UPDATE SET api_on = ?1, updated_at = ?2",
            params![on, now],
        )?;
        Ok(())
    }

    fn usage(&self, account_id: i64, month: Month) -> Result<u32> {
        Ok(self
            .conn()
            .query_row(
                "SELECT count FROM usage WHERE account_id = ?1 AND month = ?2",
                params![account_id, month.to_string()],
                |r| r.get(0),
            )
            .optional()?
            .unwrap_or(0))
    }

    fn admit(&self, account: &Account, month: Month) -> Result<std::result::Result<Slot, Refusal>> {
        let permit = self.limiter.admit(
            account.id,
            account.plan.concurrency,
            account.plan.monthly_limit,
            || self.usage(account.id, month),
        )?;
        Ok(permit.map(|p| Slot(SlotKind::Memory(p))))
    }

    fn in_flight(&self, account_id: i64) -> Result<u32> {
        Ok(self.limiter.in_flight(account_id))
    }

    fn charge(&self, slot: Slot, caller: &Caller, month: Month, now: i64) -> Result<u32> {
        let SlotKind::Memory(permit) = slot.0 else {
            unreachable!("a SQLite store hands out its own slots")
        };
        permit.charge(|| self.record_charge(caller, month, now))
    }

    fn refund(&self, account_id: i64, month: Month) -> Result<()> {
        self.conn().execute(
            "UPDATE usage SET count = count - 1 WHERE account_id = ?1 AND month = ?2 AND count > 0",
            params![account_id, month.to_string()],
        )?;
        Ok(())
    }

    fn set_usage(&self, account: &str, month: Month, count: u32) -> Result<()> {
        let account = self.account(account)?;
        self.conn().execute(
            "INSERT INTO usage (account_id, month, count) VALUES (?1, ?2, ?3)
             ON CONFLICT (account_id, month) DO UPDATE SET count = excluded.count",
            params![account.id, month.to_string(), count],
        )?;
        Ok(())
    }

    fn is_empty(&self) -> Result<bool> {
        Ok(self
            .conn()
            .query_row("SELECT COUNT(*) = 0 FROM accounts", [], |r| r.get(0))?)
    }

    /// Whether a charge could be written now: the data directory is on a
    /// writable file system with room left, and the write lock is free.
    fn check_writable(&self) -> Result<()> {
        let fs = rustix::fs::statvfs(&self.data_dir)
            .map_err(|e| StoreError::NotWritable(format!("cannot be examined: {e}")))?;
        if fs.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY) {
            return Err(StoreError::NotWritable(
                "is on a read-only file system".into(),
            ));
        }
        let free = fs.f_bavail.saturating_mul(fs.f_frsize);
        if free < MIN_FREE_BYTES {
            return Err(StoreError::NotWritable(format!(
                "is full ({} KiB free, {} MiB needed)",
                free / 1024,
                MIN_FREE_BYTES >> 20
            )));
        }
        self.conn().execute_batch("BEGIN IMMEDIATE; ROLLBACK;")?;
        Ok(())
    }

    fn probe_write(&self, now: i64) -> Result<()> {
        self.check_writable()?;
        self.conn().execute(
            "INSERT OR REPLACE INTO write_probe (id, written_at) VALUES (1, ?1)",
            [now],
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_device_key_is_made_once_and_outlives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let key = SqliteStore::open(dir.path()).unwrap().device_key().unwrap();
        assert_eq!(key.len(), 64);
        let reopened = SqliteStore::open(dir.path()).unwrap();
        assert_eq!(reopened.device_key().unwrap(), key);
        assert_ne!(
            SqliteStore::open(tempfile::tempdir().unwrap().path())
                .unwrap()
                .device_key()
                .unwrap(),
            key
        );
    }
}
