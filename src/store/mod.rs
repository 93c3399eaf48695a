//! Plans, accounts, API keys, monthly usage, request slots and dashboard
//! sessions, behind one interface with two backends: SQLite in the data
//! directory (one appliance, the default) and PostgreSQL (any number of
//! appliances sharing accounts; README, "Several appliances"). Knows
//! nothing of HTTP; HTTP and the dashboard never know which backend runs.

mod copy;
mod postgres;
mod sqlite;

pub use self::postgres::{dump_command, PostgresStore, DEAD_AFTER, HEARTBEAT};
pub use copy::{sqlite_to_postgres, Copied};
pub use sqlite::SqliteStore;

use crate::config::StoreSettings;
use crate::domain::{AccountName, ApiKey, Month};
use std::path::Path;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("account {0:?} already exists")]
    AccountExists(String),
    #[error("no account named {0:?}")]
    NoSuchAccount(String),
    #[error("no plan named {0:?} (plans: {1})")]
    NoSuchPlan(String, String),
    #[error("no active key matches {0:?}")]
    NoSuchKey(String),
    #[error("{0:?} matches more than one key; give more of it")]
    AmbiguousKey(String),
    #[error("database: {0}")]
    Db(#[from] rusqlite::Error),
    #[error("PostgreSQL: {0}")]
    Postgres(String),
    #[error("cannot create {0}: {1}")]
    Io(String, #[source] std::io::Error),
    #[error("the data directory {0}")]
    NotWritable(String),
}

pub type Result<T> = std::result::Result<T, StoreError>;

#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub name: String,
    /// Images a month; `None` is unlimited.
    pub monthly_limit: Option<u32>,
    pub concurrency: u32,
    pub api_access: bool,
}

#[derive(Debug, Clone)]
pub struct Account {
    pub id: i64,
    pub name: String,
    pub plan: Plan,
    pub suspended: bool,
    /// Whether the account's user can sign in to the dashboard.
    pub has_login: bool,
}

#[derive(Debug, Clone)]
pub struct KeyRecord {
    pub prefix: String,
    pub label: String,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
    /// When it last came over plain HTTP: sent across the LAN in clear.
    pub last_in_clear_at: Option<i64>,
    pub revoked_at: Option<i64>,
}

/// Who is calling: the account behind a valid key, or a signed-in user
/// trying the service from the dashboard (no key).
#[derive(Debug, Clone)]
pub struct Caller {
    pub account: Account,
    pub key_id: Option<i64>,
}

/// Who a dashboard session belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Principal {
    Admin,
    Account(i64),
}

impl Principal {
    /// As a session row stores it: the account's id, none for the operator.
    fn account_id(self) -> Option<i64> {
        match self {
            Principal::Admin => None,
            Principal::Account(id) => Some(id),
        }
    }

    fn of_account_id(account_id: Option<i64>) -> Principal {
        account_id.map_or(Principal::Admin, Principal::Account)
    }
}

#[derive(Debug, Clone)]
pub struct Session {
    pub principal: Principal,
    pub csrf: String,
}

/// Why an account's call was not let in.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    TooManyConcurrent { limit: u32 },
    QuotaExceeded { limit: u32 },
}

/// One of an account's request slots and, on a plan with a monthly limit,
/// one reserved image of the month. Dropped without a charge, both are
/// free again.
pub struct Slot(SlotKind);

enum SlotKind {
    Memory(sqlite::Permit),
    Shared(self::postgres::Lease),
}

/// Everything that touches accounts, keys, plans, usage, slots, sessions
/// and the operator's password.
pub trait Store: Send + Sync {
    /// What the Status page names: the backend and where it is.
    fn describe(&self) -> String;

    fn plans(&self) -> Result<Vec<Plan>>;
    fn create_account(&self, name: &AccountName, plan: &str, now: i64) -> Result<Account>;
    fn account(&self, name: &str) -> Result<Account>;
    fn account_by_id(&self, id: i64) -> Result<Account>;
    /// Every account with its usage in `month`.
    fn accounts(&self, month: Month) -> Result<Vec<(Account, u32)>>;
    fn set_plan(&self, name: &str, plan: &str) -> Result<()>;
    /// Suspends an account (its keys and its user are refused) or lifts it.
    /// Suspending ends the user's dashboard sessions.
    fn set_suspended(&self, name: &str, suspended: bool, now: i64) -> Result<()>;
    /// Sets the account user's password hash and ends the user's sessions,
    /// so a changed password locks out whoever knew the old one.
    fn set_account_password(&self, name: &str, password_hash: &str) -> Result<()>;
    /// The account named `name` and its user's password hash, for signing in.
    fn account_login(&self, name: &str) -> Result<Option<(Account, Option<String>)>>;
    fn admin_password_hash(&self) -> Result<Option<String>>;
    /// Sets the operator's password hash and ends the operator's sessions.
    fn set_admin_password(&self, password_hash: &str, now: i64) -> Result<()>;
    /// The key that signs device cookies, made on first use.
    fn device_key(&self) -> Result<String>;
    /// Records a new session (by the SHA-256 of its token) and clears out
    /// expired ones.
    fn create_session(
        &self,
        token_hash: &str,
        principal: Principal,
        csrf: &str,
        expires_at: i64,
        now: i64,
    ) -> Result<()>;
    /// The live session with this token hash. An account user's session
    /// ends with the account's suspension.
    fn session(&self, token_hash: &str, now: i64) -> Result<Option<Session>>;
    fn end_session(&self, token_hash: &str) -> Result<()>;
    fn create_key_for(&self, account_id: i64, label: &str, now: i64) -> Result<ApiKey>;
    fn keys_of(&self, account_id: i64) -> Result<Vec<KeyRecord>>;
    /// Revokes the active key given in full or by a prefix that names exactly one.
    fn revoke_key(&self, key_or_prefix: &str, now: i64) -> Result<()>;
    /// Revokes `account_id`'s active key with exactly this prefix; another
    /// account's key is as unknown as one that does not exist.
    fn revoke_key_of(&self, account_id: i64, prefix: &str, now: i64) -> Result<()>;
    /// The account behind an active key, or `None` for an unknown or revoked one.
    fn authenticate(&self, key: &ApiKey) -> Result<Option<Caller>>;
    /// Notes that the key came over plain HTTP at `now` (the keys pages
    /// show it, so that the operator finds the device that sends it so).
    /// Written at most once a minute a key: a booth sending in clear costs
    /// no write of its own on each call.
    fn key_came_in_clear(&self, key_id: i64, now: i64) -> Result<()>;
    /// Whether API keys are taken over plain HTTP where HTTPS is on (the
    /// operator's switch on the Status page; on until switched off).
    fn plain_http_api(&self) -> Result<bool>;
    fn set_plain_http_api(&self, on: bool, now: i64) -> Result<()>;
    fn usage(&self, account_id: i64, month: Month) -> Result<u32>;
    fn set_usage(&self, account: &str, month: Month, count: u32) -> Result<()>;
    fn is_empty(&self) -> Result<bool>;

    /// Takes one of `account`'s slots and, on a plan with a monthly limit,
    /// reserves one image of `month`: checked and taken at once, so with 3
    /// images left and 8 parallel calls exactly 3 get in, on one appliance
    /// or across all that share the store.
    fn admit(&self, account: &Account, month: Month) -> Result<std::result::Result<Slot, Refusal>>;
    /// Counts one image for the caller in `month` (with the key's last-used
    /// time) and frees the slot, in one transaction; returns the month's
    /// new count. On an error nothing stays counted: where the store cannot
    /// tell whether the count was written (its answer lost), it settles
    /// that once it can, and takes the count back.
    fn charge(&self, slot: Slot, caller: &Caller, month: Month, now: i64) -> Result<u32>;
    /// Takes back one image `charge` counted in `month`: its answer was
    /// never delivered.
    fn refund(&self, account_id: i64, month: Month) -> Result<()>;
    /// Requests of `account_id` in flight, on every appliance.
    fn in_flight(&self, account_id: i64) -> Result<u32>;

    /// Whether a charge could be written now.
    fn check_writable(&self) -> Result<()>;
    /// `check_writable`, then a real write: after a write has failed, a
    /// file system that went read-only on an error may still grant locks.
    fn probe_write(&self, now: i64) -> Result<()>;

    /// Makes a key for `account`; the clear key exists only in the return value.
    fn create_key(&self, account: &str, label: &str, now: i64) -> Result<ApiKey> {
        let account = self.account(account)?;
        self.create_key_for(account.id, label, now)
    }

    fn keys(&self, account: &str) -> Result<Vec<KeyRecord>> {
        let account = self.account(account)?;
        self.keys_of(account.id)
    }
}

/// Opens the configured store and brings its schema up to date.
pub fn open(settings: &StoreSettings, data_dir: &Path) -> Result<Arc<dyn Store>> {
    Ok(match &settings.url {
        None => Arc::new(SqliteStore::open(data_dir)?),
        Some(url) => Arc::new(PostgresStore::open(url, settings.password_file.as_deref())?),
    })
}

/// `plan` if it is one of `plans`, else the error that lists them.
fn check_plan(plans: Vec<Plan>, plan: &str) -> Result<()> {
    if plans.iter().any(|p| p.name == plan) {
        Ok(())
    } else {
        let names: Vec<_> = plans.into_iter().map(|p| p.name).collect();
        Err(StoreError::NoSuchPlan(plan.to_owned(), names.join(", ")))
    }
}
