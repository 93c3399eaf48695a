//! Setting the operator password on a new appliance, for whoever shows
//! physical access, and nobody else: the one-time link in the journal, the
//! short code on the board's own console (typed at `/setup`), or a press of
//! the appliance's button while one browser, and only one, waits for it.

use crate::secrets::{constant_time_eq, random_token, sha256_hex};
use std::sync::{Mutex, MutexGuard};

/// How long a browser waits for the button, and how long setup stays open
/// to it after the press.
pub const BUTTON_SECONDS: i64 = 60;
/// Wrong codes before the code is replaced (and shown anew on the console)
/// and codes are refused for a minute: 8 characters of 31 leave a guesser
/// about one chance in 10^11 a minute.
pub const CODE_TRIES: u32 = 10;
pub const CODE_PAUSE_SECONDS: i64 = 60;
/// Browsers waiting for the button at once; a new one pushes out the oldest.
const MAX_WAITING: usize = 8;
/// No 0/O, 1/I/L: read off a screen and typed by a person.
const CODE_ALPHABET: &[u8] = b"23456789ABCDEFGHJKMNPQRSTUVWXYZ";
const CODE_LEN: usize = 8;

/// Until the password is set: what can open the password form.
pub struct Setup(Mutex<SetupState>);

pub struct SetupState {
    /// The link's token; `None` once the password is set.
    token: Option<String>,
    code: String,
    wrong_codes: u32,
    /// After `CODE_TRIES` wrong codes, none is taken before this time.
    codes_paused_until: i64,
    waiting: Vec<Waiting>,
}

/// Why a typed code did not open setup.
#[derive(Debug, PartialEq)]
pub enum CodeRefused {
    Wrong,
    /// That was one wrong code too many: this is the new code, to be shown
    /// where the old one was; no code is taken for a minute.
    Replaced(String),
    /// Codes are refused for so many more seconds.
    Paused(i64),
    /// Setup is closed.
    Closed,
}

/// A browser that asked to be let in by the button.
struct Waiting {
    /// The SHA-256 of its cookie.
    cookie_hash: String,
    asked: i64,
    /// When the button let it in, and the token it was given.
    opened: Option<(i64, String)>,
}

/// What a press of the button did for setup.
#[derive(Debug, PartialEq)]
pub enum Press {
    /// One browser waited: setup is open to it for a minute.
    Opened,
    /// No browser waits (the press may be for a booth).
    NobodyWaiting,
    /// More than one browser waits: the press cannot tell which is the
    /// operator's, so it opens none.
    SeveralWaiting(usize),
}

/// A code as a person might type it: any case, with spaces or dashes.
fn normalized(code: &str) -> String {
    code.chars()
        .filter(|c| !matches!(c, ' ' | '-'))
        .map(|c| c.to_ascii_uppercase())
        .collect()
}

fn new_code() -> String {
    let mut bytes = [0u8; CODE_LEN];
    getrandom::fill(&mut bytes).expect("the OS random number generator failed");
    // 256 = 8 × 31 + 8: the bias toward the first 8 characters is 1 in 32.
    let code: String = bytes
        .iter()
        .map(|b| CODE_ALPHABET[*b as usize % CODE_ALPHABET.len()] as char)
        .collect();
    format!("{}-{}", &code[..4], &code[4..])
}

impl Setup {
    /// Open (a token and a code) on an appliance without a password.
    pub fn new(open: bool) -> Setup {
        Setup(Mutex::new(SetupState {
            token: open.then(random_token),
            code: new_code(),
            wrong_codes: 0,
            codes_paused_until: 0,
            waiting: Vec::new(),
        }))
    }

    /// Held while a token is checked and used, so that two uses cannot
    /// both win.
    pub fn lock(&self) -> MutexGuard<'_, SetupState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl SetupState {
    pub fn is_open(&self) -> bool {
        self.token.is_some()
    }

    /// The link's token and the console's code, while setup is open.
    pub fn link(&self) -> Option<(&str, &str)> {
        Some((self.token.as_deref()?, &self.code))
    }

    /// Whether `token` is the link's, or one the button gave in the last
    /// minute.
    pub fn token_matches(&self, token: &str, now: i64) -> bool {
        let Some(link) = &self.token else {
            return false;
        };
        constant_time_eq(link, token)
            || self.waiting.iter().any(|w| {
                w.opened.as_ref().is_some_and(|(at, given)| {
                    now - at < BUTTON_SECONDS && constant_time_eq(given, token)
                })
            })
    }

    /// The link's token for the console's code.
    pub fn token_for_code(&mut self, code: &str, now: i64) -> Result<String, CodeRefused> {
        let token = self.token.clone().ok_or(CodeRefused::Closed)?;
        if now < self.codes_paused_until {
            return Err(CodeRefused::Paused(self.codes_paused_until - now));
        }
        if constant_time_eq(&normalized(code), &normalized(&self.code)) {
            return Ok(token);
        }
        self.wrong_codes += 1;
        if self.wrong_codes < CODE_TRIES {
            return Err(CodeRefused::Wrong);
        }
        self.wrong_codes = 0;
        self.codes_paused_until = now + CODE_PAUSE_SECONDS;
        self.code = new_code();
        Err(CodeRefused::Replaced(self.code.clone()))
    }

    /// Records a browser waiting for the button; returns its cookie.
    pub fn wait_for_button(&mut self, now: i64) -> String {
        self.waiting
            .retain(|w| now - w.asked < BUTTON_SECONDS || w.opened.is_some());
        if self.waiting.len() >= MAX_WAITING {
            self.waiting.remove(0);
        }
        let cookie = random_token();
        self.waiting.push(Waiting {
            cookie_hash: sha256_hex(&cookie),
            asked: now,
            opened: None,
        });
        cookie
    }

    /// For the browser with `cookie`: `Some(Ok(token))` once the button let
    /// it in (for a minute), `Some(Err(seconds left))` while it waits.
    pub fn button_wait(&self, cookie: &str, now: i64) -> Option<Result<String, i64>> {
        let hash = sha256_hex(cookie);
        let waiting = self
            .waiting
            .iter()
            .find(|w| constant_time_eq(&w.cookie_hash, &hash))?;
        match &waiting.opened {
            Some((at, token)) if now - at < BUTTON_SECONDS => Some(Ok(token.clone())),
            Some(_) => None,
            None if now - waiting.asked < BUTTON_SECONDS => {
                Some(Err(BUTTON_SECONDS - (now - waiting.asked)))
            }
            None => None,
        }
    }

    pub fn press(&mut self, now: i64) -> Press {
        if self.token.is_none() {
            return Press::NobodyWaiting;
        }
        let mut asking = self
            .waiting
            .iter_mut()
            .filter(|w| w.opened.is_none() && now - w.asked < BUTTON_SECONDS);
        match (asking.next(), asking.next()) {
            (None, _) => Press::NobodyWaiting,
            (Some(one), None) => {
                one.opened = Some((now, random_token()));
                Press::Opened
            }
            (Some(_), Some(_)) => Press::SeveralWaiting(2 + asking.count()),
        }
    }

    /// Whether the LED should say that setup waits for the button or is
    /// open to a browser.
    pub fn button_window(&self, now: i64) -> bool {
        self.is_open()
            && self.waiting.iter().any(|w| match w.opened {
                Some((at, _)) => now - at < BUTTON_SECONDS,
                None => now - w.asked < BUTTON_SECONDS,
            })
    }

    /// The password is set: nothing opens setup any more.
    pub fn close(&mut self) {
        self.token = None;
        self.waiting.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The open setup's token and code.
    fn link(state: &SetupState) -> (String, String) {
        let (token, code) = state.link().expect("setup is open");
        (token.to_owned(), code.to_owned())
    }

    #[test]
    fn the_code_opens_setup_and_wrong_codes_replace_it() {
        let setup = Setup::new(true);
        let mut state = setup.lock();
        let (token, code) = link(&state);
        assert!(code.len() == 9 && code.as_bytes()[4] == b'-', "{code}");
        let typed = code.to_lowercase().replace('-', " ");
        assert_eq!(state.token_for_code(&typed, 1000), Ok(token.clone()));
        for _ in 1..CODE_TRIES {
            assert_eq!(
                state.token_for_code("AAAA-AAAA", 1000),
                Err(CodeRefused::Wrong)
            );
        }
        let Err(CodeRefused::Replaced(new)) = state.token_for_code("AAAA-AAAA", 1000) else {
            panic!("the code was not replaced");
        };
        assert_ne!(new, code);
        assert_eq!(
            state.token_for_code(&new, 1059),
            Err(CodeRefused::Paused(1))
        );
        assert_eq!(
            state.token_for_code(&code, 1060),
            Err(CodeRefused::Wrong),
            "the old code is gone"
        );
        assert_eq!(state.token_for_code(&new, 1060), Ok(token));
    }

    #[test]
    fn the_button_opens_setup_to_the_one_waiting_browser_for_a_minute() {
        let setup = Setup::new(true);
        let mut state = setup.lock();
        assert_eq!(state.press(1000), Press::NobodyWaiting);
        let cookie = state.wait_for_button(1000);
        assert_eq!(state.button_wait(&cookie, 1010), Some(Err(50)));
        assert!(state.button_window(1010));
        assert_eq!(state.press(1010), Press::Opened);
        let Some(Ok(token)) = state.button_wait(&cookie, 1011) else {
            panic!("not opened");
        };
        assert!(state.token_matches(&token, 1069));
        assert!(!state.token_matches(&token, 1070), "open for a minute only");
        assert_eq!(state.button_wait(&cookie, 1070), None);
        assert_eq!(state.button_wait("another browser", 1011), None);
    }

    #[test]
    fn a_press_with_two_browsers_waiting_opens_neither() {
        let setup = Setup::new(true);
        let mut state = setup.lock();
        let first = state.wait_for_button(1000);
        let second = state.wait_for_button(1001);
        assert_eq!(state.press(1002), Press::SeveralWaiting(2));
        assert!(matches!(state.button_wait(&first, 1003), Some(Err(_))));
        assert!(matches!(state.button_wait(&second, 1003), Some(Err(_))));
        // A browser that waited more than a minute no longer counts.
        assert_eq!(state.press(1060), Press::Opened);
        assert!(matches!(state.button_wait(&second, 1061), Some(Ok(_))));
    }

    #[test]
    fn once_the_password_is_set_nothing_opens_setup() {
        let setup = Setup::new(true);
        let mut state = setup.lock();
        let (token, code) = link(&state);
        let cookie = state.wait_for_button(1000);
        state.close();
        assert!(!state.token_matches(&token, 1000));
        assert_eq!(state.token_for_code(&code, 1000), Err(CodeRefused::Closed));
        assert_eq!(state.press(1001), Press::NobodyWaiting);
        assert_eq!(state.button_wait(&cookie, 1001), None);
        assert!(Setup::new(false).lock().link().is_none());
    }
}
