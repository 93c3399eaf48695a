//! Wall-clock time, injectable so tests can cross a month boundary.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Clone, Default)]
pub struct Clock(Option<Arc<AtomicI64>>);

impl Clock {
    /// A clock fixed at `unix_secs` that the holder of the returned handle can move.
    pub fn manual(unix_secs: i64) -> (Clock, Arc<AtomicI64>) {
        let now = Arc::new(AtomicI64::new(unix_secs));
        (Clock(Some(now.clone())), now)
    }

    pub fn now_unix(&self) -> i64 {
        match &self.0 {
            Some(now) => now.load(Ordering::SeqCst),
            None => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64),
        }
    }
}
