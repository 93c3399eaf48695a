//! The inference pool: a bounded queue in front of a few threads that run
//! the model. The queue bound is the server-wide back-pressure: when it is
//! full a request is refused at once instead of waiting without end.

use super::Engine;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, RwLock};
use std::thread;
use std::time::Duration;

pub enum Readiness {
    Loading,
    Ready(Arc<dyn Engine>, Duration),
    Failed(String),
}

#[derive(Debug, thiserror::Error)]
pub enum InferError {
    #[error("model not loaded yet")]
    Loading,
    #[error("model failed to load: {0}")]
    Failed(String),
    #[error("inference queue full")]
    QueueFull,
    #[error("inference failed")]
    Run(#[source] anyhow::Error),
}

struct Job {
    input: Vec<f32>,
    width: u32,
    height: u32,
    reply: mpsc::Sender<anyhow::Result<Vec<f32>>>,
}

#[derive(Clone)]
pub struct Inference {
    readiness: Arc<RwLock<Readiness>>,
    jobs: SyncSender<Job>,
    queued: Arc<AtomicUsize>,
}

impl Inference {
    /// Starts `workers` threads behind a queue of `capacity` waiting jobs.
    pub fn start(workers: usize, capacity: usize) -> Inference {
        let (jobs, rx) = mpsc::sync_channel::<Job>(capacity);
        let rx = Arc::new(Mutex::new(rx));
        let readiness = Arc::new(RwLock::new(Readiness::Loading));
        let queued = Arc::new(AtomicUsize::new(0));
        for i in 0..workers.max(1) {
            let (rx, readiness, queued) = (rx.clone(), readiness.clone(), queued.clone());
            thread::Builder::new()
                .name(format!("inference-{i}"))
                .spawn(move || work(&rx, &readiness, &queued))
                .expect("spawning an inference thread");
        }
        Inference {
            readiness,
            jobs,
            queued,
        }
    }

    pub fn set(&self, readiness: Readiness) {
        *self.readiness.write().unwrap() = readiness;
    }

    /// `Ok` with the engine's name and load time once the model is loaded.
    pub fn ready(&self) -> Result<(&'static str, Duration), InferError> {
        match &*self.readiness.read().unwrap() {
            Readiness::Loading => Err(InferError::Loading),
            Readiness::Ready(engine, took) => Ok((engine.name(), *took)),
            Readiness::Failed(why) => Err(InferError::Failed(why.clone())),
        }
    }

    /// Jobs waiting for or in a worker.
    pub fn queue_depth(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// Runs the model, waiting for a free worker if the queue has room.
    pub fn run(&self, input: Vec<f32>, width: u32, height: u32) -> Result<Vec<f32>, InferError> {
        self.ready()?;
        let (reply, result) = mpsc::channel();
        self.queued.fetch_add(1, Ordering::Relaxed);
        match self.jobs.try_send(Job {
            input,
            width,
            height,
            reply,
        }) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.queued.fetch_sub(1, Ordering::Relaxed);
                return Err(InferError::QueueFull);
            }
        }
        match result.recv() {
            Ok(out) => out.map_err(InferError::Run),
            Err(_) => Err(InferError::Run(anyhow::anyhow!("inference worker stopped"))),
        }
    }
}

fn work(rx: &Mutex<Receiver<Job>>, readiness: &RwLock<Readiness>, queued: &AtomicUsize) {
    loop {
        let job = match rx.lock().unwrap().recv() {
            Ok(job) => job,
            Err(_) => return,
        };
        let engine = match &*readiness.read().unwrap() {
            Readiness::Ready(engine, _) => Some(engine.clone()),
            _ => None,
        };
        let out = match engine {
            // A panic inside the engine must cost one request, not a worker.
            Some(engine) => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                engine.run(job.input, job.width, job.height)
            }))
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the engine panicked"))),
            None => Err(anyhow::anyhow!("model not loaded")),
        };
        queued.fetch_sub(1, Ordering::Relaxed);
        job.reply.send(out).ok();
    }
}
