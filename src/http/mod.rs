//! The HTTP server: tiny_http, a fixed pool of request workers over one
//! `Arc<Server>`, routing, one log line per request, graceful shutdown.
//! The only module that knows HTTP.

mod api;
mod dashboard;
mod gate;
mod metrics;
pub mod multipart;
mod respond;
mod session;
mod throttle;
mod tries;

use crate::clock::Clock;
use crate::config::Settings;
use crate::domain::SubjectType;
use crate::engine::{Engine, Manifest, OnnxRuntimeTrial, Readiness};
use crate::error::ApiError;
use crate::led;
use crate::limits::Limiter;
use crate::pipeline::{Loader, Models, Pipeline};
use crate::secrets::random_token;
use crate::stats::Stats;
use crate::store::Store;
use anyhow::{anyhow, Context, Result};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use tiny_http::{ConnectionLimits, Listener, Method, Request, Server, SslConfig};

/// Where the model comes from.
pub enum EngineSource {
    /// Load the configured model from the models directory, in the
    /// background: the server answers 503 until it is ready.
    Load,
    /// An engine already loaded (tests share one across many apps).
    Ready(Arc<dyn Engine>),
}

pub struct AppState {
    pub store: Store,
    pub limiter: Limiter,
    pub pipeline: Pipeline,
    pub clock: Clock,
    pub stats: Arc<Stats>,
    pub dashboard: DashboardState,
    thermal_dir: PathBuf,
    listen: String,
    /// HTTPS, when it is on: the dashboard is served there alone.
    pub tls: Option<TlsInfo>,
    /// The names the dashboard answers to (`gate::dashboard_names`).
    dashboard_names: Vec<String>,
    /// For its connection counters (`/metrics`).
    server: Arc<Server>,
    db_check: Mutex<Option<(Instant, Result<(), String>)>>,
    /// The configured LED backend, for the status page.
    led_backend: String,
    /// The board and the defaults it gave, for the status page.
    board: Option<String>,
    /// Why the engine is not the configured one, when it is not.
    engine_note: Option<String>,
    /// Where `cutout bench` leaves its report.
    data_dir: PathBuf,
    stopping: AtomicBool,
    in_flight: AtomicUsize,
}

/// Where HTTPS listens, and what a booth pins.
pub struct TlsInfo {
    pub addr: SocketAddr,
    pub fingerprint: String,
}

/// What the dashboard keeps between requests besides the database.
#[derive(Default)]
pub struct DashboardState {
    throttle: throttle::LoginThrottle,
    tries: tries::Tries,
    /// The one-time setup link's token, while no operator password is set.
    setup_token: Mutex<Option<String>>,
}

impl DashboardState {
    pub fn setup_token(&self) -> Option<String> {
        self.setup_token
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl AppState {
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }
}

impl AppState {
    /// What the appliance is doing, as the status LED shows it.
    pub fn led_state(&self) -> led::State {
        match self.pipeline.default_model().inference.ready() {
            Err(crate::engine::InferError::Loading) => led::State::Starting,
            Err(_) => led::State::Degraded,
            Ok(()) if self.database_writable().is_err() => led::State::Degraded,
            Ok(()) if self.pipeline.queue.depth() > 0 => led::State::Busy,
            Ok(()) => led::State::Idle,
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

pub struct App {
    server: Arc<Server>,
    state: Arc<AppState>,
    /// Plain HTTP's address, or HTTPS's where plain HTTP is off.
    addr: SocketAddr,
    settings: Settings,
}

/// Binds plain HTTP and HTTPS as configured, and starts serving both into
/// one server under the configured connection limits. Returns the server,
/// the address `App::addr` reports, and HTTPS's address and fingerprint.
fn listen(settings: &Settings) -> Result<(Server, SocketAddr, Option<TlsInfo>)> {
    let bind = |address: &str| {
        let listener = bind_listener(address).with_context(|| format!("binding {address}"))?;
        let addr = listener.local_addr()?;
        anyhow::Ok((Listener::from(listener), addr))
    };
    let mut listeners = vec![];
    let mut plain_addr = None;
    if settings.tls.as_ref().is_none_or(|t| t.plain_http) {
        let (listener, addr) = bind(&settings.listen)?;
        listeners.push((listener, None));
        plain_addr = Some(addr);
    }
    let mut tls = None;
    if let Some(tls_settings) = &settings.tls {
        let certificate = crate::tls::load_or_make(tls_settings, &settings.data_dir)
            .context("the HTTPS certificate")?;
        let (listener, addr) = bind(&tls_settings.listen)?;
        listeners.push((
            listener,
            Some(SslConfig {
                certificate: certificate.chain_pem,
                private_key: certificate.key_pem,
            }),
        ));
        log::info!(
            "HTTPS on {addr}; certificate SHA-256 fingerprint {}",
            certificate.fingerprint
        );
        tls = Some(TlsInfo {
            addr,
            fingerprint: certificate.fingerprint,
        });
    }
    let limits = ConnectionLimits {
        socket_timeout: Some(settings.socket_timeout),
        head_deadline: settings.head_timeout,
        max_connections: settings.max_connections,
        max_per_address: settings.max_connections_per_address,
    };
    let server = Server::from_listeners(listeners, limits)
        .map_err(|e| anyhow!("starting the HTTP server: {e}"))?;
    let addr = plain_addr
        .or(tls.as_ref().map(|t| t.addr))
        .expect("the configuration has plain HTTP or HTTPS");
    Ok((server, addr, tls))
}

/// A listening socket as std's `TcpListener::bind` makes it, with a
/// backlog of 1,024 connections instead of 128: past the backlog the
/// kernel drops a client's SYN, which costs it a second before it tries
/// again.
fn bind_listener(address: &str) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    use std::net::ToSocketAddrs;
    let mut last_error = None;
    for addr in address.to_socket_addrs()? {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
        socket.set_reuse_address(true)?;
        match socket.bind(&addr.into()).and_then(|()| socket.listen(1024)) {
            Ok(()) => return Ok(socket.into()),
            Err(e) => last_error = Some(e),
        }
    }
    Err(last_error.unwrap_or_else(|| std::io::Error::other("the address names no socket")))
}

/// Stops a running `App`: new requests get 503 while those in flight finish.
#[derive(Clone)]
pub struct ShutdownHandle {
    server: Arc<Server>,
    state: Arc<AppState>,
    workers: usize,
    grace: Duration,
}

impl App {
    /// Opens the database, binds the port and starts loading the model;
    /// `addr()` is the bound address (port 0 picks a free one).
    pub fn build(settings: Settings, engine: EngineSource) -> Result<App> {
        let manifest = Manifest::builtin();
        let models = manifest.models_for(settings.model.as_deref(), settings.general_fits())?;
        let store = Store::open(&settings.data_dir)
            .with_context(|| format!("opening the database in {}", settings.data_dir.display()))?;
        let (server, addr, tls) = listen(&settings)?;
        let server = Arc::new(server);
        let stats = Arc::new(Stats::default());
        let pipeline = match engine {
            // Tests share one loaded engine: every `type` gets it.
            EngineSource::Ready(engine) => {
                let pipeline = Pipeline::new(
                    Models::one(models.auto),
                    None,
                    settings.inference_workers,
                    settings.queue_capacity,
                    settings.upload_buffer,
                );
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
                }),
                settings.inference_workers,
                settings.queue_capacity,
                settings.upload_buffer,
            ),
        };
        let dashboard = DashboardState::default();
        if store.admin_password_hash()?.is_none() {
            let token = random_token();
            let host = if addr.ip().is_unspecified() {
                format!("<this appliance's address>:{}", addr.port())
            } else {
                addr.to_string()
            };
            log::warn!(
                "No operator password is set. Set one at http://{host}/setup?token={token} \
                 (the link works once, until restart), or with `cutout admin set-password`."
            );
            *dashboard.setup_token.lock().unwrap() = Some(token);
        }
        let state = Arc::new(AppState {
            store,
            limiter: Limiter::default(),
            pipeline,
            clock: settings.clock.clone(),
            stats,
            dashboard,
            thermal_dir: settings.thermal_dir.clone(),
            listen: addr.to_string(),
            tls,
            dashboard_names: gate::dashboard_names(&settings.allowed_hosts),
            server: server.clone(),
            db_check: Mutex::new(None),
            led_backend: settings
                .led
                .backend
                .clone()
                .unwrap_or_else(|| "none".into()),
            board: settings.board.as_ref().map(|(board, defaults)| {
                format!("{}; so by default {}", board.describe(), defaults.summary())
            }),
            engine_note: settings.engine_note.clone(),
            data_dir: settings.data_dir.clone(),
            stopping: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
        });
        // The configured model loads in the background: the API answers 503 until then.
        let loading = state.clone();
        thread::spawn(move || {
            if let Some(took) = loading.pipeline.load(SubjectType::Auto) {
                loading.stats.set_model_load(took);
            }
        });
        Ok(App {
            server,
            state,
            addr,
            settings,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where HTTPS listens, when it is on.
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.state.tls.as_ref().map(|t| t.addr)
    }

    pub fn state(&self) -> Arc<AppState> {
        self.state.clone()
    }

    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle {
            server: self.server.clone(),
            state: self.state.clone(),
            workers: self.settings.http_workers,
            grace: self.settings.shutdown_grace,
        }
    }

    /// Serves until shut down; returns once every worker has stopped.
    pub fn run(self) {
        let workers: Vec<_> = (0..self.settings.http_workers)
            .map(|i| {
                let (server, state) = (self.server.clone(), self.state.clone());
                thread::Builder::new()
                    .name(format!("http-{i}"))
                    .spawn(move || {
                        while let Ok(request) = server.recv() {
                            serve(&state, request);
                        }
                    })
                    .expect("spawning an HTTP worker")
            })
            .collect();
        for worker in workers {
            worker.join().ok();
        }
    }
}

impl ShutdownHandle {
    /// Answers new requests 503, waits (up to the grace period) for those in
    /// flight, then stops the workers.
    pub fn shutdown(&self) {
        self.state.stopping.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + self.grace;
        while self.state.in_flight.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(20));
        }
        // Before the workers go: the process may exit as soon as they have.
        self.state.pipeline.settle_trial();
        for _ in 0..self.workers {
            self.server.unblock();
        }
    }
}

fn serve(state: &AppState, mut request: Request) {
    let started = Instant::now();
    state.in_flight.fetch_add(1, Ordering::SeqCst);
    let method = request.method().clone();
    let path = request.url().split('?').next().unwrap_or("").to_owned();
    // A panic in a handler costs its request a 500, never the worker.
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        route(state, &method, &path, &mut request)
    }))
    .unwrap_or_else(|_| api::Outcome {
        response: respond::error(&ApiError::Internal(anyhow!("handler panicked"))),
        account: None,
    });
    let mut response = outcome.response;
    for (name, value) in SECURITY_HEADERS {
        response.add_header(respond::header(name, value));
    }
    let status = response.status_code().0;
    let bytes = response.data_length().unwrap_or(0);
    state.stats.record_request(route_label(&path), status);
    let cut_out_call = method == Method::Post && (path == "/api/remove-bg" || path == "/try");
    if cut_out_call {
        state
            .stats
            .record(state.clock.now_unix(), status, started.elapsed());
    }
    if let Err(e) = request.respond(response) {
        log::debug!("writing the response failed: {e}");
    }
    state.in_flight.fetch_sub(1, Ordering::SeqCst);
    log::info!(
        "{method} {} {status} account={} bytes={bytes} {}ms",
        shortened(&path, MAX_LOGGED_PATH),
        outcome.account.as_deref().unwrap_or("-"),
        started.elapsed().as_millis()
    );
}

/// A request line may hold 8 KiB; its log line keeps this much of the path.
const MAX_LOGGED_PATH: usize = 200;

/// `text` cut to at most `max` bytes (on a character boundary), with `…`
/// where it was cut.
fn shortened(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return text.into();
    }
    format!("{}…", &text[..text.floor_char_boundary(max)]).into()
}

/// A request's route as `/metrics` labels it: a fixed set, so that
/// made-up paths cannot grow the label space.
fn route_label(path: &str) -> &'static str {
    match path {
        "/api/remove-bg" => "remove_bg",
        "/try" => "try",
        "/healthz" | "/readyz" => "health",
        "/metrics" => "metrics",
        "/api/openapi.json" => "openapi",
        p if p.starts_with("/assets/") || p == "/favicon.svg" => "assets",
        "/" | "/login" | "/logout" | "/setup" | "/docs" => "dashboard",
        p if ["/admin", "/account", "/try/"]
            .iter()
            .any(|r| p.starts_with(r)) =>
        {
            "dashboard"
        }
        _ => "other",
    }
}

/// Every response: the dashboard's pages may load only what this server
/// serves, may not be framed, and send no Referer to other sites (the
/// setup link carries a token). `same-origin`, not `no-referrer`: under
/// `no-referrer` a browser sends `Origin: null` with every form, and the
/// dashboard's gate refuses a POST whose Origin is not its own.
const SECURITY_HEADERS: [(&str, &str); 4] = [
    (
        "Content-Security-Policy",
        "default-src 'self'; img-src 'self'; script-src 'self'; style-src 'self'; \
         connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "same-origin"),
];

fn route(state: &AppState, method: &Method, path: &str, request: &mut Request) -> api::Outcome {
    let plain = |response| api::Outcome {
        response,
        account: None,
    };
    let get = matches!(method, Method::Get | Method::Head);
    match (path, method) {
        ("/api/remove-bg", Method::Post) => api::remove_bg(state, request),
        ("/healthz", _) if get => plain(respond::json(200, &serde_json::json!({"status": "ok"}))),
        ("/readyz", _) if get => plain(readiness(state)),
        ("/api/openapi.json", _) if get => plain(dashboard::openapi_json()),
        ("/metrics", _) if get => plain(metrics::response(state)),
        ("/api/remove-bg", _) => plain(respond::error(&ApiError::MethodNotAllowed {
            allow: "POST",
        })),
        ("/healthz" | "/readyz" | "/api/openapi.json" | "/metrics", _) => {
            plain(respond::error(&ApiError::MethodNotAllowed {
                allow: "GET, HEAD",
            }))
        }
        _ if path.starts_with("/api/") => plain(respond::error(&ApiError::NotFound)),
        _ => plain(gate::check(state, method, request).unwrap_or_else(|| {
            dashboard::route(state, method, path, request).unwrap_or_else(|| not_found(request))
        })),
    }
}

/// A person gets a page, a program gets the JSON error.
fn not_found(request: &Request) -> respond::Body {
    let wants_html =
        session::header_value(request, "Accept").is_some_and(|a| a.contains("text/html"));
    if !wants_html {
        return respond::error(&ApiError::NotFound);
    }
    dashboard::html(
        404,
        crate::dashboard::message_page(
            "Not found",
            &crate::dashboard::Nav::Anonymous,
            "There is nothing at this address.",
        ),
    )
}

/// Ready when the model is loaded and the database takes writes.
fn readiness(state: &AppState) -> respond::Body {
    let default = state.pipeline.default_model();
    let model = default.inference.ready();
    let database = state.database_writable();
    let body = serde_json::json!({
        "model": default.spec.name,
        "model_ready": model.is_ok(),
        "model_error": model.as_ref().err().map(ToString::to_string),
        "database_writable": database.is_ok(),
        "database_error": database.as_ref().err(),
    });
    if model.is_ok() && database.is_ok() {
        respond::json(200, &body)
    } else {
        let mut response = respond::json(503, &body);
        response.add_header(respond::header("Retry-After", 5));
        response
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_long_path_is_logged_shortened_on_a_character_boundary() {
        assert_eq!(super::shortened("/short", 200), "/short");
        let long = format!("/{}", "é".repeat(300));
        let logged = super::shortened(&long, 200);
        assert!(logged.len() <= 200 + "…".len() && logged.ends_with('…'));
    }
}
