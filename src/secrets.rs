//! Everything secret in one place: random tokens, their SHA-256 for
//! storage, HMAC-SHA-256, constant-time comparison, and argon2id password
//! hashes.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use sha2::{Digest, Sha256};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// One argon2 computation at a time: each takes 19 MiB, and a burst of
/// sign-ins on every HTTP worker at once would otherwise need well over a
/// gigabyte, more than a small board has. Waiting costs a sign-in a few
/// tens of milliseconds per request ahead of it.
fn hashing_turn() -> MutexGuard<'static, ()> {
    static HASHING: Mutex<()> = Mutex::new(());
    HASHING.lock().unwrap_or_else(|p| p.into_inner())
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `bytes` bytes from the OS RNG, as hex.
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).expect("the OS random number generator failed");
    hex(&buf)
}

/// A session, CSRF or setup token: 256 bits.
pub fn random_token() -> String {
    random_hex(32)
}

pub fn sha256_hex(s: &str) -> String {
    hex(&Sha256::digest(s.as_bytes()))
}

/// HMAC-SHA-256 (RFC 2104) of `message` under `key`, as hex: a dozen lines
/// here rather than one more crate.
pub fn hmac_sha256_hex(key: &[u8], message: &str) -> String {
    let mut block = [0u8; 64];
    if key.len() > block.len() {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let padded = |pad: u8| block.map(|b| b ^ pad);
    let inner = Sha256::new()
        .chain_update(padded(0x36))
        .chain_update(message)
        .finalize();
    hex(&Sha256::new()
        .chain_update(padded(0x5c))
        .chain_update(inner)
        .finalize())
}

/// Equal without an early exit, so the time taken says nothing about where
/// two secrets differ.
pub fn constant_time_eq(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// Passwords are 8 to 256 characters; nothing else is asked of them.
pub fn check_password_policy(password: &str) -> Result<(), &'static str> {
    match password.chars().count() {
        0..=7 => Err("Use at least 8 characters."),
        8..=256 => Ok(()),
        _ => Err("Use at most 256 characters."),
    }
}

/// An argon2id hash (PHC string) with the crate's defaults: 19 MiB, 2
/// passes, 1 lane, the OWASP minimum that a Pi still computes in well under
/// a second.
pub fn hash_password(password: &str) -> String {
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt).expect("the OS random number generator failed");
    let salt = SaltString::encode_b64(&salt).expect("16 bytes is a valid salt");
    let _turn = hashing_turn();
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .expect("argon2 with default parameters cannot fail")
        .to_string()
}

/// Checks `password` against `hash`. With no hash (an unknown user) it
/// still spends the time of one verification, so a failed login takes as
/// long whether or not the name exists.
pub fn verify_password(password: &str, hash: Option<&str>) -> bool {
    static DUMMY: OnceLock<String> = OnceLock::new();
    let known = hash.is_some();
    let hash = hash.unwrap_or_else(|| DUMMY.get_or_init(|| hash_password("not a password")));
    let Ok(parsed) = PasswordHash::new(hash) else {
        return false;
    };
    let _turn = hashing_turn();
    Argon2::default()
        .verify_password(password.as_bytes(), &parsed)
        .is_ok()
        && known
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_verifies_against_its_own_argon2id_hash_only() {
        let hash = hash_password("correct horse");
        assert!(hash.starts_with("$argon2id$"));
        assert!(verify_password("correct horse", Some(&hash)));
        assert!(!verify_password("correct horsf", Some(&hash)));
        assert!(!verify_password("correct horse", None));
        assert!(!verify_password("x", Some("not a phc string")));
        assert_ne!(hash, hash_password("correct horse"), "salted");
    }

    #[test]
    fn hmac_matches_rfc_4231() {
        // Test cases 2 (a short key) and 6 (a key longer than a block).
        assert_eq!(
            hmac_sha256_hex(b"Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            hmac_sha256_hex(
                &[0xaa; 131],
                "Test Using Larger Than Block-Size Key - Hash Key First"
            ),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn constant_time_eq_is_plain_equality() {
        assert!(constant_time_eq("abc", "abc"));
        assert!(!constant_time_eq("abc", "abd"));
        assert!(!constant_time_eq("abc", "ab"));
        assert!(constant_time_eq("", ""));
    }

    #[test]
    fn the_policy_counts_characters_not_bytes() {
        assert!(check_password_policy("1234567").is_err());
        assert!(check_password_policy("ääääääää").is_ok());
        assert!(check_password_policy(&"x".repeat(257)).is_err());
    }
}
