//! cutout: a background-removal appliance. `app::AppState` is the
//! appliance, `App` serves it over HTTP; the modules below know nothing of
//! HTTP (docs/architecture.md; each file's header).
#![deny(unsafe_code)]

// `unsafe` is here only in the allocator, in ONNX Runtime's crash guard
// (engine/trial.rs, a signal handler) and in the exit that leaves ONNX
// Runtime's destructors alone (engine/mod.rs), which cannot be written
// without it (and in crates/tract-planned, which writes into tract's buffers).
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub mod allocator;
pub mod app;
pub mod backdrops;
pub mod backup;
pub mod bench;
pub mod board;
pub mod button;
pub mod cli;

pub mod clock;
pub mod config;
pub mod discovery;
pub mod domain;
pub mod engine;
pub mod error;
pub mod fetch;
pub mod http;
pub mod imaging;
pub mod ladder;
pub mod led;
pub mod pages;
pub mod pairing;
pub mod pipeline;
pub mod secrets;
pub mod serve;
pub mod stats;
pub mod store;
pub mod systemd;
pub mod tls;

pub use app::EngineSource;
pub use http::{App, ShutdownHandle};

/// The layering docs/architecture.md describes, held by a test: each
/// module uses exactly the modules its table row names, the table has no
/// cycle, and every path the page names exists.
#[cfg(test)]
mod layers {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::{Path, PathBuf};

    fn root() -> &'static Path {
        Path::new(env!("CARGO_MANIFEST_DIR"))
    }

    fn rust_files(dir: &Path) -> Vec<PathBuf> {
        let mut files = Vec::new();
        let mut dirs = vec![dir.to_owned()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    files.push(path);
                }
            }
        }
        files
    }

    /// `text` with its comments and the insides of its string and char
    /// literals blanked, so that only code is left to read.
    fn code_only(text: &str) -> String {
        let chars: Vec<char> = text.chars().collect();
        let mut out = String::with_capacity(text.len());
        let mut i = 0;
        while i < chars.len() {
            let (c, next) = (chars[i], chars.get(i + 1).copied());
            if c == '/' && next == Some('/') {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            } else if c == '/' && next == Some('*') {
                let mut depth = 0;
                while i < chars.len() {
                    if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                        depth += 1;
                        i += 2;
                    } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
                out.push(' ');
            } else if c == 'r' && matches!(next, Some('"' | '#')) {
                let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
                if chars.get(i + 1 + hashes) != Some(&'"') {
                    out.push(c);
                    i += 1;
                    continue;
                }
                i += 2 + hashes;
                let close: String = std::iter::once('"')
                    .chain("#".repeat(hashes).chars())
                    .collect();
                while i < chars.len() && !chars[i..].iter().collect::<String>().starts_with(&close)
                {
                    i += 1;
                }
                i += close.len();
                out.push_str("\"\"");
            } else if c == '"' {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            } else if c == '\'' && (next == Some('\\') || chars.get(i + 2) == Some(&'\'')) {
                // A char literal; a lifetime ('a) has no closing quote.
                i += 1;
                while i < chars.len() && chars[i] != '\'' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("' '");
            } else {
                out.push(c);
                i += 1;
            }
        }
        out
    }

    /// The top-level names `code` reaches through `crate::`, a group's
    /// (`use crate::{a, b::c}`) included.
    fn crate_names(code: &str) -> BTreeSet<String> {
        let ident = |s: &str| -> String {
            s.trim_start()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        };
        let mut names = BTreeSet::new();
        for rest in code.split("crate::").skip(1) {
            let Some(group) = rest.trim_start().strip_prefix('{') else {
                names.insert(ident(rest));
                continue;
            };
            let (mut depth, mut item) = (0, String::new());
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        names.insert(ident(&item));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            names.insert(ident(&item));
        }
        names.remove("");
        names
    }

    /// Each top-level module and the top-level modules its code (tests
    /// included) names through `crate::`.
    fn dependencies() -> BTreeMap<String, BTreeSet<String>> {
        let src = root().join("src");
        let mut deps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for path in rust_files(&src) {
            let relative = path.strip_prefix(&src).unwrap();
            let first = relative.components().next().unwrap().as_os_str();
            let module = first.to_string_lossy().trim_end_matches(".rs").to_owned();
            if module == "lib" || module == "main" {
                continue;
            }
            let code = code_only(&std::fs::read_to_string(&path).unwrap());
            let entry = deps.entry(module.clone()).or_default();
            entry.extend(crate_names(&code).into_iter().filter(|u| *u != module));
        }
        deps
    }

    fn architecture() -> String {
        std::fs::read_to_string(root().join("docs/architecture.md")).unwrap()
    }

    /// docs/architecture.md's table: each module and the modules it uses.
    fn documented() -> BTreeMap<String, BTreeSet<String>> {
        let page = architecture();
        let table = page
            .lines()
            .skip_while(|l| !l.starts_with("| module | uses |"))
            .skip(2)
            .take_while(|l| l.starts_with('|'));
        table
            .map(|row| {
                let cells: Vec<&str> = row.split('|').map(str::trim).collect();
                let uses = cells[2].split(',').map(str::trim).filter(|u| !u.is_empty());
                (cells[1].to_owned(), uses.map(String::from).collect())
            })
            .collect()
    }

    #[test]
    fn each_module_uses_exactly_what_the_architecture_page_says() {
        let (actual, documented) = (dependencies(), documented());
        assert!(!documented.is_empty(), "no table in docs/architecture.md");
        for (module, uses) in &actual {
            let claimed = documented
                .get(module)
                .unwrap_or_else(|| panic!("{module} is not in docs/architecture.md's table"));
            for name in uses {
                assert!(
                    actual.contains_key(name),
                    "{module} names crate::{name}, not a module: name the module"
                );
            }
            let unclaimed: Vec<_> = uses.difference(claimed).collect();
            assert!(
                unclaimed.is_empty(),
                "{module} uses {unclaimed:?} undocumented"
            );
            let unused: Vec<_> = claimed.difference(uses).collect();
            assert!(unused.is_empty(), "{module} no longer uses {unused:?}");
        }
        let gone: Vec<_> = documented
            .keys()
            .filter(|m| !actual.contains_key(*m))
            .collect();
        assert!(
            gone.is_empty(),
            "the table names modules that are gone: {gone:?}"
        );
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
    fn every_path_the_architecture_page_names_exists() {
        let page = architecture();
        let src = root().join("src");
        let names: BTreeSet<String> = rust_files(&src)
            .iter()
            .chain(&rust_files(&root().join("tests")))
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        let words = page.split(|c: char| !(c.is_ascii_alphanumeric() || "_./-".contains(c)));
        for word in words.filter(|w| w.ends_with(".rs")) {
            let exists = if word.contains('/') {
                src.join(word).exists() || root().join(word).exists()
            } else {
                names.contains(word)
            };
            assert!(
                exists,
                "docs/architecture.md names {word}, which does not exist"
            );
        }
        let layout = page.split("```").nth(1).expect("the layout block");
        for line in layout.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            if first.ends_with('/') {
                let exists = src.join(first).is_dir() || root().join(first).is_dir();
                assert!(
                    exists,
                    "docs/architecture.md lays out {first}, which does not exist"
                );
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
        assert!(!deps["app"].contains("pages"), "the app renders no pages");
        assert!(
            deps["config"].is_empty(),
            "config is a leaf: {:?}",
            deps["config"]
        );
    }
}
