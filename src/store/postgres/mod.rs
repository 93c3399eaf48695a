//! The store several appliances share: a PostgreSQL server. Accounts, keys,
//! usage and sessions are rows every appliance reads at each call (no cache:
//! a key revoked on one appliance is refused by the next call on any other).
//! Request slots are rows too, each tied to the appliance that holds it; an
//! appliance says it is alive every `HEARTBEAT`, and the slots of one not
//! heard from for `DEAD_AFTER` (killed, powered off, cut off) stop counting.
//! A charge marks its slot charged in the statement that counts the image,
//! so when the database goes away before that statement's answer arrives,
//! the slot says afterwards whether the image was counted (`Shared::settle`).

mod schema;

use super::{
    check_plan, Account, Caller, KeyRecord, Plan, Principal, Refusal, Result, Session, Slot,
    SlotKind, Store, StoreError,
};
use crate::domain::{AccountName, ApiKey, Month};
use crate::secrets::random_token;
use postgres::{NoTls, Row};
use r2d2_postgres::PostgresConnectionManager;
use std::collections::HashSet;
use std::path::Path;
use std::str::FromStr;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

type Pool = r2d2::Pool<PostgresConnectionManager<NoTls>>;
type Connection = r2d2::PooledConnection<PostgresConnectionManager<NoTls>>;

/// How often an appliance tells the others it is alive.
pub const HEARTBEAT: Duration = Duration::from_secs(2);
/// How long after its last heartbeat an appliance's slots stop counting:
/// the bound on how long a dead appliance holds an account's slots.
pub const DEAD_AFTER: Duration = Duration::from_secs(10);
/// A slot this old that its appliance no longer holds (its release failed
/// while the database was away) is removed by the appliance's heartbeat.
/// Longer than a slot takes from its insert to being recorded as held.
const ORPHAN_AFTER: &str = "5 seconds";
/// How long a call waits for a connection before it gets 503.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(3);
/// Connections each appliance keeps at most: its calls hold one for a
/// statement or a short transaction, never across a model run.
const CONNECTIONS: u32 = 8;

impl From<postgres::Error> for StoreError {
    /// The error and its causes: postgres' own text of a server's refusal
    /// is "db error", the reason is in its source.
    fn from(e: postgres::Error) -> StoreError {
        let mut text = e.to_string();
        let mut cause = std::error::Error::source(&e);
        while let Some(c) = cause {
            text = format!("{text}: {c}");
            cause = c.source();
        }
        StoreError::Postgres(text)
    }
}

impl From<r2d2::Error> for StoreError {
    fn from(e: r2d2::Error) -> StoreError {
        StoreError::Postgres(format!("no connection: {e}"))
    }
}

pub struct PostgresStore {
    shared: Arc<Shared>,
    /// host:port/database, for the Status page.
    location: String,
}

struct Shared {
    pool: Pool,
    /// This appliance in `appliances`: random, new at each start.
    appliance: String,
    /// The slots of the calls this appliance serves now.
    held: Mutex<HashSet<i64>>,
    /// Charges whose statement failed: the database may have written
    /// them and lost only the answer (it stopped or the connection broke
    /// after the commit), while their calls got 503.
    in_doubt: Mutex<Vec<InDoubt>>,
}

#[derive(Clone)]
struct InDoubt {
    slot: i64,
    account_id: i64,
    month: String,
}

/// A slot row held by this appliance, until its call ends: charged, it
/// goes with the next heartbeat; uncharged, it is deleted at once; with its
/// charge in doubt, it stays until the heartbeat settles that.
pub struct Lease {
    id: i64,
    shared: Arc<Shared>,
    state: LeaseState,
}

#[derive(PartialEq)]
enum LeaseState {
    Uncharged,
    Charged,
    InDoubt,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.shared.held().remove(&self.id);
        if self.state != LeaseState::Uncharged {
            return;
        }
        // Should the database be away, the heartbeat removes it later.
        if let Err(e) = self
            .shared
            .client()
            .and_then(|mut c| Ok(c.execute("DELETE FROM slots WHERE id = $1", &[&self.id])?))
        {
            log::warn!("a request slot stays taken until the database is back: {e}");
        }
    }
}

const REFUND: &str =
    "UPDATE usage SET count = count - 1 WHERE account_id = $1 AND month = $2 AND count > 0";

const ACCOUNT_COLUMNS: &str =
    "a.id, a.name, p.name, p.monthly_limit, p.concurrency, p.api_access, \
     a.suspended_at IS NOT NULL, a.password_hash IS NOT NULL";
/// The column after `ACCOUNT_COLUMNS`.
const NEXT: usize = 8;

fn account_from_row(r: &Row) -> Account {
    Account {
        id: r.get(0),
        name: r.get(1),
        plan: Plan {
            name: r.get(2),
            monthly_limit: r.get::<_, Option<i32>>(3).map(|n| n as u32),
            concurrency: r.get::<_, i32>(4) as u32,
            api_access: r.get(5),
        },
        suspended: r.get(6),
        has_login: r.get(7),
    }
}

fn key_from_row(r: &Row) -> KeyRecord {
    KeyRecord {
        prefix: r.get(0),
        label: r.get(1),
        created_at: r.get(2),
        last_used_at: r.get(3),
        last_in_clear_at: r.get(4),
        revoked_at: r.get(5),
    }
}

/// The condition under which a slot `s` of appliance `a` counts: not yet
/// charged (its image is in `usage` then), and its appliance heard from
/// within `DEAD_AFTER`.
fn in_flight() -> String {
    format!(
        "NOT s.charged AND a.seen_at > statement_timestamp() - interval '{} seconds'",
        DEAD_AFTER.as_secs()
    )
}

impl Shared {
    fn client(&self) -> Result<Connection> {
        Ok(self.pool.get()?)
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashSet<i64>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn in_doubt(&self) -> std::sync::MutexGuard<'_, Vec<InDoubt>> {
        self.in_doubt.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Says this appliance is alive, settles the charges in doubt, removes
    /// the slots it no longer holds, and forgets appliances long dead
    /// (their slots go with them).
    fn beat(&self) -> Result<()> {
        let mut c = self.client()?;
        c.execute(
            "INSERT INTO appliances (id, seen_at) VALUES ($1, statement_timestamp())
             ON CONFLICT (id) DO UPDATE SET seen_at = excluded.seen_at",
            &[&self.appliance],
        )?;
        self.settle(&mut c)?;
        // The slots of charges in doubt too: the next settling reads them.
        let held: Vec<i64> = self
            .held()
            .iter()
            .copied()
            .chain(self.in_doubt().iter().map(|d| d.slot))
            .collect();
        c.execute(
            &format!(
                "DELETE FROM slots WHERE appliance = $1 AND NOT (id = ANY($2))
                 AND (charged OR taken_at < statement_timestamp() - interval '{ORPHAN_AFTER}')"
            ),
            &[&self.appliance, &held],
        )?;
        c.execute(
            &format!(
                "DELETE FROM appliances WHERE seen_at < statement_timestamp() - interval '{} seconds'",
                DEAD_AFTER.as_secs() * 6
            ),
            &[],
        )?;
        Ok(())
    }

    /// Each charge in doubt, settled by its slot: marked charged, the image
    /// was counted, and is taken back, as its call got 503; unmarked, it
    /// was not. The slot goes in the same transaction, so a settling whose
    /// own answer is lost finds it gone the next time and changes nothing.
    fn settle(&self, c: &mut postgres::Client) -> Result<()> {
        let pending = self.in_doubt().clone();
        for charge in pending {
            let mut tx = c.transaction()?;
            let charged: Option<bool> = tx
                .query_opt(
                    "DELETE FROM slots WHERE id = $1 RETURNING charged",
                    &[&charge.slot],
                )?
                .map(|r| r.get(0));
            if charged == Some(true) {
                tx.execute(REFUND, &[&charge.account_id, &charge.month])?;
            }
            tx.commit()?;
            self.in_doubt().retain(|c| c.slot != charge.slot);
            match charged {
                Some(true) => log::warn!(
                    "a charge the database wrote but did not confirm (its call got 503) is taken back"
                ),
                Some(false) => log::info!("a charge that failed with the database was not written"),
                // This appliance was taken for dead while the database was
                // away, or an earlier settling of it was written.
                None => log::warn!(
                    "a charge that failed with the database could not be settled: its slot is gone"
                ),
            }
        }
        Ok(())
    }
}

impl Drop for Shared {
    /// A clean stop settles what it can and frees this appliance's slots.
    fn drop(&mut self) {
        if let Ok(mut c) = self.client() {
            let _ = self.settle(&mut c);
            let _ = c.execute("DELETE FROM appliances WHERE id = $1", &[&self.appliance]);
        }
    }
}

/// The heartbeat, for as long as the store is open.
fn keep_beating(shared: Weak<Shared>) {
    let mut failing = false;
    loop {
        std::thread::sleep(HEARTBEAT);
        let Some(shared) = shared.upgrade() else {
            return;
        };
        match shared.beat() {
            Ok(()) if failing => {
                log::warn!("PostgreSQL answers the heartbeat again");
                failing = false;
            }
            Err(e) if !failing => {
                log::error!("PostgreSQL heartbeat failed: {e}");
                failing = true;
            }
            _ => {}
        }
    }
}

impl PostgresStore {
    /// Connects to `url` (its password from `password_file` if given),
    /// applies the migrations the database lacks and registers this
    /// appliance.
    pub fn open(url: &str, password_file: Option<&Path>) -> Result<PostgresStore> {
        let mut config = postgres::Config::from_str(url)
            .map_err(|e| StoreError::Postgres(format!("store.url: {e}")))?;
        if let Some(file) = password_file {
            let password = std::fs::read_to_string(file)
                .map_err(|e| StoreError::Io(file.display().to_string(), e))?;
            config.password(password.trim_end_matches(['\n', '\r']));
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECTION_TIMEOUT);
        }
        config.application_name("cutout");
        let location = location(&config);
        // One connection first: a wrong password or database is said at
        // once, with the server's reason.
        schema::migrate(&mut config.connect(NoTls)?)?;
        let pool = r2d2::Pool::builder()
            .max_size(CONNECTIONS)
            .min_idle(Some(1))
            .connection_timeout(CONNECTION_TIMEOUT)
            // The pool's retries would log each failed connection; the
            // appliance logs the database going and coming back, once each.
            .error_handler(Box::new(r2d2::NopErrorHandler))
            .build(PostgresConnectionManager::new(config, NoTls))?;
        let shared = Arc::new(Shared {
            pool,
            appliance: random_token()[..16].to_owned(),
            held: Mutex::new(HashSet::new()),
            in_doubt: Mutex::new(Vec::new()),
        });
        shared.beat()?;
        let weak = Arc::downgrade(&shared);
        std::thread::Builder::new()
            .name("store-heartbeat".into())
            .spawn(move || keep_beating(weak))
            .map_err(|e| StoreError::Io("the heartbeat thread".into(), e))?;
        Ok(PostgresStore { shared, location })
    }

    pub(super) fn client(&self) -> Result<Connection> {
        self.shared.client()
    }
}

/// The shared store at `url` (`host:port/database`), and the PostgreSQL
/// command that backs up its accounts, keys and counts (they are not in an
/// appliance's backup), with no password in it.
pub fn dump_command(url: &str) -> Result<(String, String)> {
    let config: postgres::Config = url
        .parse()
        .map_err(|e| StoreError::Postgres(format!("store.url: {e}")))?;
    let (host, port, database) = address(&config);
    let user = config
        .get_user()
        .map_or(String::new(), |u| format!(" --username={u}"));
    let dump = format!(
        "pg_dump --format=custom --host={host} --port={port}{user} --file=cutout-accounts.pgdump {database}"
    );
    Ok((location(&config), dump))
}

/// host:port/database, without the user or password.
fn location(config: &postgres::Config) -> String {
    let (host, port, database) = address(config);
    format!("{host}:{port}/{database}")
}

/// The host, port and database `config` names, with PostgreSQL's defaults.
fn address(config: &postgres::Config) -> (String, u16, &str) {
    let host = match config.get_hosts().first() {
        Some(postgres::config::Host::Tcp(h)) => h.clone(),
        Some(postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let database = config
        .get_dbname()
        .or(config.get_user())
        .unwrap_or("postgres");
    (host, port, database)
}

impl Store for PostgresStore {
    fn describe(&self) -> String {
        format!("PostgreSQL, {} (shared)", self.location)
    }

    fn plans(&self) -> Result<Vec<Plan>> {
        let rows = self.client()?.query(
            "SELECT name, monthly_limit, concurrency, api_access FROM plans ORDER BY concurrency",
            &[],
        )?;
        Ok(rows
            .iter()
            .map(|r| Plan {
                name: r.get(0),
                monthly_limit: r.get::<_, Option<i32>>(1).map(|n| n as u32),
                concurrency: r.get::<_, i32>(2) as u32,
                api_access: r.get(3),
            })
            .collect())
    }

    fn create_account(&self, name: &AccountName, plan: &str, now: i64) -> Result<Account> {
        check_plan(self.plans()?, plan)?;
        let inserted = self.client()?.execute(
            // Names are unique regardless of case: Alice and alice are one account.
            "INSERT INTO accounts (name, plan, created_at) SELECT $1::TEXT, $2::TEXT, $3::BIGINT \
             WHERE NOT EXISTS (SELECT 1 FROM accounts WHERE lower(name) = lower($1::TEXT)) \
             ON CONFLICT (name) DO NOTHING",
            &[&name.as_str(), &plan, &now],
        )?;
        if inserted == 0 {
            return Err(StoreError::AccountExists(name.to_string()));
        }
        self.account(name.as_str())
    }

    fn account(&self, name: &str) -> Result<Account> {
        self.client()?
            .query_opt(
                &format!("SELECT {ACCOUNT_COLUMNS} FROM accounts a JOIN plans p ON p.name = a.plan WHERE a.name = $1"),
                &[&name],
            )?
            .map(|r| account_from_row(&r))
            .ok_or_else(|| StoreError::NoSuchAccount(name.to_owned()))
    }

    fn account_by_id(&self, id: i64) -> Result<Account> {
        self.client()?
            .query_opt(
                &format!("SELECT {ACCOUNT_COLUMNS} FROM accounts a JOIN plans p ON p.name = a.plan WHERE a.id = $1"),
                &[&id],
            )?
            .map(|r| account_from_row(&r))
            .ok_or_else(|| StoreError::NoSuchAccount(format!("#{id}")))
    }

    fn accounts(&self, month: Month) -> Result<Vec<(Account, u32)>> {
        let rows = self.client()?.query(
            &format!(
                "SELECT {ACCOUNT_COLUMNS}, COALESCE(u.count, 0) FROM accounts a JOIN plans p ON p.name = a.plan
                 LEFT JOIN usage u ON u.account_id = a.id AND u.month = $1 ORDER BY a.name"
            ),
            &[&month.to_string()],
        )?;
        Ok(rows
            .iter()
            .map(|r| (account_from_row(r), r.get::<_, i32>(NEXT) as u32))
            .collect())
    }

    fn set_plan(&self, name: &str, plan: &str) -> Result<()> {
        check_plan(self.plans()?, plan)?;
        match self.client()?.execute(
            "UPDATE accounts SET plan = $2 WHERE name = $1",
            &[&name, &plan],
        )? {
            0 => Err(StoreError::NoSuchAccount(name.to_owned())),
            _ => Ok(()),
        }
    }

    fn set_suspended(&self, name: &str, suspended: bool, now: i64) -> Result<()> {
        let account = self.account(name)?;
        let mut c = self.client()?;
        let mut tx = c.transaction()?;
        tx.execute(
            "UPDATE accounts SET suspended_at = $2 WHERE id = $1",
            &[&account.id, &suspended.then_some(now)],
        )?;
        if suspended {
            tx.execute("DELETE FROM sessions WHERE account_id = $1", &[&account.id])?;
        }
        tx.commit()?;
        Ok(())
    }

    fn set_account_password(&self, name: &str, password_hash: &str) -> Result<()> {
        let account = self.account(name)?;
        let mut c = self.client()?;
        let mut tx = c.transaction()?;
        tx.execute(
            "UPDATE accounts SET password_hash = $2 WHERE id = $1",
            &[&account.id, &password_hash],
        )?;
        tx.execute("DELETE FROM sessions WHERE account_id = $1", &[&account.id])?;
        tx.commit()?;
        Ok(())
    }

    fn account_login(&self, name: &str) -> Result<Option<(Account, Option<String>)>> {
        Ok(self
            .client()?
            .query_opt(
                &format!("SELECT {ACCOUNT_COLUMNS}, a.password_hash FROM accounts a JOIN plans p ON p.name = a.plan WHERE a.name = $1"),
                &[&name],
            )?
            .map(|r| (account_from_row(&r), r.get(NEXT))))
    }

    fn admin_password_hash(&self) -> Result<Option<String>> {
        Ok(self
            .client()?
            .query_opt("SELECT password_hash FROM admin WHERE id = 1", &[])?
            .map(|r| r.get(0)))
    }

    fn set_admin_password(&self, password_hash: &str, now: i64) -> Result<()> {
        let mut c = self.client()?;
        let mut tx = c.transaction()?;
        tx.execute(
            "INSERT INTO admin (id, password_hash, updated_at) VALUES (1, $1, $2)
             ON CONFLICT (id) DO UPDATE SET password_hash = excluded.password_hash, updated_at = excluded.updated_at",
            &[&password_hash, &now],
        )?;
        tx.execute("DELETE FROM sessions WHERE account_id IS NULL", &[])?;
        tx.commit()?;
        Ok(())
    }

    fn device_key(&self) -> Result<String> {
        let mut c = self.client()?;
        // Should another appliance have just made one, the first key stays.
        c.execute(
            "INSERT INTO device_key (id, key) VALUES (1, $1) ON CONFLICT (id) DO NOTHING",
            &[&random_token()],
        )?;
        Ok(c.query_one("SELECT key FROM device_key WHERE id = 1", &[])?
            .get(0))
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
        let mut c = self.client()?;
        c.execute("DELETE FROM sessions WHERE expires_at <= $1", &[&now])?;
        c.execute(
            "INSERT INTO sessions (token_hash, account_id, csrf, expires_at) VALUES ($1, $2, $3, $4)",
            &[&token_hash, &account_id, &csrf, &expires_at],
        )?;
        Ok(())
    }

    fn session(&self, token_hash: &str, now: i64) -> Result<Option<Session>> {
        Ok(self
            .client()?
            .query_opt(
                "SELECT s.account_id, s.csrf FROM sessions s LEFT JOIN accounts a ON a.id = s.account_id
                 WHERE s.token_hash = $1 AND s.expires_at > $2 AND a.suspended_at IS NULL",
                &[&token_hash, &now],
            )?
            .map(|r| Session {
                principal: Principal::of_account_id(r.get(0)),
                csrf: r.get(1),
            }))
    }

    fn end_session(&self, token_hash: &str) -> Result<()> {
        self.client()?
            .execute("DELETE FROM sessions WHERE token_hash = $1", &[&token_hash])?;
        Ok(())
    }

    fn create_key_for(&self, account_id: i64, label: &str, now: i64) -> Result<ApiKey> {
        let key = ApiKey::generate();
        self.client()?.execute(
            "INSERT INTO api_keys (account_id, prefix, hash, label, created_at) VALUES ($1, $2, $3, $4, $5)",
            &[&account_id, &key.prefix(), &key.hash(), &label, &now],
        )?;
        Ok(key)
    }

    fn keys_of(&self, account_id: i64) -> Result<Vec<KeyRecord>> {
        let rows = self.client()?.query(
            "SELECT prefix, label, created_at, last_used_at, last_in_clear_at, revoked_at
             FROM api_keys WHERE account_id = $1 ORDER BY id",
            &[&account_id],
        )?;
        Ok(rows.iter().map(key_from_row).collect())
    }

    fn revoke_key(&self, key_or_prefix: &str, now: i64) -> Result<()> {
        let mut c = self.client()?;
        let ids: Vec<i64> = match ApiKey::parse(key_or_prefix) {
            Some(key) => c.query(
                "SELECT id FROM api_keys WHERE hash = $1 AND revoked_at IS NULL",
                &[&key.hash()],
            )?,
            None if key_or_prefix.len() >= 4 => c.query(
                "SELECT id FROM api_keys WHERE substr(prefix, 1, $2) = $1 AND revoked_at IS NULL",
                &[&key_or_prefix, &(key_or_prefix.len() as i32)],
            )?,
            None => vec![],
        }
        .iter()
        .map(|r| r.get(0))
        .collect();
        match ids.as_slice() {
            [] => Err(StoreError::NoSuchKey(key_or_prefix.to_owned())),
            [id] => {
                c.execute(
                    "UPDATE api_keys SET revoked_at = $2 WHERE id = $1",
                    &[id, &now],
                )?;
                Ok(())
            }
            _ => Err(StoreError::AmbiguousKey(key_or_prefix.to_owned())),
        }
    }

    fn revoke_key_of(&self, account_id: i64, prefix: &str, now: i64) -> Result<()> {
        match self.client()?.execute(
            "UPDATE api_keys SET revoked_at = $3 WHERE account_id = $1 AND prefix = $2 AND revoked_at IS NULL",
            &[&account_id, &prefix, &now],
        )? {
            0 => Err(StoreError::NoSuchKey(prefix.to_owned())),
            _ => Ok(()),
        }
    }

    fn authenticate(&self, key: &ApiKey) -> Result<Option<Caller>> {
        Ok(self
            .client()?
            .query_opt(
                &format!(
                    "SELECT {ACCOUNT_COLUMNS}, k.id FROM api_keys k JOIN accounts a ON a.id = k.account_id
                     JOIN plans p ON p.name = a.plan WHERE k.hash = $1 AND k.revoked_at IS NULL"
                ),
                &[&key.hash()],
            )?
            .map(|r| Caller {
                account: account_from_row(&r),
                key_id: Some(r.get(NEXT)),
            }))
    }

    fn key_came_in_clear(&self, key_id: i64, now: i64) -> Result<()> {
        self.client()?.execute(
            "UPDATE api_keys SET last_in_clear_at = $2 WHERE id = $1
             AND (last_in_clear_at IS NULL OR last_in_clear_at <= $2::BIGINT - 60)",
            &[&key_id, &now],
        )?;
        Ok(())
    }

    fn plain_http_api(&self) -> Result<bool> {
        let on = self
            .client()?
            .query_opt("SELECT api_on FROM plain_http_api", &[])?
            .map(|r| r.get(0));
        Ok(on.unwrap_or(true))
    }

    fn set_plain_http_api(&self, on: bool, now: i64) -> Result<()> {
        self.client()?.execute(
            "INSERT INTO plain_http_api (id, api_on, updated_at) VALUES (1, $1, $2)
             ON CONFLICT (id) DO UPDATE SET api_on = $1, updated_at = $2",
            &[&on, &now],
        )?;
        Ok(())
    }

    fn usage(&self, account_id: i64, month: Month) -> Result<u32> {
        Ok(self
            .client()?
            .query_opt(
                "SELECT count FROM usage WHERE account_id = $1 AND month = $2",
                &[&account_id, &month.to_string()],
            )?
            .map_or(0, |r| r.get::<_, i32>(0) as u32))
    }

    fn refund(&self, account_id: i64, month: Month) -> Result<()> {
        self.client()?
            .execute(REFUND, &[&account_id, &month.to_string()])?;
        Ok(())
    }

    fn set_usage(&self, account: &str, month: Month, count: u32) -> Result<()> {
        let account = self.account(account)?;
        self.client()?.execute(
            "INSERT INTO usage (account_id, month, count) VALUES ($1, $2, $3)
             ON CONFLICT (account_id, month) DO UPDATE SET count = excluded.count",
            &[&account.id, &month.to_string(), &(count as i32)],
        )?;
        Ok(())
    }

    fn is_empty(&self) -> Result<bool> {
        Ok(self
            .client()?
            .query_one("SELECT NOT EXISTS (SELECT 1 FROM accounts)", &[])?
            .get(0))
    }

    fn admit(&self, account: &Account, month: Month) -> Result<std::result::Result<Slot, Refusal>> {
        let (concurrency, limit) = (account.plan.concurrency, account.plan.monthly_limit);
        let mut c = self.client()?;
        let mut tx = c.transaction()?;
        // Admissions of one account, on every appliance, take turns here;
        // each then reads the slots and the count as the last one left
        // them. A charge changes both in one statement, so the sum holds.
        tx.execute(
            "SELECT 1 FROM accounts WHERE id = $1 FOR UPDATE",
            &[&account.id],
        )?;
        let in_flight = in_flight();
        let row = tx.query_one(
            &format!(
                "WITH held AS (
                    SELECT COUNT(*) AS slots, COUNT(*) FILTER (WHERE s.reserved) AS reserved,
                        COALESCE((SELECT count FROM usage WHERE account_id = $1 AND month = $5), 0) AS used
                    FROM slots s JOIN appliances a ON a.id = s.appliance
                    WHERE s.account_id = $1 AND {in_flight}),
                 taken AS (
                    INSERT INTO slots (account_id, appliance, reserved)
                    SELECT $1, $2, $4::BIGINT IS NOT NULL FROM held
                    WHERE held.slots < $3 AND ($4 IS NULL OR held.used + held.reserved < $4)
                    RETURNING id)
                 SELECT held.slots, (SELECT id FROM taken) FROM held"
            ),
            &[
                &account.id,
                &self.shared.appliance,
                &i64::from(concurrency),
                &limit.map(i64::from),
                &month.to_string(),
            ],
        )?;
        tx.commit()?;
        let (in_flight, taken): (i64, Option<i64>) = (row.get(0), row.get(1));
        let Some(id) = taken else {
            return Ok(Err(match limit {
                Some(limit) if in_flight < i64::from(concurrency) => {
                    Refusal::QuotaExceeded { limit }
                }
                _ => Refusal::TooManyConcurrent { limit: concurrency },
            }));
        };
        self.shared.held().insert(id);
        Ok(Ok(Slot(SlotKind::Shared(Lease {
            id,
            shared: self.shared.clone(),
            state: LeaseState::Uncharged,
        }))))
    }

    fn charge(&self, slot: Slot, caller: &Caller, month: Month, now: i64) -> Result<u32> {
        let SlotKind::Shared(mut lease) = slot.0 else {
            unreachable!("a PostgreSQL store hands out its own slots")
        };
        // One statement, so one transaction and one round trip: the count,
        // the key's last use, and the slot marked charged, its reservation
        // now in the count.
        let charged = self.client().and_then(|mut c| {
            Ok(c.query_one(
                "WITH charged AS (UPDATE slots SET charged = true WHERE id = $3),
                      used AS (UPDATE api_keys SET last_used_at = $4 WHERE id = $5)
                 INSERT INTO usage (account_id, month, count) VALUES ($1, $2, 1)
                 ON CONFLICT (account_id, month) DO UPDATE SET count = usage.count + 1
                 RETURNING count",
                &[
                    &caller.account.id,
                    &month.to_string(),
                    &lease.id,
                    &now,
                    &caller.key_id,
                ],
            )?)
        });
        match charged {
            Ok(row) => {
                lease.state = LeaseState::Charged;
                Ok(row.get::<_, i32>(0) as u32)
            }
            Err(e) => {
                lease.state = LeaseState::InDoubt;
                self.shared.in_doubt().push(InDoubt {
                    slot: lease.id,
                    account_id: caller.account.id,
                    month: month.to_string(),
                });
                Err(e)
            }
        }
    }

    fn in_flight(&self, account_id: i64) -> Result<u32> {
        let n: i64 = self
            .client()?
            .query_one(
                &format!(
                    "SELECT COUNT(*) FROM slots s JOIN appliances a ON a.id = s.appliance
                     WHERE s.account_id = $1 AND {}",
                    in_flight()
                ),
                &[&account_id],
            )?
            .get(0);
        Ok(n as u32)
    }

    fn check_writable(&self) -> Result<()> {
        let standby: bool = self
            .client()?
            .query_one("SELECT pg_is_in_recovery()", &[])?
            .get(0);
        if standby {
            return Err(StoreError::Postgres(
                "the server is a read-only standby".into(),
            ));
        }
        Ok(())
    }

    fn probe_write(&self, _now: i64) -> Result<()> {
        self.check_writable()?;
        self.shared.beat()
    }
}
