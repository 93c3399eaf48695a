//! Refused requests in the log: the first of each status from one client
//! address in an interval gets its own line; those that repeat it are
//! counted and logged as one line per address and status when the
//! interval ends. A client that floods the server with refused requests
//! cannot fill the disk with its log.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const INTERVAL: Duration = Duration::from_secs(10);
/// Addresses and statuses counted at once; past it, the rest count together.
const MOST_COUNTED: usize = 1024;

#[derive(Default)]
pub struct RefusalLog {
    counts: Mutex<Counts>,
}

#[derive(Default)]
struct Counts {
    /// Since when each (address, status) is counted, and its repeats since.
    repeats: HashMap<(Option<IpAddr>, u16), (Instant, u64)>,
    /// Repeats of refusals that found `repeats` full.
    others: u64,
    last_summary: Option<Instant>,
}

impl RefusalLog {
    /// Whether this refusal gets a log line of its own; if not, it is
    /// counted for the interval's summary. Writes the summaries of the
    /// intervals that have ended.
    pub fn first_in_interval(&self, client: Option<IpAddr>, status: u16, now: Instant) -> bool {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if counts
            .last_summary
            .is_none_or(|at| now.duration_since(at) >= INTERVAL)
        {
            counts.last_summary = Some(now);
            for line in counts.summarise(now) {
                log::info!("{line}");
            }
        }
        let full = counts.repeats.len() >= MOST_COUNTED;
        match counts.repeats.get_mut(&(client, status)) {
            Some((_, repeats)) => {
                *repeats += 1;
                false
            }
            None if full => {
                counts.others += 1;
                false
            }
            None => {
                counts.repeats.insert((client, status), (now, 0));
                true
            }
        }
    }
}

impl Counts {
    /// The lines for the intervals ended by `now`, which stop being counted.
    fn summarise(&mut self, now: Instant) -> Vec<String> {
        let mut lines = vec![];
        self.repeats.retain(|(client, status), (since, repeats)| {
            let ended = now.duration_since(*since) >= INTERVAL;
            if ended && *repeats > 0 {
                let client = client.map_or_else(|| "-".to_owned(), |ip| ip.to_string());
                lines.push(format!(
                    "{repeats} more {status} answers to {client} in {} s, not logged one by one",
                    now.duration_since(*since).as_secs()
                ));
            }
            !ended
        });
        if self.others > 0 && self.repeats.is_empty() {
            lines.push(format!(
                "{} more refused requests from other addresses, not logged one by one",
                self.others
            ));
            self.others = 0;
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_are_counted_and_summarised_once_their_interval_ends() {
        let log = RefusalLog::default();
        let (a, b) = (
            Some(IpAddr::from([10, 0, 0, 1])),
            Some(IpAddr::from([10, 0, 0, 2])),
        );
        let start = Instant::now();
        assert!(log.first_in_interval(a, 429, start));
        for i in 0..1000 {
            assert!(!log.first_in_interval(a, 429, start + Duration::from_millis(i)));
        }
        assert!(log.first_in_interval(a, 401, start), "another status");
        assert!(log.first_in_interval(b, 429, start), "another address");
        let later = start + INTERVAL;
        let lines = log.counts.lock().unwrap().summarise(later);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].starts_with("1000 more 429 answers to 10.0.0.1"),
            "{lines:?}"
        );
        assert!(log.first_in_interval(a, 429, later), "a new interval");
    }

    #[test]
    fn past_the_addresses_it_counts_the_rest_count_together() {
        let log = RefusalLog::default();
        let now = Instant::now();
        for i in 0..MOST_COUNTED as u32 {
            assert!(log.first_in_interval(Some(IpAddr::from(i.to_be_bytes())), 404, now));
        }
        let stranger = Some(IpAddr::from([192, 0, 2, 1]));
        assert!(!log.first_in_interval(stranger, 404, now));
        assert_eq!(log.counts.lock().unwrap().repeats.len(), MOST_COUNTED);
        let lines = log.counts.lock().unwrap().summarise(now + INTERVAL);
        assert_eq!(
            lines,
            ["1 more refused requests from other addresses, not logged one by one"]
        );
    }
}
