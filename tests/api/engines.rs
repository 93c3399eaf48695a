//! Both engines give the same matte: every model at every input size the
//! dev photographs give it (two photos a size; read from ../shared/eval,
//! never copied here), through the same pre-processing, with the alpha of
//! tract and of ONNX Runtime at most 1e-3 apart anywhere; and the server on ONNX Runtime, with its library present,
//! missing or wrong. Needs `make models onnxruntime`. `make check` compares
//! every 7th photo (`PARITY_EVERY_NTH=7`), `make test` all of them.

use crate::helpers::*;
use cutout::engine::preprocess::output_range;
use cutout::engine::{
    self, Engine, EngineChoice, EngineKind, Manifest, ModelSpec, Replaced, TractEngine,
};
use cutout::EngineSource;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const TOLERANCE: f32 = 1e-3;

fn dev_photos() -> Vec<PathBuf> {
    let dev = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/eval/dev");
    let mut photos: Vec<PathBuf> = ["alphamatting", "grabcut"]
        .iter()
        .flat_map(|set| {
            std::fs::read_dir(dev.join(set).join("images"))
                .expect("../shared/eval is beside the checkout")
                .map(|entry| entry.unwrap().path())
        })
        .collect();
    photos.sort();
    photos
}

fn load(spec: &ModelSpec, kind: EngineKind) -> Arc<dyn Engine> {
    let choice = EngineChoice {
        kind,
        onnxruntime_library: None,
    };
    engine::load(spec, &models_dir(), &choice).unwrap_or_else(|e| {
        panic!(
            "{} on {kind:?} (run `make models onnxruntime`): {e:#}",
            spec.name
        )
    })
}

/// Photos compared at each of a model's input sizes: the engines' kernels
/// and plans follow the size, not the pixels, so more photos at a size
/// mostly repeat a comparison already made.
const PHOTOS_PER_INPUT_SIZE: usize = 2;

/// The largest alpha difference between the engines over `photos`, at most
/// `PHOTOS_PER_INPUT_SIZE` of them at each input size; the photo where it
/// is, and how many photos at how many sizes were compared.
fn largest_difference(spec: &ModelSpec, photos: &[PathBuf]) -> (f32, PathBuf, usize, usize) {
    let (tract, onnxruntime) = (
        load(spec, EngineKind::Tract),
        load(spec, EngineKind::Onnxruntime),
    );
    let mut worst = (0.0, PathBuf::new());
    let mut sizes = std::collections::HashMap::new();
    for photo in photos {
        // Some dev photos are BMP, which the API refuses; the engines do not care.
        let image = image::DynamicImage::ImageRgb8(image::open(photo).unwrap().into_rgb8());
        let (_, tensor, layout) = cutout::pipeline::prepare(spec, spec.input, &image);
        let (w, h) = layout.input;
        let compared = sizes.entry((w, h)).or_insert(0);
        if *compared == PHOTOS_PER_INPUT_SIZE {
            continue;
        }
        *compared += 1;
        let a = tract.run(tensor.clone(), w, h).unwrap();
        let b = onnxruntime.run(tensor, w, h).unwrap();
        let (range_a, range_b) = (output_range(&a, spec.output), output_range(&b, spec.output));
        let difference = a
            .iter()
            .zip(&b)
            .map(|(&a, &b)| (range_a.unit(a) - range_b.unit(b)).abs())
            .fold(0.0, f32::max);
        if difference > worst.0 {
            worst = (difference, photo.clone());
        }
    }
    let compared = sizes.values().sum();
    (worst.0, worst.1, compared, sizes.len())
}

#[test]
fn tract_and_onnxruntime_give_the_same_matte_at_every_input_size_of_the_dev_photos() {
    let photos = dev_photos();
    assert_eq!(photos.len(), 77, "27 alphamatting and 50 grabcut photos");
    let every_nth = std::env::var("PARITY_EVERY_NTH").map_or(1, |n| {
        n.parse()
            .expect("PARITY_EVERY_NTH is a whole number of photos")
    });
    let photos: Vec<PathBuf> = photos.into_iter().step_by(every_nth).collect();
    // Each engine's int8 file is quantised in its own format
    // (models/quantize.py): not the same graph, so not compared here.
    for spec in Manifest::builtin().models.iter().filter(|m| !m.int8) {
        let (difference, photo, compared, sizes) = largest_difference(spec, &photos);
        eprintln!(
            "{}: largest alpha difference {difference:.2e} ({}), on {compared} photos at {sizes} input sizes",
            spec.name,
            photo.display()
        );
        assert!(
            difference <= TOLERANCE,
            "{}: the engines differ by {difference} on {}",
            spec.name,
            photo.display()
        );
    }
}

#[test]
fn a_fixed_size_model_on_tract_runs_at_its_size_and_refuses_others() {
    let spec = Manifest::builtin().require(Some("u2netp")).unwrap().clone();
    let (width, height) = spec.input.fixed_size().unwrap();
    let tract = load(&spec, EngineKind::Tract);
    let input = |w: u32, h: u32| vec![0.5; (3 * w * h) as usize];
    let matte = tract.run(input(width, height), width, height).unwrap();
    assert_eq!(matte.len(), (width * height) as usize);
    // Planned at load, its parsed model dropped: no other size is planned.
    let error = tract.run(input(64, 64), 64, 64).unwrap_err();
    assert!(
        format!("{error:#}").contains(&format!(
            "planned for [({width}, {height})] only, not 64x64"
        )),
        "{error:#}"
    );
}

/// cutout's passes over tract's plan (crates/tract-planned) replace these many
/// nodes in each shipped model at the sizes it runs at. A pass that stops
/// applying, after a tract update or on a model exported anew, fails here
/// instead of only making the model slower.
#[test]
fn every_pass_over_tracts_plan_still_applies_to_every_model() {
    let manifest = Manifest::builtin();
    let replaced = |model: &str, (width, height): (u32, u32)| {
        let spec = manifest.require(Some(model)).unwrap();
        let (file, _) = spec.prepared_for(EngineKind::Tract).unwrap();
        let path = models_dir().join(file);
        let bytes = std::fs::read(&path).expect("the model (run `make models`)");
        let tract = TractEngine::load(spec, &bytes, &path).unwrap();
        tract.replaced(width, height).unwrap()
    };
    let counts = |r: Replaced| {
        [
            r.qconvs,
            r.resizes,
            r.norms,
            r.fused,
            r.pads,
            r.im2cols,
            r.max_pools,
        ]
    };
    // int8 convolutions, resizes, norms, fused, pads, im2cols, max pools;
    // IS-Net at 4:3 and squashed (`type=auto`).
    let expected = [
        ("isnet", (1024, 768), [0, 34, 0, 123, 114, 114, 33]),
        ("isnet", (1024, 1024), [0, 34, 0, 123, 114, 114, 33]),
        ("isnet-int8", (1024, 1024), [114, 34, 0, 0, 0, 0, 33]),
        ("u2netp", (256, 256), [0, 38, 0, 123, 118, 118, 33]),
        ("modnet", (384, 512), [0, 8, 16, 2, 15, 15, 0]),
        ("modnet-int8", (384, 512), [36, 8, 16, 3, 1, 1, 0]),
    ];
    let found: Vec<_> = expected
        .iter()
        .map(|&(model, size, _)| (model, size, counts(replaced(model, size))))
        .collect();
    assert_eq!(found, expected);
}

fn on_onnxruntime(library: Option<PathBuf>) -> TestApp {
    spawn_app_with(EngineSource::Load, |s| {
        s.model = Some("u2netp".into());
        s.engine = EngineChoice {
            kind: EngineKind::Onnxruntime,
            onnxruntime_library: library,
        };
    })
}

#[test]
fn the_api_cuts_out_on_onnxruntime() {
    let app = on_onnxruntime(None);
    let key = app.account("acme", "pro");
    wait_until("the model is loaded", || {
        app.request("GET", "/readyz", &[], b"").status == 200
    });
    let reply = app.post_image(Some(&key), &jpeg(64, 48), None);
    assert_eq!(reply.png().dimensions(), (64, 48));
    assert_eq!(
        app.state.pipeline.default_model().inference.engine_name(),
        Some("onnxruntime")
    );
}

#[test]
fn a_missing_or_wrong_onnxruntime_library_leaves_the_server_up_but_degraded() {
    let dir = tempfile::tempdir().unwrap();
    let wrong = dir.path().join("libonnxruntime.so.1.31.1");
    std::fs::write(&wrong, b"not a library").unwrap();
    for (library, says) in [
        (
            dir.path().join("absent.so"),
            "missing or unreadable (run `make onnxruntime`)",
        ),
        (wrong, "is corrupt: sha256"),
    ] {
        let app = on_onnxruntime(Some(library));
        let key = app.account("acme", "pro");
        let model_error = || {
            let ready = app.request("GET", "/readyz", &[], b"");
            assert_eq!(ready.status, 503);
            let ready: serde_json::Value = serde_json::from_slice(&ready.body).unwrap();
            ready["model_error"].as_str().unwrap().to_owned()
        };
        wait_until("the load has failed", || {
            model_error().starts_with("model failed to load")
        });
        let error = model_error();
        assert!(error.contains(says), "{error}");
        let reply = app.post_image(Some(&key), &jpeg(64, 48), None);
        assert_eq!(
            (reply.status, reply.error_code().as_str()),
            (503, "service_unavailable")
        );
        assert_eq!(app.used("acme"), 0);
    }
}
