//! The model: the manifest, pure pre/post-processing, one `Engine` trait
//! with its backends, and the inference pool every request shares.

mod manifest;
mod pool;
pub mod preprocess;
mod tract;

pub use manifest::{InputSpec, Manifest, ModelSpec, OutputKind};
pub use pool::{InferError, Inference, Readiness};
pub use tract::TractEngine;

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::Path;

/// Runs one model. Implementations are shared by all inference workers.
pub trait Engine: Send + Sync {
    /// The inference library, as the status page names it.
    fn name(&self) -> &'static str;

    /// Runs the model on one NCHW f32 image of `width`×`height`; returns
    /// the first output's `height*width` values.
    fn run(&self, input: Vec<f32>, width: u32, height: u32) -> Result<Vec<f32>>;
}

/// Loads `spec`'s file from `models_dir` after checking its sha256, so a
/// truncated or swapped file is reported as such, not as a parse error.
pub fn load(spec: &ModelSpec, models_dir: &Path) -> Result<TractEngine> {
    let path = models_dir.join(&spec.file);
    let actual = sha256_file(&path).with_context(|| {
        format!(
            "model file {} is missing or unreadable (run `make models`)",
            path.display()
        )
    })?;
    if actual != spec.sha256 {
        bail!(
            "model file {} is corrupt: sha256 {actual}, expected {}",
            path.display(),
            spec.sha256
        );
    }
    TractEngine::load(spec, &path)
}

fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match file.read(&mut buf)? {
            0 => break,
            n => hasher.update(&buf[..n]),
        }
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}
