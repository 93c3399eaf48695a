//! cutout: a background-removal appliance. `app::AppState` is the
//! appliance, `App` serves it over HTTP; the modules below know nothing of
//! HTTP (docs/architecture.md; each file's header).
#![deny(unsafe_code)]

// `unsafe` is here, as an allocator cannot be written without it, and in
// `engine::tract::im2col`, which fills buffers tract hands it by pointer,
// and `engine::tract::planes`, which writes tensors tract makes unzeroed.
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
pub mod limits;
pub mod pipeline;
pub mod secrets;
pub mod serve;
pub mod stats;
pub mod store;
pub mod systemd;
pub mod tls;

pub use app::EngineSource;
pub use http::{App, ShutdownHandle};
