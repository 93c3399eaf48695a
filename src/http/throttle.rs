//! Login throttling: after repeated failed sign-ins for one name, or from
//! one address, further attempts are refused until the oldest failure is
//! 15 minutes old. Refused attempts cost no password hashing, so a guessing
//! client cannot keep the CPU busy either. In memory: a restart forgets.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;

const WINDOW_SECS: i64 = 15 * 60;
const PER_NAME: usize = 5;
/// Higher than per name: several people may share one address (a NAT).
const PER_ADDRESS: usize = 20;
/// Beyond this many tracked names and addresses, stale ones are dropped
/// first and then names, so a flood of made-up names cannot grow memory.
const MAX_TRACKED: usize = 10_000;

#[derive(Default)]
pub struct LoginThrottle {
    failures: Mutex<HashMap<String, VecDeque<i64>>>,
}

impl LoginThrottle {
    fn keys(name: &str, address: Option<IpAddr>) -> [(String, usize); 2] {
        [
            (format!("name:{}", name.to_lowercase()), PER_NAME),
            (
                format!("address:{}", address.map_or("-".into(), |a| a.to_string())),
                PER_ADDRESS,
            ),
        ]
    }

    /// `Err(seconds)` to wait when this name or address is locked out.
    pub fn check(&self, name: &str, address: Option<IpAddr>, now: i64) -> Result<(), i64> {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let mut wait = 0;
        for (key, limit) in Self::keys(name, address) {
            if let Some(times) = failures.get_mut(&key) {
                while times.front().is_some_and(|&t| t + WINDOW_SECS <= now) {
                    times.pop_front();
                }
                if times.len() >= limit {
                    wait = wait.max(times[times.len() - limit] + WINDOW_SECS - now);
                }
            }
        }
        if wait > 0 {
            Err(wait)
        } else {
            Ok(())
        }
    }

    pub fn failed(&self, name: &str, address: Option<IpAddr>, now: i64) {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        if failures.len() >= MAX_TRACKED {
            failures.retain(|_, times| times.back().is_some_and(|&t| t + WINDOW_SECS > now));
            if failures.len() >= MAX_TRACKED {
                failures.retain(|key, _| key.starts_with("address:"));
            }
        }
        for (key, _) in Self::keys(name, address) {
            failures.entry(key).or_default().push_back(now);
        }
    }

    /// A successful sign-in clears the name's failures (not the address's).
    pub fn succeeded(&self, name: &str) {
        let [(key, _), _] = Self::keys(name, None);
        self.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> Option<IpAddr> {
        Some(IpAddr::from([192, 168, 1, last]))
    }

    #[test]
    fn a_name_is_locked_after_five_failures_until_the_first_is_fifteen_minutes_old() {
        let t = LoginThrottle::default();
        for i in 0..5 {
            assert_eq!(t.check("Ann", ip(i), 1000 + i64::from(i)), Ok(()));
            t.failed("Ann", ip(i), 1000 + i64::from(i));
        }
        assert_eq!(t.check("ann", ip(9), 1010), Err(900 - 10));
        assert_eq!(t.check("bob", ip(9), 1010), Ok(()));
        assert_eq!(
            t.check("ann", ip(9), 1900),
            Ok(()),
            "the first failure aged out"
        );
    }

    #[test]
    fn an_address_is_locked_after_twenty_failures_across_names() {
        let t = LoginThrottle::default();
        for i in 0..20 {
            t.failed(&format!("user{i}"), ip(1), 5000);
        }
        assert!(t.check("someone-else", ip(1), 5001).is_err());
        assert_eq!(t.check("someone-else", ip(2), 5001), Ok(()));
    }

    #[test]
    fn success_clears_the_names_failures() {
        let t = LoginThrottle::default();
        for _ in 0..4 {
            t.failed("ann", ip(1), 10);
        }
        t.succeeded("ann");
        t.failed("ann", ip(1), 11);
        assert_eq!(t.check("ann", ip(2), 12), Ok(()));
    }
}
