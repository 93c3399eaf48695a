//! One cut-out, start to finish: decode, size, run the model, put the matte
//! in the alpha channel, encode. The API and `cutout remove` share it, and
//! its work queue is the server-wide back-pressure.

use crate::domain::{SizeMode, SubjectType};
use crate::engine::preprocess::{apply_levels, matte_from_output, placement, to_tensor};
pub use crate::engine::Models;
use crate::engine::{
    self, Blend, EngineChoice, EngineKind, InferError, Inference, InputSpec, ModelSpec,
    OnnxRuntimeTrial, Readiness,
};
use crate::error::{ApiError, OptionField};
use crate::imaging::{self, Background, DecodeError, Finish, FinishError, GeometryError};
use image::DynamicImage;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Condvar, Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

pub struct CutOut {
    /// The file: a PNG unless `finish` asked for another format.
    pub bytes: Vec<u8>,
    pub media_type: &'static str,
    /// Where the subject is in it; `None` if nothing was kept.
    pub foreground: Option<imaging::Foreground>,
    pub width: u32,
    pub height: u32,
    /// The model that made the matte.
    pub model: String,
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

    /// Ends the step called `name`; a step run more than once (a blend's
    /// views) adds up.
    fn lap(&mut self, name: &'static str) {
        let now = Instant::now();
        let took = now - self.last;
        match self.laps.iter_mut().find(|(lap, _)| *lap == name) {
            Some((_, sum)) => *sum += took,
            None => self.laps.push((name, took)),
        }
        self.last = now;
    }
}

/// A model and the workers that run it.
pub struct Model {
    pub spec: ModelSpec,
    pub inference: Inference,
    loading: Once,
}

/// Where models named by `type` are loaded from on first use.
pub struct Loader {
    pub models_dir: PathBuf,
    pub engine: EngineChoice,
    /// Set where a crash inside ONNX Runtime must not become a crash loop.
    pub trial: Option<OnnxRuntimeTrial>,
}

pub struct Pipeline {
    /// `type=auto`'s model first, then any other `type` names.
    pub models: Vec<Model>,
    person: usize,
    general: usize,
    /// `auto`'s blend's other models.
    blended: Vec<usize>,
    /// `None`: every model is set by the caller (`Inference::set`).
    loader: Option<Loader>,
    pub queue: WorkQueue,
    spare_pixels: SparePixels,
    /// The most pixels a photo may decode to.
    max_pixels: u64,
}

impl Pipeline {
    /// `inference_workers` threads per model run it; beside them one more
    /// request may decode or encode, `queue_capacity` may wait, and the
    /// uploads held at once stay within `upload_buffer` bytes. The models
    /// other than `type=auto`'s are loaded by `loader` on first use.
    pub fn new(
        models: Models,
        loader: Option<Loader>,
        inference_workers: usize,
        queue_capacity: usize,
        upload_buffer: u64,
    ) -> Pipeline {
        // Each inference worker's request, and one more decoding or encoding.
        let holding_pixels = inference_workers + 1;
        let mut list: Vec<Model> = Vec::new();
        let mut index = |spec: ModelSpec| match list.iter().position(|m| m.spec.name == spec.name) {
            Some(i) => i,
            None => {
                list.push(Model {
                    spec,
                    inference: Inference::start(inference_workers),
                    loading: Once::new(),
                });
                list.len() - 1
            }
        };
        index(models.auto);
        let person = index(models.person);
        let general = index(models.general);
        let blended = models.blended.into_iter().map(&mut index).collect();
        Pipeline {
            models: list,
            person,
            general,
            blended,
            loader,
            queue: WorkQueue::new(holding_pixels, queue_capacity, upload_buffer),
            spare_pixels: SparePixels::new(holding_pixels),
            max_pixels: crate::error::MAX_PIXELS_DECODED,
        }
    }

    /// Refuses photos of more than `max_pixels` (`image_too_large`): fewer
    /// than the API's 50 million where the board's memory is small.
    pub fn with_max_pixels(mut self, max_pixels: u64) -> Pipeline {
        self.max_pixels = max_pixels;
        self
    }

    /// The engine has run a model (or the server stops cleanly): this start
    /// did not crash in it.
    pub fn settle_trial(&self) {
        let Some(loader) = &self.loader else { return };
        if let (EngineKind::Onnxruntime, Some(trial)) = (loader.engine.kind, &loader.trial) {
            trial.settle();
        }
    }

    /// `type=auto`'s model: the one the server loads at start.
    pub fn default_model(&self) -> &Model {
        &self.models[0]
    }

    pub fn model(&self, subject: SubjectType) -> &Model {
        match subject {
            SubjectType::Auto => &self.models[0],
            SubjectType::Person => &self.models[self.person],
            SubjectType::General => &self.models[self.general],
        }
    }

    /// Loads `subject`'s model through the loader, and for `auto` the
    /// models its blend averages in, unless loaded, failed or being loaded
    /// (then waits): seconds for IS-Net on tract. The time it took, when
    /// this call loaded any.
    pub fn load(&self, subject: SubjectType) -> Option<Duration> {
        let mut took = self.load_model(self.model(subject));
        if subject == SubjectType::Auto {
            for &i in &self.blended {
                if let Some(more) = self.load_model(&self.models[i]) {
                    took = Some(took.unwrap_or_default() + more);
                }
            }
        }
        took
    }

    fn load_model(&self, model: &Model) -> Option<Duration> {
        let loader = self.loader.as_ref()?;
        let mut took = None;
        model.loading.call_once(|| {
            if !matches!(model.inference.ready(), Err(InferError::Loading)) {
                return;
            }
            if let (EngineKind::Onnxruntime, Some(trial)) = (loader.engine.kind, &loader.trial) {
                trial.begin();
            }
            let started = Instant::now();
            match engine::load(&model.spec, &loader.models_dir, &loader.engine) {
                Ok(engine) => {
                    let elapsed = started.elapsed();
                    log::info!(
                        "model {} loaded on {} in {:.2} s",
                        model.spec.name,
                        engine.name(),
                        elapsed.as_secs_f64()
                    );
                    model.inference.set(Readiness::Ready(engine));
                    took = Some(elapsed);
                }
                Err(e) => {
                    log::error!("model {} failed to load: {e:#}", model.spec.name);
                    model.inference.set(Readiness::Failed(format!("{e:#}")));
                }
            }
        });
        took
    }

    /// `type=auto`'s blend: the mean of `first` (the model's own view,
    /// before levels) and the other views, on `first`'s grid, levelled (the
    /// other models' views alone where the model's own see no subject); and
    /// the models that made it, joined by `+`.
    fn blend(
        &self,
        model: &Model,
        blend: &Blend,
        original: &DynamicImage,
        first: (&DynamicImage, &[u8]),
        watch: &mut Stopwatch,
    ) -> Result<(Vec<u8>, String), ApiError> {
        let grid = (first.0.width(), first.0.height());
        let mut sum: Vec<u16> = first.1.iter().map(|&a| u16::from(a)).collect();
        // The union of the model's own views' silhouettes, as a matte.
        let mut own_union: Vec<u8> = first.1.iter().map(|&a| silhouette(a)).collect();
        let laps = ["blend-prepare", "blend-model"];
        let mut views = 1;
        let mut least_agreement = 1.0f64;
        for &input in &blend.inputs {
            let (view_input, matte) = run_model(model, input, original, watch, laps)?;
            let size = (view_input.width(), view_input.height());
            let matte = imaging::resize_gray(&matte, size, grid);
            least_agreement = least_agreement.min(silhouettes_agree(first.1, &matte));
            for ((s, union), a) in sum.iter_mut().zip(&mut own_union).zip(matte) {
                *s += u16::from(a);
                *union |= silhouette(a);
            }
            views += 1;
        }
        let own_subject = own_union.iter().filter(|&&a| is_subject(a)).count() as f64;
        let doubt = blend.doubt.filter(|doubt| least_agreement < doubt.below);
        // A blended model that failed to load leaves its view out.
        let others = self.blended.iter().map(|&i| &self.models[i]);
        let others = others.filter(|other| match other.inference.ready() {
            Err(InferError::Failed(why)) => {
                log::warn!("{} left out of the blend: {why}", other.spec.name);
                false
            }
            _ => true,
        });
        let mut made_by = model.spec.name.clone();
        // Views that see no subject at all have missed it (a photo sent to
        // be cut out has one): where another model sees one, its view alone
        // makes the matte (BENCHMARKS.md, "Views that see nothing"). Their
        // sum is set aside until the others have been seen.
        let own_missed = (own_subject == 0.0).then(|| {
            let zeros = vec![0; sum.len()];
            (
                std::mem::replace(&mut sum, zeros),
                std::mem::replace(&mut views, 0),
            )
        });
        let mut others_see = false;
        for other in others {
            made_by = format!("{made_by}+{}", other.spec.name);
            let (view_input, matte) = run_model(other, other.spec.input, original, watch, laps)?;
            let size = (view_input.width(), view_input.height());
            let matte = imaging::resize_gray(&matte, size, grid);
            let subject = matte.iter().filter(|&&a| is_subject(a)).count() as f64;
            others_see |= subject > 0.0;
            let sees_more = match doubt {
                Some(doubt) if subject > doubt.others_larger_by * own_subject => doubt.others_count,
                _ => 1,
            };
            let agrees = match blend.agree {
                Some(agree) if silhouettes_agree(&own_union, &matte) > agree.over => {
                    agree.others_count
                }
                _ => 1,
            };
            let weight = sees_more.max(agrees);
            for (s, a) in sum.iter_mut().zip(matte) {
                *s += weight * u16::from(a);
            }
            views += weight;
        }
        if let Some((own_sum, own_views)) = own_missed.filter(|_| !others_see) {
            for (s, o) in sum.iter_mut().zip(own_sum) {
                *s += o;
            }
            views += own_views;
        }
        let mut matte: Vec<u8> = sum
            .iter()
            .map(|&s| ((s + views / 2) / views) as u8)
            .collect();
        apply_levels(&mut matte, blend.levels);
        Ok((matte, made_by))
    }

    /// The person model, its photo and its matte, where the configured model is
    /// unsure of the subject and the person model, far surer, agrees with it
    /// on most of it (`second_opinion` in the manifest; BENCHMARKS.md,
    /// "A second opinion"). `None` keeps the first matte, also when the
    /// person model cannot run.
    fn second_opinion(
        &self,
        subject: SubjectType,
        original: &DynamicImage,
        (first_input, first): (&DynamicImage, &[u8]),
        watch: &mut Stopwatch,
    ) -> Option<(&Model, DynamicImage, Vec<u8>)> {
        // `person` is `auto`'s own model when there is only one.
        let asks = subject == SubjectType::Auto && self.default_model().spec.second_opinion;
        if !asks || self.person == 0 {
            return None;
        }
        let first_unsure = unsure(first);
        if first_unsure <= ASK_WHEN_UNSURE_OVER {
            return None;
        }
        self.load(SubjectType::Person);
        let person = &self.models[self.person];
        let laps = ["second-prepare", "second-model"];
        let (input, matte) = match run_model(person, person.spec.input, original, watch, laps) {
            Ok(second) => second,
            Err(e) => {
                log::warn!("no second opinion from {}: {e}", person.spec.name);
                return None;
            }
        };
        let second_unsure = unsure(&matte);
        let size = |image: &DynamicImage| (image.width(), image.height());
        let agree = agreement(first, size(first_input), &matte, size(&input));
        log::debug!(
            "second opinion from {}: unsure {first_unsure:.3} -> {second_unsure:.3}, \
             agreement {agree:.2}",
            person.spec.name
        );
        let far_surer = second_unsure < first_unsure * KEEP_WHEN_UNSURE_UNDER;
        (far_surer && agree > AGREE_OVER).then_some((person, input, matte))
    }

    /// Cuts out `bytes`, read while holding `ticket`, with `subject`'s
    /// model, and makes the file `finish` asks for.
    pub fn cut_out(
        &self,
        ticket: Ticket<'_>,
        bytes: &[u8],
        size: SizeMode,
        subject: SubjectType,
        finish: &Finish,
    ) -> Result<CutOut, ApiError> {
        self.cut_out_for(ticket, bytes, size, subject, finish, &|| false)
    }

    /// `cut_out` for a client that may hang up while it waits its turn:
    /// once the turn comes, `client_gone` is asked, and a client gone is
    /// spared the work (`ApiError::ClientGone`).
    pub fn cut_out_for(
        &self,
        mut ticket: Ticket<'_>,
        bytes: &[u8],
        size: SizeMode,
        subject: SubjectType,
        finish: &Finish,
        client_gone: &dyn Fn() -> bool,
    ) -> Result<CutOut, ApiError> {
        imaging::format_of(bytes)?;
        if let Some(Background::Image(file)) = &finish.background {
            imaging::format_of(file).map_err(background_error)?;
        }
        let mut watch = Stopwatch::start();
        ticket.wait_for_turn();
        watch.lap("queue");
        if client_gone() {
            return Err(ApiError::ClientGone);
        }
        self.load(subject);
        let model = self.model(subject);
        let original = imaging::decode_reusing(bytes, self.spare_pixels.take(), self.max_pixels)?;
        watch.lap("decode");
        let (w, h) = (original.width(), original.height());
        if let Some(why) = finish.roi.as_ref().and_then(|roi| roi.outside(w, h)) {
            return Err(ApiError::InvalidOption {
                field: OptionField::Roi,
                why,
            });
        }
        let (out_w, out_h) = imaging::output_size(w, h, size).map_err(|e| match e {
            GeometryError::ResolutionTooHigh => ApiError::ResolutionTooHigh {
                width: w,
                height: h,
            },
        })?;

        let spec = &model.spec;
        let laps = ["prepare", "model"];
        let (mut model_input, mut first) =
            run_model_unless(model, spec.input, &original, &mut watch, laps, client_gone)?;
        self.settle_trial();
        // The raw matte is kept only for a blend; otherwise it is levelled in place.
        let blends = subject == SubjectType::Auto && spec.blend.is_some();
        let mut alone = if blends {
            first.clone()
        } else {
            std::mem::take(&mut first)
        };
        if let Some(levels) = spec.levels {
            apply_levels(&mut alone, levels);
        }
        // A photo the person model takes is not worth the blend's views.
        let asked = self.second_opinion(subject, &original, (&model_input, &alone), &mut watch);
        let (made_by, mut small_matte) = match (asked, &spec.blend, subject) {
            (Some((person, input, matte)), ..) => {
                model_input = input;
                (person.spec.name.clone(), matte)
            }
            (None, Some(blend), SubjectType::Auto) => {
                let first = (&model_input, first.as_slice());
                let (matte, made_by) = self.blend(model, blend, &original, first, &mut watch)?;
                (made_by, matte)
            }
            (None, ..) => (spec.name.clone(), alone),
        };
        if let (Some(smallest), SubjectType::Auto) = (spec.smallest_part, subject) {
            imaging::keep_main_parts(&mut small_matte, model_input.width() as usize, smallest);
        }
        let kept = if (out_w, out_h) == (w, h) {
            original
        } else {
            let resized = imaging::resize(&original, out_w, out_h);
            self.spare_pixels.give(original);
            resized
        };
        let finished = if finish.is_plain() {
            let (png, foreground) =
                imaging::cut_out_png(&kept, &model_input, &small_matte, finish.channels);
            watch.lap("compose");
            self.spare_pixels.give(kept);
            imaging::Finished {
                bytes: png,
                media_type: "image/png",
                width: out_w,
                height: out_h,
                foreground,
            }
        } else {
            let cut = imaging::cut_out_image(&kept, &model_input, &small_matte);
            watch.lap("compose");
            // The photo's memory is free for the background's.
            self.spare_pixels.give(kept);
            let finished = imaging::finish(cut, (w, h), finish).map_err(|e| match e {
                FinishError::TooLarge { format, most } => ApiError::InvalidOption {
                    field: OptionField::Format,
                    why: format!("a {format} is at most {most} pixels a side"),
                },
                FinishError::Background(e) => background_error(e),
            })?;
            watch.lap("finish");
            finished
        };
        Ok(CutOut {
            bytes: finished.bytes,
            media_type: finished.media_type,
            foreground: finished.foreground,
            width: finished.width,
            height: finished.height,
            model: made_by,
            timings: watch.laps,
        })
    }
}

/// Decoded photos' memory, handed on to the next request's decode: fresh
/// pages are faulted in one by one, which for a 12 MP photo's 36 MB took a
/// third of the decode. At most one buffer a request that may hold pixels
/// is kept, and none over `MAX_SPARE_BYTES`, so idle memory stays bounded.
struct SparePixels {
    buffers: Mutex<Vec<Vec<u8>>>,
    most: usize,
}

/// A 16 MP photo with alpha; a larger one's memory goes back to the system.
const MAX_SPARE_BYTES: usize = 64 << 20;

impl SparePixels {
    fn new(most: usize) -> SparePixels {
        SparePixels {
            buffers: Mutex::default(),
            most,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Vec<u8>>> {
        self.buffers.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take(&self) -> Vec<u8> {
        self.lock().pop().unwrap_or_default()
    }

    fn give(&self, image: DynamicImage) {
        let pixels = image.into_bytes();
        let mut buffers = self.lock();
        if pixels.capacity() <= MAX_SPARE_BYTES && buffers.len() < self.most {
            buffers.push(pixels);
        }
    }
}

/// `model`'s input photo (the original scaled to `input`'s grid) and its
/// matte on that grid, before levels; `laps` name the two steps in `watch`.
fn run_model(
    model: &Model,
    input: InputSpec,
    original: &DynamicImage,
    watch: &mut Stopwatch,
    laps: [&'static str; 2],
) -> Result<(DynamicImage, Vec<u8>), ApiError> {
    run_model_unless(model, input, original, watch, laps, &|| false)
}

/// `run_model`, withdrawn (`ApiError::ClientGone`) if `client_gone` says
/// so once an inference worker is free for it.
fn run_model_unless(
    model: &Model,
    input: InputSpec,
    original: &DynamicImage,
    watch: &mut Stopwatch,
    laps: [&'static str; 2],
    client_gone: &dyn Fn() -> bool,
) -> Result<(DynamicImage, Vec<u8>), ApiError> {
    let spec = &model.spec;
    let place = placement(input, original.width(), original.height());
    let (in_w, in_h) = place.input;
    let (image_w, image_h) = place.image_size();
    let model_input = imaging::resize_with(original, image_w, image_h, spec.input_filter);
    let tensor = to_tensor(&model_input, &spec.normalise, place);
    watch.lap(laps[0]);
    let output = model
        .inference
        .run_unless(tensor, in_w, in_h, client_gone)
        .map_err(|e| match e {
            InferError::Loading | InferError::Failed(_) => ApiError::Unavailable(e.to_string()),
            InferError::Run(cause) => ApiError::Internal(cause),
            InferError::Withdrawn => ApiError::ClientGone,
        })?;
    watch.lap(laps[1]);
    Ok((model_input, matte_from_output(&output, spec.output, place)))
}

/// A matte's silhouette: alpha 0.5 and over.
fn is_subject(alpha: u8) -> bool {
    alpha >= 128
}

/// A matte's silhouette as a matte: opaque where it is subject, clear elsewhere.
fn silhouette(alpha: u8) -> u8 {
    if is_subject(alpha) {
        255
    } else {
        0
    }
}

/// How much of what two mattes on one grid call subject both do: their
/// silhouettes' intersection over union. Two empty mattes agree.
fn silhouettes_agree(first: &[u8], second: &[u8]) -> f64 {
    let (mut both, mut either) = (0u64, 0u64);
    for (a, b) in first
        .iter()
        .zip(second)
        .map(|(&a, &b)| (is_subject(a), is_subject(b)))
    {
        both += u64::from(a && b);
        either += u64::from(a || b);
    }
    if either == 0 {
        1.0
    } else {
        both as f64 / either as f64
    }
}

/// Alpha from 0.05 to 0.95: neither subject nor background.
const PARTIAL: std::ops::Range<u8> = 13..243;
/// A matte more than this partial, over its subject, is asked about again.
const ASK_WHEN_UNSURE_OVER: f64 = 0.1;
/// The second matte is kept where it is less than half as unsure...
const KEEP_WHEN_UNSURE_UNDER: f64 = 0.5;
/// ...and covers more than half of what the two cover.
const AGREE_OVER: f64 = 0.5;

/// How much of what a matte calls subject (alpha over 0.05) it is unsure
/// of: a model sure of its subject leaves only a rim partial. A matte
/// with no subject is sure of nothing.
fn unsure(matte: &[u8]) -> f64 {
    let (mut subject, mut partial) = (0usize, 0usize);
    for &a in matte.iter().filter(|&&a| a >= PARTIAL.start) {
        subject += 1;
        partial += usize::from(a < PARTIAL.end);
    }
    match subject {
        0 => 1.0,
        _ => partial as f64 / subject as f64,
    }
}

/// How far two mattes of one photo call the same pixels subject: the sum
/// of their smaller alpha over the sum of their larger (1 the same, 0
/// disjoint), compared at the first's size.
fn agreement(first: &[u8], first_size: (u32, u32), second: &[u8], second_size: (u32, u32)) -> f64 {
    let second = imaging::resize_gray(second, second_size, first_size);
    let (mut both, mut either) = (0u64, 0u64);
    for (&a, &b) in first.iter().zip(&second) {
        both += u64::from(a.min(b));
        either += u64::from(a.max(b));
    }
    both as f64 / either.max(1) as f64
}

/// A background image that cannot be used, named as such.
fn background_error(e: DecodeError) -> ApiError {
    let why = match e {
        DecodeError::TooLarge { width, height, .. } => format!(
            "it is {width}x{height}; a background may have at most {} pixels, the most a result has",
            crate::error::MAX_PIXELS_OUTPUT
        ),
        other => other.to_string(),
    };
    ApiError::InvalidOption {
        field: OptionField::BgImageFile,
        why,
    }
}

impl From<DecodeError> for ApiError {
    fn from(e: DecodeError) -> ApiError {
        match e {
            DecodeError::Unsupported => ApiError::UnsupportedImageFormat,
            DecodeError::TooLarge {
                width,
                height,
                most,
            } => ApiError::ImageTooLarge {
                width,
                height,
                most,
            },
            DecodeError::Invalid(why) => ApiError::InvalidImage(why),
        }
    }
}

/// Bounds what the server holds at once. Up to `max_running` requests hold
/// decoded pixels (one per inference worker, plus one decoding or encoding
/// beside them); the others wait in line, at most `capacity()` in all, past
/// which a request is refused at once. Turns go in the order requests were
/// ready for one, so nobody's wait grows while later arrivals go first. A
/// request in line reads its upload only when the uploads held fit in
/// `upload_buffer` bytes, and its account's in half of them; until then it
/// holds only its connection (the client's bytes wait in the network). So
/// one account's uploads, however slowly they come, leave room for
/// another's.
pub struct WorkQueue {
    counts: Mutex<Counts>,
    changed: Condvar,
    max_running: usize,
    max_waiting: usize,
    upload_buffer: u64,
}

#[derive(Default)]
struct Counts {
    running: usize,
    waiting: usize,
    /// Bytes reserved by the uploads being read or held.
    uploads: u64,
    /// The same, by account.
    uploads_by: HashMap<i64, u64>,
    /// The number the next ticket ready for a turn takes, and the one
    /// whose turn is next.
    next_ticket: u64,
    next_turn: u64,
}

/// A request's place in line; its upload's reservation and, once it has
/// its turn, its right to hold pixels. Both end when it is dropped.
pub struct Ticket<'q> {
    queue: &'q WorkQueue,
    upload: u64,
    account: Option<i64>,
    running: bool,
}

impl WorkQueue {
    pub fn new(max_running: usize, max_waiting: usize, upload_buffer: u64) -> WorkQueue {
        WorkQueue {
            counts: Mutex::default(),
            changed: Condvar::new(),
            max_running: max_running.max(1),
            max_waiting,
            upload_buffer,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait<'a>(&self, counts: MutexGuard<'a, Counts>) -> MutexGuard<'a, Counts> {
        self.changed.wait(counts).unwrap_or_else(|p| p.into_inner())
    }

    /// A ticket in line for an upload of at most `upload` bytes, once the
    /// uploads held leave room for it (one upload alone always fits); `None`
    /// at once if the line is full.
    pub fn join(&self, upload: u64) -> Option<Ticket<'_>> {
        self.join_as(None, upload)
    }

    /// `join` for `account`'s upload, which also waits while the account's
    /// uploads would hold more than half the buffer (one alone always fits).
    pub fn join_as(&self, account: Option<i64>, upload: u64) -> Option<Ticket<'_>> {
        let mut counts = self.lock();
        if counts.running + counts.waiting >= self.capacity() {
            return None;
        }
        counts.waiting += 1;
        let share = self.upload_buffer / 2;
        let held_by = |counts: &Counts| {
            account.map_or(0, |a| counts.uploads_by.get(&a).copied().unwrap_or(0))
        };
        while (counts.uploads > 0 && counts.uploads + upload > self.upload_buffer)
            || (held_by(&counts) > 0 && held_by(&counts) + upload > share)
        {
            counts = self.wait(counts);
        }
        counts.uploads += upload;
        if let Some(account) = account {
            *counts.uploads_by.entry(account).or_default() += upload;
        }
        Some(Ticket {
            queue: self,
            upload,
            account,
            running: false,
        })
    }

    /// Requests running and waiting.
    pub fn depth(&self) -> usize {
        let counts = self.lock();
        counts.running + counts.waiting
    }

    /// Bytes reserved by the uploads being read or held.
    pub fn uploads_held(&self) -> u64 {
        self.lock().uploads
    }

    /// The most requests it holds before refusing.
    pub fn capacity(&self) -> usize {
        self.max_running + self.max_waiting
    }
}

impl Ticket<'_> {
    /// Waits until this request may hold decoded pixels.
    pub fn wait_for_turn(&mut self) {
        if self.running {
            return;
        }
        let queue = self.queue;
        let mut counts = queue.lock();
        let number = counts.next_ticket;
        counts.next_ticket += 1;
        while counts.next_turn != number || counts.running >= queue.max_running {
            counts = queue.wait(counts);
        }
        counts.next_turn += 1;
        counts.waiting -= 1;
        counts.running += 1;
        self.running = true;
        let slot_left = counts.running < queue.max_running;
        drop(counts);
        // The next ticket may have woken before this one and gone back to
        // sleep; only a slot still free is worth waking it for.
        if slot_left {
            queue.changed.notify_all();
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut counts = self.queue.lock();
        if self.running {
            counts.running -= 1;
        } else {
            counts.waiting -= 1;
        }
        counts.uploads -= self.upload;
        if let Some(account) = self.account {
            if let Some(held) = counts.uploads_by.get_mut(&account) {
                *held -= self.upload;
                if *held == 0 {
                    counts.uploads_by.remove(&account);
                }
            }
        }
        drop(counts);
        // Waiters for a turn and for upload room share the condition.
        self.queue.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `w`×`h` matte: a disc of radius `r` at the centre, opaque inside,
    /// with a one-pixel partial rim, and `inside` as the disc's alpha.
    fn disc(w: u32, h: u32, r: f64, inside: u8) -> Vec<u8> {
        let (cx, cy) = (f64::from(w) / 2.0, f64::from(h) / 2.0);
        (0..h)
            .flat_map(|y| (0..w).map(move |x| (f64::from(x) + 0.5, f64::from(y) + 0.5)))
            .map(|(x, y)| {
                let d = ((x - cx).powi(2) + (y - cy).powi(2)).sqrt();
                if d < r - 1.0 {
                    inside
                } else if d < r {
                    128
                } else {
                    0
                }
            })
            .collect()
    }

    /// Answers every run with `value`, or `square` on a square input.
    struct Fill {
        value: f32,
        square: f32,
    }

    impl engine::Engine for Fill {
        fn name(&self) -> &'static str {
            "fill"
        }

        fn run(&self, _: Vec<f32>, width: u32, height: u32) -> anyhow::Result<Vec<f32>> {
            let value = if width == height {
                self.square
            } else {
                self.value
            };
            Ok(vec![value; (width * height) as usize])
        }
    }

    /// IS-Net as `type=auto`, `general` and `person`, blending U2NetP in;
    /// no loader: each test sets the engines.
    fn isnet_blending_u2netp() -> Pipeline {
        let manifest = crate::engine::Manifest::builtin();
        let isnet = manifest.require(Some("isnet")).unwrap().clone();
        let u2netp = manifest.require(Some("u2netp")).unwrap().clone();
        let models = Models {
            auto: isnet.clone(),
            person: isnet.clone(),
            general: isnet,
            blended: vec![u2netp],
        };
        Pipeline::new(models, None, 1, 0, u64::MAX)
    }

    fn black_png(width: u32, height: u32) -> Vec<u8> {
        let mut png = Vec::new();
        DynamicImage::ImageRgb8(image::RgbImage::new(width, height))
            .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
            .unwrap();
        png
    }

    fn set_engine(pipeline: &Pipeline, model: usize, engine: impl engine::Engine + 'static) {
        let ready = Readiness::Ready(std::sync::Arc::new(engine));
        pipeline.models[model].inference.set(ready);
    }

    /// A black 400×300 photo cut out as `subject`: the models that made
    /// it, its alpha, the steps it took.
    fn cut_black_photo(
        pipeline: &Pipeline,
        subject: SubjectType,
    ) -> (String, image::GrayImage, Vec<&'static str>) {
        let photo = black_png(400, 300);
        let ticket = pipeline.queue.join(photo.len() as u64).unwrap();
        let cut = pipeline
            .cut_out(ticket, &photo, SizeMode::Auto, subject, &Finish::default())
            .unwrap();
        let png = image::load_from_memory(&cut.bytes).unwrap().to_rgba8();
        let alpha =
            image::GrayImage::from_fn(400, 300, |x, y| image::Luma([png.get_pixel(x, y)[3]]));
        let laps = cut.timings.iter().map(|(name, _)| *name).collect();
        (cut.model, alpha, laps)
    }

    #[test]
    fn auto_blends_its_views_trusting_the_others_more_where_its_own_disagree() {
        let pipeline = isnet_blending_u2netp();
        let ready = |i, value, square| set_engine(&pipeline, i, Fill { value, square });
        let cut_out = |subject| {
            let (model, alpha, laps) = cut_black_photo(&pipeline, subject);
            (model, alpha.get_pixel(200, 150).0[0], laps)
        };
        // IS-Net 0.6 at the photo's aspect and squashed: its views agree,
        // so (0.6 + 0.6 + U2NetP's 0) / 3 = 0.4, levelled by [0.35, 0.55].
        ready(0, 0.6, 0.6);
        ready(1, 0.0, 0.0);
        let (model, alpha, _) = cut_out(SubjectType::Auto);
        assert_eq!(model, "isnet+u2netp");
        assert!(alpha.abs_diff(64) <= 1, "{alpha}");
        // IS-Net 0.4 and 1.0: only the squashed view calls it subject, so
        // their silhouettes agree on none of it; but U2NetP's 0 calls less
        // of it subject and counts once: (0.4 + 1.0 + 0) / 3 = 0.467.
        ready(0, 0.4, 1.0);
        ready(1, 0.0, 0.0);
        let (model, alpha, laps) = cut_out(SubjectType::Auto);
        assert_eq!(model, "isnet+u2netp");
        assert!(alpha.abs_diff(149) <= 1, "{alpha}");
        let blend_laps = laps.iter().filter(|l| l.starts_with("blend-")).count();
        assert_eq!(blend_laps, 2, "both other views add to one pair: {laps:?}");
        let (model, alpha, laps) = cut_out(SubjectType::General);
        assert_eq!(model, "isnet");
        // 0.4 alone, levelled by IS-Net's own [0.1, 0.7].
        assert!(alpha.abs_diff(128) <= 1, "{alpha}");
        assert_eq!(laps, ["queue", "decode", "prepare", "model", "compose"]);

        // U2NetP failed to load: IS-Net's two views alone, (0.4 + 1.0) / 2.
        let failed = Readiness::Failed("no file".into());
        pipeline.models[1].inference.set(failed);
        let (model, alpha, _) = cut_out(SubjectType::Auto);
        assert_eq!(model, "isnet");
        assert_eq!(alpha, 255);
    }

    #[test]
    fn auto_takes_the_others_alone_where_its_own_views_see_nothing() {
        let pipeline = isnet_blending_u2netp();
        // U2NetP: sure of the left half.
        set_engine(
            &pipeline,
            1,
            Columns {
                square: 0.5,
                other: 0.5,
            },
        );
        let alpha_at = |x, isnet| {
            set_engine(
                &pipeline,
                0,
                Fill {
                    value: isnet,
                    square: isnet,
                },
            );
            cut_black_photo(&pipeline, SubjectType::Auto)
                .1
                .get_pixel(x, 150)
                .0[0]
        };
        // IS-Net's views, 0.2, call nothing subject: U2NetP's alone makes
        // the matte, not (0.2 + 0.2 + 1) / 3 = 0.467 (149 once levelled).
        assert_eq!(alpha_at(100, 0.2), 255);
        assert_eq!(alpha_at(300, 0.2), 0);
        // IS-Net's views, 0.7, see a subject: they count, (0.7 + 0.7 + 0)
        // / 3 = 0.467 on the right.
        assert!(alpha_at(300, 0.7).abs_diff(149) <= 2);
    }

    /// Sure of the left half of any input and of its bottom-right corner
    /// (a hundredth of it).
    struct HalfAndCorner;

    impl engine::Engine for HalfAndCorner {
        fn name(&self) -> &'static str {
            "half-and-corner"
        }

        fn run(&self, _: Vec<f32>, width: u32, height: u32) -> anyhow::Result<Vec<f32>> {
            let sure =
                |x: u32, y: u32| x < width / 2 || (x >= width * 9 / 10 && y >= height * 9 / 10);
            let matte = (0..height).flat_map(|y| (0..width).map(move |x| sure(x, y)));
            Ok(matte.map(|s| if s { 1.0 } else { 0.0 }).collect())
        }
    }

    #[test]
    fn auto_drops_the_parts_far_smaller_than_its_subject_and_general_keeps_them() {
        let pipeline = isnet_blending_u2netp();
        assert_eq!(pipeline.models[0].spec.smallest_part, Some(0.2));
        for model in 0..pipeline.models.len() {
            set_engine(&pipeline, model, HalfAndCorner);
        }
        let alpha = |subject, (x, y)| cut_black_photo(&pipeline, subject).1.get_pixel(x, y).0[0];
        let (half, corner) = ((100, 150), (390, 290));
        assert_eq!(alpha(SubjectType::Auto, half), 255);
        assert_eq!(alpha(SubjectType::Auto, corner), 0);
        assert_eq!(alpha(SubjectType::General, half), 255);
        assert_eq!(alpha(SubjectType::General, corner), 255);
    }

    /// Opaque left of `square` of the width on a square input, left of
    /// `other` on any other; clear elsewhere.
    struct Columns {
        square: f32,
        other: f32,
    }

    impl engine::Engine for Columns {
        fn name(&self) -> &'static str {
            "columns"
        }

        fn run(&self, _: Vec<f32>, width: u32, height: u32) -> anyhow::Result<Vec<f32>> {
            let edge = width as f32
                * if width == height {
                    self.square
                } else {
                    self.other
                };
            let row = (0..width).map(|x| if (x as f32) < edge { 1.0 } else { 0.0 });
            Ok(row.cycle().take((width * height) as usize).collect())
        }
    }

    #[test]
    fn auto_counts_the_others_twice_where_they_see_more_than_its_disagreeing_views_or_agree_with_them(
    ) {
        let pipeline = isnet_blending_u2netp();
        let ready = |i, square, other| set_engine(&pipeline, i, Columns { square, other });
        let blend = pipeline.models[0].spec.blend.as_ref().unwrap();
        let (doubt, agree) = (blend.doubt.unwrap(), blend.agree.unwrap());
        assert_eq!(doubt.below, 0.8);
        assert_eq!(doubt.others_larger_by, 1.2);
        assert_eq!(doubt.others_count, 2);
        assert_eq!(agree.over, 0.8);
        assert_eq!(agree.others_count, 2);
        let alpha_at = |x| {
            cut_black_photo(&pipeline, SubjectType::Auto)
                .1
                .get_pixel(x, 150)
                .0[0]
        };
        // IS-Net's views: the left half at the photo's aspect, the left
        // quarter squashed (they agree on half); U2NetP: the left 0.9,
        // more than 1.2 times the half. At 0.7 of the width only U2NetP
        // sees the subject: 2 / 4 = 0.5 (128 of 255), levelled by [0.35, 0.55].
        ready(0, 0.25, 0.5);
        ready(1, 0.9, 0.9);
        assert!(alpha_at(280).abs_diff(194) <= 2);
        // IS-Net's views agree (the left half both), and U2NetP's left 0.7
        // agrees with them on 0.71, not over 0.8: it counts once, and at
        // 0.6 of the width 1 / 3 = 0.333 is under the levels.
        ready(0, 0.5, 0.5);
        ready(1, 0.7, 0.7);
        assert_eq!(alpha_at(240), 0);
        // U2NetP's left 0.55 agrees with the half on 0.91: it counts twice,
        // and at 0.525 of the width 2 / 4 = 0.5, levelled.
        ready(1, 0.55, 0.55);
        assert!(alpha_at(210).abs_diff(194) <= 2);
    }

    #[test]
    fn silhouettes_agree_on_their_intersection_over_their_union() {
        let left = [255, 255, 200, 0];
        assert_eq!(silhouettes_agree(&left, &left), 1.0);
        assert_eq!(silhouettes_agree(&left, &[0, 255, 255, 127]), 2.0 / 3.0);
        assert_eq!(silhouettes_agree(&left, &[0, 0, 0, 127]), 0.0);
        assert_eq!(silhouettes_agree(&[0; 4], &[127; 4]), 1.0, "both empty");
    }

    #[test]
    fn spare_pixels_are_kept_one_a_running_request_and_never_huge() {
        let image =
            |bytes: usize| DynamicImage::ImageRgb8(image::RgbImage::new(bytes as u32 / 3, 1));
        let spare = SparePixels::new(2);
        assert!(spare.take().is_empty(), "none yet");
        spare.give(image(MAX_SPARE_BYTES + 3));
        for _ in 0..3 {
            spare.give(image(300));
        }
        assert_eq!(spare.take().len(), 300);
        assert_eq!(spare.take().len(), 300);
        assert!(
            spare.take().is_empty(),
            "two kept, the third and the huge one freed"
        );
    }

    #[test]
    fn a_matte_is_unsure_where_its_subject_is_partial() {
        let sure = unsure(&disc(100, 100, 30.0, 255));
        assert!(sure < 0.1, "only the rim is partial: {sure}");
        assert_eq!(unsure(&disc(100, 100, 30.0, 128)), 1.0, "all grey");
        let half = unsure(&[255, 255, 128, 128, 0, 0]);
        assert!((half - 0.5).abs() < 1e-9, "{half}");
        assert_eq!(unsure(&[0; 64]), 1.0, "no subject: sure of nothing");
        assert_eq!(unsure(&[12; 64]), 1.0, "alpha under 0.05 is no subject");
    }

    #[test]
    fn mattes_agree_on_the_same_subject_at_any_size() {
        let first = disc(200, 150, 50.0, 255);
        let same = agreement(&first, (200, 150), &first, (200, 150));
        assert!((same - 1.0).abs() < 1e-9);
        // The same disc on a grid of another size and aspect.
        let second = disc(100, 75, 25.0, 255);
        let scaled = agreement(&first, (200, 150), &second, (100, 75));
        assert!(scaled > 0.95, "{scaled}");
        let elsewhere: Vec<u8> = disc(200, 150, 50.0, 255)
            .chunks(200)
            .flat_map(|row| {
                row.iter()
                    .cycle()
                    .skip(100)
                    .take(200)
                    .copied()
                    .collect::<Vec<_>>()
            })
            .collect();
        let apart = agreement(&first, (200, 150), &elsewhere, (200, 150));
        assert!(apart < 0.05, "disjoint discs: {apart}");
        let smaller = agreement(&first, (200, 150), &disc(200, 150, 25.0, 255), (200, 150));
        assert!(
            (0.2..0.3).contains(&smaller),
            "a quarter of the area: {smaller}"
        );
        assert_eq!(
            agreement(&[0; 4], (2, 2), &[0; 4], (2, 2)),
            0.0,
            "nothing to agree on"
        );
    }

    #[test]
    fn the_queue_refuses_only_when_running_and_waiting_are_both_full() {
        let queue = WorkQueue::new(1, 1, u64::MAX);
        let mut first = queue.join(10).unwrap();
        first.wait_for_turn();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| queue.join(10).map(|mut ticket| ticket.wait_for_turn()));
            while queue.depth() < 2 {
                std::thread::yield_now();
            }
            assert!(queue.join(10).is_none(), "one running, one waiting: full");
            drop(first);
            assert!(waiter.join().unwrap().is_some(), "the waiter gets its turn");
        });
        assert_eq!(queue.depth(), 0);
    }

    #[test]
    fn turns_go_in_the_order_requests_were_ready() {
        let queue = WorkQueue::new(1, 8, u64::MAX);
        let mut first = queue.join(10).unwrap();
        first.wait_for_turn();
        let served = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for arrival in 0..6 {
                let (queue, served) = (&queue, &served);
                s.spawn(move || {
                    let mut ticket = queue.join(10).unwrap();
                    ticket.wait_for_turn();
                    served.lock().unwrap().push(arrival);
                });
                // The next one arrives once this one holds its ticket.
                while queue.lock().next_ticket < arrival + 2 {
                    std::thread::yield_now();
                }
            }
            drop(first);
        });
        assert_eq!(served.into_inner().unwrap(), (0..6).collect::<Vec<u64>>());
    }

    #[test]
    fn uploads_are_read_only_while_they_fit_the_buffer() {
        let queue = WorkQueue::new(1, 8, 25);
        let a = queue.join(10).unwrap();
        let b = queue.join(10).unwrap();
        std::thread::scope(|s| {
            let third = s.spawn(|| queue.join(10).map(|_| ()));
            while queue.depth() < 3 {
                std::thread::yield_now();
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert!(!third.is_finished(), "30 bytes would not fit in 25");
            drop(a);
            assert!(third.join().unwrap().is_some(), "room once one is done");
        });
        drop(b);
        let alone = queue.join(1000).unwrap();
        assert_eq!(
            alone.upload, 1000,
            "an upload larger than the buffer still fits alone"
        );
    }

    #[test]
    fn one_accounts_uploads_leave_room_for_anothers() {
        let queue = WorkQueue::new(1, 8, 40);
        let held = [queue.join_as(Some(1), 10), queue.join_as(Some(1), 10)];
        std::thread::scope(|s| {
            let third = s.spawn(|| queue.join_as(Some(1), 10).map(|_| ()));
            while queue.depth() < 3 {
                std::thread::yield_now();
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert!(
                !third.is_finished(),
                "account 1 holds its half of the buffer"
            );
            let other = queue.join_as(Some(2), 10).expect("room for account 2");
            assert_eq!(queue.uploads_held(), 30);
            drop(other);
            drop(held);
            assert!(
                third.join().unwrap().is_some(),
                "room once its own are done"
            );
        });
        assert_eq!(queue.uploads_held(), 0);
        assert!(queue.lock().uploads_by.is_empty());
    }
}
