//! Per-account admission: concurrency slots and monthly-quota reservations.
//!
//! A request that passes holds a `Permit`: one of its account's slots and,
//! on a plan with a monthly limit, one reserved image. The check and the
//! reservation happen under one lock, as do the charge and the release, so
//! with 3 images left and 8 parallel calls exactly 3 can succeed. Permits
//! live in memory only: a crash frees them, and the database count (the
//! charges that committed) is all that survives.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::store::Refusal;

#[derive(Default)]
struct Counters {
    in_flight: u32,
    reserved: u32,
}

#[derive(Default, Clone)]
pub struct Limiter {
    accounts: Arc<Mutex<HashMap<i64, Counters>>>,
}

pub struct Permit {
    limiter: Limiter,
    account: i64,
    reserved: bool,
}

impl Limiter {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Counters>> {
        self.accounts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a slot and, if `monthly_limit` is set, reserves one image.
    /// `used` reads the month's committed count; it runs under the lock so
    /// no charge can land between reading it and reserving.
    pub fn admit<E>(
        &self,
        account: i64,
        concurrency: u32,
        monthly_limit: Option<u32>,
        used: impl FnOnce() -> Result<u32, E>,
    ) -> Result<Result<Permit, Refusal>, E> {
        let mut accounts = self.lock();
        let counters = accounts.entry(account).or_default();
        if counters.in_flight >= concurrency {
            return Ok(Err(Refusal::TooManyConcurrent { limit: concurrency }));
        }
        if let Some(limit) = monthly_limit {
            if used()?.saturating_add(counters.reserved) >= limit {
                return Ok(Err(Refusal::QuotaExceeded { limit }));
            }
            counters.reserved += 1;
        }
        counters.in_flight += 1;
        Ok(Ok(Permit {
            limiter: self.clone(),
            account,
            reserved: monthly_limit.is_some(),
        }))
    }

    /// Requests in flight for `account`.
    pub fn in_flight(&self, account: i64) -> u32 {
        self.lock().get(&account).map_or(0, |c| c.in_flight)
    }
}

impl Permit {
    /// Runs `charge` (the database commit) and turns the reservation into
    /// the charge it stood for, under the admission lock.
    pub fn charge<T, E>(mut self, charge: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
        let mut accounts = self.limiter.lock();
        let result = charge();
        if result.is_ok() && self.reserved {
            if let Some(c) = accounts.get_mut(&self.account) {
                c.reserved -= 1;
            }
            self.reserved = false;
        }
        result
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut accounts = self.limiter.lock();
        if let Some(c) = accounts.get_mut(&self.account) {
            c.in_flight -= 1;
            c.reserved -= u32::from(self.reserved);
            if c.in_flight == 0 && c.reserved == 0 {
                accounts.remove(&self.account);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    fn admit(
        l: &Limiter,
        concurrency: u32,
        limit: Option<u32>,
        used: u32,
    ) -> Result<Permit, Refusal> {
        l.admit(1, concurrency, limit, || Ok::<_, Infallible>(used))
            .unwrap()
    }

    #[test]
    fn a_slot_is_refused_past_the_plan_and_freed_when_the_permit_drops() {
        let l = Limiter::default();
        let permits: Vec<_> = (0..5).map(|_| admit(&l, 5, None, 0).unwrap()).collect();
        assert_eq!(
            admit(&l, 5, None, 0).err(),
            Some(Refusal::TooManyConcurrent { limit: 5 })
        );
        drop(permits);
        assert_eq!(l.in_flight(1), 0);
        assert!(admit(&l, 5, None, 0).is_ok());
    }

    #[test]
    fn reservations_count_against_the_quota_until_charged_or_dropped() {
        let l = Limiter::default();
        let a = admit(&l, 10, Some(3), 1).unwrap();
        let b = admit(&l, 10, Some(3), 1).unwrap();
        assert_eq!(
            admit(&l, 10, Some(3), 1).err(),
            Some(Refusal::QuotaExceeded { limit: 3 })
        );
        drop(a); // failed: its reservation returns
        assert!(b.charge(|| Ok::<_, Infallible>(())).is_ok());
        // the charge is now in the database count (2 used), nothing reserved
        assert!(admit(&l, 10, Some(3), 2).is_ok());
        assert_eq!(
            admit(&l, 10, Some(3), 3).err(),
            Some(Refusal::QuotaExceeded { limit: 3 })
        );
    }

    #[test]
    fn a_failed_charge_keeps_the_reservation_until_the_permit_drops() {
        let l = Limiter::default();
        let p = admit(&l, 10, Some(1), 0).unwrap();
        assert!(p.charge(|| Err::<(), _>("disk full")).is_err());
        assert!(admit(&l, 10, Some(1), 0).is_ok());
    }
}
