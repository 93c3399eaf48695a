//! `type=auto`'s ladder: the pipelines it may serve, from the best mattes
//! down to one fast model, and the choice of the best that fits the
//! board's time budget (`pipeline.budget_seconds`): by the board's own
//! measurement (`cutout bench`), or by a paper estimate until there is one:
//! which rungs a pipeline has, what each costs, and the choice. Nothing
//! here runs a model.

use super::Pipeline;
use crate::engine::preprocess::input_layout;
use crate::engine::{InputSpec, ModelSpec};
use std::sync::atomic::Ordering;

/// One way to serve `type=auto`, best mattes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rung {
    /// The configured model's views blended, with the person model's
    /// second opinion where it is unsure: the manifest's whole `type=auto`.
    Views,
    /// The configured model alone, as `type=general` runs it.
    Alone,
    /// The blend's small model alone (U2NetP).
    Fast,
}

impl Rung {
    /// Best mattes first.
    pub const ALL: [Rung; 3] = [Rung::Views, Rung::Alone, Rung::Fast];

    pub fn name(self) -> &'static str {
        match self {
            Rung::Views => "views",
            Rung::Alone => "alone",
            Rung::Fast => "fast",
        }
    }

    pub fn parse(name: &str) -> Option<Rung> {
        Rung::ALL.into_iter().find(|r| r.name() == name)
    }
}

impl Pipeline {
    /// The rungs `type=auto` may serve here, best first: where it is
    /// more than one model run, the whole `auto`, its model alone and the
    /// blend's small model alone; else its model alone.
    pub fn rungs(&self) -> Vec<Rung> {
        let spec = &self.default_model().spec;
        let several = spec.blend.is_some() || (spec.second_opinion.is_some() && self.person != 0);
        match (several, self.blended.is_empty()) {
            (false, _) => vec![Rung::Alone],
            (true, true) => vec![Rung::Views, Rung::Alone],
            (true, false) => vec![Rung::Views, Rung::Alone, Rung::Fast],
        }
    }

    /// What `rung` runs here, and its mattes against the peers'.
    pub fn describe(&self, rung: Rung) -> String {
        let auto = &self.default_model().spec;
        let quality = |mae: Option<f64>| match mae {
            Some(mae) => format!(", mean MAE {mae:.2}x the best peer's on the dev sets"),
            None => String::new(),
        };
        let dev_mae = auto.dev_mae;
        match rung {
            Rung::Views => {
                let mut runs = vec![match auto.blend {
                    Some(_) => format!("{}'s views", auto.name),
                    None => auto.name.clone(),
                }];
                runs.extend(
                    self.blended
                        .iter()
                        .map(|&i| self.models[i].spec.name.clone()),
                );
                let mut text = runs.join(" + ");
                if auto.second_opinion.is_some() && self.person != 0 {
                    let person = &self.models[self.person].spec.name;
                    text += &format!(", {person}'s second opinion");
                }
                text + &quality(dev_mae.and_then(|d| d.auto))
            }
            Rung::Alone => format!("{} alone{}", auto.name, quality(dev_mae.map(|d| d.alone))),
            Rung::Fast => {
                let fast = &self.models[self.blended[0]].spec;
                format!(
                    "{} alone{}",
                    fast.name,
                    quality(fast.dev_mae.map(|d| d.alone))
                )
            }
        }
    }

    pub fn serving(&self) -> Rung {
        Rung::ALL[self.serving.load(Ordering::Relaxed)]
    }

    /// From now on `type=auto` is served with `rung` (one of `rungs`).
    pub fn serve(&self, rung: Rung) {
        let index = Rung::ALL.iter().position(|r| *r == rung).expect("in ALL");
        self.serving.store(index, Ordering::Relaxed);
    }

    /// The multiply-adds of the most a `width`×`height` photo can cost on
    /// `rung`: every view and the second opinion, as `(f32, int8)`.
    pub fn rung_macs(&self, rung: Rung, width: u32, height: u32) -> (u64, u64) {
        let auto = self.default_model();
        let mut runs: Vec<(&ModelSpec, InputSpec)> = Vec::new();
        match rung {
            Rung::Views => {
                runs.push((&auto.spec, auto.spec.input));
                if let Some(blend) = &auto.spec.blend {
                    runs.extend(blend.inputs.iter().map(|&input| (&auto.spec, input)));
                    runs.extend(self.blended.iter().map(|&i| {
                        let spec = &self.models[i].spec;
                        (spec, spec.input)
                    }));
                }
                if auto.spec.second_opinion.is_some() && self.person != 0 {
                    let spec = &self.models[self.person].spec;
                    runs.push((spec, spec.input));
                }
            }
            Rung::Alone => runs.push((&auto.spec, auto.spec.input)),
            Rung::Fast => {
                let spec = &self.models[self.blended[0]].spec;
                runs.push((spec, spec.input));
            }
        }
        let mut macs = (0, 0);
        for (spec, input) in runs {
            let (w, h) = input_layout(input, width, height).input;
            let run = spec.macs_per_pixel * u64::from(w) * u64::from(h);
            match spec.int8 {
                true => macs.1 += run,
                false => macs.0 += run,
            }
        }
        macs
    }
}

/// The seconds one photo takes on a rung, and where the figure comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Seconds {
    pub seconds: f64,
    pub measured: bool,
}

/// The rung that serves, and what a larger budget would buy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Choice {
    pub rung: Rung,
    /// `None` where nothing is known of this board's speed.
    pub seconds: Option<Seconds>,
    /// The next better rung, and its seconds where known.
    pub better: Option<(Rung, Option<Seconds>)>,
}

/// The best of `rungs` (best first, each with its seconds where known)
/// whose seconds are within `budget`. Where none is, the last (the
/// fastest), as a slow answer beats none; where nothing is known of any,
/// the first.
pub fn choose(rungs: &[(Rung, Option<Seconds>)], budget: f64) -> Choice {
    assert!(!rungs.is_empty(), "a pipeline has at least one rung");
    let index = rungs
        .iter()
        .position(|(_, s)| s.is_some_and(|s| s.seconds <= budget))
        .unwrap_or(if rungs.iter().all(|(_, s)| s.is_none()) {
            0
        } else {
            rungs.len() - 1
        });
    Choice {
        rung: rungs[index].0,
        seconds: rungs[index].1,
        better: index.checked_sub(1).map(|i| rungs[i]),
    }
}

/// Sustained multiply-adds a second that published benchmarks give each
/// board's CPU on all its cores with ONNX Runtime, f32 and int8
/// (BENCHMARKS.md, "Cost, counted", names the sources); tract runs
/// these models at about half ONNX Runtime's speed (`make bench`).
pub fn published_rate(board: &str) -> Option<PublishedRate> {
    const GIGA: f64 = 1e9;
    let rate = |f32, int8| {
        Some(PublishedRate {
            f32: f32 * GIGA,
            int8: int8 * GIGA,
        })
    };
    let is = |names: &[&str]| names.iter().any(|n| board.contains(n));
    if is(&["Raspberry Pi 5", "Cortex-A76"]) {
        rate(35.0, 70.0)
    } else if is(&[
        "Raspberry Pi 4",
        "Raspberry Pi 400",
        "Compute Module 4",
        "Cortex-A72",
    ]) {
        rate(12.0, 16.0)
    } else if is(&["Raspberry Pi 3", "Raspberry Pi Zero 2", "Cortex-A53"]) {
        rate(5.0, 7.5)
    } else {
        None
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PublishedRate {
    pub f32: f64,
    pub int8: f64,
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
        assert_eq!(choose(&rungs, 1.0).rung, Rung::Fast);
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
        let unknown = [(Rung::Views, None), (Rung::Alone, None), (Rung::Fast, None)];
        assert_eq!(choose(&unknown, 4.0).rung, Rung::Views);
        assert_eq!(
            choose(&[(Rung::Views, measured(9.0))], 4.0).rung,
            Rung::Views
        );
    }

    #[test]
    fn boards_are_known_by_their_model_or_their_core() {
        let pi5 = published_rate("Raspberry Pi 5 Model B Rev 1.0").unwrap();
        let pi4 = published_rate("Raspberry Pi 4 Model B Rev 1.4").unwrap();
        let a53 = published_rate("Cortex-A53").unwrap();
        assert!(pi5.f32 > pi4.f32 && pi4.f32 > a53.f32);
        assert!(pi5.int8 >= 2.0 * pi5.f32, "SDOT");
        assert_eq!(published_rate("AMD EPYC 9R14"), None);
    }
}
