//! ONNX Runtime is a C++ library loaded at run time: an instruction the
//! board's CPU lacks kills the whole process (its aarch64 builds have died
//! with "illegal instruction" on Pi 4 cores before), and systemd would
//! restart it into the same crash for ever. A file in the data directory
//! counts the starts that began loading the library and then neither cut
//! out a photo with it nor stopped cleanly. After two such starts the
//! server runs tract instead, says so once in the log and on the Status
//! page, and leaves the file for the operator to delete. A new cutout
//! version starts the count afresh.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// Starts that crashed before they may fall back.
const CRASHES_BEFORE_FALLBACK: u32 = 2;

pub const TRIAL_FILE: &str = "onnxruntime-trial";

pub struct OnnxRuntimeTrial {
    path: PathBuf,
    /// This start has shown the library works (or stopped cleanly).
    settled: AtomicBool,
}

impl OnnxRuntimeTrial {
    pub fn new(data_dir: &Path) -> OnnxRuntimeTrial {
        OnnxRuntimeTrial {
            path: data_dir.join(TRIAL_FILE),
            settled: AtomicBool::new(false),
        }
    }

    /// Why this start must not load ONNX Runtime, if earlier ones crashed.
    pub fn refusal(&self) -> Option<String> {
        let crashed = self.crashed_starts();
        (crashed >= CRASHES_BEFORE_FALLBACK).then(|| {
            format!(
                "ONNX Runtime's library ended the process {crashed} times while loading or \
                 before its first cut-out (an instruction this CPU lacks?): serving with \
                 tract instead. To try onnxruntime again, delete {} and restart.",
                self.path.display()
            )
        })
    }

    /// Called before the library loads a model: one more start on trial,
    /// until a cut-out settles it again.
    pub fn begin(&self) {
        self.settled.store(false, Ordering::Release);
        let count = self.crashed_starts() + 1;
        let line = format!("{} {count}\n", env!("CARGO_PKG_VERSION"));
        if let Err(e) = write_synced(&self.path, line.as_bytes()) {
            log::warn!("cannot write {}: {e}", self.path.display());
        }
    }

    /// The library cut out a photo, or the server stops cleanly: this start
    /// did not crash in it.
    pub fn settle(&self) {
        if !self.settled.swap(true, Ordering::AcqRel) {
            match std::fs::remove_file(&self.path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => log::warn!("cannot remove {}: {e}", self.path.display()),
            }
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

/// On disk before the library is touched: a crash a moment later must not
/// lose the count.
fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::File::create(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_starts_that_never_settled_make_the_third_fall_back() {
        let dir = tempfile::tempdir().unwrap();
        let start = || OnnxRuntimeTrial::new(dir.path());
        assert!(start().refusal().is_none());
        start().begin(); // crashed
        assert!(start().refusal().is_none());
        let clean = start();
        clean.begin();
        clean.settle(); // cut out a photo: the count is gone
        assert!(start().refusal().is_none());
        start().begin();
        start().begin();
        let refusal = start().refusal().expect("two crashed starts");
        assert!(refusal.contains("2 times"), "{refusal}");
        assert!(refusal.contains(TRIAL_FILE), "{refusal}");
        // Another version of cutout tries again.
        std::fs::write(dir.path().join(TRIAL_FILE), "0.0.0-old 5\n").unwrap();
        assert!(start().refusal().is_none());
    }
}
