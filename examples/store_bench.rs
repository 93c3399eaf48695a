//! The store's part of a call (admit, then charge) on SQLite and on a
//! PostgreSQL on loopback, side by side (`make bench-store`): the latency of
//! one cycle from one caller, p50 and p99, and the cycles a second of 50
//! callers spread over 3 appliances. PostgreSQL is a throw-away cluster
//! made here as the tests make theirs (tests/api/helpers/postgres.rs).

#[path = "../tests/api/helpers/postgres.rs"]
#[allow(dead_code)]
mod postgres_server;

use cutout::domain::{AccountName, Month};
use cutout::store::{PostgresStore, SqliteStore, Store};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const NOW: i64 = 1_773_576_000;
const LATENCY_CYCLES: usize = 2000;
const CALLERS: usize = 50;
const THROUGHPUT_FOR: Duration = Duration::from_secs(5);

/// The same setup on each backend: one Business account (50 slots) and its key.
fn account(store: &dyn Store) -> cutout::store::Caller {
    store
        .create_account(&AccountName::parse("booth").unwrap(), "business", NOW)
        .unwrap();
    let key = store.create_key("booth", "bench", NOW).unwrap();
    store.authenticate(&key).unwrap().unwrap()
}

fn cycle(store: &dyn Store, caller: &cutout::store::Caller) {
    let month = Month::of_unix(NOW);
    let slot = store
        .admit(&caller.account, month)
        .unwrap()
        .expect("a Business account has 50 slots");
    store.charge(slot, caller, month, NOW).unwrap();
}

/// p50 and p99 of one cycle, in ms.
fn latency(store: &dyn Store, caller: &cutout::store::Caller) -> (f64, f64) {
    for _ in 0..100 {
        cycle(store, caller);
    }
    let mut ms: Vec<f64> = (0..LATENCY_CYCLES)
        .map(|_| {
            let start = Instant::now();
            cycle(store, caller);
            start.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    (ms[ms.len() / 2], ms[ms.len() * 99 / 100])
}

/// Cycles a second of `CALLERS` threads, spread over `appliances`.
fn throughput(appliances: &[Arc<dyn Store>], caller: &cutout::store::Caller) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..CALLERS)
        .map(|i| {
            let store = appliances[i % appliances.len()].clone();
            let (caller, stop, done) = (caller.clone(), stop.clone(), done.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    cycle(store.as_ref(), &caller);
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let start = Instant::now();
    std::thread::sleep(THROUGHPUT_FOR);
    stop.store(true, Ordering::Relaxed);
    let counted = done.load(Ordering::Relaxed);
    let took = start.elapsed();
    for t in threads {
        t.join().unwrap();
    }
    counted as f64 / took.as_secs_f64()
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path()).unwrap());
    let sqlite_caller = account(sqlite.as_ref());
    let sqlite_latency = latency(sqlite.as_ref(), &sqlite_caller);
    let sqlite_rate = throughput(std::slice::from_ref(&sqlite), &sqlite_caller);

    let server = postgres_server::Postgres::start();
    let url = server.database_with_password();
    let fleet: Vec<Arc<dyn Store>> = (0..3)
        .map(|_| Arc::new(PostgresStore::open(&url, None).unwrap()) as Arc<dyn Store>)
        .collect();
    let pg_caller = account(fleet[0].as_ref());
    let pg_latency = latency(fleet[0].as_ref(), &pg_caller);
    let pg_rate = throughput(&fleet, &pg_caller);

    println!("| store | admit + charge p50 | p99 | cycles/s, {CALLERS} callers | over |");
    println!("|---|---|---|---|---|");
    println!(
        "| SQLite (one appliance) | {:.2} ms | {:.2} ms | {:.0} | 1 appliance |",
        sqlite_latency.0, sqlite_latency.1, sqlite_rate
    );
    println!(
        "| PostgreSQL on loopback | {:.2} ms | {:.2} ms | {:.0} | 3 appliances |",
        pg_latency.0, pg_latency.1, pg_rate
    );
    println!(
        "PostgreSQL / SQLite: p99 {:.2}x, throughput {:.2}x. Targets: p99 under 5 ms, at least 500 cycles/s.",
        pg_latency.1 / sqlite_latency.1,
        pg_rate / sqlite_rate
    );
}
