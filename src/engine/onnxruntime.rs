//! The fast engine: ONNX Runtime, loaded at run time from the shared library
//! `make onnxruntime` takes out of the pinned PyPI wheel. Nothing of it is
//! compiled in, so a build without that file still runs on tract.

use super::Engine;
use anyhow::{anyhow, ensure, Result};
use ort::environment::Environment;
use ort::session::Session;
use ort::value::TensorRef;
use std::path::Path;
use std::sync::Mutex;

pub struct OnnxRuntimeEngine {
    /// `Session::run` takes `&mut`: runs on one session take turns. Each
    /// run already spreads over every core.
    session: Mutex<Session>,
}

impl OnnxRuntimeEngine {
    /// `library` must already be checked. The first library a process
    /// loads stays for good: later calls use it, whatever `library` says.
    /// `model` is the file prepared for ONNX Runtime (models/prepare.py);
    /// `fixed` its one input size, where it has one.
    pub fn load(
        model: &[u8],
        path: &Path,
        library: &Path,
        fixed: Option<(u32, u32)>,
    ) -> Result<OnnxRuntimeEngine> {
        let environment = environment(library)?;
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let session = Session::builder(&environment)?
            .with_intra_threads(threads)
            .map_err(|e| anyhow!("{e}"))?
            // Spinning threads would take the cores from the requests
            // decoding and encoding beside a run.
            .with_intra_op_spinning(false)
            .map_err(|e| anyhow!("{e}"))?
            // Planning memory ahead made IS-Net's peak 2.2 GB instead of
            // 1.35 GB here, and was no faster (BENCHMARKS.md, "ONNX Runtime's settings").
            .with_memory_pattern(false)
            .map_err(|e| anyhow!("{e}"))?
            .commit_from_memory(model)
            .map_err(|e| anyhow!("loading {}: {e}", path.display()))?;
        let engine = OnnxRuntimeEngine {
            session: Mutex::new(session),
        };
        // The arena grows to the largest input a run has had and keeps it.
        // A model of one input size grows it here, so that it is the idle
        // server's and a request reserves only what a run adds (manifest
        // `working_mib`). One whose input follows the photo's shape (IS-Net,
        // MODNet) grows it over its first requests, up to its largest input:
        // the board's budget leaves that beside the idle server
        // (`board::IDLE_WITH_ISNET`); a run at its largest input under
        // emulation takes a quarter of an hour.
        if let Some((width, height)) = fixed {
            engine
                .run(
                    vec![0.0; 3 * width as usize * height as usize],
                    width,
                    height,
                )
                .map_err(|e| anyhow!("a first run of {}: {e}", path.display()))?;
        }
        Ok(engine)
    }
}

/// ONNX Runtime allows one environment per process, even after the first
/// is dropped; every model loaded later shares it (and its library).
fn environment(library: &Path) -> Result<Environment> {
    static ENVIRONMENT: Mutex<Option<Environment>> = Mutex::new(None);
    let mut shared = ENVIRONMENT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(environment) = shared.as_ref() {
        return Ok(environment.clone());
    }
    let environment = ort::init_from(library)
        .map_err(|e| anyhow!("loading ONNX Runtime: {e}"))?
        .with_name("cutout")
        .build()?;
    *shared = Some(environment.clone());
    Ok(environment)
}

impl Engine for OnnxRuntimeEngine {
    fn name(&self) -> &'static str {
        "onnxruntime"
    }

    fn run(&self, input: Vec<f32>, width: u32, height: u32) -> Result<Vec<f32>> {
        let shape = [1usize, 3, height as usize, width as usize];
        let tensor = TensorRef::from_array_view((shape, &input[..]))?;
        let mut session = self.session.lock().unwrap_or_else(|p| p.into_inner());
        let outputs = session.run(ort::inputs![tensor])?;
        let (_, values) = outputs[0].try_extract_tensor::<f32>()?;
        ensure!(
            values.len() == (width * height) as usize,
            "model output has {} values, expected {width}x{height}",
            values.len()
        );
        Ok(values.to_vec())
    }
}
