//! cutout: a background-removal appliance. `app::AppState` is the
//! appliance, `App` serves it over HTTP; the modules below know nothing of
//! HTTP (docs/architecture.md; each file's header).
#![deny(unsafe_code)]

// `unsafe` is here only in the allocator, which cannot be written without it
// (and in crates/tract-planned, which writes into tract's buffers).
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub mod allocator;
pub mod app;
pub mod bench;
pub mod board;
pub mod cli;

pub mod clock;
pub mod config;
pub mod dashboard;
pub mod discovery;
pub mod domain;
pub mod engine;
pub mod error;
pub mod http;
pub mod imaging;
pub mod led;
pub mod pipeline;
pub mod secrets;
pub mod serve;
pub mod stats;
pub mod store;
pub mod systemd;
pub mod tls;

pub use app::EngineSource;
pub use http::{App, ShutdownHandle};

/// The layering docs/architecture.md describes, held by a test: no module
/// reaches back into one that depends on it, and only the start-up knows
/// the HTTP server.
#[cfg(test)]
mod layers {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;

    /// Each top-level module and the top-level modules its non-test code
    /// names through `crate::`.
    fn dependencies() -> BTreeMap<String, BTreeSet<String>> {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut deps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut dirs = vec![src.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                    continue;
                }
                if path.extension().is_none_or(|e| e != "rs") {
                    continue;
                }
                let relative = path.strip_prefix(&src).unwrap();
                let first = relative.components().next().unwrap().as_os_str();
                let module = first.to_string_lossy().trim_end_matches(".rs").to_owned();
                if module == "lib" || module == "main" {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                let code = text.split("#[cfg(test)]").next().unwrap();
                let used = code.split("crate::").skip(1).map(|rest| {
                    rest.chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect::<String>()
                });
                let entry = deps.entry(module.clone()).or_default();
                entry.extend(used.filter(|u| !u.is_empty() && *u != module));
            }
        }
        deps
    }

    #[test]
    fn no_module_depends_on_itself_through_others() {
        let deps = dependencies();
        for start in deps.keys() {
            let mut seen = BTreeSet::new();
            let mut next: Vec<&String> = deps[start].iter().collect();
            while let Some(module) = next.pop() {
                assert_ne!(module, start, "{start} reaches itself: {deps:?}");
                if seen.insert(module) {
                    next.extend(deps.get(module).into_iter().flatten());
                }
            }
        }
    }

    #[test]
    fn only_the_start_up_knows_the_http_server() {
        let deps = dependencies();
        let users: Vec<_> = deps
            .iter()
            .filter(|(module, uses)| {
                uses.contains("http") && !["cli", "serve"].contains(&module.as_str())
            })
            .map(|(module, _)| module.as_str())
            .collect();
        assert!(users.is_empty(), "{users:?} use the HTTP server");
        assert!(
            !deps["app"].contains("dashboard"),
            "the app renders no pages"
        );
    }
}
