//! What the server is started with. `main` fills it from the command line
//! and `CUTOUT_*` variables; tests build it directly.

use crate::clock::Clock;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone)]
pub struct Settings {
    pub data_dir: PathBuf,
    pub models_dir: PathBuf,
    pub listen: String,
    /// A model name from the manifest; `None` is the manifest's default.
    pub model: Option<String>,
    /// Threads that read requests and do everything but the model run. At
    /// least `queue_capacity + inference_workers + 1`, so that a full queue
    /// is reached; the rest answer at once while it is full.
    pub http_workers: usize,
    /// Threads that run the model (each run already uses every core).
    pub inference_workers: usize,
    /// Requests that may wait their turn before new ones get 503.
    pub queue_capacity: usize,
    /// Read and write timeout of every client socket.
    pub socket_timeout: Duration,
    /// How long SIGTERM waits for requests in flight.
    pub shutdown_grace: Duration,
    /// Where Linux reports temperatures (the status page's CPU temperature).
    pub thermal_dir: PathBuf,
    pub clock: Clock,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            data_dir: "./data".into(),
            models_dir: "./models".into(),
            listen: "127.0.0.1:8080".into(),
            model: None,
            http_workers: 64 + 1 + 1 + 8,
            inference_workers: 1,
            queue_capacity: 64,
            socket_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(60),
            thermal_dir: "/sys/class/thermal".into(),
            clock: Clock::default(),
        }
    }
}
