//! The last Try it result of each session, kept in memory so the result
//! page can be reloaded without sending (and paying for) the photo again.
//! Bounded in bytes: the oldest results go first.

use std::collections::HashMap;
use std::sync::Mutex;

/// What the results of all sessions may hold together; a single larger
/// result is still kept, alone.
const MAX_BYTES: usize = 96 << 20;
/// A result older than this is gone.
const MAX_AGE_SECS: i64 = 30 * 60;

pub struct TryResult {
    pub serial: u64,
    pub original: Vec<u8>,
    pub original_type: &'static str,
    /// The cut-out's file and its media type.
    pub result: Vec<u8>,
    pub result_type: &'static str,
    pub width: u32,
    pub height: u32,
    pub at: i64,
}

impl TryResult {
    fn bytes(&self) -> usize {
        self.original.len() + self.result.len()
    }
}

#[derive(Default)]
pub struct Tries {
    inner: Mutex<(u64, HashMap<String, TryResult>)>,
}

impl Tries {
    /// Keeps `result` as `session`'s latest; returns its serial number.
    pub fn put(&self, session: &str, mut result: TryResult) -> u64 {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.0 += 1;
        result.serial = inner.0;
        let (now, serial) = (result.at, result.serial);
        let results = &mut inner.1;
        results.insert(session.to_owned(), result);
        results.retain(|_, r| r.at + MAX_AGE_SECS > now);
        while results.values().map(TryResult::bytes).sum::<usize>() > MAX_BYTES && results.len() > 1
        {
            let oldest = results
                .iter()
                .min_by_key(|(_, r)| r.serial)
                .map(|(k, _)| k.clone())
                .expect("more than one result");
            results.remove(&oldest);
        }
        serial
    }

    /// Runs `f` on `session`'s latest result, if it is still kept.
    pub fn with<T>(&self, session: &str, now: i64, f: impl FnOnce(&TryResult) -> T) -> Option<T> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner
            .1
            .get(session)
            .filter(|r| r.at + MAX_AGE_SECS > now)
            .map(f)
    }

    pub fn forget(&self, session: &str) {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .remove(session);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(bytes: usize, at: i64) -> TryResult {
        TryResult {
            serial: 0,
            original: vec![0; bytes],
            original_type: "image/png",
            result: vec![],
            result_type: "image/png",
            width: 1,
            height: 1,
            at,
        }
    }

    #[test]
    fn keeps_each_sessions_latest_until_it_is_half_an_hour_old() {
        let tries = Tries::default();
        tries.put("a", result(1, 100));
        let second = tries.put("a", result(2, 200));
        assert_eq!(
            tries.with("a", 300, |r| (r.serial, r.original.len())),
            Some((second, 2))
        );
        assert_eq!(tries.with("b", 300, |_| ()), None);
        assert_eq!(tries.with("a", 200 + MAX_AGE_SECS, |_| ()), None);
    }

    #[test]
    fn the_oldest_results_go_when_the_total_passes_the_cap() {
        let tries = Tries::default();
        tries.put("a", result(MAX_BYTES / 2, 0));
        tries.put("b", result(MAX_BYTES / 2, 1));
        tries.put("c", result(MAX_BYTES / 2, 2));
        assert!(tries.with("a", 3, |_| ()).is_none());
        assert!(tries.with("b", 3, |_| ()).is_some());
        tries.put("d", result(MAX_BYTES * 2, 4));
        assert!(tries.with("d", 5, |_| ()).is_some(), "kept alone");
        assert!(tries.with("c", 5, |_| ()).is_none());
    }
}
