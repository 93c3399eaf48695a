//! One cut-out, start to finish: decode, size, run the model, put the matte
//! in the alpha channel, encode. The API and `cutout remove` share it, and
//! its work queue is the server-wide back-pressure.

use crate::domain::SizeMode;
use crate::engine::preprocess::{input_size, matte_from_output, to_tensor};
use crate::engine::{InferError, Inference, ModelSpec};
use crate::error::ApiError;
use crate::imaging::{self, DecodeError, GeometryError};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub struct CutOut {
    pub png: Vec<u8>,
    pub width: u32,
    pub height: u32,
    /// Each step and how long it took, in order (the `Server-Timing` header).
    pub timings: Vec<(&'static str, Duration)>,
}

/// Splits one request's time into named steps.
struct Stopwatch {
    last: Instant,
    laps: Vec<(&'static str, Duration)>,
}

impl Stopwatch {
    fn start() -> Stopwatch {
        Stopwatch {
            last: Instant::now(),
            laps: Vec::with_capacity(6),
        }
    }

    /// Ends the step called `name`.
    fn lap(&mut self, name: &'static str) {
        let now = Instant::now();
        self.laps.push((name, now - self.last));
        self.last = now;
    }
}

pub struct Pipeline {
    pub spec: ModelSpec,
    pub inference: Inference,
    pub queue: WorkQueue,
}

impl Pipeline {
    /// `inference_workers` threads run the model; beside them one more
    /// request may decode or encode, and `queue_capacity` may wait.
    pub fn new(spec: ModelSpec, inference_workers: usize, queue_capacity: usize) -> Pipeline {
        Pipeline {
            spec,
            inference: Inference::start(inference_workers),
            queue: WorkQueue::new(inference_workers + 1, queue_capacity),
        }
    }

    pub fn cut_out(&self, bytes: &[u8], size: SizeMode) -> Result<CutOut, ApiError> {
        imaging::format_of(bytes)?;
        let mut watch = Stopwatch::start();
        let _turn = self
            .queue
            .enter()
            .ok_or_else(|| ApiError::Unavailable("the work queue is full".into()))?;
        watch.lap("queue");
        let original = imaging::decode(bytes)?;
        watch.lap("decode");
        let (w, h) = (original.width(), original.height());
        let (out_w, out_h) = imaging::output_size(w, h, size).map_err(|e| match e {
            GeometryError::ResolutionTooHigh => ApiError::ResolutionTooHigh {
                width: w,
                height: h,
            },
        })?;

        let (in_w, in_h) = input_size(self.spec.input, w, h);
        let model_input = imaging::resize(&original, in_w, in_h);
        let tensor = to_tensor(&model_input, &self.spec.normalise);
        drop(model_input);
        watch.lap("prepare");
        let output = self
            .inference
            .run(tensor, in_w, in_h)
            .map_err(|e| match e {
                InferError::Loading | InferError::Failed(_) => ApiError::Unavailable(e.to_string()),
                InferError::Run(cause) => ApiError::Internal(cause),
            })?;
        watch.lap("model");
        let matte = matte_from_output(&output, self.spec.output);
        let matte = imaging::resize_gray(&matte, (in_w, in_h), (out_w, out_h));

        let kept = if (out_w, out_h) == (w, h) {
            original
        } else {
            imaging::resize(&original, out_w, out_h)
        };
        let cut = imaging::cut_out(&kept, &matte);
        drop(kept);
        watch.lap("compose");
        let png = imaging::encode_png(&cut).map_err(|e| ApiError::Internal(e.into()))?;
        watch.lap("encode");
        Ok(CutOut {
            png,
            width: out_w,
            height: out_h,
            timings: watch.laps,
        })
    }
}

impl From<DecodeError> for ApiError {
    fn from(e: DecodeError) -> ApiError {
        match e {
            DecodeError::Unsupported => ApiError::UnsupportedImageFormat,
            DecodeError::TooLarge { width, height } => ApiError::ImageTooLarge { width, height },
            DecodeError::Invalid(why) => ApiError::InvalidImage(why),
        }
    }
}

/// Bounds what the server holds at once. Up to `max_running` requests hold
/// decoded pixels (one per inference worker, plus one decoding or encoding
/// beside them); up to `max_waiting` more wait their turn holding only the
/// upload; past that the queue is full and a request is refused at once.
pub struct WorkQueue {
    counts: Mutex<Counts>,
    freed: Condvar,
    max_running: usize,
    max_waiting: usize,
}

#[derive(Default)]
struct Counts {
    running: usize,
    waiting: usize,
}

/// A request's turn to hold pixels; ends when dropped.
pub struct Turn<'q>(&'q WorkQueue);

impl WorkQueue {
    pub fn new(max_running: usize, max_waiting: usize) -> WorkQueue {
        WorkQueue {
            counts: Mutex::default(),
            freed: Condvar::new(),
            max_running: max_running.max(1),
            max_waiting,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for a turn, or `None` at once if the queue is full.
    pub fn enter(&self) -> Option<Turn<'_>> {
        let mut counts = self.lock();
        if counts.running >= self.max_running {
            if counts.waiting >= self.max_waiting {
                return None;
            }
            counts.waiting += 1;
            while counts.running >= self.max_running {
                counts = self.freed.wait(counts).unwrap_or_else(|p| p.into_inner());
            }
            counts.waiting -= 1;
        }
        counts.running += 1;
        Some(Turn(self))
    }

    /// Requests running and waiting.
    pub fn depth(&self) -> usize {
        let counts = self.lock();
        counts.running + counts.waiting
    }

    /// The most requests it holds before refusing.
    pub fn capacity(&self) -> usize {
        self.max_running + self.max_waiting
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.0.lock().running -= 1;
        self.0.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_refuses_only_when_running_and_waiting_are_both_full() {
        let queue = WorkQueue::new(1, 1);
        let first = queue.enter().unwrap();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| queue.enter().map(|_| ()));
            while queue.depth() < 2 {
                std::thread::yield_now();
            }
            assert!(queue.enter().is_none(), "one running, one waiting: full");
            drop(first);
            assert!(waiter.join().unwrap().is_some(), "the waiter gets its turn");
        });
        assert_eq!(queue.depth(), 0);
    }
}
