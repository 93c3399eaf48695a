//! `type=auto`'s rungs: the ways it may serve a photo, from the best
//! mattes down to one fast model, what each runs and what that costs in
//! multiply-adds. Which rung serves is the ladder's choice (`crate::ladder`).
//! Nothing here runs a model.

use super::{Model, Pipeline};
use crate::engine::preprocess::input_layout;
use crate::engine::InputSpec;
use std::sync::atomic::Ordering;

/// One way to serve `type=auto`, best mattes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rung {
    /// The configured model's views blended, with the person model's
    /// second opinion where it is unsure: the manifest's whole `type=auto`.
    Views,
    /// The same with the model's first view alone: its other views (IS-Net
    /// squashed to 1024², a third more work than the first) left out.
    OneView,
    /// The configured model alone, as `type=general` runs it.
    Alone,
    /// The blend's small model alone (U2NetP).
    Fast,
}

impl Rung {
    /// Best mattes first.
    pub const ALL: [Rung; 4] = [Rung::Views, Rung::OneView, Rung::Alone, Rung::Fast];

    pub fn name(self) -> &'static str {
        match self {
            Rung::Views => "views",
            Rung::OneView => "one-view",
            Rung::Alone => "alone",
            Rung::Fast => "fast",
        }
    }

    pub fn parse(name: &str) -> Option<Rung> {
        Rung::ALL.into_iter().find(|r| r.name() == name)
    }

    /// Whether the rung blends the configured model's views with the
    /// blended models' and asks the person model where unsure.
    pub fn blends(self) -> bool {
        matches!(self, Rung::Views | Rung::OneView)
    }
}

/// One way to serve `type=person`, best mattes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PersonRung {
    /// The per-pixel median of the person model's views and the median's
    /// other models (`Pipeline::median`).
    Median,
    /// The person model's first view alone.
    Alone,
}

impl PersonRung {
    pub const ALL: [PersonRung; 2] = [PersonRung::Median, PersonRung::Alone];

    pub fn name(self) -> &'static str {
        match self {
            PersonRung::Median => "median",
            PersonRung::Alone => "alone",
        }
    }

    pub fn parse(name: &str) -> Option<PersonRung> {
        PersonRung::ALL.into_iter().find(|r| r.name() == name)
    }
}

impl Pipeline {
    /// The rungs `type=person` may serve here, best first: the median where
    /// the person model has one here, then the model alone.
    pub fn person_rungs(&self) -> Vec<PersonRung> {
        let median = self.models[self.person].spec.median.is_some();
        PersonRung::ALL
            .into_iter()
            .filter(|rung| median || *rung == PersonRung::Alone)
            .collect()
    }

    pub fn serving_person(&self) -> PersonRung {
        PersonRung::ALL[self.serving_person.load(Ordering::Relaxed)]
    }

    /// From now on `type=person` is served with `rung` (one of `person_rungs`).
    pub fn serve_person(&self, rung: PersonRung) {
        let index = PersonRung::ALL.iter().position(|r| *r == rung);
        self.serving_person
            .store(index.expect("in ALL"), Ordering::Relaxed);
    }

    /// The model runs of `type=person`'s `rung`.
    fn person_runs(&self, rung: PersonRung) -> Vec<(&Model, InputSpec)> {
        let person = &self.models[self.person];
        let mut runs = vec![(person, person.spec.input)];
        if let (PersonRung::Median, Some(median)) = (rung, &person.spec.median) {
            runs.extend(median.inputs.iter().map(|&input| (person, input)));
            runs.extend(self.in_median.iter().map(|&i| {
                let model = &self.models[i];
                (model, model.spec.input)
            }));
        }
        runs
    }

    /// What `type=person`'s `rung` runs here.
    pub fn describe_person(&self, rung: PersonRung) -> String {
        let person = &self.models[self.person].spec.name;
        match rung {
            PersonRung::Median => {
                let others = self.in_median.iter().map(|&i| &self.models[i].spec.name);
                let models: Vec<&str> = std::iter::once(person)
                    .chain(others)
                    .map(String::as_str)
                    .collect();
                format!(
                    "the median of {} views of {}",
                    self.person_runs(rung).len(),
                    models.join(" and ")
                )
            }
            PersonRung::Alone => format!("{person} alone"),
        }
    }

    /// The multiply-adds of `type=person`'s `rung` on a `width`×`height`
    /// photo, as `(f32, int8)`.
    pub fn person_rung_macs(&self, rung: PersonRung, width: u32, height: u32) -> (u64, u64) {
        macs_of(&self.person_runs(rung), width, height)
    }

    /// `type=person`'s `rung`'s MSE and MAD on dev/ppm (`make eval`, the
    /// manifest's `dev_ppm`), where measured.
    pub fn dev_ppm(&self, rung: PersonRung) -> Option<&[f64]> {
        let ppm = self.models[self.person].spec.dev_ppm.as_ref()?;
        let figures = match rung {
            PersonRung::Median => ppm.median.as_ref(),
            PersonRung::Alone => ppm.alone.as_ref(),
        };
        figures.map(Vec::as_slice)
    }

    /// The rungs `type=auto` may serve here, best first: where it is more
    /// than one model run, the whole `auto`, the same with one view of its
    /// model (where it has more), its model alone and the blend's small
    /// model alone; else its model alone.
    pub fn rungs(&self) -> Vec<Rung> {
        let spec = &self.default_model().spec;
        let several = spec.blend.is_some() || (spec.second_opinion.is_some() && self.person != 0);
        if !several {
            return vec![Rung::Alone];
        }
        let more_views = spec.blend.as_ref().is_some_and(|b| !b.inputs.is_empty());
        Rung::ALL
            .into_iter()
            .filter(|rung| match rung {
                Rung::OneView => more_views,
                Rung::Fast => !self.blended.is_empty(),
                Rung::Views | Rung::Alone => true,
            })
            .collect()
    }

    /// What `rung` runs here.
    pub fn describe(&self, rung: Rung) -> String {
        let auto = &self.default_model().spec;
        match rung {
            Rung::Views | Rung::OneView => {
                let mut runs = vec![match (&auto.blend, rung) {
                    (Some(_), Rung::Views) => format!("{}'s views", auto.name),
                    _ => auto.name.clone(),
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
                text
            }
            Rung::Alone => format!("{} alone", auto.name),
            Rung::Fast => format!("{} alone", self.models[self.blended[0]].spec.name),
        }
    }

    /// `rung`'s MAE on each dev set (`make eval`, the manifest's
    /// `dev_mae`), where measured.
    pub fn dev_mae(&self, rung: Rung) -> Option<&[f64]> {
        let mae = match rung {
            Rung::Fast => self.models[self.blended[0]]
                .spec
                .dev_mae
                .as_ref()?
                .alone
                .as_ref(),
            _ => {
                let mae = self.default_model().spec.dev_mae.as_ref()?;
                match rung {
                    Rung::Views => mae.views.as_ref(),
                    Rung::OneView => mae.one_view.as_ref(),
                    _ => mae.alone.as_ref(),
                }
            }
        };
        mae.map(Vec::as_slice)
    }

    pub fn serving(&self) -> Rung {
        Rung::ALL[self.serving.load(Ordering::Relaxed)]
    }

    /// From now on `type=auto` is served with `rung` (one of `rungs`).
    pub fn serve(&self, rung: Rung) {
        let index = Rung::ALL.iter().position(|r| *r == rung).expect("in ALL");
        self.serving.store(index, Ordering::Relaxed);
    }

    /// Every model run `rung` may make on a photo: every view and the
    /// second opinion.
    fn runs(&self, rung: Rung) -> Vec<(&Model, InputSpec)> {
        let auto = self.default_model();
        let mut runs = vec![];
        match rung {
            Rung::Views | Rung::OneView => {
                runs.push((auto, auto.spec.input));
                if let Some(blend) = &auto.spec.blend {
                    if rung == Rung::Views {
                        runs.extend(blend.inputs.iter().map(|&input| (auto, input)));
                    }
                    runs.extend(self.blended.iter().map(|&i| {
                        let model = &self.models[i];
                        (model, model.spec.input)
                    }));
                }
                if auto.spec.second_opinion.is_some() && self.person != 0 {
                    let person = &self.models[self.person];
                    runs.push((person, person.spec.input));
                }
            }
            Rung::Alone => runs.push((auto, auto.spec.input)),
            Rung::Fast => {
                let fast = &self.models[self.blended[0]];
                runs.push((fast, fast.spec.input));
            }
        }
        runs
    }

    /// What the model runs of `rung` hold at most beside the idle server:
    /// each run's own, summed, as each keeps its input and matte and may be
    /// the first of its size on tract (`ModelSpec::working_mib`).
    pub fn rung_working(&self, rung: Rung) -> u64 {
        self.runs(rung)
            .into_iter()
            .map(|(model, _)| self.working(model))
            .sum()
    }

    /// The multiply-adds of the most a `width`×`height` photo can cost on
    /// `rung`: every view and the second opinion, as `(f32, int8)`.
    pub fn rung_macs(&self, rung: Rung, width: u32, height: u32) -> (u64, u64) {
        macs_of(&self.runs(rung), width, height)
    }
}

/// The multiply-adds of `runs` on a `width`×`height` photo, as `(f32, int8)`.
fn macs_of(runs: &[(&Model, InputSpec)], width: u32, height: u32) -> (u64, u64) {
    let mut macs = (0, 0);
    for (Model { spec, .. }, input) in runs {
        let (w, h) = input_layout(*input, width, height).input;
        let run = spec.macs_per_pixel * u64::from(w) * u64::from(h);
        match spec.int8 {
            true => macs.1 += run,
            false => macs.0 += run,
        }
    }
    macs
}
