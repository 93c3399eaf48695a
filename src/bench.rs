//! `cutout bench`: on the operator's own board, one 12 MP cut-out with each
//! installed model on each engine, each in a child process of its own so
//! that its peak memory is its own, within a time budget; then the
//! configuration it recommends. The last report is kept in the data
//! directory for the dashboard's Status page.

use crate::board::{Board, Installed, Measurement, Report, Row};
use crate::config::Settings;
use crate::engine::{EngineKind, Manifest};
use crate::ladder;
use anyhow::{bail, Result};
use std::path::Path;
use std::time::{Duration, Instant};

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
            ladder::measure_in_child(settings, &model, engine, photo, None, left, &|| false)
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
}
