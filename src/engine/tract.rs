//! The pure-Rust engine: tract-onnx. The model is parsed once; an optimised
//! plan is built once per input shape and shared by every worker, with
//! cutout's own operators in place of some of tract's
//! (crates/tract-planned).

use super::manifest::ModelSpec;
use super::Engine;
use anyhow::{Context, Result};
use std::path::Path;
use std::sync::{Arc, Mutex};
use tract_onnx::prelude::*;
use tract_planned::Replaced;

#[cfg(target_os = "linux")]
use crate::allocator::reusing_large_blocks;

/// Elsewhere the system allocator is left as it is.
#[cfg(not(target_os = "linux"))]
fn reusing_large_blocks<R>(f: impl FnOnce() -> R) -> R {
    f()
}

type Runnable = Arc<TypedRunnableModel>;

/// Plans kept for a model that runs at any size, the least recently used
/// dropped first: each holds the weights again, IS-Net's 175 MB.
const MAX_CACHED_PLANS: usize = 3;

pub struct TractEngine {
    /// Kept to plan each new input size; a fixed-size model's one plan is
    /// made at load, and its parsed model (IS-Net's 88 MB of fp16
    /// weights) dropped.
    model: Option<InferenceModel>,
    fp16: bool,
    /// The most recently used last.
    plans: Mutex<Vec<Planned>>,
}

/// A plan for one input size, and what cutout's passes replaced in it.
#[derive(Clone)]
struct Planned {
    size: (u32, u32),
    plan: Runnable,
    replaced: Replaced,
}

impl TractEngine {
    /// `model` is the file's bytes; `path` names it in errors.
    pub fn load(spec: &ModelSpec, model: &[u8], path: &Path) -> Result<TractEngine> {
        tract_planned::prefer_avx2_on_zen4();
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        tract_linalg::multithread::set_default_executor(
            tract_linalg::multithread::Executor::multithread(threads),
        );
        let mut model = tract_onnx::onnx()
            .model_for_read(&mut &model[..])
            .with_context(|| format!("parsing {}", path.display()))?;
        // The first output is the matte; side outputs (IS-Net's
        // deep-supervision mattes) are then never computed.
        let first = *model
            .output_outlets()?
            .first()
            .context("the model has no output")?;
        model.select_output_outlets(&[first])?;
        let mut engine = TractEngine {
            model: Some(model),
            fp16: spec.fp16,
            plans: Mutex::default(),
        };
        // Fixed-size models get their one plan now, so the first request is not slow.
        if let Some((width, height)) = spec.input.fixed_size() {
            engine.plan(width, height)?;
            engine.model = None;
        }
        Ok(engine)
    }

    fn plan(&self, width: u32, height: u32) -> Result<Runnable> {
        Ok(self.planned(width, height)?.plan)
    }

    /// What cutout's passes replaced in the plan for `width`×`height`
    /// (tests hold every shipped model to its counts).
    pub fn replaced(&self, width: u32, height: u32) -> Result<Replaced> {
        Ok(self.planned(width, height)?.replaced)
    }

    fn planned(&self, width: u32, height: u32) -> Result<Planned> {
        {
            let mut plans = self.plans.lock().unwrap();
            if let Some(at) = plans.iter().position(|p| p.size == (width, height)) {
                let used = plans.remove(at);
                plans.push(used.clone());
                return Ok(used);
            }
        }
        let model = self.model.as_ref().with_context(|| {
            let plans = self.plans.lock().unwrap();
            let sizes: Vec<_> = plans.iter().map(|p| p.size).collect();
            format!("the model was planned for {sizes:?} only, not {width}x{height}")
        })?;
        let (plan, replaced) = self.make_plan(model, width, height)?;
        log::debug!("tract plan for {width}x{height}: {replaced:?}");
        let planned = Planned {
            size: (width, height),
            plan,
            replaced,
        };
        let mut plans = self.plans.lock().unwrap();
        // Another request may have planned this size meanwhile.
        if !plans.iter().any(|p| p.size == (width, height)) {
            if plans.len() >= MAX_CACHED_PLANS {
                plans.remove(0);
            }
            plans.push(planned.clone());
        }
        Ok(planned)
    }

    fn make_plan(
        &self,
        model: &InferenceModel,
        width: u32,
        height: u32,
    ) -> Result<(Runnable, Replaced)> {
        let shape = [1, 3, height as usize, width as usize];
        let mut typed = model
            .clone()
            .with_input_fact(0, f32::fact(shape).into())?
            // Some graphs declare symbolic output dims that analysis cannot resolve.
            .with_output_fact(0, Default::default())?
            .into_typed()?
            .into_decluttered()?;
        if self.fp16 {
            tract_planned::to_f32(&mut typed)?;
        }
        let (optimised, replaced) = tract_planned::optimise(typed)?;
        Ok((optimised.into_runnable()?, replaced))
    }
}

impl Engine for TractEngine {
    fn name(&self) -> &'static str {
        "tract-onnx"
    }

    fn run(&self, input: Vec<f32>, width: u32, height: u32) -> Result<Vec<f32>> {
        let plan = self.plan(width, height)?;
        let tensor = Tensor::from_shape(&[1, 3, height as usize, width as usize], &input)?;
        let outputs = reusing_large_blocks(|| plan.run(tvec!(tensor.into())))?;
        let out = outputs[0].to_plain_array_view::<f32>()?;
        anyhow::ensure!(
            out.len() == (width * height) as usize,
            "model output has {} values, expected {}x{}",
            out.len(),
            width,
            height
        );
        Ok(out.iter().copied().collect())
    }
}
