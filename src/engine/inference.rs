//! The inference pool: the threads that run the model, and whether it is
//! loaded. How many requests may wait for it is bounded upstream, by the
//! pipeline's work queue. A caller takes a free worker before it hands over
//! its job, so that it can still withdraw once its turn has come (its
//! client hung up) and no job waits unseen in the channel.

use super::Engine;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread;

pub enum Readiness {
    Loading,
    Ready(Arc<dyn Engine>),
    Failed(String),
}

#[derive(Debug, thiserror::Error)]
pub enum InferError {
    #[error("model not loaded yet")]
    Loading,
    #[error("model failed to load: {0}")]
    Failed(String),
    #[error("inference failed")]
    Run(#[source] anyhow::Error),
    #[error("the client hung up before the model ran")]
    Withdrawn,
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
    jobs: Sender<Job>,
    /// Workers not running a job.
    free: Arc<(Mutex<usize>, Condvar)>,
}

impl Inference {
    /// Starts `workers` threads that take jobs in turn.
    pub fn start(workers: usize) -> Inference {
        let (jobs, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let readiness = Arc::new(RwLock::new(Readiness::Loading));
        for i in 0..workers.max(1) {
            let (rx, readiness) = (rx.clone(), readiness.clone());
            thread::Builder::new()
                .name(format!("inference-{i}"))
                .spawn(move || work(&rx, &readiness))
                .expect("spawning an inference thread");
        }
        let free = Arc::new((Mutex::new(workers.max(1)), Condvar::new()));
        Inference {
            readiness,
            jobs,
            free,
        }
    }

    pub fn set(&self, readiness: Readiness) {
        *self.readiness.write().unwrap() = readiness;
    }

    /// `Ok` once the model is loaded.
    pub fn ready(&self) -> Result<(), InferError> {
        match &*self.readiness.read().unwrap() {
            Readiness::Loading => Err(InferError::Loading),
            Readiness::Ready(_) => Ok(()),
            Readiness::Failed(why) => Err(InferError::Failed(why.clone())),
        }
    }

    /// The loaded engine's name, once it is loaded.
    pub fn engine_name(&self) -> Option<&'static str> {
        match &*self.readiness.read().unwrap() {
            Readiness::Ready(engine) => Some(engine.name()),
            _ => None,
        }
    }

    /// Runs the model on a free worker, waiting for one.
    pub fn run(&self, input: Vec<f32>, width: u32, height: u32) -> Result<Vec<f32>, InferError> {
        self.run_unless(input, width, height, &|| false)
    }

    /// `run`, withdrawn (`InferError::Withdrawn`) if `withdrawn` says so
    /// once a worker is free for it.
    pub fn run_unless(
        &self,
        input: Vec<f32>,
        width: u32,
        height: u32,
        withdrawn: &dyn Fn() -> bool,
    ) -> Result<Vec<f32>, InferError> {
        self.ready()?;
        let _worker = WorkerTaken::wait_for(&self.free);
        if withdrawn() {
            return Err(InferError::Withdrawn);
        }
        let (reply, result) = mpsc::channel();
        self.jobs
            .send(Job {
                input,
                width,
                height,
                reply,
            })
            .map_err(|_| InferError::Run(anyhow::anyhow!("inference workers stopped")))?;
        match result.recv() {
            Ok(out) => out.map_err(InferError::Run),
            Err(_) => Err(InferError::Run(anyhow::anyhow!("inference worker stopped"))),
        }
    }
}

/// A worker taken for one job, given back when dropped.
struct WorkerTaken<'a>(&'a (Mutex<usize>, Condvar));

impl<'a> WorkerTaken<'a> {
    fn wait_for(free: &'a (Mutex<usize>, Condvar)) -> WorkerTaken<'a> {
        let mut count = free.0.lock().unwrap_or_else(|p| p.into_inner());
        while *count == 0 {
            count = free.1.wait(count).unwrap_or_else(|p| p.into_inner());
        }
        *count -= 1;
        WorkerTaken(free)
    }
}

impl Drop for WorkerTaken<'_> {
    fn drop(&mut self) {
        *self.0 .0.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        self.0 .1.notify_one();
    }
}

fn work(rx: &Mutex<Receiver<Job>>, readiness: &RwLock<Readiness>) {
    loop {
        let job = match rx.lock().unwrap().recv() {
            Ok(job) => job,
            Err(_) => return,
        };
        let engine = match &*readiness.read().unwrap() {
            Readiness::Ready(engine) => Some(engine.clone()),
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
        job.reply.send(out).ok();
    }
}
