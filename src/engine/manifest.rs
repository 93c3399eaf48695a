//! The model manifest (`models/manifest.toml`, compiled into the binary): for
//! each model its file, sha256, input geometry, normalisation and output;
//! and the onnxruntime engine's library with its sha256 per architecture.

use super::EngineKind;
use serde::Deserialize;

const MANIFEST: &str = include_str!("../../models/manifest.toml");

#[derive(Debug, Deserialize)]
pub struct Manifest {
    pub default: String,
    /// The models the request field `type=person` and `type=general` pick.
    pub person: String,
    pub general: String,
    #[serde(rename = "model")]
    pub models: Vec<ModelSpec>,
    pub onnxruntime: RuntimeSpec,
    pub peers: Peers,
}

/// ONNX Runtime's shared library, as `make onnxruntime` puts it beside the models.
#[derive(Debug, Clone, Deserialize)]
pub struct RuntimeSpec {
    pub file: String,
    #[serde(rename = "build")]
    pub builds: Vec<RuntimeBuild>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RuntimeBuild {
    /// As `std::env::consts::ARCH` names it.
    pub arch: String,
    pub sha256: String,
}

impl RuntimeSpec {
    /// The sha256 of the build for the architecture this binary runs on.
    pub fn sha256_here(&self) -> Option<&str> {
        self.builds
            .iter()
            .find(|b| b.arch == std::env::consts::ARCH)
            .map(|b| b.sha256.as_str())
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct ModelSpec {
    pub name: String,
    pub description: String,
    /// The file as published, which `make models` fetches and checks.
    pub file: String,
    pub sha256: String,
    /// What each engine loads: `file` as models/prepare.py rewrote it.
    pub prepared: Prepared,
    pub license: String,
    /// Multiply-adds of one run per input pixel (bench/cost.py).
    pub macs_per_pixel: u64,
    /// What one run holds beside the idle server with the model loaded, in
    /// MiB, on each engine: on tract a first run at its largest input (its
    /// plan for a size is kept); on ONNX Runtime a run beside its arena
    /// at its largest input (`OnnxRuntimeEngine::load`).
    pub working_mib: PerEngine,
    /// Its mattes' error against the peers' (`make eval`).
    #[serde(default)]
    pub dev_mae: Option<DevMae>,
    /// Its `type=person` on dev/ppm (`make eval`), where measured.
    #[serde(default)]
    pub dev_ppm: Option<DevPpm>,
    pub input: InputSpec,
    /// `input` on tract, where tract's file runs at another geometry.
    #[serde(default)]
    pub tract_input: Option<InputSpec>,
    /// How the photo is shrunk to the input: the filter the model was
    /// trained with suits it best (`make eval`).
    #[serde(default)]
    pub input_filter: InputFilter,
    pub normalise: Normalise,
    pub output: OutputKind,
    /// Output levels `[low, high]`: alpha at or below `low` becomes 0, at or
    /// above `high` 1, linear between (a calibration measured with `make eval`).
    #[serde(default)]
    pub levels: Option<[f32; 2]>,
    /// Stored in fp16: both engines run it in f32.
    pub fp16: bool,
    /// Quantised to int8 (`make quantize`): each engine's file in the
    /// format it runs fast (models/quantize.py), so the engines' mattes are
    /// not compared value for value.
    #[serde(default)]
    pub int8: bool,
    /// `type=auto` asks the `person` model too where this one is unsure of
    /// the subject, and keeps its matte where it is far surer and agrees on
    /// most of the subject (BENCHMARKS.md, "A second opinion").
    #[serde(default)]
    pub second_opinion: Option<SecondOpinion>,
    /// `type=auto`'s matte on this model: several views of the photo,
    /// averaged (BENCHMARKS.md, "Views of one photo").
    #[serde(default)]
    pub blend: Option<Blend>,
    /// `type=person`'s matte on this model: the per-pixel median of several
    /// mattes of the photo (BENCHMARKS.md, "People").
    #[serde(default)]
    pub median: Option<Median>,
    /// `type=auto` keeps only the parts of its matte whose sure area is at
    /// least this times the largest part's (BENCHMARKS.md, "Parts of a
    /// matte").
    #[serde(default)]
    pub smallest_part: Option<f32>,
    /// The model this one is a faster form of: a `type` that picks that
    /// model picks this one instead when it is the configured model.
    #[serde(default)]
    pub variant_of: Option<String>,
}

/// Its MAE on each dev set (`make eval`, in the order of `Peers::sets`):
/// alone, and on each of `type=auto`'s rungs that it leads.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DevMae {
    pub alone: Option<Vec<f64>>,
    pub views: Option<Vec<f64>>,
    pub one_view: Option<Vec<f64>>,
}

/// `type=person`'s MSE and MAD on dev/ppm, on each of its rungs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DevPpm {
    pub median: Option<Vec<f64>>,
    pub alone: Option<Vec<f64>>,
}

/// The peers' figures on the dev sets (../shared/eval/REFERENCE.md: the
/// same weights, the peers' own processing) and what each costs a 12 MP
/// photo (bench/cost.py), for the ladder to say which peers fit a budget.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Peers {
    pub sets: Vec<String>,
    #[serde(rename = "peer")]
    pub peers: Vec<Peer>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Peer {
    pub name: String,
    /// f32 multiply-adds of one 12 MP 4:3 photo, its whole pipeline.
    pub gmacs_12mp: f64,
    /// MAE on each of `Peers::sets`.
    pub mae: Vec<f64>,
    /// MSE and MAD on dev/ppm, where scored.
    #[serde(default)]
    pub ppm: Option<Vec<f64>>,
}

/// The resampling filter a photo is shrunk to a model's input with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InputFilter {
    #[default]
    CatmullRom,
    Bilinear,
}

/// A figure for each engine.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct PerEngine {
    pub tract: u64,
    pub onnxruntime: u64,
}

impl PerEngine {
    /// `engine`'s figure; the larger where the engine is not known yet.
    pub fn on(self, engine: Option<EngineKind>) -> u64 {
        match engine {
            Some(EngineKind::Tract) => self.tract,
            Some(EngineKind::Onnxruntime) => self.onnxruntime,
            None => self.tract.max(self.onnxruntime),
        }
    }
}

/// The sha256 of the file each engine loads; a model may have none for tract.
#[derive(Debug, Clone, Deserialize)]
pub struct Prepared {
    #[serde(default)]
    pub tract: Option<String>,
    pub onnxruntime: String,
}

impl ModelSpec {
    /// The file `engine` loads (`<name>.<engine>.onnx`, beside `file`) and
    /// its sha256, or `None` where there is none for that engine.
    pub fn prepared_for(&self, engine: EngineKind) -> Option<(String, &str)> {
        let sha256 = match engine {
            EngineKind::Tract => self.prepared.tract.as_deref()?,
            EngineKind::Onnxruntime => &self.prepared.onnxruntime,
        };
        let stem = self.file.strip_suffix(".onnx").unwrap_or(&self.file);
        Some((format!("{stem}.{engine}.onnx"), sha256))
    }

    /// This model as `engine` runs it: its input there.
    pub fn on(&self, engine: EngineKind) -> ModelSpec {
        let mut spec = self.clone();
        if let (EngineKind::Tract, Some(input)) = (engine, self.tract_input) {
            spec.input = input;
        }
        spec
    }

    /// Whether the file `engine` loads is in `models_dir`.
    pub fn installed_for(&self, engine: EngineKind, models_dir: &std::path::Path) -> bool {
        self.prepared_for(engine)
            .is_some_and(|(file, _)| models_dir.join(file).is_file())
    }
}

/// The mean of this model's matte at its `input` and at each of `inputs`,
/// and of each of `models`' mattes at their own input, all before levels;
/// then `levels` as a model's own.
#[derive(Debug, Clone, Deserialize)]
pub struct Blend {
    #[serde(default)]
    pub inputs: Vec<InputSpec>,
    #[serde(default)]
    pub models: Vec<String>,
    pub levels: [f32; 2],
    pub doubt: Option<Doubt>,
    pub agree: Option<Agree>,
    /// `inputs` run only where the first view's silhouette agrees with a
    /// blended model's on under this (pipeline/views.rs,
    /// `more_views_wanted`); elsewhere the first view counts in their place.
    #[serde(default)]
    pub more_views_below: Option<f64>,
}

/// The model's matte at its `input`, at each of `inputs` and each of
/// `models`' mattes at their own input (all before levels), whose per-pixel
/// median is the matte: a blob one of them sees alone (MODNet at one size)
/// or a car the general model keeps is outvoted, a person MODNet loses at
/// one size but not at the other is kept. An odd count in all.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Median {
    #[serde(default)]
    pub inputs: Vec<InputSpec>,
    #[serde(default)]
    pub models: Vec<String>,
}

/// When `type=auto` asks the person model (pipeline/views.rs): where over
/// `ask_when_unsure_over` of what the matte calls subject (alpha over 0.05)
/// is partial; its matte is kept where under `keep_when_unsure_under` times
/// as much of it is partial and the two agree on over `agree_over` (the sum
/// of their smaller alpha over the sum of their larger).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecondOpinion {
    pub ask_when_unsure_over: f64,
    pub keep_when_unsure_under: f64,
    pub agree_over: f64,
}

/// When the model is unsure of the photo: the silhouettes of its own views
/// (alpha 0.5 and over) agree on less than `below` of what either calls
/// subject. Then each of the blend's `models` whose silhouette is over
/// `others_larger_by` times the union of the model's own counts
/// `others_count` times.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct Doubt {
    pub below: f64,
    pub others_larger_by: f64,
    pub others_count: u16,
}

/// Each of the blend's `models` whose silhouette agrees with the union of
/// the model's own on over `over` of what either calls subject (their
/// intersection over union) counts `others_count` times.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct Agree {
    pub over: f64,
    pub others_count: u16,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(tag = "fit", rename_all = "lowercase")]
pub enum InputSpec {
    /// A fixed square (or rectangle) the image is stretched to.
    Squash { width: u32, height: u32 },
    /// A fixed size the image is scaled to fit, aspect kept, centred on grey.
    Letterbox { width: u32, height: u32 },
    /// Aspect kept: the short side scaled to `short_side`, both sides
    /// rounded to a multiple of `multiple`.
    Aspect { short_side: u32, multiple: u32 },
    /// Aspect kept: the long side scaled to `long_side`, centred on grey in
    /// an input whose sides are the next multiples of `multiple` (a
    /// letterbox no larger than the photo needs).
    Padded { long_side: u32, multiple: u32 },
}

impl InputSpec {
    /// The one input size of a fixed-size model.
    pub fn fixed_size(self) -> Option<(u32, u32)> {
        match self {
            InputSpec::Squash { width, height } | InputSpec::Letterbox { width, height } => {
                Some((width, height))
            }
            InputSpec::Aspect { .. } | InputSpec::Padded { .. } => None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct Normalise {
    pub scale: Scale,
    pub mean: [f32; 3],
    pub std: [f32; 3],
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq)]
pub enum Scale {
    /// Divide by 255.
    #[serde(rename = "255")]
    Fixed255,
    /// Divide by the image's largest channel value (U2-Net's convention).
    #[serde(rename = "max")]
    ImageMax,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum OutputKind {
    /// Already in [0, 1].
    Unit,
    /// Stretched so its minimum is 0 and maximum 1.
    Minmax,
}

impl Manifest {
    pub fn builtin() -> Manifest {
        toml::from_str(MANIFEST).expect("models/manifest.toml is valid (a unit test parses it)")
    }

    /// The named model, or the manifest's default for `None`.
    pub fn model(&self, name: Option<&str>) -> Option<&ModelSpec> {
        let name = name.unwrap_or(&self.default);
        self.models.iter().find(|m| m.name == name)
    }

    /// Like `model`, with an error that lists the models there are.
    pub fn require(&self, name: Option<&str>) -> anyhow::Result<&ModelSpec> {
        self.model(name).ok_or_else(|| {
            anyhow::anyhow!(
                "no model named {:?} (models: {})",
                name.unwrap_or_default(),
                self.names().join(", ")
            )
        })
    }

    /// The models for each `type` as `engine` runs them, with `auto` the
    /// one named (or the default). With `isnet-int8` configured,
    /// `type=general` runs it too, not a second IS-Net; so does any
    /// configured model where the board has no room for the general model
    /// beside it (`general_fits`), where `person` also runs without its
    /// median. With an int8 model configured on tract,
    /// another type runs its model's int8 form where `models_dir` has it.
    /// Not on ONNX Runtime: its aarch64 int8 kernels round otherwise than
    /// x86's, and MODNet in int8 carries that to 4% of a photo's pixels
    /// (tests/board.rs), where on tract it stays within a few.
    pub fn models_for(
        &self,
        auto: Option<&str>,
        general_fits: bool,
        engine: EngineKind,
        models_dir: &std::path::Path,
    ) -> anyhow::Result<Models> {
        let auto = self.require(auto)?;
        let int8_wanted = auto.int8 && engine == EngineKind::Tract;
        let int8_form = |name: &str| {
            self.models.iter().find(|m| {
                int8_wanted
                    && m.int8
                    && m.variant_of.as_deref() == Some(name)
                    && m.installed_for(engine, models_dir)
            })
        };
        let pick = |name: &str| match &auto.variant_of {
            Some(of) if of == name => Ok(auto),
            _ if name == self.general && !general_fits => Ok(auto),
            _ => int8_form(name).map_or_else(|| self.require(Some(name)), Ok),
        };
        // Where the general model has no room, the board is a Pi 3's or
        // smaller: there the median's runs, 3.8x MODNet's work, would take
        // a portrait from 4.6 to 18 s (BENCHMARKS.md, "People"), and MODNet
        // runs alone.
        let mut person = pick(&self.person)?.on(engine);
        let median = person.median.take().filter(|_| general_fits);
        Ok(Models {
            auto: auto.on(engine),
            general: pick(&self.general)?.on(engine),
            blended: self.named(auto.blend.iter().flat_map(|b| &b.models), engine)?,
            in_median: self.named(median.iter().flat_map(|m| &m.models), engine)?,
            person: ModelSpec { median, ..person },
        })
    }

    fn named<'a>(
        &self,
        names: impl Iterator<Item = &'a String>,
        engine: EngineKind,
    ) -> anyhow::Result<Vec<ModelSpec>> {
        names
            .map(|name| Ok(self.require(Some(name))?.on(engine)))
            .collect()
    }

    pub fn names(&self) -> Vec<&str> {
        self.models.iter().map(|m| m.name.as_str()).collect()
    }
}

/// The models a request's `type` can pick.
pub struct Models {
    pub auto: ModelSpec,
    pub person: ModelSpec,
    pub general: ModelSpec,
    /// The other models `auto`'s blend averages in.
    pub blended: Vec<ModelSpec>,
    /// The other models in `person`'s median.
    pub in_median: Vec<ModelSpec>,
}

impl Models {
    /// One model for every type, alone: no blend, no second opinion.
    pub fn one(mut spec: ModelSpec) -> Models {
        spec.blend = None;
        spec.second_opinion = None;
        spec.smallest_part = None;
        spec.median = None;
        Models {
            auto: spec.clone(),
            person: spec.clone(),
            general: spec,
            blended: Vec::new(),
            in_median: Vec::new(),
        }
    }

    /// These models less the ones named in `killed` (killed for memory
    /// while loading, `engine::killed`): `type=person` and `type=general`
    /// get `type=auto`'s model in their place, the blend and the median
    /// go without them. `auto`'s own is replaced by the settings.
    pub fn without(mut self, killed: &[String]) -> Models {
        let gone = |spec: &ModelSpec| killed.contains(&spec.name);
        if gone(&self.person) {
            self.person = self.auto.clone();
        }
        if gone(&self.general) {
            self.general = self.auto.clone();
        }
        self.blended.retain(|spec| !gone(spec));
        self.in_median.retain(|spec| !gone(spec));
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_killed_for_memory_are_left_out_and_autos_serves_their_types() {
        let none = tempfile::tempdir().unwrap();
        let for_isnet = || {
            let m = Manifest::builtin();
            m.models_for(Some("isnet"), true, EngineKind::Onnxruntime, none.path())
                .unwrap()
        };
        let killed = for_isnet().without(&["modnet".into(), "u2netp".into()]);
        assert_eq!(killed.person.name, "isnet");
        assert_eq!(killed.general.name, "isnet");
        assert!(killed.blended.is_empty());
        let others = for_isnet().without(&["isnet-int8".into()]);
        assert_eq!(others.person.name, "modnet");
        assert_eq!(others.blended.len(), 1);
        assert_eq!(others.in_median.len(), 1);
    }

    #[test]
    fn the_builtin_manifest_parses_and_its_default_exists() {
        let m = Manifest::builtin();
        assert_eq!(
            m.names(),
            ["isnet", "isnet-int8", "modnet", "modnet-int8", "u2netp"]
        );
        let none = tempfile::tempdir().unwrap();
        assert_eq!(m.model(None).unwrap().name, "isnet");
        assert_eq!(
            m.model(Some("modnet")).unwrap().input_filter,
            InputFilter::Bilinear
        );
        assert_eq!(m.model(None).unwrap().input_filter, InputFilter::CatmullRom);
        // Every dev-set figure has one MAE a set, peers' and models' alike.
        let sets = m.peers.sets.len();
        assert!(m.peers.peers.iter().all(|p| p.mae.len() == sets));
        for mae in m.models.iter().filter_map(|spec| spec.dev_mae.as_ref()) {
            for figures in [&mae.alone, &mae.views, &mae.one_view]
                .into_iter()
                .flatten()
            {
                assert_eq!(figures.len(), sets);
                assert!(figures.iter().all(|&f| f > 0.0 && f < 1.0), "{figures:?}");
            }
        }
        for median in m.models.iter().filter_map(|spec| spec.median.as_ref()) {
            assert_eq!((1 + median.inputs.len() + median.models.len()) % 2, 1);
        }
        let models = m
            .models_for(Some("u2netp"), true, EngineKind::Tract, none.path())
            .unwrap();
        assert!(models.blended.is_empty(), "U2NetP runs alone");
        let in_median: Vec<_> = models.in_median.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(in_median, ["u2netp"], "MODNet's median takes U2NetP's view");
        assert!(models.person.median.is_some());
        let small_board = m
            .models_for(Some("u2netp"), false, EngineKind::Tract, none.path())
            .unwrap();
        assert!(small_board.in_median.is_empty(), "MODNet alone");
        assert!(small_board.person.median.is_none());
        assert_eq!(
            [models.auto.name, models.person.name, models.general.name],
            ["u2netp", "modnet", "isnet"]
        );
        let models = m
            .models_for(Some("isnet-int8"), true, EngineKind::Tract, none.path())
            .unwrap();
        // tract's int8 file runs at the photo's aspect, ONNX Runtime's on the square.
        assert!(models.auto.input.fixed_size().is_none());
        let on_onnxruntime = m.models_for(
            Some("isnet-int8"),
            true,
            EngineKind::Onnxruntime,
            none.path(),
        );
        let input = on_onnxruntime.unwrap().auto.input;
        assert_eq!(input.fixed_size(), Some((1024, 1024)));
        let blended: Vec<_> = models.blended.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(blended, ["u2netp"], "IS-Net's views average in U2NetP's");
        assert_eq!(
            [models.auto.name, models.person.name, models.general.name],
            ["isnet-int8", "modnet", "isnet-int8"]
        );
        // With MODNet's int8 files there, int8 IS-Net's `type=person` runs
        // it on tract; on ONNX Runtime, or with f32 IS-Net, f32 MODNet.
        let int8_dir = tempfile::tempdir().unwrap();
        for engine in ["tract", "onnxruntime"] {
            let file = int8_dir.path().join(format!("modnet-int8.{engine}.onnx"));
            std::fs::write(file, b"").unwrap();
        }
        for (auto, engine, dir, person) in [
            (
                "isnet-int8",
                EngineKind::Tract,
                int8_dir.path(),
                "modnet-int8",
            ),
            ("isnet-int8", EngineKind::Tract, none.path(), "modnet"),
            (
                "isnet-int8",
                EngineKind::Onnxruntime,
                int8_dir.path(),
                "modnet",
            ),
            ("isnet", EngineKind::Tract, int8_dir.path(), "modnet"),
            (
                "modnet-int8",
                EngineKind::Onnxruntime,
                none.path(),
                "modnet-int8",
            ),
        ] {
            let models = m.models_for(Some(auto), true, engine, dir).unwrap();
            assert_eq!(models.person.name, person, "{auto} on {engine}");
        }
        // A small board: MODNet fits beside U2NetP, IS-Net does not.
        let models = m
            .models_for(Some("u2netp"), false, EngineKind::Tract, none.path())
            .unwrap();
        assert_eq!(
            [models.auto.name, models.person.name, models.general.name],
            ["u2netp", "modnet", "u2netp"]
        );
        assert!(m.model(Some("nope")).is_none());
        assert!(
            m.onnxruntime.sha256_here().is_some(),
            "a build for this arch"
        );
    }
}
