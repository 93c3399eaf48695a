//! `cutout bench`: on the operator's own board, one 12 MP cut-out with each
//! installed model on each engine, each in a child process of its own so
//! that its peak memory is its own, within a time budget; then the
//! configuration it recommends. The last report is kept in the data
//! directory for the dashboard's Status page.

use crate::board::{Board, Installed, LadderReport, Measurement, Report, Row, RungRow};
use crate::config::Settings;
use crate::domain::{SizeMode, SubjectType};
use crate::engine::{EngineChoice, EngineKind, Manifest};
use crate::pipeline::ladder::{self, Choice, Seconds};
use crate::pipeline::{Loader, Pipeline, Rung};
use anyhow::{anyhow, bail, Context, Result};

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The largest upload the API takes, less room for the form around it.
const MAX_PHOTO_BYTES: usize = 10 * 1024 * 1024 - 64 * 1024;

/// The pairs to measure, cheapest first, so that a short budget still
/// measures the small models: ONNX Runtime before tract.
pub fn pairs(models: &[String], onnxruntime: bool) -> Vec<(String, EngineKind)> {
    let mut engines = vec![EngineKind::Tract];
    if onnxruntime {
        engines.insert(0, EngineKind::Onnxruntime);
    }
    let cost = |m: &str| {
        ["u2netp", "modnet", "isnet-int8", "isnet"]
            .iter()
            .position(|n| *n == m)
    };
    let mut models: Vec<&String> = models.iter().collect();
    models.sort_by_key(|m| cost(m).unwrap_or(usize::MAX));
    models
        .into_iter()
        .flat_map(|m| engines.iter().map(move |e| (m.clone(), *e)))
        .collect()
}

/// The test photo's size: a phone's 12 MP, 4:3; the paper estimate's too.
const PHOTO_SIZE: (u32, u32) = (4000, 3000);

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

/// Measures every installed model on every engine within `budget`, each
/// in a child process (`cutout bench-one`) on the photo at `photo`;
/// `progress` sees each row as it is done.
pub fn run(
    settings: &Settings,
    now_unix: i64,
    budget: Duration,
    photo: &Path,
    mut progress: impl FnMut(&Row),
) -> Result<Report> {
    let board = Board::detect();
    let manifest = Manifest::builtin();
    let library = settings.engine.onnxruntime_library.as_deref();
    let installed = Installed::find(&settings.models_dir, library);
    let models: Vec<String> = manifest
        .models
        .iter()
        .filter(|m| {
            [EngineKind::Tract, EngineKind::Onnxruntime]
                .into_iter()
                .any(|engine| m.installed_for(engine, &settings.models_dir))
        })
        .map(|m| m.name.clone())
        .collect();
    if models.is_empty() {
        bail!(
            "no model files in {} (run `make models`)",
            settings.models_dir.display()
        );
    }
    let started = Instant::now();
    let mut rows = Vec::new();
    for (model, engine) in pairs(&models, installed.onnxruntime) {
        let left = budget.saturating_sub(started.elapsed());
        let outcome = if left.is_zero() {
            Measurement::Not(format!("over the {} s budget", budget.as_secs()))
        } else {
            measure_in_child(settings, &model, engine, photo, left)
                .unwrap_or_else(|e| Measurement::Not(format!("{e:#}")))
        };
        let row = Row {
            model,
            engine: engine.to_string(),
            outcome,
        };
        progress(&row);
        rows.push(row);
    }
    let memory_mib = board.memory >> 20;
    Ok(Report {
        at_unix: now_unix,
        board: board.describe(),
        memory_mib,
        recommended: Report::recommend(&rows, memory_mib),
        rows,
        ladder: None,
    })
}

/// Times each rung of `type=auto` for `model` on the configured engine
/// with the photo at `photo`, cheapest first, each in a child process at the lowest CPU
/// priority (so that requests served meanwhile go first); stops after the
/// first rung over `budget_seconds`, as the dearer ones cannot fit, or
/// when `stop` says so. A rung still running when `time_left` is up is
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
    let mut over: Option<String> = None;
    for rung in pipeline.rungs().into_iter().rev() {
        let left = time_left.saturating_sub(started.elapsed());
        let outcome = match &over {
            Some(cheaper) => Measurement::Not(format!("{cheaper} is over the budget already")),
            None if left.is_zero() => Measurement::Not("out of time".into()),
            None => {
                let child = Child {
                    settings,
                    model,
                    engine,
                    photo,
                    rung: Some(rung),
                };
                child
                    .measure(left, stop)
                    .unwrap_or_else(|e| Measurement::Not(format!("{e:#}")))
            }
        };
        if let Measurement::Measured { seconds, .. } = outcome {
            if seconds > budget_seconds {
                over = Some(rung.name().to_owned());
            }
        }
        let row = RungRow {
            rung: rung.name().to_owned(),
            outcome,
        };
        progress(&row);
        rows.push(row);
        if stop() {
            bail!("stopped");
        }
    }
    rows.reverse();
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
/// (`ladder::published_rate`; tract at half ONNX Runtime's speed), else
/// unknown.
pub fn rung_seconds(
    pipeline: &Pipeline,
    engine: EngineKind,
    ladder: Option<&LadderReport>,
    board: &str,
) -> Vec<(Rung, Option<Seconds>)> {
    let measured = measured_for(ladder, pipeline, engine);
    let rate = ladder::published_rate(board);
    let slower = match engine {
        EngineKind::Tract => 2.0,
        EngineKind::Onnxruntime => 1.0,
    };
    pipeline
        .rungs()
        .into_iter()
        .map(|rung| {
            let seconds = match measured {
                Some(ladder) => ladder.seconds(rung.name()).map(|seconds| Seconds {
                    seconds,
                    measured: true,
                }),
                None => rate.map(|rate| {
                    let (f32_macs, int8_macs) =
                        pipeline.rung_macs(rung, PHOTO_SIZE.0, PHOTO_SIZE.1);
                    Seconds {
                        seconds: slower
                            * (f32_macs as f64 / rate.f32 + int8_macs as f64 / rate.int8),
                        measured: false,
                    }
                }),
            };
            (rung, seconds)
        })
        .collect()
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
    budget_seconds: f64,
) -> (Rung, Vec<String>) {
    let board = Board::detect();
    let rungs = rung_seconds(pipeline, engine, ladder, &board.name);
    let choice = ladder::choose(&rungs, budget_seconds);
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
    let mut lines = vec![format!(
        "type=auto serves {} ({}): {}; the budget is {budget_seconds} s",
        choice.rung.name(),
        pipeline.describe(choice.rung),
        seconds(choice.seconds)
    )];
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
            "{buys} would buy {} ({}): {costs}",
            better.name(),
            pipeline.describe(better),
        ));
    }
    lines
}

fn measure_in_child(
    settings: &Settings,
    model: &str,
    engine: EngineKind,
    photo: &Path,
    left: Duration,
) -> Result<Measurement> {
    let child = Child {
        settings,
        model,
        engine,
        photo,
        rung: None,
    };
    child.measure(left, &|| false)
}

/// One `cutout bench-one`: `model` on `engine`, as `type=auto` serves it
/// or, with `rung`, as that rung with every view.
struct Child<'a> {
    settings: &'a Settings,
    model: &'a str,
    engine: EngineKind,
    photo: &'a Path,
    rung: Option<Rung>,
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
        // priority, requests go first.
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
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(rung) = rung {
            command.args(["--rung", rung.name()]);
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

/// In the child: loads `model` on `engine` (with the models its
/// `type=auto` blends) and cuts out the photo; returns the load's and the
/// cut-out's seconds, and the process's peak resident memory in KiB.
/// Without `rung`, once, as `type=auto` serves it but without the second
/// opinion (only some photos ask for it). With `rung`, as that rung with
/// every view it may run, twice, the faster run counting (the first plans
/// the sizes).
pub fn measure_one(
    settings: &Settings,
    model: &str,
    engine: EngineKind,
    photo: &Path,
    rung: Option<Rung>,
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
    };
    let pipeline = Pipeline::new(models, Some(loader), 1, 0, u64::MAX).with_every_view();
    if let Some(rung) = rung {
        pipeline.serve(rung);
    }
    let mut loaded = pipeline.load(SubjectType::Auto).unwrap_or_default();
    if rung == Some(Rung::Views) {
        loaded += pipeline.load(SubjectType::Person).unwrap_or_default();
    }
    let inference = &pipeline.default_model().inference;
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
                SubjectType::Auto,
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

    #[test]
    fn small_models_and_onnxruntime_come_first() {
        let models = ["isnet", "u2netp", "isnet-int8"].map(String::from);
        let order = pairs(&models, true);
        let names: Vec<String> = order.iter().map(|(m, e)| format!("{m}/{e}")).collect();
        assert_eq!(
            names,
            [
                "u2netp/onnxruntime",
                "u2netp/tract",
                "isnet-int8/onnxruntime",
                "isnet-int8/tract",
                "isnet/onnxruntime",
                "isnet/tract"
            ]
        );
        assert_eq!(pairs(&models, false).len(), 3);
    }

    #[test]
    fn rungs_are_timed_by_the_boards_own_measurement_else_on_paper() {
        let manifest = Manifest::builtin();
        let spec = |name| manifest.require(Some(name)).unwrap().clone();
        let models = crate::pipeline::Models {
            auto: spec("isnet"),
            person: spec("modnet"),
            general: spec("isnet"),
            blended: vec![spec("u2netp")],
        };
        let pipeline = Pipeline::new(models, None, 1, 0, u64::MAX);
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
                (Rung::Alone, Some(10.0)),
                (Rung::Fast, Some(1.1))
            ]
        );
        let on_tract = seconds(EngineKind::Tract, None, pi4);
        assert_eq!(on_tract[1], (Rung::Alone, Some(20.0)));
        let estimated = rung_seconds(&pipeline, EngineKind::Onnxruntime, None, pi4);
        let choice = ladder::choose(&estimated, 4.0);
        assert_eq!(choice.rung, Rung::Fast);
        assert!(!choice.seconds.unwrap().measured);
        // Nothing published for this CPU: unknown until measured.
        let unknown = seconds(EngineKind::Onnxruntime, None, "AMD EPYC 9R14");
        assert!(unknown.iter().all(|(_, s)| s.is_none()));

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
                    rung: "views".into(),
                    outcome: measured(5.2),
                },
                RungRow {
                    rung: "alone".into(),
                    outcome: measured(2.1),
                },
                RungRow {
                    rung: "fast".into(),
                    outcome: measured(0.3),
                },
            ],
        };
        let timed = rung_seconds(&pipeline, EngineKind::Onnxruntime, Some(&ladder), pi4);
        let choice = ladder::choose(&timed, 4.0);
        assert_eq!(choice.rung, Rung::Alone);
        assert!(choice.seconds.unwrap().measured);
        let lines = describe_choice(&pipeline, &choice, 4.0);
        assert!(lines[0].starts_with("type=auto serves alone"), "{lines:?}");
        assert!(
            lines[1].starts_with("a budget of 5.2 s would buy views"),
            "{lines:?}"
        );
        // Over the budget already at U2NetP: the next rung up was not run.
        ladder.rows[0].outcome = Measurement::Not("alone is over the budget already".into());
        ladder.rows[1].outcome = Measurement::Not("fast is over the budget already".into());
        ladder.rows[2].outcome = measured(5.0);
        let timed = rung_seconds(&pipeline, EngineKind::Onnxruntime, Some(&ladder), pi4);
        let choice = ladder::choose(&timed, 4.0);
        assert_eq!(choice.rung, Rung::Fast);
        // 5 s x 119.7 / 12.6 GMACs.
        let lines = describe_choice(&pipeline, &choice, 4.0);
        assert!(
            lines[1].starts_with("a budget of about 47 s would buy alone")
                && lines[1].ends_with(
                    "about 47 s a photo, fast's measurement scaled by their multiply-adds"
                ),
            "{lines:?}"
        );
        // Measured for another engine: on paper again.
        ladder.engine = "tract".into();
        let other = seconds(EngineKind::Onnxruntime, Some(&ladder), pi4);
        assert_eq!(other, paper);
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
