//! The appliance behind its transport: the state every request shares, its
//! health (the model loaded, the database writable, what the LED shows),
//! and what the dashboard keeps between requests. Knows nothing of HTTP:
//! `http` serves it; `systemd`, the LED and the status page watch it.

mod admission;
pub mod setup;
pub mod throttle;
pub mod tries;

/// A cut-out's memory, kept reserved while its answer is sent.
pub use crate::pipeline::{Held, NoTurn};
pub use admission::{Admission, Charge, Charged, Upload};

use crate::backup::schedule::Scheduled;
use crate::clock::Clock;
use crate::config::Settings;
use crate::domain::SubjectType;
use crate::engine::{Engine, InferError, LoadWatch, Manifest, OnnxRuntimeTrial, Readiness};
use crate::led;
use crate::pairing::{Pairings, PendingView};
use crate::pipeline::{Loader, Models, Pipeline};
use crate::stats::Stats;
use crate::store::{self, Store};
use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// Where the model comes from.
pub enum EngineSource {
    /// Load the configured model from the models directory, in the
    /// background: the server answers 503 until it is ready.
    Load,
    /// An engine already loaded (tests share one across many apps).
    Ready(Arc<dyn Engine>),
}

pub struct AppState {
    pub store: Arc<dyn Store>,
    pub pipeline: Pipeline,
    pub clock: Clock,
    pub stats: Arc<Stats>,
    pub dashboard: DashboardState,
    thermal_dir: PathBuf,
    /// The address the API is served on, for the status page.
    pub listen: String,
    /// HTTPS, when it is on: the dashboard is served there alone.
    pub tls: Option<TlsInfo>,
    /// The names the dashboard answers to besides the machine's addresses.
    pub dashboard_names: Vec<String>,
    db_check: Mutex<Option<(Instant, Result<(), String>)>>,
    /// The configured LED backend, for the status page.
    pub led_backend: String,
    /// The board and the defaults it gave, for the status page.
    pub board: Option<String>,
    /// Why the engine is not the configured one, when it is not.
    pub engine_note: Option<String>,
    /// The models killed for memory while loading, and what serves instead.
    pub memory_note: Option<String>,
    /// Where `cutout bench` leaves its report.
    pub data_dir: PathBuf,
    /// What a backup from the dashboard holds, and where it is.
    pub backup_sources: crate::backup::Sources,
    /// Backups on a schedule (`[backup] dir`), and the last one.
    pub backups: Option<Arc<Scheduled>>,
    /// What `type=auto` serves and why, and the board's measurement while
    /// it runs: lines for the Status page, kept by whoever chooses.
    pub ladder: Mutex<Vec<String>>,
    /// Where `image_url` and `bg_image_url` may be fetched from.
    pub fetch_allow: Vec<ipnet::IpNet>,
    /// Booths asking to pair.
    pub pairings: Pairings,
    /// The account a booth approved by the button joins.
    pairing_account: Option<String>,
    /// Whether a button is configured (setup and pairing offer it).
    pub button: bool,
    /// Where a person opens setup, as the console and the log say it.
    setup_page: String,
    setup_console: Option<PathBuf>,
    stopping: AtomicBool,
    /// Shared with the thread that starts the program again (`restart`).
    in_flight: Arc<AtomicUsize>,
}

/// The setup page's address as a person types it: the host's mDNS name,
/// over HTTPS where it is on.
fn setup_page(addr: SocketAddr, https: Option<SocketAddr>) -> String {
    let (scheme, addr) = match https {
        Some(https) => ("https", https),
        None => ("http", addr),
    };
    match addr.ip().is_unspecified() {
        true => format!(
            "{scheme}://{}.local:{}/setup",
            crate::discovery::hostname(),
            addr.port()
        ),
        false => format!("{scheme}://{addr}/setup"),
    }
}

/// Where HTTPS listens, and what a booth pins.
pub struct TlsInfo {
    pub addr: SocketAddr,
    pub fingerprint: String,
    /// The same SHA-256 as bytes: what a booth's pairing code is made from.
    pub certificate_sha256: Vec<u8>,
}

/// What the dashboard keeps between requests besides the database.
pub struct DashboardState {
    pub throttle: throttle::LoginThrottle,
    pub tries: tries::Tries,
    /// What opens the password form while no operator password is set.
    pub setup: setup::Setup,
}

impl DashboardState {
    /// The one-time link's token, while setup is open.
    pub fn setup_token(&self) -> Option<String> {
        self.setup.lock().link().map(|(token, _)| token.to_owned())
    }
}

impl AppState {
    /// Opens the database and starts loading the model in the background,
    /// for a server bound to `addr` (and HTTPS, when `tls` is on). On a
    /// database with no operator password, logs the one-time setup link.
    pub fn start(
        settings: &Settings,
        engine: EngineSource,
        clock: Clock,
        addr: SocketAddr,
        tls: Option<TlsInfo>,
    ) -> Result<Arc<AppState>> {
        let manifest = Manifest::builtin();
        let models = manifest
            .models_for(
                settings.model.as_deref(),
                settings.general_fits(),
                settings.engine.kind,
                &settings.models_dir,
            )?
            .without(&settings.killed_models);
        let store = store::open(&settings.store, &settings.data_dir)
            .with_context(|| format!("opening the database in {}", settings.data_dir.display()))?;
        let pipeline = match engine {
            // Tests share one loaded engine: every `type` gets it.
            EngineSource::Ready(engine) => {
                let pipeline = Pipeline::new(
                    Models::one(models.auto),
                    None,
                    settings.inference_workers,
                    settings.queue_capacity,
                    settings.upload_buffer,
                )
                .with_max_pixels(settings.max_pixels)
                .with_memory_budget(settings.memory_budget);
                pipeline
                    .default_model()
                    .inference
                    .set(Readiness::Ready(engine));
                pipeline
            }
            EngineSource::Load => Pipeline::new(
                models,
                Some(Loader {
                    models_dir: settings.models_dir.clone(),
                    engine: settings.engine.clone(),
                    trial: Some(OnnxRuntimeTrial::new(&settings.data_dir)),
                    loads: Some(LoadWatch::new(&settings.data_dir)),
                }),
                settings.inference_workers,
                settings.queue_capacity,
                settings.upload_buffer,
            )
            .with_max_pixels(settings.max_pixels)
            .with_memory_budget(settings.memory_budget),
        };
        let dashboard = DashboardState {
            throttle: Default::default(),
            tries: Default::default(),
            setup: setup::Setup::new(store.admin_password_hash()?.is_none()),
        };
        let setup_page = setup_page(addr, tls.as_ref().map(|t| t.addr));
        let state = Arc::new(AppState {
            store,
            pipeline,
            clock,
            stats: Arc::new(Stats::default()),
            dashboard,
            thermal_dir: settings.thermal_dir.clone(),
            listen: addr.to_string(),
            tls,
            dashboard_names: dashboard_names(&settings.allowed_hosts),
            db_check: Mutex::new(None),
            led_backend: settings
                .led
                .backend
                .clone()
                .unwrap_or_else(|| "none".into()),
            board: settings
                .board
                .as_ref()
                .map(|board| format!("{}; so by default {}", board.description, board.defaults)),
            engine_note: settings.engine_note.clone(),
            memory_note: settings.memory_note.clone(),
            data_dir: settings.data_dir.clone(),
            backup_sources: crate::backup::Sources::of(settings),
            backups: settings.backup.clone().map(|s| Arc::new(Scheduled::new(s))),
            ladder: Mutex::new(Vec::new()),
            fetch_allow: settings.fetch_allow.clone(),
            pairings: Pairings::new(settings.pairing_expire_seconds),
            pairing_account: settings.pairing_account.clone(),
            button: settings.button.gpio_pin.is_some() || settings.button.value_file.is_some(),
            setup_page,
            setup_console: settings.setup_console.clone(),
            stopping: AtomicBool::new(false),
            in_flight: Arc::new(AtomicUsize::new(0)),
        });
        if let Some((token, code)) = state.dashboard.setup.lock().link() {
            state.show_setup_code(code);
            log::warn!(
                "No operator password is set. Set one at {}?token={token} (the link works \
                 once, until restart), with the code {code} shown on the board's console, or \
                 with `cutout admin set-password`.",
                state.setup_page
            );
        }
        if let Some(backups) = state.backups.clone() {
            let (sources, state) = (state.backup_sources.clone(), Arc::downgrade(&state));
            thread::spawn(move || {
                backups.run(&sources, || state.upgrade().is_none_or(|s| s.is_stopping()));
            });
        }
        // The configured model loads in the background: the API answers 503 until then.
        let loading = state.clone();
        thread::spawn(move || {
            if let Some(took) = loading.pipeline.load(SubjectType::Auto) {
                loading.stats.set_model_load(took);
            }
        });
        Ok(state)
    }

    /// The next start loads the models killed for memory again.
    pub fn forget_killed_for_memory(&self) -> std::io::Result<()> {
        crate::engine::forget_killed(&self.data_dir)
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// From now on new requests are refused; those in flight go on.
    pub fn stop_taking_requests(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// Counts a request while it is served, so a stop can wait for it.
    pub fn serving(&self) -> InFlight<'_> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(&self.in_flight)
    }

    /// Waits until no request is in flight, or until `deadline`.
    pub fn requests_in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Refuses new requests and, once those in flight are answered (the
    /// one asking among them) or after 30 s, runs this program again in
    /// this process: what is in place only on start (a restore from the
    /// setup page) is then. exec keeps the pid, so systemd's unit goes on;
    /// should exec fail, the exit status asks systemd for a restart.
    pub fn restart(&self) {
        self.stop_taking_requests();
        let in_flight = self.in_flight.clone();
        thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(30);
            while in_flight.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(20));
            }
            use std::os::unix::process::CommandExt;
            let args: Vec<_> = std::env::args_os().collect();
            let error = match std::env::current_exe() {
                Ok(program) => std::process::Command::new(program).args(&args[1..]).exec(),
                Err(e) => e,
            };
            log::error!("cannot start again ({error}): exiting for the service manager to");
            crate::engine::exit_leaving_the_libraries(75);
        });
    }

    pub fn wait_for_requests_in_flight(&self, deadline: Instant) {
        while self.in_flight.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Shows the setup code on the board's console (a screen plugged into
    /// it), where one is configured.
    pub fn show_setup_code(&self, code: &str) {
        let Some(console) = &self.setup_console else {
            return;
        };
        let text = format!(
            "\r\n  cutout: no operator password is set yet.\r\n  \
             In a browser on this network, open {}\r\n  and type this code: {code}\r\n\r\n",
            self.setup_page
        );
        if let Err(e) = write_to_console(console, &text) {
            log::warn!("showing the setup code on {}: {e}", console.display());
        }
    }

    /// A press of the appliance's button: it opens setup to the one browser
    /// waiting for it, or else approves the one booth that asked to pair in
    /// the last minute. Where it cannot tell which, it does nothing.
    pub fn button_pressed(&self) {
        let now = self.clock.now_unix();
        match self.dashboard.setup.lock().press(now) {
            setup::Press::Opened => {
                log::info!("button: setup is open for a minute to the browser that waited for it");
                return;
            }
            setup::Press::SeveralWaiting(n) => {
                log::warn!("button: {n} browsers wait to set the password, so none was let in; ask again from one");
                return;
            }
            setup::Press::NobodyWaiting => {}
        }
        let request = match self.pairings.for_the_button(now) {
            Ok(request) => request,
            Err(0) => return log::info!("button pressed; nothing waits for it"),
            Err(n) => {
                return log::warn!(
                    "button: {n} booths asked to pair in the last minute, so none was approved; approve one on the dashboard"
                )
            }
        };
        let account = match self.button_account() {
            Ok(account) => account,
            Err(why) => return log::warn!("button: booth {:?} not approved: {why}", request.name),
        };
        if let Err(e) = self.approve_pairing(&request.handle, &account, now) {
            log::error!("button: approving booth {:?}: {e:#}", request.name);
        }
    }

    /// The account a booth approved by the button joins: `[pairing]
    /// account`, or the only account there is.
    fn button_account(&self) -> Result<String, String> {
        if let Some(name) = &self.pairing_account {
            return Ok(name.clone());
        }
        let accounts = self
            .store
            .accounts(crate::domain::Month::of_unix(self.clock.now_unix()))
            .map_err(|e| e.to_string())?;
        match accounts.as_slice() {
            [(only, _)] => Ok(only.name.clone()),
            _ => Err(format!(
                "the appliance has {} accounts and [pairing] account names none",
                accounts.len()
            )),
        }
    }

    /// Approves the waiting pairing request `handle`: a new key on
    /// `account`, labelled with the booth's name, for the booth to collect.
    /// `None` when no such request waits (nothing is issued).
    pub fn approve_pairing(
        &self,
        handle: &str,
        account: &str,
        now: i64,
    ) -> Result<Option<PendingView>, store::StoreError> {
        let approved = self.pairings.approve(handle, now, |request| {
            let account = self.store.account(account)?;
            let key = self.store.create_key_for(account.id, &request.name, now)?;
            Ok::<_, store::StoreError>((key, account.name))
        })?;
        if let Some(request) = &approved {
            log::info!(
                "booth {:?} at {} paired to account {account}",
                request.name,
                request.address
            );
        }
        Ok(approved)
    }

    /// Plain HTTP's port where it listens beside HTTPS: where the
    /// operator's switch for the API over plain HTTP applies.
    pub fn plain_http_beside_https(&self) -> Option<u16> {
        let tls = self.tls.as_ref()?;
        let plain: std::net::SocketAddr = self.listen.parse().ok()?;
        (plain != tls.addr).then_some(plain.port())
    }

    /// What the appliance is doing, as the status LED shows it.
    pub fn led_state(&self) -> led::State {
        let now = self.clock.now_unix();
        if self.button
            && (self.dashboard.setup.lock().button_window(now)
                || self.pairings.for_the_button(now).is_ok())
        {
            return led::State::Waiting;
        }
        match self.pipeline.default_model().inference.ready() {
            Err(InferError::Loading) => led::State::Starting,
            Err(_) => led::State::Degraded,
            Ok(()) if self.database_writable().is_err() => led::State::Degraded,
            Ok(()) if self.pipeline.queue.depth() > 0 => led::State::Busy,
            Ok(()) => led::State::Idle,
        }
    }

    pub fn backdrops(&self) -> crate::backdrops::Backdrops {
        crate::backdrops::Backdrops::in_data_dir(&self.data_dir)
    }

    /// Whether the model is loaded and the database takes writes: the
    /// configured model's name, and each one's error if not.
    pub fn readiness(&self) -> Health {
        let default = self.pipeline.default_model();
        Health {
            model_name: default.spec.name.clone(),
            model: default
                .inference
                .ready()
                .map_err(|e| file_names_only(&e.to_string())),
            database: self.database_writable(),
        }
    }

    /// Whether the database takes writes, checked at most every two
    /// seconds (the LED asks eight times a second, and every API call
    /// asks). A change is logged once, when it is seen, not per request.
    pub fn database_writable(&self) -> Result<(), String> {
        let mut last = self.db_check.lock().unwrap_or_else(|p| p.into_inner());
        match &*last {
            Some((at, verdict)) if at.elapsed() < Duration::from_secs(2) => verdict.clone(),
            previous => {
                let was_writable = previous.as_ref().is_none_or(|(_, v)| v.is_ok());
                let verdict = if was_writable {
                    self.store.check_writable()
                } else {
                    self.store.probe_write(self.clock.now_unix())
                };
                let verdict = verdict.map_err(|e| e.to_string());
                log_database_change(was_writable, &verdict);
                *last = Some((Instant::now(), verdict.clone()));
                verdict
            }
        }
    }

    /// A write that failed although the last check passed (the disk filled
    /// up in between): later calls are refused up front until a check passes.
    pub fn database_failed(&self, why: &str) {
        let mut last = self.db_check.lock().unwrap_or_else(|p| p.into_inner());
        let was_writable = last.as_ref().is_none_or(|(_, v)| v.is_ok());
        let verdict = Err(why.to_owned());
        log_database_change(was_writable, &verdict);
        *last = Some((Instant::now(), verdict));
    }

    /// The CPU's temperature in °C, where the system reports one.
    pub fn cpu_celsius(&self) -> Option<f64> {
        cpu_celsius(&self.thermal_dir)
    }
}

/// A request being served; it stops counting when dropped.
pub struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Writes `text` to a terminal without waiting on it: a console whose output
/// is stopped (Scroll Lock on a keyboard plugged into the board) would block
/// the write for as long, and with it the start or the request that shows
/// the setup code.
fn write_to_console(console: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut console = std::fs::OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(console)?;
    std::io::Write::write_all(&mut console, text.as_bytes())
}

/// What `/readyz` reports.
pub struct Health {
    pub model_name: String,
    pub model: Result<(), String>,
    pub database: Result<(), String>,
}

impl Health {
    pub fn is_ready(&self) -> bool {
        self.model.is_ok() && self.database.is_ok()
    }
}

fn log_database_change(was_writable: bool, now: &Result<(), String>) {
    match (was_writable, now) {
        (true, Err(why)) => {
            log::error!("the database cannot take writes ({why}); API calls get 503 until it can")
        }
        (false, Ok(())) => log::warn!("the database takes writes again; API calls are served"),
        _ => {}
    }
}

/// The names the dashboard answers to, lowercased, worked out once at start:
/// localhost, the machine's hostname with and without `.local`, and the
/// configured ones.
fn dashboard_names(configured: &[String]) -> Vec<String> {
    let own = crate::discovery::hostname().to_ascii_lowercase();
    let mut names = vec!["localhost".to_owned(), format!("{own}.local"), own];
    names.extend(configured.iter().map(|n| n.to_ascii_lowercase()));
    names
}

/// The CPU's temperature from Linux's thermal zones: the zone named for the
/// CPU (or SoC) if there is one, else the first.
fn cpu_celsius(thermal_dir: &Path) -> Option<f64> {
    let mut zones: Vec<_> = std::fs::read_dir(thermal_dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("thermal_zone"))
        })
        .collect();
    zones.sort();
    let kind = |p: &PathBuf| {
        std::fs::read_to_string(p.join("type"))
            .unwrap_or_default()
            .to_lowercase()
    };
    let zone = zones
        .iter()
        .find(|p| {
            ["cpu", "soc", "x86_pkg"]
                .iter()
                .any(|k| kind(p).contains(k))
        })
        .or(zones.first())?;
    let millis: f64 = std::fs::read_to_string(zone.join("temp"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(millis / 1000.0)
}

/// `text` with each absolute path cut to its file name: `/readyz` answers
/// anyone on the LAN, who need not learn where the appliance keeps its
/// files (the log has the whole message).
fn file_names_only(text: &str) -> String {
    text.split(' ')
        .map(|word| match word.find('/') {
            Some(at) if !word[..at].ends_with(|c: char| c.is_alphanumeric()) => {
                let last = word.rfind('/').expect("a slash was found");
                format!("{}{}", &word[..at], &word[last + 1..])
            }
            _ => word.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    /// A pseudo-terminal: its controlling side, its terminal and that's path.
    #[allow(unsafe_code)]
    fn pty() -> (std::fs::File, std::fs::File, std::path::PathBuf) {
        use std::os::fd::FromRawFd;
        let (mut controller, mut terminal) = (0, 0);
        let made = unsafe {
            libc::openpty(
                &mut controller,
                &mut terminal,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(made, 0, "{}", std::io::Error::last_os_error());
        let path = std::fs::read_link(format!("/proc/self/fd/{terminal}")).unwrap();
        let file = |fd| unsafe { std::fs::File::from_raw_fd(fd) };
        (file(controller), file(terminal), path)
    }

    #[test]
    fn the_setup_code_reaches_the_console_and_a_stopped_one_does_not_block() {
        use std::io::Read;
        use std::os::fd::AsRawFd;
        let (mut controller, terminal, console) = pty();
        super::write_to_console(&console, "J8QJ-PJBN").unwrap();
        let mut shown = [0u8; 9];
        controller.read_exact(&mut shown).unwrap();
        assert_eq!(&shown, b"J8QJ-PJBN");
        // Its output stopped, as Scroll Lock stops a Linux console's.
        #[allow(unsafe_code)]
        let stopped = unsafe { libc::tcflow(terminal.as_raw_fd(), libc::TCOOFF) };
        assert_eq!(stopped, 0, "{}", std::io::Error::last_os_error());
        let error = super::write_to_console(&console, "J8QJ-PJBN").unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::WouldBlock);
    }

    #[test]
    fn readiness_names_files_without_their_directories() {
        let said = "model failed to load: model file /var/lib/cutout/models/isnet.onnx is \
                    missing (`/usr/lib/x.so`) and/or corrupt";
        assert_eq!(
            super::file_names_only(said),
            "model failed to load: model file isnet.onnx is missing (`x.so`) and/or corrupt"
        );
    }
}
