//! A model load the kernel kills for memory (a board with less free than
//! its defaults assume, a model configured too large for it) dies with
//! SIGKILL, which no handler sees, and systemd would restart it into the
//! same kill for ever. So each load is written down before it starts and
//! struck off when it ends; a start that finds a load still written down
//! knows the last process died in it. It was killed for memory when the
//! machine has not rebooted since (a power cut is no such kill) and the
//! kernel's count of OOM kills went up meanwhile (a `kill -9` is not).
//! Such a model is kept in a second file until the operator clears it on
//! the Status page: later starts serve without it (`Models::without`), and
//! where it is `type=auto`'s, with the smallest model on tract.

use crate::config::EngineKind;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The loads in flight: `boot_id oom_kills model engine` a line.
pub const LOADING_FILE: &str = "model-loading";
/// The models killed for memory while loading: `model engine unix_time`.
pub const KILLED_FILE: &str = "killed-for-memory";

/// Writes down each load while it runs.
pub struct LoadWatch {
    path: PathBuf,
    loading: Mutex<Vec<String>>,
}

impl LoadWatch {
    pub fn new(data_dir: &Path) -> LoadWatch {
        LoadWatch {
            path: data_dir.join(LOADING_FILE),
            loading: Mutex::new(Vec::new()),
        }
    }

    /// Before `model` loads on `engine`.
    pub fn begin(&self, model: &str, engine: EngineKind) {
        let (Some(boot), Some(kills)) = (boot_id(), oom_kills()) else {
            return;
        };
        let mut loading = self.loading.lock().unwrap_or_else(|p| p.into_inner());
        loading.push(format!("{boot} {kills} {model} {engine}"));
        self.write(&loading);
    }

    /// `model`'s load ended, loaded or failed: it was not killed in it.
    pub fn end(&self, model: &str) {
        let mut loading = self.loading.lock().unwrap_or_else(|p| p.into_inner());
        loading.retain(|line| line.split(' ').nth(2) != Some(model));
        self.write(&loading);
    }

    fn write(&self, loading: &[String]) {
        let written = if loading.is_empty() {
            match std::fs::remove_file(&self.path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                other => other,
            }
        } else {
            // Synced: the kill that follows may come within milliseconds.
            std::fs::File::create(&self.path).and_then(|mut file| {
                file.write_all(format!("{}\n", loading.join("\n")).as_bytes())?;
                file.sync_all()
            })
        };
        if let Err(e) = written {
            log::warn!("{}: {e}", self.path.display());
        }
    }
}

/// A model the kernel killed this appliance for while it loaded.
#[derive(Clone, Debug, PartialEq)]
pub struct Killed {
    pub model: String,
    pub engine: String,
    /// When the start after it found out (Unix seconds).
    pub at: i64,
}

/// At start, before any model loads: the loads the last process died in
/// that were killed for memory join those kept; all of them, oldest first.
pub fn killed_for_memory(data_dir: &Path, now: i64) -> Vec<Killed> {
    let kernel = (boot_id().unwrap_or_default(), oom_kills().unwrap_or(0));
    killed_as_the_kernel_says(data_dir, now, (&kernel.0, kernel.1))
}

/// `killed_for_memory` where the kernel says this boot is `boot` and it
/// has killed `kills` processes for memory.
fn killed_as_the_kernel_says(data_dir: &Path, now: i64, (boot, kills): (&str, u64)) -> Vec<Killed> {
    let loading = data_dir.join(LOADING_FILE);
    let mut killed = read_killed(data_dir);
    if let Ok(text) = std::fs::read_to_string(&loading) {
        for line in text.lines() {
            let [then_boot, then_kills, model, engine] = line.split(' ').collect::<Vec<_>>()[..]
            else {
                continue;
            };
            // The same boot (not a power cut), and more kills (not `kill -9`).
            if then_boot == boot && then_kills.parse().is_ok_and(|then: u64| kills > then) {
                log::error!(
                    "the last start was killed for memory while loading {model} on {engine}"
                );
                killed.push(Killed {
                    model: model.to_owned(),
                    engine: engine.to_owned(),
                    at: now,
                });
            }
        }
        let lines: String = killed
            .iter()
            .map(|k| format!("{} {} {}\n", k.model, k.engine, k.at))
            .collect();
        let kept = std::fs::write(data_dir.join(KILLED_FILE), lines)
            .and_then(|()| std::fs::remove_file(&loading));
        if let Err(e) = kept {
            log::warn!("{}: {e}", loading.display());
        }
    }
    killed
}

/// The operator tries the models again from the next start.
pub fn forget_killed(data_dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(data_dir.join(KILLED_FILE)) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

fn read_killed(data_dir: &Path) -> Vec<Killed> {
    let text = std::fs::read_to_string(data_dir.join(KILLED_FILE)).unwrap_or_default();
    text.lines()
        .filter_map(|line| match line.split(' ').collect::<Vec<_>>()[..] {
            [model, engine, at] => Some(Killed {
                model: model.to_owned(),
                engine: engine.to_owned(),
                at: at.parse().ok()?,
            }),
            _ => None,
        })
        .collect()
}

fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(id.trim().to_owned())
}

/// The kernel's OOM kills since boot, the whole machine's and every
/// cgroup's limit (Linux 4.13 and later).
fn oom_kills() -> Option<u64> {
    let vmstat = std::fs::read_to_string("/proc/vmstat").ok()?;
    vmstat
        .lines()
        .find_map(|line| line.strip_prefix("oom_kill "))?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_load_in_flight_when_the_process_died_counts_only_if_the_kernel_killed_for_memory_since() {
        let dir = tempfile::tempdir().unwrap();
        let watch = LoadWatch::new(dir.path());
        watch.begin("isnet", EngineKind::Tract);
        watch.begin("u2netp", EngineKind::Tract);
        watch.end("u2netp");
        let loading = std::fs::read_to_string(dir.path().join(LOADING_FILE)).unwrap();
        assert_eq!(loading.lines().count(), 1, "{loading}");
        let boot = boot_id().unwrap();
        assert!(
            loading.starts_with(&boot) && loading.ends_with(" isnet tract\n"),
            "{loading}"
        );
        watch.end("isnet");
        assert!(!dir.path().join(LOADING_FILE).exists());

        // Killed in three loads at once: one by the OOM killer of this
        // boot, one by `kill -9` (no kill since), one by a power cut (an
        // earlier boot). Only the first is kept, after those kept before.
        std::fs::write(dir.path().join(KILLED_FILE), "modnet onnxruntime 100\n").unwrap();
        let then = "boot-a 4 isnet tract\nboot-a 5 u2netp tract\nboot-0 1 modnet-int8 tract\n";
        std::fs::write(dir.path().join(LOADING_FILE), then).unwrap();
        let killed = killed_as_the_kernel_says(dir.path(), 200, ("boot-a", 5));
        let models: Vec<_> = killed.iter().map(|k| (k.model.as_str(), k.at)).collect();
        assert_eq!(models, [("modnet", 100), ("isnet", 200)]);
        assert!(!dir.path().join(LOADING_FILE).exists());
        // Kept for the next starts, until the operator clears them.
        assert_eq!(
            killed_as_the_kernel_says(dir.path(), 300, ("boot-a", 9)),
            killed
        );
        forget_killed(dir.path()).unwrap();
        assert!(killed_for_memory(dir.path(), 300).is_empty());
    }

    #[test]
    fn the_kernel_says_which_boot_this_is_and_how_many_it_killed_for_memory() {
        assert_eq!(boot_id().unwrap().len(), 36);
        assert!(oom_kills().is_some());
    }
}
