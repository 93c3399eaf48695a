//! The model: the manifest, pure pre/post-processing, one `Engine` trait
//! with its two backends (tract, pure Rust; ONNX Runtime, loaded at run
//! time), and the inference pool every request shares.

mod inference;
mod killed;
mod manifest;
mod onnxruntime;
pub mod preprocess;
mod tract;
mod trial;

pub use crate::config::{EngineChoice, EngineKind};
pub use inference::{InferError, Inference, Readiness};
pub use killed::{forget_killed, killed_for_memory, Killed, LoadWatch, KILLED_FILE};
pub use manifest::{
    Agree, Blend, Doubt, InputFilter, InputSpec, Manifest, Median, ModelSpec, Models, OutputKind,
    Peer, Peers, RuntimeSpec, SecondOpinion,
};
pub use onnxruntime::OnnxRuntimeEngine;
pub use tract::TractEngine;
pub use tract_planned::Replaced;
pub use trial::{OnnxRuntimeTrial, TRIAL_FILE};

use anyhow::{bail, Context, Result};

use sha2::{Digest, Sha256};
use std::path::Path;
use std::sync::Arc;

/// Ends the process with `code` without the C and C++ exit handlers.
/// Another thread may be inside ONNX Runtime still (a model of `type=auto`'s
/// blend loading after READY=1, one loaded on first use), and the library's
/// static destructors, which those handlers run, free what it is using: a
/// clean stop then dies of SIGSEGV. Nothing of ours runs at exit.
#[allow(unsafe_code)]
pub fn exit_leaving_the_libraries(code: i32) -> ! {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: _exit ends the process at once; it reads no memory of ours.
    unsafe { libc::_exit(code) }
}

/// Runs one model. Implementations are shared by all inference workers.
pub trait Engine: Send + Sync {
    /// The inference library, as the status page names it.
    fn name(&self) -> &'static str;

    /// Runs the model on one NCHW f32 image of `width`×`height`; returns
    /// the first output's `height*width` values.
    fn run(&self, input: Vec<f32>, width: u32, height: u32) -> Result<Vec<f32>>;
}

/// Loads `spec`'s file from `models_dir` on the chosen engine. Every file
/// is checked against its sha256 first, so a truncated or swapped file is
/// reported as such, not as a parse error.
pub fn load(spec: &ModelSpec, models_dir: &Path, choice: &EngineChoice) -> Result<Arc<dyn Engine>> {
    let Some((file, sha256)) = spec.prepared_for(choice.kind) else {
        bail!(
            "{} has no file for the {} engine (models/manifest.toml)",
            spec.name,
            choice.kind
        );
    };
    let path = models_dir.join(file);
    let remedy = if spec.int8 {
        "make quantize"
    } else {
        "make models"
    };
    // Read once: hashed here, then parsed from memory by either engine.
    let model = read_checked(&path, sha256, "model file", remedy)?;
    Ok(match choice.kind {
        EngineKind::Tract => Arc::new(TractEngine::load(spec, &model, &path)?),
        EngineKind::Onnxruntime => {
            let runtime = Manifest::builtin().onnxruntime;
            let library = choice
                .onnxruntime_library
                .clone()
                .unwrap_or_else(|| models_dir.join(&runtime.file));
            let Some(sha256) = runtime.sha256_here() else {
                bail!(
                    "there is no pinned ONNX Runtime build for {}",
                    std::env::consts::ARCH
                );
            };
            read_checked(&library, sha256, "ONNX Runtime library", "make onnxruntime")?;
            Arc::new(OnnxRuntimeEngine::load(
                &model,
                &path,
                &library,
                spec.input.fixed_size(),
            )?)
        }
    })
}

/// The file's bytes, once its sha256 is the expected one.
fn read_checked(path: &Path, expected: &str, what: &str, remedy: &str) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path).with_context(|| {
        format!(
            "{what} {} is missing or unreadable (run `{remedy}`)",
            path.display()
        )
    })?;
    let actual: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if actual != expected {
        bail!(
            "{what} {} is corrupt: sha256 {actual}, expected {expected}",
            path.display()
        );
    }
    Ok(bytes)
}
