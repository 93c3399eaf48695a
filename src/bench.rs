//! `cutout bench`: on the operator's own board, one 12 MP cut-out with each
//! installed model on each engine, each in a child process of its own so
//! that its peak memory is its own, within a time budget; then the
//! configuration it recommends. The last report is kept in the data
//! directory for the dashboard's Status page.

use crate::board::{Board, Installed, Measurement, Report, Row};
use crate::config::Settings;
use crate::domain::{SizeMode, SubjectType};
use crate::engine::{EngineChoice, EngineKind, Manifest};
use crate::pipeline::{Loader, Pipeline};
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

/// A 12 MP (4000×3000) JPEG just under the API's 10 MB limit: a subject on
/// a graded background, with grain as a real sensor's, so that decoding
/// it costs what a phone's photo costs. The same bytes every time.
pub fn test_photo() -> Vec<u8> {
    let (w, h) = (4000u32, 3000u32);
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
    })
}

fn measure_in_child(
    settings: &Settings,
    model: &str,
    engine: EngineKind,
    photo: &Path,
    left: Duration,
) -> Result<Measurement> {
    let mut command = Command::new(std::env::current_exe()?);
    command
        .arg("--data-dir")
        .arg(&settings.data_dir)
        .arg("--models-dir")
        .arg(&settings.models_dir)
        .args(["bench-one", model, &engine.to_string()])
        .arg(photo)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(library) = &settings.engine.onnxruntime_library {
        command.env("CUTOUT_ONNXRUNTIME_LIBRARY", library);
    }
    let mut child = command.spawn().context("starting cutout bench-one")?;
    let deadline = Instant::now() + left;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("stopped at the end of the time budget");
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

/// In the child: loads `model` on `engine` (with the models its
/// `type=auto` blends) and cuts out the photo once;
/// returns the load's and the cut-out's seconds, and the process's peak
/// resident memory in KiB.
pub fn measure_one(
    settings: &Settings,
    model: &str,
    engine: EngineKind,
    photo: &Path,
) -> Result<(f64, f64, u64)> {
    // As `type=auto` serves it, with the views it blends. Every other type
    // is this model too, so the second opinion, which only some photos ask
    // for, never runs.
    let mut models =
        Manifest::builtin().models_for(Some(model), true, engine, &settings.models_dir)?;
    models.person = models.auto.clone();
    models.general = models.auto.clone();
    let loader = Loader {
        models_dir: settings.models_dir.clone(),
        engine: EngineChoice {
            kind: engine,
            onnxruntime_library: settings.engine.onnxruntime_library.clone(),
        },
        trial: None,
    };
    let pipeline = Pipeline::new(models, Some(loader), 1, 0, u64::MAX);
    let loaded = pipeline.load(SubjectType::Auto).unwrap_or_default();
    let inference = &pipeline.default_model().inference;
    inference.ready().map_err(|e| anyhow!("{e}"))?;
    let bytes = std::fs::read(photo).with_context(|| format!("reading {}", photo.display()))?;
    let started = Instant::now();
    let place = pipeline.queue.join(0).expect("an empty queue has room");
    pipeline
        .cut_out(
            place,
            &bytes,
            SizeMode::Auto,
            SubjectType::Auto,
            &crate::imaging::Finish::default(),
            &|| false,
        )
        .map_err(|e| anyhow!("{}: {}", e.code(), e.detail()))?;
    let took = started.elapsed().as_secs_f64();
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
