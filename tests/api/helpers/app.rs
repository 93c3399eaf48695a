//! The app in this process: `spawn_app` starts it on port 0 with a fresh
//! data directory and a manual clock; `TestApp` makes accounts and keys and
//! reads its counters. `GatedEngine` holds runs until a test opens it.

use super::{post_form, request, Multipart, Reply};
use cutout::app::AppState;
use cutout::clock::Clock;
use cutout::config::Settings;
use cutout::domain::AccountName;
use cutout::engine::{self, Engine, EngineChoice, Manifest};
use cutout::store::Store;
use cutout::{App, EngineSource, ShutdownHandle};
use std::net::SocketAddr;
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread;
use std::time::Duration;

/// 2026-03-15T12:00:00Z
pub const MID_MARCH: i64 = 1_773_576_000;

pub fn models_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models")
}

/// The real U2NetP model, loaded once for the whole test binary.
pub fn u2netp() -> Arc<dyn Engine> {
    static ENGINE: OnceLock<Arc<dyn Engine>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let manifest = Manifest::builtin();
            let spec = manifest.model(Some("u2netp")).unwrap();
            engine::load(spec, &models_dir(), &EngineChoice::default())
                .expect("models/u2netp.tract.onnx (run `make models`)")
        })
        .clone()
}

pub struct TestApp {
    pub addr: SocketAddr,
    pub store: Arc<dyn Store>,
    pub now: Arc<AtomicI64>,
    pub shutdown: ShutdownHandle,
    pub state: Arc<AppState>,
    _data_dir: tempfile::TempDir,
    server: Option<thread::JoinHandle<()>>,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.shutdown();
        if let Some(server) = self.server.take() {
            server.join().ok();
        }
    }
}

pub fn spawn_app() -> TestApp {
    spawn_app_with(EngineSource::Ready(u2netp()), |_| {})
}

pub fn spawn_app_with(engine: EngineSource, tweak: impl FnOnce(&mut Settings)) -> TestApp {
    spawn_app_in(tempfile::tempdir().unwrap(), engine, tweak)
}

/// The app on a data directory the test has filled.
pub fn spawn_app_in(
    data_dir: tempfile::TempDir,
    engine: EngineSource,
    tweak: impl FnOnce(&mut Settings),
) -> TestApp {
    if std::env::var_os("TEST_LOG").is_some() {
        let _ = env_logger::builder().is_test(true).try_init();
    }
    let (clock, now) = Clock::manual(MID_MARCH);
    let mut settings = Settings {
        data_dir: data_dir.path().to_owned(),
        models_dir: models_dir(),
        listen: "127.0.0.1:0".into(),
        model: Some("u2netp".into()),
        shutdown_grace: Duration::from_secs(30),
        ..Settings::default()
    };
    tweak(&mut settings);
    let app = App::build(settings, engine, clock).unwrap();
    let (addr, shutdown, state) = (app.addr(), app.shutdown_handle(), app.state());
    let server = thread::spawn(move || app.run());
    let store = state.store.clone();
    TestApp {
        addr,
        store,
        now,
        shutdown,
        state,
        _data_dir: data_dir,
        server: Some(server),
    }
}

impl TestApp {
    /// The data directory, `cutout.db` in it.
    pub fn data_dir(&self) -> &std::path::Path {
        self._data_dir.path()
    }

    /// A new account on `plan` and one key for it.
    pub fn account(&self, name: &str, plan: &str) -> String {
        self.store
            .create_account(&AccountName::parse(name).unwrap(), plan, MID_MARCH)
            .unwrap();
        self.store
            .create_key(name, "test", MID_MARCH)
            .unwrap()
            .expose()
            .to_owned()
    }

    pub fn in_flight(&self, name: &str) -> u32 {
        self.store
            .in_flight(self.store.account(name).unwrap().id)
            .unwrap()
    }

    pub fn used(&self, name: &str) -> u32 {
        let account = self.store.account(name).unwrap();
        let month =
            cutout::domain::Month::of_unix(self.now.load(std::sync::atomic::Ordering::SeqCst));
        self.store.usage(account.id, month).unwrap()
    }

    pub fn post_image(&self, key: Option<&str>, image: &[u8], size: Option<&str>) -> Reply {
        let mut form = Multipart::new();
        form.file("image_file", image);
        if let Some(size) = size {
            form.text("size", size);
        }
        self.post_form(key, &form)
    }

    pub fn post_form(&self, key: Option<&str>, form: &Multipart) -> Reply {
        post_form(self.addr, key, form)
    }

    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Reply {
        request(self.addr, method, path, headers, body)
    }
}

/// An engine that holds every run until `open` is called, so tests can put
/// a known number of requests in flight without depending on timing.
#[derive(Default)]
pub struct Gate {
    open: Mutex<bool>,
    changed: Condvar,
}

impl Gate {
    pub fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.changed.notify_all();
    }
}

pub struct GatedEngine(pub Arc<Gate>);

impl Engine for GatedEngine {
    fn name(&self) -> &'static str {
        "gated test engine"
    }

    fn run(&self, input: Vec<f32>, width: u32, height: u32) -> anyhow::Result<Vec<f32>> {
        let mut open = self.0.open.lock().unwrap();
        while !*open {
            open = self.0.changed.wait(open).unwrap();
        }
        drop(open);
        u2netp().run(input, width, height)
    }
}

/// Waits until `done` holds; panics after a generous minute so a broken
/// build fails rather than hangs. No assertion depends on how long it took.
pub fn wait_until(what: &str, done: impl Fn() -> bool) {
    for _ in 0..6000 {
        if done() {
            return;
        }
        thread::sleep(Duration::from_millis(10));
    }
    panic!("timed out waiting until {what}");
}
