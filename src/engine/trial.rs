//! ONNX Runtime is a C++ library loaded at run time: an instruction the
//! board's CPU lacks kills the whole process (its aarch64 builds have died
//! with "illegal instruction" on Pi 4 cores before), and systemd would
//! restart it into the same crash for ever. From the moment the library
//! loads a model until that model has run once (or the server stops
//! cleanly), whenever it loads (MODNet on the first `type=person`, say),
//! this start is on trial: a fault signal then (an illegal instruction, a
//! bad address, an abort) counts the start in a file in the data directory
//! before the process dies of it. After two such starts the server runs
//! tract instead, says so once in the log and on the Status page, and
//! leaves the file for the operator to delete. A start ended from outside
//! (`kill -9`, a power cut) is no crash of the library and counts nothing,
//! however often an appliance is unplugged while it starts. A clean stop,
//! or a new cutout version, starts the count afresh.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Starts that crashed before they may fall back.
const CRASHES_BEFORE_FALLBACK: u32 = 2;

pub const TRIAL_FILE: &str = "onnxruntime-trial";

pub struct OnnxRuntimeTrial {
    path: PathBuf,
    /// The models loaded and not yet run: while there is one, this start
    /// is on trial and the crash guard holds the line to write.
    on_trial: Mutex<BTreeSet<String>>,
}

impl OnnxRuntimeTrial {
    pub fn new(data_dir: &Path) -> OnnxRuntimeTrial {
        OnnxRuntimeTrial {
            path: data_dir.join(TRIAL_FILE),
            on_trial: Mutex::new(BTreeSet::new()),
        }
    }

    /// Why this start must not load ONNX Runtime, if earlier ones crashed.
    pub fn refusal(&self) -> Option<String> {
        let crashed = self.crashed_starts();
        (crashed >= CRASHES_BEFORE_FALLBACK).then(|| {
            format!(
                "ONNX Runtime's library crashed the process {crashed} times while loading a \
                 model or before its first run (an instruction this CPU lacks?): serving with \
                 tract instead. To try onnxruntime again, delete {} and restart.",
                self.path.display()
            )
        })
    }

    /// Called before the library loads `model`: this start is on trial
    /// until each model it loads has run once.
    pub fn begin(&self, model: &str) {
        let mut on_trial = self.on_trial.lock().unwrap_or_else(|p| p.into_inner());
        if on_trial.is_empty() {
            let line = format!(
                "{} {}\n",
                env!("CARGO_PKG_VERSION"),
                self.crashed_starts() + 1
            );
            if let Err(e) = guard::arm(&self.path, line.as_bytes()) {
                log::warn!("ONNX Runtime's crash guard is off: {e}");
                return;
            }
        }
        on_trial.insert(model.to_owned());
    }

    /// The library ran `model`: it did not crash in it. With no other
    /// model on trial, a crash is no longer counted. The count of earlier
    /// starts stays: the next may crash in a model loaded later again.
    pub fn settle(&self, model: &str) {
        let mut on_trial = self.on_trial.lock().unwrap_or_else(|p| p.into_inner());
        if on_trial.remove(model) && on_trial.is_empty() {
            guard::disarm();
        }
    }

    /// The server stops cleanly: this start did not crash, and the count
    /// of those before it starts again.
    pub fn settle_all(&self) {
        let mut on_trial = self.on_trial.lock().unwrap_or_else(|p| p.into_inner());
        on_trial.clear();
        guard::disarm();
        match std::fs::remove_file(&self.path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => log::warn!("cannot remove {}: {e}", self.path.display()),
        }
    }

    fn crashed_starts(&self) -> u32 {
        let Ok(text) = std::fs::read_to_string(&self.path) else {
            return 0;
        };
        match text.split_whitespace().collect::<Vec<_>>()[..] {
            [env!("CARGO_PKG_VERSION"), count] => count.parse().unwrap_or(0),
            _ => 0,
        }
    }
}

/// The fault signals' handlers: while armed, the first fault writes the
/// trial's line, synced, then hands the signal on to the handler that was
/// there before (the default one, or Rust's own for a stack overflow), so
/// the process still dies of it as it would have.
#[allow(unsafe_code)]
mod guard {
    use std::ffi::CString;
    use std::io;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;
    use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
    use std::sync::OnceLock;

    const SIGNALS: [libc::c_int; 5] = [
        libc::SIGILL,
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGFPE,
        libc::SIGABRT,
    ];

    struct Record {
        path: CString,
        line: Vec<u8>,
    }

    /// What the handler writes. Made before it is armed and never freed
    /// while armed: a handler may neither allocate nor take a lock.
    static RECORD: AtomicPtr<Record> = AtomicPtr::new(std::ptr::null_mut());
    static ARMED: AtomicBool = AtomicBool::new(false);
    /// The handlers that were there before ours, by signal; set once.
    static PREVIOUS: OnceLock<[libc::sigaction; 5]> = OnceLock::new();

    pub fn arm(path: &Path, line: &[u8]) -> io::Result<()> {
        let record = Box::new(Record {
            path: CString::new(path.as_os_str().as_bytes())
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?,
            line: line.to_vec(),
        });
        // A record an earlier trial of this process armed is left, not
        // freed: a handler on another thread may still be reading it.
        RECORD.store(Box::into_raw(record), Ordering::Release);
        install()?;
        ARMED.store(true, Ordering::Release);
        Ok(())
    }

    pub fn disarm() {
        ARMED.store(false, Ordering::Release);
    }

    fn install() -> io::Result<()> {
        if PREVIOUS.get().is_some() {
            return Ok(());
        }
        // SAFETY: zeroed `sigaction`s are valid values to be filled in.
        let mut previous: [libc::sigaction; 5] = unsafe { std::mem::zeroed() };
        for (signal, old) in SIGNALS.iter().zip(previous.iter_mut()) {
            // SAFETY: `ours` is a valid action whose handler only makes
            // async-signal-safe calls; `old` receives the one it replaces.
            let installed = unsafe {
                let mut ours: libc::sigaction = std::mem::zeroed();
                ours.sa_sigaction = on_fault as *const () as libc::sighandler_t;
                ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                libc::sigemptyset(&mut ours.sa_mask);
                libc::sigaction(*signal, &ours, old)
            };
            if installed != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        let _ = PREVIOUS.set(previous);
        Ok(())
    }

    extern "C" fn on_fault(signal: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
        if ARMED.swap(false, Ordering::AcqRel) {
            let record = RECORD.load(Ordering::Acquire);
            // SAFETY: a non-null RECORD points at a leaked, never freed
            // `Record`; open, write, fsync and close are async-signal-safe.
            unsafe {
                if let Some(record) = record.as_ref() {
                    let fd = libc::open(
                        record.path.as_ptr(),
                        libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
                        0o640,
                    );
                    if fd >= 0 {
                        libc::write(fd, record.line.as_ptr().cast(), record.line.len());
                        libc::fsync(fd);
                        libc::close(fd);
                    }
                }
            }
        }
        // The handler that was there before takes the signal, raised again
        // (it is blocked until this handler returns), and any that follows.
        if let (Some(previous), Some(i)) =
            (PREVIOUS.get(), SIGNALS.iter().position(|s| *s == signal))
        {
            // SAFETY: sigaction and raise are async-signal-safe;
            // `previous[i]` is the action this signal had before `install`.
            unsafe {
                libc::sigaction(signal, &previous[i], std::ptr::null_mut());
                libc::raise(signal);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::process::Command;

    /// Set in the child this test starts: the directory of its trial.
    const CHILD_DIR: &str = "CUTOUT_TEST_TRIAL_DIR";

    /// One start in a child process (this test binary, running only the
    /// test below): begins a trial, then dies as `how` says. The signal it
    /// died of.
    fn start_that(dir: &Path, how: &str) -> Option<i32> {
        let status = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "engine::trial::tests::child", "--ignored"])
            .env(CHILD_DIR, dir)
            .env("CUTOUT_TEST_TRIAL_END", how)
            .status()
            .unwrap();
        status.signal()
    }

    #[test]
    #[ignore = "a start that the test below runs in a child process"]
    fn child() {
        let dir = std::env::var_os(CHILD_DIR).expect("run by the test below");
        let trial = OnnxRuntimeTrial::new(Path::new(&dir));
        trial.begin("isnet");
        trial.begin("u2netp"); // a second model, in the same start
        match std::env::var("CUTOUT_TEST_TRIAL_END").unwrap().as_str() {
            // What the library does on a CPU without its instructions.
            "abort" => std::process::abort(),
            "kill" => {
                let me = std::process::id().to_string();
                Command::new("kill").args(["-KILL", &me]).status().unwrap();
                std::thread::sleep(std::time::Duration::from_secs(10));
            }
            "stop" => trial.settle_all(),
            "settle" => {
                trial.settle("isnet");
                trial.settle("u2netp");
                std::process::abort()
            }
            // One model has run, the other not yet.
            "settle-one" => {
                trial.settle("isnet");
                std::process::abort()
            }
            // Both have run; MODNet is loaded later, on the first
            // `type=person`, and crashes the library.
            "load-later" => {
                trial.settle("isnet");
                trial.settle("u2netp");
                trial.begin("modnet");
                std::process::abort()
            }
            how => panic!("{how}?"),
        }
    }

    #[test]
    fn two_starts_the_library_crashed_with_any_model_unproven_make_the_third_fall_back_and_kills_count_nothing(
    ) {
        let dir = tempfile::tempdir().unwrap();
        let trial = || OnnxRuntimeTrial::new(dir.path());
        // Unplugged while starting, again and again: no crash of the library.
        for _ in 0..3 {
            assert_eq!(start_that(dir.path(), "kill"), Some(libc::SIGKILL));
        }
        assert!(trial().refusal().is_none());
        assert!(!dir.path().join(TRIAL_FILE).exists());

        assert_eq!(start_that(dir.path(), "abort"), Some(libc::SIGABRT));
        assert!(trial().refusal().is_none(), "one crash is not two");
        // A clean stop settles the count.
        assert_eq!(start_that(dir.path(), "stop"), None);
        assert!(!dir.path().join(TRIAL_FILE).exists());
        // A crash once every model loaded has run is not the library's
        // loading and counts nothing.
        assert_eq!(start_that(dir.path(), "settle"), Some(libc::SIGABRT));
        assert!(!dir.path().join(TRIAL_FILE).exists());

        // A model still on trial, or one loaded after the first cut-out,
        // counts as the first did.
        for how in ["settle-one", "load-later"] {
            assert_eq!(start_that(dir.path(), how), Some(libc::SIGABRT));
        }
        assert_eq!(start_that(dir.path(), "kill"), Some(libc::SIGKILL));
        let refusal = trial().refusal().expect("two crashed starts");
        assert!(refusal.contains("2 times"), "{refusal}");
        assert!(refusal.contains(TRIAL_FILE), "{refusal}");
        // Another version of cutout tries again.
        std::fs::write(dir.path().join(TRIAL_FILE), "0.0.0-old 5\n").unwrap();
        assert!(trial().refusal().is_none());
    }
}
