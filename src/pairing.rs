//! Booths asking to pair: a booth with no key sends its name and a nonce
//! over HTTPS, the operator approves it (on the dashboard, or by the
//! button) and the booth collects its own API key by polling with the
//! secret id it was given. Held in memory, bounded: pending requests
//! expire, and each address may ask only a few times a minute.
//!
//! The code both sides show is derived from the certificate and the
//! request: the booth computes it from the certificate it saw, the
//! dashboard from the appliance's own. Something in between with another
//! certificate gives the booth another code, and it had to pick that
//! certificate before it saw the booth's nonce.

use crate::domain::{ApiKey, KeyLabel};
use crate::secrets::{random_hex, random_token, sha256_hex};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Mutex, MutexGuard};

/// Pending requests at once, from every address together.
pub const MAX_PENDING: usize = 16;
/// Requests one address may make in a minute.
pub const ASKS_PER_MINUTE: usize = 6;
/// Addresses whose recent requests are remembered; past this the oldest
/// is forgotten, so that many addresses cannot fill memory.
const REMEMBERED_ADDRESSES: usize = 1024;
/// How long after its request a booth may be approved by the button.
pub const BUTTON_SECONDS: i64 = 60;

/// A request as the dashboard lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingView {
    /// Names the request in the dashboard's forms; not the booth's secret.
    pub handle: String,
    pub name: String,
    pub address: IpAddr,
    pub code: String,
    pub asked: i64,
}

/// What a booth's poll finds.
#[derive(Debug, PartialEq)]
pub enum Poll {
    Pending {
        expires_in: i64,
    },
    Approved {
        key: ApiKey,
        account: String,
    },
    Refused,
    /// Never asked, expired, or already collected.
    Unknown,
}

#[derive(Debug, PartialEq)]
pub enum AskError {
    /// The name or the nonce is not what a booth sends.
    Invalid(&'static str),
    /// This address asked too often, or too many requests are pending.
    TooMany { retry_after: i64 },
}

#[derive(Debug)]
enum Answer {
    Waiting,
    Approved { key: ApiKey, account: String },
    Refused,
}

#[derive(Debug)]
struct Request {
    view: PendingView,
    answer: Answer,
}

#[derive(Default)]
struct Inner {
    /// By the SHA-256 of the booth's secret id.
    requests: HashMap<String, Request>,
    /// Each address's requests in the last minute, oldest first.
    asks: HashMap<IpAddr, VecDeque<i64>>,
}

pub struct Pairings {
    inner: Mutex<Inner>,
    expire_seconds: i64,
}

/// The six digits both sides show, as `"042 917"`: from the SHA-256 of the
/// certificate (DER), the booth's nonce and its name.
pub fn code(certificate_sha256: &[u8], nonce: &str, name: &str) -> String {
    let digest = Sha256::new()
        .chain_update(b"cutout-pair\0")
        .chain_update(certificate_sha256)
        .chain_update(b"\0")
        .chain_update(nonce)
        .chain_update(b"\0")
        .chain_update(name)
        .finalize();
    let n = u32::from_be_bytes(digest[..4].try_into().expect("4 bytes")) % 1_000_000;
    format!("{:03} {:03}", n / 1000, n % 1000)
}

impl Pairings {
    pub fn new(expire_seconds: i64) -> Pairings {
        Pairings {
            inner: Mutex::new(Inner::default()),
            expire_seconds,
        }
    }

    pub fn expire_seconds(&self) -> i64 {
        self.expire_seconds
    }

    fn lock(&self, now: i64) -> MutexGuard<'_, Inner> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let expire = self.expire_seconds;
        inner.requests.retain(|_, r| now - r.view.asked < expire);
        inner.asks.retain(|_, times| {
            while times.front().is_some_and(|&t| now - t >= 60) {
                times.pop_front();
            }
            !times.is_empty()
        });
        inner
    }

    /// Records a booth's request; returns the secret id it polls with.
    /// `certificate_sha256` is the appliance's own certificate's.
    pub fn ask(
        &self,
        name: &str,
        nonce: &str,
        address: IpAddr,
        certificate_sha256: &[u8],
        now: i64,
    ) -> Result<String, AskError> {
        // The name becomes the key's label.
        let Some(label) = KeyLabel::parse(name).filter(|n| !n.as_str().is_empty()) else {
            return Err(AskError::Invalid("name: 1 to 64 characters on one line"));
        };
        let name = label.as_str();
        let nonce_ok = (16..=128).contains(&nonce.len())
            && nonce
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !nonce_ok {
            return Err(AskError::Invalid(
                "nonce: 16 to 128 letters, digits, - or _",
            ));
        }
        let mut inner = self.lock(now);
        let recent = inner.asks.get(&address).map_or(0, VecDeque::len);
        if recent >= ASKS_PER_MINUTE {
            let oldest = inner.asks[&address][0];
            return Err(AskError::TooMany {
                retry_after: 60 - (now - oldest),
            });
        }
        // A booth that asks again (it restarted) replaces its own request.
        inner
            .requests
            .retain(|_, r| !(r.view.address == address && matches!(r.answer, Answer::Waiting)));
        if inner.requests.len() >= MAX_PENDING {
            let oldest = inner
                .requests
                .values()
                .map(|r| r.view.asked)
                .min()
                .unwrap_or(now);
            return Err(AskError::TooMany {
                retry_after: (self.expire_seconds - (now - oldest)).max(1),
            });
        }
        if !inner.asks.contains_key(&address) && inner.asks.len() >= REMEMBERED_ADDRESSES {
            let stalest = inner
                .asks
                .iter()
                .min_by_key(|(_, times)| times.back().copied())
                .map(|(a, _)| *a);
            if let Some(stalest) = stalest {
                inner.asks.remove(&stalest);
            }
        }
        inner.asks.entry(address).or_default().push_back(now);
        let id = random_token();
        let view = PendingView {
            handle: random_hex(8),
            name: name.to_owned(),
            address,
            code: code(certificate_sha256, nonce, name),
            asked: now,
        };
        log::info!(
            "booth {name:?} at {address} asks to pair; code {}",
            view.code
        );
        inner.requests.insert(
            sha256_hex(&id),
            Request {
                view,
                answer: Answer::Waiting,
            },
        );
        Ok(id)
    }

    /// What the booth holding `id` gets now. An approved request's key is
    /// handed out once.
    pub fn poll(&self, id: &str, now: i64) -> Poll {
        let mut inner = self.lock(now);
        let hash = sha256_hex(id);
        let Some(request) = inner.requests.get(&hash) else {
            return Poll::Unknown;
        };
        match request.answer {
            Answer::Waiting => Poll::Pending {
                expires_in: self.expire_seconds - (now - request.view.asked),
            },
            Answer::Refused => Poll::Refused,
            Answer::Approved { .. } => match inner.requests.remove(&hash) {
                Some(Request {
                    answer: Answer::Approved { key, account },
                    ..
                }) => Poll::Approved { key, account },
                _ => unreachable!("matched as approved above"),
            },
        }
    }

    /// The requests still waiting for an answer, oldest first.
    pub fn waiting(&self, now: i64) -> Vec<PendingView> {
        let inner = self.lock(now);
        let mut views: Vec<_> = inner
            .requests
            .values()
            .filter(|r| matches!(r.answer, Answer::Waiting))
            .map(|r| r.view.clone())
            .collect();
        views.sort_by_key(|v| (v.asked, v.handle.clone()));
        views
    }

    /// The one request a press of the button approves: the only one made
    /// in the last minute and still waiting.
    pub fn for_the_button(&self, now: i64) -> Result<PendingView, usize> {
        let recent: Vec<_> = self
            .waiting(now)
            .into_iter()
            .filter(|v| now - v.asked < BUTTON_SECONDS)
            .collect();
        match <[PendingView; 1]>::try_from(recent) {
            Ok([one]) => Ok(one),
            Err(recent) => Err(recent.len()),
        }
    }

    /// Approves the waiting request `handle` with the key `issue` makes
    /// (under the lock, so that it is issued at most once). `Ok(None)`: no
    /// such request is waiting, and nothing was issued.
    pub fn approve<E>(
        &self,
        handle: &str,
        now: i64,
        issue: impl FnOnce(&PendingView) -> Result<(ApiKey, String), E>,
    ) -> Result<Option<PendingView>, E> {
        let mut inner = self.lock(now);
        let Some(request) = inner
            .requests
            .values_mut()
            .find(|r| r.view.handle == handle && matches!(r.answer, Answer::Waiting))
        else {
            return Ok(None);
        };
        let (key, account) = issue(&request.view)?;
        request.answer = Answer::Approved { key, account };
        Ok(Some(request.view.clone()))
    }

    /// Refuses the waiting request `handle`; whether there was one.
    pub fn refuse(&self, handle: &str, now: i64) -> bool {
        let mut inner = self.lock(now);
        match inner
            .requests
            .values_mut()
            .find(|r| r.view.handle == handle && matches!(r.answer, Answer::Waiting))
        {
            Some(request) => {
                request.answer = Answer::Refused;
                log::info!("pairing of booth {:?} refused", request.view.name);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const CERT: [u8; 32] = [7; 32];
    const NONCE: &str = "0123456789abcdef0123456789abcdef";

    fn booth(n: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(192, 168, 1, n))
    }

    #[test]
    fn the_code_is_six_digits_from_the_certificate_the_nonce_and_the_name() {
        let code = code(&CERT, NONCE, "Booth 1");
        assert!(code.len() == 7 && code.as_bytes()[3] == b' ', "{code}");
        assert_eq!(code, super::code(&CERT, NONCE, "Booth 1"));
        assert_ne!(code, super::code(&[8; 32], NONCE, "Booth 1"));
        assert_ne!(
            code,
            super::code(&CERT, "fedcba9876543210fedcba9876543210", "Booth 1")
        );
        assert_ne!(code, super::code(&CERT, NONCE, "Booth 2"));
    }

    #[test]
    fn an_approved_booth_collects_its_key_once() {
        let pairings = Pairings::new(120);
        let id = pairings.ask("Booth", NONCE, booth(1), &CERT, 1000).unwrap();
        assert_eq!(pairings.poll(&id, 1001), Poll::Pending { expires_in: 119 });
        assert_eq!(pairings.poll("not-the-id", 1001), Poll::Unknown);
        let [waiting] = <[_; 1]>::try_from(pairings.waiting(1002)).unwrap();
        assert_eq!(waiting.code, code(&CERT, NONCE, "Booth"));
        let key = ApiKey::generate();
        let issued = key.clone();
        let approved = pairings
            .approve(&waiting.handle, 1003, |_| {
                Ok::<_, ()>((issued, "acme".into()))
            })
            .unwrap();
        assert!(approved.is_some());
        // A second approval issues nothing.
        let again = pairings.approve(&waiting.handle, 1003, |_| -> Result<_, ()> {
            panic!("issued twice")
        });
        assert_eq!(again, Ok(None));
        assert_eq!(
            pairings.poll(&id, 1004),
            Poll::Approved {
                key,
                account: "acme".into()
            }
        );
        assert_eq!(pairings.poll(&id, 1005), Poll::Unknown);
    }

    #[test]
    fn refused_and_expired_requests_get_nothing() {
        let pairings = Pairings::new(120);
        let refused = pairings.ask("A", NONCE, booth(1), &CERT, 1000).unwrap();
        let expired = pairings.ask("B", NONCE, booth(2), &CERT, 1000).unwrap();
        let handle = pairings
            .waiting(1000)
            .into_iter()
            .find(|w| w.name == "A")
            .unwrap()
            .handle;
        assert!(pairings.refuse(&handle, 1001));
        assert_eq!(pairings.poll(&refused, 1002), Poll::Refused);
        assert_eq!(
            pairings.poll(&expired, 1119),
            Poll::Pending { expires_in: 1 }
        );
        assert_eq!(pairings.poll(&expired, 1120), Poll::Unknown);
        assert_eq!(pairings.poll(&refused, 1120), Poll::Unknown);
        assert!(pairings.waiting(1120).is_empty());
    }

    #[test]
    fn the_button_approves_only_the_one_recent_request() {
        let pairings = Pairings::new(120);
        assert_eq!(pairings.for_the_button(1000), Err(0));
        pairings.ask("A", NONCE, booth(1), &CERT, 1000).unwrap();
        assert_eq!(pairings.for_the_button(1059).unwrap().name, "A");
        assert_eq!(pairings.for_the_button(1060), Err(0), "a minute has passed");
        pairings.ask("B", NONCE, booth(2), &CERT, 1061).unwrap();
        pairings.ask("C", NONCE, booth(3), &CERT, 1062).unwrap();
        assert_eq!(
            pairings.for_the_button(1062),
            Err(2),
            "two booths: which one?"
        );
    }

    #[test]
    fn requests_are_bounded_per_address_and_in_all() {
        let pairings = Pairings::new(120);
        for second in 0..ASKS_PER_MINUTE as i64 {
            pairings
                .ask("A", NONCE, booth(1), &CERT, 1000 + second)
                .unwrap();
        }
        assert_eq!(
            pairings.waiting(1010).len(),
            1,
            "a booth's new request replaces its last"
        );
        assert_eq!(
            pairings.ask("A", NONCE, booth(1), &CERT, 1010),
            Err(AskError::TooMany { retry_after: 50 })
        );
        assert!(pairings.ask("A", NONCE, booth(1), &CERT, 1060).is_ok());
        for n in 2..=MAX_PENDING as u8 {
            pairings.ask("B", NONCE, booth(n), &CERT, 1061).unwrap();
        }
        assert!(matches!(
            pairings.ask("C", NONCE, booth(200), &CERT, 1062),
            Err(AskError::TooMany { .. })
        ));
        assert!(
            pairings
                .ask("C", NONCE, booth(200), &CERT, 1060 + 120)
                .is_ok(),
            "expired ones make room"
        );
        for _ in 0..3 * REMEMBERED_ADDRESSES {
            let address = IpAddr::V6(std::net::Ipv6Addr::from(rand_u128()));
            let _ = pairings.ask("D", NONCE, address, &CERT, 2000);
        }
        assert!(pairings.lock(2000).asks.len() <= REMEMBERED_ADDRESSES);
        assert!(pairings.lock(2000).requests.len() <= MAX_PENDING);
    }

    fn rand_u128() -> u128 {
        u128::from_str_radix(&random_hex(16), 16).unwrap()
    }

    #[test]
    fn names_and_nonces_are_checked() {
        let pairings = Pairings::new(120);
        for (name, nonce) in [
            ("", NONCE),
            (&"x".repeat(65), NONCE),
            ("tab\there", NONCE),
            ("Booth", "short"),
            ("Booth", "0123456789abcdef0123456789abcde!"),
        ] {
            assert!(
                matches!(
                    pairings.ask(name, nonce, booth(1), &CERT, 1000),
                    Err(AskError::Invalid(_))
                ),
                "{name:?} {nonce:?}"
            );
        }
        assert!(pairings.waiting(1000).is_empty());
    }
}
