//! One cut-out, start to finish: decode, size, run the model(s), put the
//! matte in the alpha channel, encode. The API and `cutout remove` share
//! it. How `type=auto` combines several mattes is `views`; the server-wide
//! back-pressure is `queue`; decoded photos' memory is reused through
//! `spare`.

pub mod memory;
mod queue;
pub mod rungs;
mod spare;
mod views;

pub use queue::{Held, NoTurn, Place, WorkQueue};
pub use rungs::{PersonRung, Rung};

use crate::domain::{SizeMode, SubjectType};
use crate::engine::preprocess::{
    apply_levels, input_layout, matte_from_output, to_tensor, InputLayout,
};
pub use crate::engine::Models;
use crate::engine::{
    self, Blend, EngineChoice, EngineKind, InferError, Inference, InputFilter, InputSpec,
    LoadWatch, Median, ModelSpec, OnnxRuntimeTrial, Readiness,
};
use crate::error::{ApiError, OptionField};
use crate::imaging::{self, Background, DecodeError, Finish, FinishError, GeometryError};
use image::DynamicImage;
use spare::SparePixels;
use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::Once;
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

impl Model {
    /// The engine it runs on, once loaded.
    pub fn engine(&self) -> Option<EngineKind> {
        match self.inference.engine_name()? {
            "tract-onnx" => Some(EngineKind::Tract),
            "onnxruntime" => Some(EngineKind::Onnxruntime),
            _ => None,
        }
    }
}

/// Where models named by `type` are loaded from on first use.
pub struct Loader {
    pub models_dir: PathBuf,
    pub engine: EngineChoice,
    /// Set where a crash inside ONNX Runtime must not become a crash loop.
    pub trial: Option<OnnxRuntimeTrial>,
    /// Set where a load killed for memory must not become a kill loop.
    pub loads: Option<LoadWatch>,
}

pub struct Pipeline {
    /// `type=auto`'s model first, then any other `type` names.
    pub models: Vec<Model>,
    person: usize,
    general: usize,
    /// `auto`'s blend's other models.
    blended: Vec<usize>,
    /// `person`'s median's other models.
    in_median: Vec<usize>,
    /// `None`: every model is set by the caller (`Inference::set`).
    loader: Option<Loader>,
    pub queue: WorkQueue,
    spare_pixels: SparePixels,
    /// The most pixels a photo may decode to.
    max_pixels: u64,
    /// The rung of `Rung::ALL` that `type=auto` serves.
    serving: AtomicUsize,
    /// The rung of `PersonRung::ALL` that `type=person` serves.
    serving_person: AtomicUsize,
    /// Every view of `type=auto` runs, whatever the first says: the bench
    /// times the most a photo can cost.
    every_view: bool,
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
        let in_median = models.in_median.into_iter().map(&mut index).collect();
        let pipeline = Pipeline {
            models: list,
            person,
            general,
            blended,
            in_median,
            loader,
            queue: WorkQueue::new(holding_pixels, queue_capacity, upload_buffer),
            spare_pixels: SparePixels::new(holding_pixels),
            max_pixels: crate::error::MAX_PIXELS_DECODED,
            serving: AtomicUsize::new(0),
            serving_person: AtomicUsize::new(0),
            every_view: false,
        };
        pipeline.serve(pipeline.rungs()[0]);
        pipeline.serve_person(pipeline.person_rungs()[0]);
        pipeline
    }

    /// Runs every view of `type=auto` on every photo (`cutout bench`).
    pub fn with_every_view(mut self) -> Pipeline {
        self.every_view = true;
        self
    }
    /// Refuses photos of more than `max_pixels` (`image_too_large`): fewer
    /// than the API's 50 million where the board's memory is small.
    pub fn with_max_pixels(mut self, max_pixels: u64) -> Pipeline {
        self.max_pixels = max_pixels;
        self
    }

    /// Bounds what the requests at work hold at once to `bytes`, the spare
    /// photos kept between them included (`memory::need`).
    pub fn with_memory_budget(mut self, bytes: u64) -> Pipeline {
        if bytes == u64::MAX {
            return self;
        }
        let spare = self.spare_pixels.with_share_of(bytes);
        self.queue = self.queue.with_memory_budget(bytes.saturating_sub(spare));
        self
    }

    /// `model`'s input photo (the original scaled to `input`'s grid) and its
    /// matte on that grid, before levels; `laps` name the two steps in `watch`.
    /// Withdrawn (`ApiError::ClientGone`) if `client_gone` says so once an
    /// inference worker is free for it. Its run settles its crash trial.
    fn run_model(
        &self,
        model: &Model,
        input: InputSpec,
        original: &DynamicImage,
        watch: &mut Stopwatch,
        laps: [&'static str; 2],
        client_gone: &dyn Fn() -> bool,
    ) -> Result<(DynamicImage, Vec<u8>), ApiError> {
        let spec = &model.spec;
        let (model_input, tensor, layout) = prepare(spec, input, original);
        let (in_w, in_h) = layout.input;
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
        if let Some(trial) = self.trial() {
            trial.settle(&spec.name);
        }
        Ok((model_input, matte_from_output(&output, spec.output, layout)))
    }

    /// ONNX Runtime's crash trial (`engine::trial`), where it runs.
    fn trial(&self) -> Option<&OnnxRuntimeTrial> {
        let loader = self.loader.as_ref()?;
        match loader.engine.kind {
            EngineKind::Onnxruntime => loader.trial.as_ref(),
            _ => None,
        }
    }

    /// The server stops cleanly: no model crashed this start.
    pub fn settle_trial(&self) {
        if let Some(trial) = self.trial() {
            trial.settle_all();
        }
    }

    /// What one run of `model` holds at most beside the idle server, on
    /// the engine that runs it (the configured one until it is loaded).
    pub fn working(&self, model: &Model) -> u64 {
        let configured = self.loader.as_ref().map(|loader| loader.engine.kind);
        model.spec.working_mib.on(model.engine().or(configured)) << 20
    }

    /// What `type=person`'s runs hold at most beside the idle server: the
    /// most any of its runs holds (its model's views, its median's other
    /// models), as they run one after another and each run's own is gone
    /// before the next (tests/api/memory.rs, on tract: a 12 MP photo held
    /// 164-166 MiB over the idle server for two MODNet sizes new to it and
    /// U2NetP, where one MODNet run holds up to 160).
    fn person_working(&self) -> u64 {
        let person = &self.models[self.person];
        let others = self.served_in_median().iter();
        let others = others.map(|&i| self.working(&self.models[i]));
        others.fold(self.working(person), u64::max)
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

    /// Loads `subject`'s model through the loader, and the models its
    /// blend (`auto`) or median (`person`) takes in, unless loaded, failed
    /// or being loaded (then waits): seconds for IS-Net on tract. The time
    /// it took, when this call loaded any.
    pub fn load(&self, subject: SubjectType) -> Option<Duration> {
        let mut took = self.load_model(self.model(subject));
        for &i in self.taken_in(subject) {
            if let Some(more) = self.load_model(&self.models[i]) {
                took = Some(took.unwrap_or_default() + more);
            }
        }
        took
    }

    /// The other models `subject`'s matte takes in: `auto`'s blend's,
    /// `person`'s median's.
    fn taken_in(&self, subject: SubjectType) -> &[usize] {
        match subject {
            SubjectType::Auto => &self.blended,
            SubjectType::Person => self.served_in_median(),
            SubjectType::General => &[],
        }
    }

    /// `person`'s median's other models, where the median serves.
    fn served_in_median(&self) -> &[usize] {
        match self.serving_person() {
            PersonRung::Median => &self.in_median,
            PersonRung::Alone => &[],
        }
    }

    fn load_model(&self, model: &Model) -> Option<Duration> {
        let loader = self.loader.as_ref()?;
        let mut took = None;
        model.loading.call_once(|| {
            if !matches!(model.inference.ready(), Err(InferError::Loading)) {
                return;
            }
            if let Some(trial) = self.trial() {
                trial.begin(&model.spec.name);
            }
            if let Some(loads) = &loader.loads {
                loads.begin(&model.spec.name, loader.engine.kind);
            }
            let started = Instant::now();
            let loaded = engine::load(&model.spec, &loader.models_dir, &loader.engine);
            if let Some(loads) = &loader.loads {
                loads.end(&model.spec.name);
            }
            match loaded {
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
                    // An error returned is no crash, and it will never run.
                    if let Some(trial) = self.trial() {
                        trial.settle(&model.spec.name);
                    }
                }
            }
        });
        took
    }

    /// `type=auto`'s blend (`views::blend`) of `first` (the model's own
    /// view, before levels), the model's other views and the blended
    /// models' views, on `first`'s grid; and the models that made it,
    /// joined by `+`. Without `own_views` the model's other views are not
    /// run and its first counts in their place (`Rung::OneView`).
    fn blend(
        &self,
        model: &Model,
        blend: &Blend,
        original: &DynamicImage,
        (first_input, first): (&DynamicImage, Vec<u8>),
        own_views: bool,
        watch: &mut Stopwatch,
    ) -> Result<(Vec<u8>, String), ApiError> {
        let grid = (first_input.width(), first_input.height());
        let laps = ["blend-prepare", "blend-model"];
        let view = |model: &Model, input: InputSpec, watch: &mut Stopwatch| {
            let (view_input, matte) =
                self.run_model(model, input, original, watch, laps, &|| false)?;
            let size = (view_input.width(), view_input.height());
            Ok::<_, ApiError>(imaging::resize_gray(&matte, size, grid))
        };
        let mut made_by = model.spec.name.clone();
        let mut others = Vec::new();
        for other in self.blended.iter().map(|&i| &self.models[i]) {
            // A blended model that failed to load leaves its view out.
            if let Err(InferError::Failed(why)) = other.inference.ready() {
                log::warn!("{} left out of the blend: {why}", other.spec.name);
                continue;
            }
            made_by = format!("{made_by}+{}", other.spec.name);
            others.push(view(other, other.spec.input, watch)?);
        }
        // The model's other views are dear (IS-Net's squashed view is a
        // third more work than its first): they run where the first is in
        // doubt, unless the bench asks for every view.
        let mut own = vec![first];
        let more =
            own_views && (self.every_view || views::more_views_wanted(blend, &own[0], &others));
        for &input in &blend.inputs {
            let view = if more {
                view(model, input, watch)?
            } else {
                own[0].clone()
            };
            own.push(view);
        }
        Ok((views::blend(&own, &others, blend), made_by))
    }

    /// `type=person`'s matte (`views::median`) of `first` (the model's
    /// photo and matte at its input), the model's other views and the
    /// median's other models' views, on the grid of the view with the most
    /// pixels; with that view's photo and the models that made it, joined
    /// by `+`. A model that cannot run is left out.
    fn median(
        &self,
        model: &Model,
        median: &Median,
        original: &DynamicImage,
        first: (DynamicImage, Vec<u8>),
        watch: &mut Stopwatch,
    ) -> Result<(DynamicImage, Vec<u8>, String), ApiError> {
        let laps = ["median-prepare", "median-model"];
        let mut made_by = model.spec.name.clone();
        let mut views = vec![first];
        for &input in &median.inputs {
            views.push(self.run_model(model, input, original, watch, laps, &|| false)?);
        }
        for other in self.in_median.iter().map(|&i| &self.models[i]) {
            match self.run_model(other, other.spec.input, original, watch, laps, &|| false) {
                Ok(view) => {
                    views.push(view);
                    made_by = format!("{made_by}+{}", other.spec.name);
                }
                Err(e) => log::warn!("{} left out of the median: {e}", other.spec.name),
            }
        }
        let size = |image: &DynamicImage| (image.width(), image.height());
        let largest = (0..views.len())
            .max_by_key(|&i| u64::from(views[i].0.width()) * u64::from(views[i].0.height()))
            .expect("the first view");
        let grid = size(&views[largest].0);
        let mattes: Vec<Vec<u8>> = views
            .iter()
            .map(|(input, matte)| imaging::resize_gray(matte, size(input), grid))
            .collect();
        let matte = views::median(&mattes);
        Ok((views.swap_remove(largest).0, matte, made_by))
    }

    /// The person model, its photo and its matte, where the configured
    /// model's policy (`views::worth_asking`, `views::second_wins`) prefers
    /// them. `None` keeps the first matte, also when the person model
    /// cannot run.
    fn second_opinion(
        &self,
        original: &DynamicImage,
        (first_input, first): (&DynamicImage, &[u8]),
        watch: &mut Stopwatch,
    ) -> Option<(&Model, DynamicImage, Vec<u8>)> {
        // `person` is `auto`'s own model when there is only one.
        let opinion = self.default_model().spec.second_opinion.as_ref();
        let opinion = opinion.filter(|_| self.person != 0)?;
        if !self.every_view && !views::worth_asking(opinion, first) {
            return None;
        }
        self.load(SubjectType::Person);
        let person = &self.models[self.person];
        let laps = ["second-prepare", "second-model"];
        let run = self.run_model(person, person.spec.input, original, watch, laps, &|| false);
        let (input, matte) = run
            .inspect_err(|e| log::warn!("no second opinion from {}: {e}", person.spec.name))
            .ok()?;
        let size = |image: &DynamicImage| (image.width(), image.height());
        let wins = views::second_wins(opinion, (first, size(first_input)), (&matte, size(&input)));
        wins.then_some((person, input, matte))
    }

    /// Cuts out `bytes`, read while holding `place`, with `subject`'s
    /// model, and makes the file `finish` asks for. Its turn waits until
    /// what it will hold at its peak fits the memory budget. Once its turn
    /// comes, and again once an inference worker is free, `client_gone` is
    /// asked, and a client that hung up is spared the work
    /// (`ApiError::ClientGone`).
    pub fn cut_out(
        &self,
        place: &mut Place<'_>,
        bytes: &[u8],
        size: SizeMode,
        subject: SubjectType,
        finish: &Finish,
        client_gone: &dyn Fn() -> bool,
    ) -> Result<CutOut, ApiError> {
        let photo = imaging::header(bytes, self.max_pixels)?;
        let background = match &finish.background {
            Some(Background::Image(file)) => Some(
                imaging::header(file, crate::error::MAX_PIXELS_OUTPUT)
                    .map_err(|e| background_error(e, finish))?,
            ),
            _ => None,
        };
        let overlay = finish
            .overlay
            .as_deref()
            .map(|file| imaging::header(file, crate::error::MAX_PIXELS_OUTPUT))
            .transpose()
            .map_err(|e| overlay_error(e, finish))?;
        let output = output_size(photo.width, photo.height, size)?;
        // `type=auto` serves the rung the board's budget allows.
        let rung = match subject {
            SubjectType::Auto => self.serving(),
            _ => Rung::Alone,
        };
        let model_working = match subject {
            SubjectType::Auto => self.rung_working(rung),
            SubjectType::Person => self.person_working(),
            SubjectType::General => self.working(self.model(subject)),
        };
        let need = memory::need(
            &photo,
            model_working,
            output,
            finish,
            background.as_ref(),
            overlay.as_ref(),
        );
        log::debug!(
            "a {}x{} photo needs {} bytes at its peak ({})",
            photo.width,
            photo.height,
            need.bytes,
            need.at
        );
        let mut watch = Stopwatch::start();
        place
            .wait_for_turn(need.bytes)
            .map_err(|refused| match refused {
                NoTurn::NeverFits { budget } => ApiError::NeedsTooMuchMemory {
                    width: photo.width,
                    height: photo.height,
                    need: need.bytes,
                    at: need.at,
                    budget,
                },
                NoTurn::Busy => ApiError::Unavailable(
                    "the requests ahead already need the memory of two budgets".into(),
                ),
            })?;
        watch.lap("queue");
        if client_gone() {
            return Err(ApiError::ClientGone);
        }
        self.load(subject);
        let model = match rung {
            Rung::Fast => &self.models[self.blended[0]],
            Rung::Views | Rung::OneView | Rung::Alone => self.model(subject),
        };
        let views = subject == SubjectType::Auto && rung.blends();
        let original = imaging::decode_reusing(bytes, self.spare_pixels.take(), self.max_pixels)?;
        watch.lap("decode");
        let (w, h) = (original.width(), original.height());
        if let Some(why) = finish.roi.as_ref().and_then(|roi| roi.outside(w, h)) {
            return Err(ApiError::InvalidOption {
                field: OptionField::Roi,
                why,
            });
        }
        let (out_w, out_h) = output_size(w, h, size)?;

        let spec = &model.spec;
        let laps = ["prepare", "model"];
        let (mut model_input, mut first) =
            self.run_model(model, spec.input, &original, &mut watch, laps, client_gone)?;
        // The raw matte is kept only for a blend; otherwise it is levelled in place.
        let blend = spec.blend.as_ref().filter(|_| views);
        let mut alone = if blend.is_some() {
            first.clone()
        } else {
            std::mem::take(&mut first)
        };
        let mut alone_by = spec.name.clone();
        let median = spec.median.as_ref();
        let median = median.filter(|_| self.serving_person() == PersonRung::Median);
        if let (SubjectType::Person, Some(median)) = (subject, median) {
            let first = (
                std::mem::replace(&mut model_input, DynamicImage::new_luma8(0, 0)),
                alone,
            );
            (model_input, alone, alone_by) =
                self.median(model, median, &original, first, &mut watch)?;
        }
        if let Some(levels) = spec.levels {
            apply_levels(&mut alone, levels);
        }
        // A photo the person model takes is not worth the blend's views;
        // the bench runs both, to time the most a photo can cost.
        let asked = match views {
            true => self.second_opinion(&original, (&model_input, &alone), &mut watch),
            false => None,
        };
        let blended = match blend {
            Some(blend) if asked.is_none() || self.every_view => {
                let first = (&model_input, std::mem::take(&mut first));
                let own_views = rung == Rung::Views;
                Some(self.blend(model, blend, &original, first, own_views, &mut watch)?)
            }
            _ => None,
        };
        let (made_by, mut small_matte) = match (asked, blended) {
            (Some((person, input, matte)), _) => {
                model_input = input;
                (person.spec.name.clone(), matte)
            }
            (None, Some((matte, made_by))) => (made_by, matte),
            (None, None) => (alone_by, alone),
        };
        if let (Some(smallest), true) = (spec.smallest_part, views) {
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
                FinishError::Background(e) => background_error(e, finish),
                FinishError::Overlay(e) => overlay_error(e, finish),
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

/// `original` as `spec`'s model takes it at `input`'s geometry: the photo
/// scaled with the model's filter, its tensor, and where it lies in the input.
pub fn prepare(
    spec: &ModelSpec,
    input: InputSpec,
    original: &DynamicImage,
) -> (DynamicImage, Vec<f32>, InputLayout) {
    let layout = input_layout(input, original.width(), original.height());
    let (image_w, image_h) = layout.image_size();
    let filter = match spec.input_filter {
        InputFilter::CatmullRom => imaging::Filter::CatmullRom,
        InputFilter::Bilinear => imaging::Filter::Bilinear,
    };
    let model_input = imaging::resize_with(original, image_w, image_h, filter);
    let tensor = to_tensor(&model_input, &spec.normalise, layout);
    (model_input, tensor, layout)
}

/// The result's size for a `width`×`height` photo at `size`.
fn output_size(width: u32, height: u32, size: SizeMode) -> Result<(u32, u32), ApiError> {
    imaging::output_size(width, height, size).map_err(|e| match e {
        GeometryError::ResolutionTooHigh => ApiError::ResolutionTooHigh { width, height },
    })
}

/// A backdrop's overlay, checked when it was added, unreadable now.
fn overlay_error(e: DecodeError, finish: &Finish) -> ApiError {
    let name = finish.backdrop.as_deref().unwrap_or_default();
    ApiError::InvalidOption {
        field: OptionField::Backdrop,
        why: format!("the overlay of the backdrop {name:?} cannot be read: {e}"),
    }
}

/// A background image that cannot be used, named by the field it came
/// from: the request's own, or the backdrop's (checked when it was added,
/// unreadable now).
fn background_error(e: DecodeError, finish: &Finish) -> ApiError {
    if let Some(name) = &finish.backdrop {
        return ApiError::InvalidOption {
            field: OptionField::Backdrop,
            why: format!("the background of the backdrop {name:?} cannot be read: {e}"),
        };
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

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
            in_median: Vec::new(),
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
        let mut place = pipeline.queue.join(photo.len() as u64).unwrap();
        let cut = pipeline
            .cut_out(
                &mut place,
                &photo,
                SizeMode::Auto,
                subject,
                &Finish::default(),
                &|| false,
            )
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

    /// `inner`, counting its runs.
    struct Counted<E> {
        inner: E,
        runs: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    }

    impl<E: engine::Engine> engine::Engine for Counted<E> {
        fn name(&self) -> &'static str {
            "counted"
        }

        fn run(&self, input: Vec<f32>, width: u32, height: u32) -> anyhow::Result<Vec<f32>> {
            self.runs.fetch_add(1, Ordering::SeqCst);
            self.inner.run(input, width, height)
        }
    }

    #[test]
    fn auto_runs_the_squashed_view_only_where_the_first_and_u2netp_disagree() {
        // IS-Net: the left half at the photo's aspect, nothing squashed.
        let isnet_runs = |pipeline: Pipeline, u2netp_edge: f32| {
            let runs = std::sync::Arc::new(AtomicUsize::new(0));
            let inner = Columns {
                square: 0.0,
                other: 0.5,
            };
            let counted = Counted {
                inner,
                runs: runs.clone(),
            };
            set_engine(&pipeline, 0, counted);
            let u2netp = Columns {
                square: u2netp_edge,
                other: u2netp_edge,
            };
            set_engine(&pipeline, 1, u2netp);
            let (model, ..) = cut_black_photo(&pipeline, SubjectType::Auto);
            assert_eq!(model, "isnet+u2netp");
            runs.load(Ordering::SeqCst)
        };
        // U2NetP's left half agrees with the first view: not run.
        assert_eq!(isnet_runs(isnet_blending_u2netp(), 0.5), 1);
        // Its left 0.6 agrees on 0.83 of it: in doubt, run.
        assert_eq!(isnet_runs(isnet_blending_u2netp(), 0.6), 2);
        // The bench runs every view.
        let every_view = isnet_blending_u2netp().with_every_view();
        assert_eq!(isnet_runs(every_view, 0.5), 2);
        // `one-view` never runs it, in doubt or timed by the bench.
        let one_view = isnet_blending_u2netp();
        one_view.serve(Rung::OneView);
        assert_eq!(isnet_runs(one_view, 0.6), 1);
        let one_view = isnet_blending_u2netp().with_every_view();
        one_view.serve(Rung::OneView);
        assert_eq!(isnet_runs(one_view, 0.6), 1);
    }

    /// MODNet's view at one input width answers `at_width`, any other
    /// `otherwise`.
    struct ByWidth {
        width: u32,
        at_width: f32,
        otherwise: f32,
    }

    impl engine::Engine for ByWidth {
        fn name(&self) -> &'static str {
            "by-width"
        }

        fn run(&self, _: Vec<f32>, width: u32, height: u32) -> anyhow::Result<Vec<f32>> {
            let value = if width == self.width {
                self.at_width
            } else {
                self.otherwise
            };
            Ok(vec![value; (width * height) as usize])
        }
    }

    /// Subject on the left half of the input, none on the right.
    struct LeftHalf;

    impl engine::Engine for LeftHalf {
        fn name(&self) -> &'static str {
            "left-half"
        }

        fn run(&self, _: Vec<f32>, width: u32, height: u32) -> anyhow::Result<Vec<f32>> {
            let row = (0..width).map(|x| if x < width / 2 { 1.0 } else { 0.0 });
            Ok(row.cycle().take((width * height) as usize).collect())
        }
    }

    #[test]
    fn person_is_the_median_of_modnet_at_two_sizes_and_u2netp() {
        let manifest = crate::engine::Manifest::builtin();
        let spec = |name| manifest.require(Some(name)).unwrap().clone();
        let models = Models {
            auto: spec("u2netp"),
            person: spec("modnet"),
            general: spec("isnet"),
            blended: Vec::new(),
            in_median: vec![spec("u2netp")],
        };
        let pipeline = Pipeline::new(models, None, 1, 0, u64::MAX);
        let (person, u2netp) = (pipeline.person, pipeline.in_median[0]);
        set_engine(&pipeline, u2netp, LeftHalf);
        // 400x300 straddles 384: MODNet's first view is its own size on
        // MODNet's grid of 32, 384 wide; its second is 672x512.
        for (first, second) in [(1.0, 0.0), (0.0, 1.0)] {
            let modnet = ByWidth {
                width: 384,
                at_width: first,
                otherwise: second,
            };
            set_engine(&pipeline, person, modnet);
            let (made_by, alpha, laps) = cut_black_photo(&pipeline, SubjectType::Person);
            assert_eq!(made_by, "modnet+u2netp");
            assert!(laps.contains(&"median-model"), "{laps:?}");
            // Where one MODNet view and U2NetP see the subject, it is kept;
            // what one MODNet view sees alone is not.
            assert_eq!(alpha.get_pixel(20, 150)[0], 255, "{first}, {second}");
            assert_eq!(alpha.get_pixel(380, 150)[0], 0, "{first}, {second}");
        }
        // `auto` and `general` take no median.
        let (made_by, _, laps) = cut_black_photo(&pipeline, SubjectType::Auto);
        assert_eq!(made_by, "u2netp");
        assert!(!laps.contains(&"median-model"), "{laps:?}");
        // Served `alone` (a board too slow for the median): MODNet's first view.
        assert_eq!(pipeline.person_rungs(), PersonRung::ALL);
        pipeline.serve_person(PersonRung::Alone);
        let modnet = ByWidth {
            width: 384,
            at_width: 1.0,
            otherwise: 0.0,
        };
        set_engine(&pipeline, person, modnet);
        let (made_by, alpha, laps) = cut_black_photo(&pipeline, SubjectType::Person);
        assert_eq!(made_by, "modnet");
        assert!(!laps.contains(&"median-model"), "{laps:?}");
        assert_eq!(alpha.get_pixel(380, 150)[0], 255, "what MODNet sees, kept");
    }

    #[test]
    fn auto_serves_the_rung_it_is_told_and_the_other_types_are_unchanged() {
        let pipeline = isnet_blending_u2netp();
        assert_eq!(
            pipeline.rungs(),
            [Rung::Views, Rung::OneView, Rung::Alone, Rung::Fast]
        );
        set_engine(
            &pipeline,
            0,
            Fill {
                value: 0.4,
                square: 0.4,
            },
        );
        let left_half = Columns {
            square: 0.5,
            other: 0.5,
        };
        set_engine(&pipeline, 1, left_half);
        let cut_out = |subject| {
            let (model, alpha, laps) = cut_black_photo(&pipeline, subject);
            (model, alpha.get_pixel(100, 150).0[0], laps)
        };
        assert_eq!(cut_out(SubjectType::Auto).0, "isnet+u2netp");
        pipeline.serve(Rung::Alone);
        let (model, alpha, laps) = cut_out(SubjectType::Auto);
        assert_eq!(model, "isnet");
        // 0.4 levelled by IS-Net's own [0.1, 0.7], as `type=general`.
        assert!(alpha.abs_diff(128) <= 1, "{alpha}");
        assert_eq!(laps, ["queue", "decode", "prepare", "model", "compose"]);
        pipeline.serve(Rung::Fast);
        let (model, alpha, laps) = cut_out(SubjectType::Auto);
        assert_eq!((model.as_str(), alpha), ("u2netp", 255));
        assert_eq!(laps, ["queue", "decode", "prepare", "model", "compose"]);
        assert_eq!(cut_out(SubjectType::General).0, "isnet");
        // A model alone has one rung.
        let manifest = crate::engine::Manifest::builtin();
        let u2netp = manifest.require(Some("u2netp")).unwrap().clone();
        let alone = Pipeline::new(Models::one(u2netp), None, 1, 0, u64::MAX);
        assert_eq!(alone.rungs(), [Rung::Alone]);
        assert_eq!(alone.serving(), Rung::Alone);
    }

    #[test]
    fn a_rungs_cost_is_every_run_it_may_make() {
        let pipeline = isnet_blending_u2netp();
        // IS-Net at 1024x768 and squashed to 1024x1024, U2NetP at 256x256
        // (the pipeline's `person` is IS-Net itself: no second opinion).
        let (isnet, u2netp) = (152_208u64, 192_931u64);
        let views = isnet * (1024 * 768 + 1024 * 1024) + u2netp * 256 * 256;
        assert_eq!(pipeline.rung_macs(Rung::Views, 4000, 3000), (views, 0));
        let one_view = isnet * 1024 * 768 + u2netp * 256 * 256;
        assert_eq!(pipeline.rung_macs(Rung::OneView, 4000, 3000), (one_view, 0));
        assert_eq!(
            pipeline.rung_macs(Rung::Alone, 4000, 3000),
            (isnet * 1024 * 768, 0)
        );
        assert_eq!(
            pipeline.rung_macs(Rung::Fast, 854, 480),
            (u2netp * 256 * 256, 0)
        );
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
}
