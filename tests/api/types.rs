//! The `type` field picks the model: `auto` the configured one, `person`
//! MODNet, `general` IS-Net; a model other than the configured one is loaded
//! once, on its first use. Runs the binary with real models (ONNX Runtime:
//! IS-Net takes seconds to load there, against a minute on tract).

use crate::helpers::*;
use std::path::Path;

/// The cut-out's alpha, once `X-Model` is `model`.
fn alpha_of(
    server: &Server,
    key: &str,
    photo: &[u8],
    subject: Option<&str>,
    model: &str,
) -> Vec<u8> {
    let mut form = Multipart::new();
    form.file("image_file", photo);
    if let Some(subject) = subject {
        form.text("type", subject);
    }
    let reply = post_form(server.addr, Some(key), &form);
    assert_eq!(reply.status, 200, "type {subject:?}: {}", reply.text());
    assert_eq!(reply.header("x-model"), Some(model), "type {subject:?}");
    reply.png().pixels().map(|p| p.0[3]).collect()
}

/// The mean absolute difference of two mattes, in alpha levels.
fn difference(a: &[u8], b: &[u8]) -> f64 {
    assert_eq!(a.len(), b.len());
    let sum: u64 = a
        .iter()
        .zip(b)
        .map(|(&a, &b)| u64::from(a.abs_diff(b)))
        .sum();
    sum as f64 / a.len() as f64
}

#[test]
fn each_type_runs_its_own_model_loaded_once_on_first_use() {
    let photo = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/eval/dev/grabcut/images/person1.jpg"),
    )
    .expect("../shared/eval is beside the checkout");
    let data = tempfile::tempdir().unwrap();
    let key = cli_account(data.path(), "booth", "pro");
    // The configured model (`type=auto`) is U2NetP here.
    let server = Server::start(data.path(), "info", &["--engine", "onnxruntime"]);

    let unnamed = alpha_of(&server, &key, &photo, None, "u2netp");
    let auto = alpha_of(&server, &key, &photo, Some("auto"), "u2netp");
    // MODNet's matte at two sizes and U2NetP's, their median (BENCHMARKS.md, "People").
    let person = alpha_of(&server, &key, &photo, Some("person"), "modnet+u2netp");
    let person_again = alpha_of(&server, &key, &photo, Some("person"), "modnet+u2netp");
    let general = alpha_of(&server, &key, &photo, Some(" general "), "isnet");

    assert!(difference(&unnamed, &auto) < 0.5, "no type is auto");
    assert!(
        difference(&person, &person_again) < 0.5,
        "the same model twice"
    );
    for (a, b, what) in [
        (&auto, &person, "U2NetP vs MODNet"),
        (&auto, &general, "U2NetP vs IS-Net"),
        (&person, &general, "MODNet vs IS-Net"),
    ] {
        assert!(difference(a, b) > 1.0, "{what}: the same matte");
    }

    let log = std::fs::read_to_string(&server.log).unwrap();
    for model in ["u2netp", "modnet", "isnet"] {
        let loads = log.matches(&format!("model {model} loaded")).count();
        assert_eq!(loads, 1, "{model} loaded once:\n{log}");
    }
    let usage = cutout_cli(data.path(), &["usage", "booth"]);
    assert!(usage.contains("5 of 500"), "each type counts: {usage}");
}
