//! Login throttling. Every sign-in attempt is counted *before* its password
//! is checked, in the same locked step that decides whether it may go on,
//! so a burst of parallel guesses checks no more passwords than the limits
//! allow; a right password on an active account takes its count back, and
//! anything else (a wrong password, a suspended account) keeps it. Refused
//! attempts cost no password hashing, so a guessing client cannot keep the
//! CPU busy either. In memory: a restart forgets.
//!
//! Buckets, each over the last 15 minutes: one name from one address, one
//! address over all names, and one name over all addresses. A browser that
//! has signed in as a name before carries a device cookie for it (signed
//! with a key in the database) and is counted only in its own bucket, so a
//! stranger who exhausts a name's buckets does not lock out that browser.

use crate::domain::MAX_NAME_BYTES;
use crate::secrets::{constant_time_eq, hmac_sha256_hex, random_hex};
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;

const WINDOW_SECS: i64 = 15 * 60;
/// Guesses at one name from one address: a user's typos.
const PER_NAME_AND_ADDRESS: usize = 5;
/// Higher than per name: several people may share one address (a NAT).
const PER_ADDRESS: usize = 20;
/// Guesses at one name from all addresses together. Without it an attacker
/// with many addresses (an IPv6 host has 2^64 of them in its /64, and more
/// /64s are cheap) gets 5 guesses per address; with it, 30 per 15 minutes,
/// 2,880 a day. It is six addresses' worth, so a user's own typos from a
/// few places never reach it; once a stranger has used it up, only browsers
/// with a device cookie for the name (and the command line) get in.
const PER_NAME: usize = 30;
/// Guesses from one browser holding a device cookie for the name.
const PER_DEVICE: usize = 5;
/// Buckets kept at most. A bucket is a key of at most 64 + 17 bytes and at
/// most 30 timestamps, so the table stays under 5 MiB (the unit tests
/// measure it).
const MAX_BUCKETS: usize = 10_000;

/// The cookie that marks a browser as having signed in as a name before.
pub const DEVICE_COOKIE: &str = "cutout_device";
/// A year: the point is to outlast any lockout a stranger can cause.
pub const DEVICE_COOKIE_SECONDS: i64 = 365 * 86_400;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Bucket {
    NameAt(String, Option<IpAddr>),
    Address(Option<IpAddr>),
    Name(String),
    /// A device cookie's nonce.
    Device(String),
}

/// One sign-in attempt, as the throttle sees it.
pub struct Attempt<'a> {
    /// The name as typed, of any length.
    pub name: &'a str,
    pub address: Option<IpAddr>,
    /// The nonce of a valid device cookie for `name`, if the browser sent one.
    pub device: Option<&'a str>,
}

/// An attempt that was let through and counted. Dropping it leaves it
/// counted; `LoginThrottle::succeeded` takes it back.
#[must_use = "dropping a pending attempt counts it as failed"]
pub struct PendingAttempt {
    buckets: Vec<Bucket>,
    at: i64,
}

#[derive(Default)]
pub struct LoginThrottle {
    attempts: Mutex<HashMap<Bucket, VecDeque<i64>>>,
}

impl LoginThrottle {
    /// Counts `attempt` and lets it through, or `Err(seconds)` to wait when
    /// one of its buckets is full (and then counts nothing).
    pub fn begin(&self, attempt: &Attempt, now: i64) -> Result<PendingAttempt, i64> {
        let buckets = buckets(attempt);
        let mut table = self.attempts.lock().unwrap_or_else(|p| p.into_inner());
        let mut wait = 0;
        for (bucket, limit) in &buckets {
            if let Some(times) = table.get_mut(bucket) {
                while times.front().is_some_and(|&t| t + WINDOW_SECS <= now) {
                    times.pop_front();
                }
                // Never more than `limit` are kept, so the front is the
                // one that must age out first.
                if times.len() >= *limit {
                    wait = wait.max(times[0] + WINDOW_SECS - now);
                }
            }
        }
        if wait > 0 {
            return Err(wait);
        }
        make_room(&mut table, buckets.len(), now);
        for (bucket, limit) in &buckets {
            table
                .entry(bucket.clone())
                .or_insert_with(|| VecDeque::with_capacity(*limit))
                .push_back(now);
        }
        Ok(PendingAttempt {
            buckets: buckets.into_iter().map(|(b, _)| b).collect(),
            at: now,
        })
    }

    /// The right password for an active account: a real sign-in costs
    /// nothing, so a user's earlier typos stay counted but this does not.
    pub fn succeeded(&self, pending: PendingAttempt) {
        let mut table = self.attempts.lock().unwrap_or_else(|p| p.into_inner());
        for bucket in &pending.buckets {
            if let Some(times) = table.get_mut(bucket) {
                if let Some(i) = times.iter().rposition(|&t| t == pending.at) {
                    times.remove(i);
                }
                if times.is_empty() {
                    table.remove(bucket);
                }
            }
        }
    }

    /// What the table holds, in bytes, allocator overhead aside: the map's
    /// slots (one control byte each, at most 8 slots per 7 entries) and
    /// each bucket's name and timestamps.
    #[cfg(test)]
    fn bytes(&self) -> usize {
        let table = self.attempts.lock().unwrap();
        let slot = std::mem::size_of::<(Bucket, VecDeque<i64>)>() + 1;
        let heap = |bucket: &Bucket| match bucket {
            Bucket::NameAt(s, _) | Bucket::Name(s) | Bucket::Device(s) => s.capacity(),
            Bucket::Address(_) => 0,
        };
        (table.capacity() * 8 / 7 + 1) * slot
            + table
                .iter()
                .map(|(b, t)| heap(b) + t.capacity() * 8)
                .sum::<usize>()
    }
}

/// The buckets an attempt counts in, with their limits.
fn buckets(attempt: &Attempt) -> Vec<(Bucket, usize)> {
    if let Some(nonce) = attempt.device {
        return vec![(Bucket::Device(nonce.to_owned()), PER_DEVICE)];
    }
    let (name, network) = (key_name(attempt.name), network(attempt.address));
    let mut buckets = vec![
        (Bucket::NameAt(name.clone(), network), PER_NAME_AND_ADDRESS),
        (Bucket::Address(network), PER_ADDRESS),
    ];
    // The appliance itself (an SSH tunnel to it) is no stranger on the LAN:
    // the name-wide limit a LAN attacker can use up does not apply to it.
    if !network.is_some_and(|a| a.is_loopback()) {
        buckets.push((Bucket::Name(name), PER_NAME));
    }
    buckets
}

/// The name as a key: cut to the longest valid name, so a 64 KB name costs
/// no more than a real one, and lowercased, so `ADMIN` counts as `admin`.
fn key_name(name: &str) -> String {
    name[..name.floor_char_boundary(MAX_NAME_BYTES)].to_ascii_lowercase()
}

/// An IPv6 address counts by its /64, what one household or host is given,
/// so walking through its own subnet gains an attacker nothing.
fn network(address: Option<IpAddr>) -> Option<IpAddr> {
    address.map(|a| match a.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & (u128::MAX << 64)).into()),
        v4 => v4,
    })
}

/// Room for `new` more buckets: stale ones go first, then those with the
/// fewest attempts (a flood of made-up names has one each), so the buckets
/// of a name or address under attack are the last to go.
fn make_room(table: &mut HashMap<Bucket, VecDeque<i64>>, new: usize, now: i64) {
    if table.len() + new <= MAX_BUCKETS {
        return;
    }
    table.retain(|_, times| times.back().is_some_and(|&t| t + WINDOW_SECS > now));
    let mut fewest = 0;
    while table.len() + new > MAX_BUCKETS {
        fewest += 1;
        table.retain(|_, times| times.len() > fewest);
    }
}

/// A new device cookie's value for `name`: `name:nonce:mac`, the MAC an
/// HMAC-SHA-256 of `name:nonce` under the database's device key.
pub fn device_cookie(key: &str, name: &str) -> String {
    let signed = format!("{name}:{}", random_hex(16));
    let mac = hmac_sha256_hex(key.as_bytes(), &signed);
    format!("{signed}:{mac}")
}

/// The nonce of `cookie` if it is a device cookie made for `name`.
pub fn device_nonce<'c>(key: &str, cookie: &'c str, name: &str) -> Option<&'c str> {
    let (signed, mac) = cookie.rsplit_once(':')?;
    let (signed_name, nonce) = signed.split_once(':')?;
    let genuine = constant_time_eq(mac, &hmac_sha256_hex(key.as_bytes(), signed));
    (genuine && signed_name == name).then_some(nonce)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(last: u8) -> Option<IpAddr> {
        Some(IpAddr::from([192, 168, 1, last]))
    }

    /// An address in the `n`th /64 of 2001:db8::/32.
    fn v6(n: u16, host: u16) -> Option<IpAddr> {
        Some(IpAddr::from([0x2001, 0xdb8, 0, n, 0, 0, 0, host]))
    }

    fn attempt(name: &str, address: Option<IpAddr>) -> Attempt<'_> {
        Attempt {
            name,
            address,
            device: None,
        }
    }

    /// `n` attempts that fail (each dropped pending); panics if one is refused.
    fn fail(t: &LoginThrottle, a: &Attempt, now: i64, n: usize) {
        for _ in 0..n {
            drop(t.begin(a, now).expect("let through"));
        }
    }

    /// 30 attempts at `admin`, 5 from each of six /64s, at time 100.
    fn use_up_admin_from_six_networks(t: &LoginThrottle) {
        for n in 0..6 {
            fail(t, &attempt("admin", v6(n, 1)), 100, 5);
        }
    }

    #[test]
    fn a_name_from_one_address_is_locked_after_five_until_the_first_is_fifteen_minutes_old() {
        let t = LoginThrottle::default();
        for i in 0..5 {
            fail(&t, &attempt("Ann", v4(1)), 1000 + i, 1);
        }
        assert_eq!(t.begin(&attempt("ANN", v4(1)), 1010).err(), Some(900 - 10));
        assert!(t.begin(&attempt("ann", v4(2)), 1010).is_ok(), "elsewhere");
        assert!(t.begin(&attempt("bob", v4(1)), 1010).is_ok());
        assert!(
            t.begin(&attempt("ann", v4(1)), 1900).is_ok(),
            "the first aged out"
        );
        assert!(t.begin(&attempt("ann", v4(1)), 1900).is_err());
    }

    #[test]
    fn an_address_is_locked_after_twenty_attempts_across_names() {
        let t = LoginThrottle::default();
        for i in 0..20 {
            fail(&t, &attempt(&format!("user{i}"), v4(1)), 5000, 1);
        }
        assert!(t.begin(&attempt("someone-else", v4(1)), 5001).is_err());
        assert!(t.begin(&attempt("someone-else", v4(2)), 5001).is_ok());
    }

    #[test]
    fn a_name_is_locked_after_thirty_attempts_from_anywhere() {
        let t = LoginThrottle::default();
        use_up_admin_from_six_networks(&t);
        assert!(t.begin(&attempt("admin", v6(99, 1)), 101).is_err());
        assert!(t.begin(&attempt("admin", v4(1)), 101).is_err());
        assert!(t.begin(&attempt("booth", v6(99, 1)), 101).is_ok());
    }

    #[test]
    fn a_name_used_up_on_the_lan_still_signs_in_from_the_appliance_itself() {
        let t = LoginThrottle::default();
        use_up_admin_from_six_networks(&t);
        let local = Some(IpAddr::from([127, 0, 0, 1]));
        assert!(t.begin(&attempt("admin", local), 101).is_ok());
        fail(&t, &attempt("admin", local), 101, 4);
        assert!(
            t.begin(&attempt("admin", local), 101).is_err(),
            "still 5 per address"
        );
    }

    #[test]
    fn ipv6_counts_by_its_64_and_mapped_ipv4_as_ipv4() {
        let t = LoginThrottle::default();
        for host in 0..5 {
            fail(&t, &attempt("ann", v6(7, host)), 100, 1);
        }
        assert!(t.begin(&attempt("ann", v6(7, 0xffff)), 100).is_err());
        assert!(t.begin(&attempt("ann", v6(8, 0)), 100).is_ok());

        fail(&t, &attempt("bob", v4(3)), 100, 5);
        let mapped = "::ffff:192.168.1.3".parse().ok();
        assert!(t.begin(&attempt("bob", mapped), 100).is_err());
    }

    #[test]
    fn a_success_takes_back_only_its_own_attempt() {
        let t = LoginThrottle::default();
        fail(&t, &attempt("ann", v4(1)), 10, 4);
        let right = t.begin(&attempt("ann", v4(1)), 11).unwrap();
        t.succeeded(right);
        fail(&t, &attempt("ann", v4(1)), 12, 1);
        assert!(
            t.begin(&attempt("ann", v4(1)), 13).is_err(),
            "the four typos still count"
        );
    }

    #[test]
    fn parallel_attempts_are_let_through_no_more_than_the_limit() {
        let t = LoginThrottle::default();
        let through = std::thread::scope(|s| {
            let threads: Vec<_> = (0..150)
                .map(|_| s.spawn(|| t.begin(&attempt("admin", v4(1)), 50).is_ok()))
                .collect();
            threads
                .into_iter()
                .map(|h| h.join().unwrap())
                .filter(|&through| through)
                .count()
        });
        assert_eq!(through, 5);
    }

    #[test]
    fn a_device_cookie_holder_counts_only_in_its_own_bucket() {
        let t = LoginThrottle::default();
        use_up_admin_from_six_networks(&t);
        let operator = |nonce| Attempt {
            name: "admin",
            address: v6(0, 1),
            device: Some(nonce),
        };
        fail(&t, &operator("n1"), 101, 5);
        assert_eq!(t.begin(&operator("n1"), 102).err(), Some(900 - 1));
        assert!(t.begin(&operator("n2"), 102).is_ok(), "another device");
        assert!(t.begin(&attempt("admin", v6(50, 1)), 102).is_err());
    }

    #[test]
    fn long_names_cost_no_more_than_the_longest_valid_name() {
        let t = LoginThrottle::default();
        for address in 0..50 {
            for i in 0..20 {
                let name = format!("{address:02}{i:02}{}", "x".repeat(64 * 1024));
                fail(&t, &attempt(&name, v4(address)), 100, 1);
            }
        }
        // 1,000 attempts, all let through: 2,050 buckets, none holding more
        // than 64 bytes of name (the old table kept 64 MB of names).
        let bytes = t.bytes();
        assert!(bytes < 1024 * 1024, "{bytes} bytes");
        assert!(t.begin(&attempt("0000", v4(0)), 100).is_err());
    }

    #[test]
    fn a_flood_of_names_stays_within_bounds_and_keeps_a_name_under_attack_locked() {
        let t = LoginThrottle::default();
        use_up_admin_from_six_networks(&t);
        for i in 0..100_000u32 {
            let name = format!("{i}{}", "y".repeat(100));
            let address = v6(1000 + (i / 5) as u16, 1);
            fail(&t, &attempt(&name, address), 100 + i64::from(i / 1000), 1);
        }
        assert!(t.attempts.lock().unwrap().len() <= MAX_BUCKETS);
        let bytes = t.bytes();
        assert!(bytes < 5 * 1024 * 1024, "{bytes} bytes");
        assert!(t.begin(&attempt("admin", v4(1)), 300).is_err());
    }

    #[test]
    fn a_device_cookie_is_valid_only_for_its_name_under_its_key() {
        let cookie = device_cookie("key one", "admin");
        let nonce = device_nonce("key one", &cookie, "admin").expect("valid");
        assert_eq!(nonce.len(), 32);
        assert_ne!(
            cookie,
            device_cookie("key one", "admin"),
            "a new nonce each"
        );
        assert_eq!(device_nonce("key one", &cookie, "booth"), None);
        assert_eq!(device_nonce("key two", &cookie, "admin"), None);
        let forged = cookie.replacen("admin", "booth", 1);
        assert_eq!(device_nonce("key one", &forged, "booth"), None);
        for junk in ["", "admin", "admin:nonce", "admin::"] {
            assert_eq!(device_nonce("key one", junk, "admin"), None, "{junk}");
        }
    }
}
