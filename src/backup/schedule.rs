//! Backups on a schedule (`[backup] dir`): one every `every` into a
//! directory (a USB stick), named by the UTC time they were taken so that
//! they sort, the newest `keep` kept. The Status page shows the last one.

use super::Sources;
pub use crate::config::BackupSchedule as Schedule;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const PREFIX: &str = "cutout-";
const SUFFIX: &str = ".backup";

/// The last scheduled backup, for the Status page.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Last {
    /// The newest backup in the directory, and when it was made.
    pub made: Option<(i64, PathBuf)>,
    /// The last attempt's error, when it failed.
    pub failed: Option<(i64, String)>,
}

/// A schedule and how it went.
pub struct Scheduled {
    pub schedule: Schedule,
    last: Mutex<Last>,
}

impl Scheduled {
    pub fn new(schedule: Schedule) -> Scheduled {
        let made = newest(&schedule.dir);
        Scheduled {
            schedule,
            last: Mutex::new(Last { made, failed: None }),
        }
    }

    pub fn last(&self) -> Last {
        self.last.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Takes a backup whenever one is due, until `stopping` says so.
    pub fn run(&self, sources: &Sources, stopping: impl Fn() -> bool) {
        let every = self.schedule.every.as_secs() as i64;
        while !stopping() {
            let last = self.last();
            let made = last.made.map_or(0, |(at, _)| at);
            let tried = last.failed.map_or(0, |(at, _)| at);
            if unix_now() >= made.max(tried) + every {
                self.take_one(sources);
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn take_one(&self, sources: &Sources) {
        let now = unix_now();
        let file = self.schedule.dir.join(file_name(now));
        let outcome = super::read_passphrase_file(&self.schedule.passphrase_file)
            .and_then(|passphrase| super::take(sources, &passphrase, &file, now));
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        match outcome {
            Ok(_) => {
                log::info!("backup written to {}", file.display());
                prune(&self.schedule.dir, self.schedule.keep);
                *last = Last {
                    made: Some((now, file)),
                    failed: None,
                };
            }
            Err(e) => {
                log::error!(
                    "the scheduled backup into {} failed: {e:#}",
                    self.schedule.dir.display()
                );
                last.failed = Some((now, format!("{e:#}")));
            }
        }
    }
}

/// Wall time, not the app's `Clock` (a manual one in the tests): a backup
/// is named by when it was really taken.
fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// `cutout-2026-11-29T180102Z.backup`: names sort as the times do.
fn file_name(unix: i64) -> String {
    let secs = unix.rem_euclid(86_400);
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    let date = crate::domain::utc_date(unix);
    format!("{PREFIX}{date}T{h:02}{m:02}{s:02}Z{SUFFIX}")
}

/// The scheduled backups in `dir`, oldest first.
fn backups(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            name.starts_with(PREFIX) && name.ends_with(SUFFIX)
        })
        .collect();
    found.sort();
    found
}

fn newest(dir: &Path) -> Option<(i64, PathBuf)> {
    let file = backups(dir).pop()?;
    let made = fs::metadata(&file).and_then(|m| m.modified()).ok()?;
    let at = made.duration_since(UNIX_EPOCH).ok()?.as_secs() as i64;
    Some((at, file))
}

/// Removes all but the newest `keep` backups, and what a power cut left
/// half written.
fn prune(dir: &Path, keep: usize) {
    let found = backups(dir);
    let old = found.len().saturating_sub(keep);
    let partial = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|path| {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            name.starts_with(PREFIX) && name.ends_with(".partial")
        });
    for file in found.into_iter().take(old).chain(partial) {
        if let Err(e) = fs::remove_file(&file) {
            log::warn!("cannot remove the old backup {}: {e}", file.display());
        }
    }
}
