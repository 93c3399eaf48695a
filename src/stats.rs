//! What the status page and `/metrics` show about traffic: requests by
//! route and status, cut-out calls and errors per UTC day, a latency
//! histogram and the median of recent cut-outs, images processed, uptime
//! and how long the model took to load. In memory only: a restart starts
//! them afresh (Prometheus handles counter resets).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How many recent successful cut-outs the median is taken over.
const LATENCY_WINDOW: usize = 100;

/// Upper bounds (seconds) of the cut-out latency histogram's buckets: from
/// a small model on a fast machine to a large photo on a Pi.
pub const LATENCY_BUCKETS: [f64; 10] = [0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0];

pub struct Stats {
    started: Instant,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    day: i64,
    today: Today,
    latencies: VecDeque<Duration>,
    model_load: Option<Duration>,
    requests: BTreeMap<(&'static str, u16), u64>,
    histogram: Histogram,
    images: u64,
}

/// Cut-out call latencies, Prometheus-style: counts per bucket (not
/// cumulative here), their sum and count.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Histogram {
    pub buckets: [u64; LATENCY_BUCKETS.len()],
    pub sum_seconds: f64,
    pub count: u64,
}

/// Everything `/metrics` reports from here.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub requests: Vec<((&'static str, u16), u64)>,
    pub histogram: Histogram,
    pub images: u64,
    pub model_load: Option<Duration>,
    pub uptime: Duration,
}

/// Cut-out calls (API and Try it) since 00:00 UTC.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Today {
    pub calls: u64,
    pub client_errors: u64,
    pub server_errors: u64,
}

impl Default for Stats {
    fn default() -> Stats {
        Stats {
            started: Instant::now(),
            inner: Mutex::default(),
        }
    }
}

impl Stats {
    fn lock(&self, now_unix: i64) -> std::sync::MutexGuard<'_, Inner> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let day = now_unix.div_euclid(86_400);
        if inner.day != day {
            inner.day = day;
            inner.today = Today::default();
        }
        inner
    }

    /// Counts one HTTP request to `route` that answered `status`.
    pub fn record_request(&self, route: &'static str, status: u16) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        *inner.requests.entry((route, status)).or_default() += 1;
    }

    /// Counts one cut-out call that answered `status` after `took`. Try it
    /// answers a success with a redirect to its result.
    pub fn record(&self, now_unix: i64, status: u16, took: Duration) {
        let mut inner = self.lock(now_unix);
        inner.today.calls += 1;
        let seconds = took.as_secs_f64();
        let histogram = &mut inner.histogram;
        if let Some(i) = LATENCY_BUCKETS.iter().position(|&le| seconds <= le) {
            histogram.buckets[i] += 1;
        }
        histogram.sum_seconds += seconds;
        histogram.count += 1;
        match status {
            200..=399 => {
                inner.images += 1;
                if inner.latencies.len() == LATENCY_WINDOW {
                    inner.latencies.pop_front();
                }
                inner.latencies.push_back(took);
            }
            400..=499 => inner.today.client_errors += 1,
            _ => inner.today.server_errors += 1,
        }
    }

    pub fn today(&self, now_unix: i64) -> Today {
        self.lock(now_unix).today
    }

    /// The median over the last 100 successful cut-outs, and how many
    /// there were.
    pub fn median_latency(&self) -> (Option<Duration>, usize) {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut sorted: Vec<_> = inner.latencies.iter().copied().collect();
        sorted.sort();
        let median = match sorted.len() {
            0 => None,
            n if n % 2 == 1 => Some(sorted[n / 2]),
            n => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2),
        };
        (median, sorted.len())
    }

    pub fn snapshot(&self) -> Snapshot {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        Snapshot {
            requests: inner.requests.iter().map(|(k, v)| (*k, *v)).collect(),
            histogram: inner.histogram.clone(),
            images: inner.images,
            model_load: inner.model_load,
            uptime: self.started.elapsed(),
        }
    }

    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    pub fn set_model_load(&self, took: Duration) {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .model_load = Some(took);
    }

    pub fn model_load(&self) -> Option<Duration> {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .model_load
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 86_400;

    #[test]
    fn counts_reset_at_utc_midnight() {
        let stats = Stats::default();
        stats.record(DAY + 10, 200, Duration::from_millis(5));
        stats.record(DAY + 15, 303, Duration::from_millis(5));
        stats.record(DAY + 20, 402, Duration::ZERO);
        stats.record(DAY + 30, 503, Duration::ZERO);
        assert_eq!(stats.median_latency(), (Some(Duration::from_millis(5)), 2));
        assert_eq!(
            stats.today(2 * DAY - 1),
            Today {
                calls: 4,
                client_errors: 1,
                server_errors: 1
            }
        );
        assert_eq!(stats.today(2 * DAY), Today::default());
    }

    #[test]
    fn latencies_fall_into_the_first_bucket_that_holds_them() {
        let stats = Stats::default();
        stats.record(0, 200, Duration::from_millis(100));
        stats.record(0, 200, Duration::from_millis(300));
        stats.record(0, 400, Duration::from_secs(100));
        let snapshot = stats.snapshot();
        assert_eq!(snapshot.histogram.buckets[0], 1, "0.1 s is within le=0.1");
        assert_eq!(snapshot.histogram.buckets[2], 1);
        assert_eq!(
            snapshot.histogram.buckets.iter().sum::<u64>(),
            2,
            "100 s is only in +Inf"
        );
        assert_eq!(snapshot.histogram.count, 3);
        assert_eq!(snapshot.images, 2);
    }

    #[test]
    fn the_median_covers_the_last_hundred_successes_only() {
        let stats = Stats::default();
        assert_eq!(stats.median_latency(), (None, 0));
        for ms in 1..=150u64 {
            stats.record(0, 200, Duration::from_millis(ms));
        }
        stats.record(0, 500, Duration::from_secs(100));
        // the last 100 are 51..=150 ms: median (100 + 101) / 2
        assert_eq!(
            stats.median_latency(),
            (Some(Duration::from_micros(100_500)), 100)
        );
    }
}
