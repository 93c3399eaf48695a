//! The HTTP server: tiny_http, a fixed pool of request workers over one
//! `Arc<Server>`, routing, one log line per request, graceful shutdown.
//! The only module that knows HTTP; what it serves is `app::AppState`.

mod api;
mod dashboard;
pub mod form;
mod gate;
mod metrics;
mod options;
mod pair;
mod refusals;
mod respond;
mod session;

use crate::app::{AppState, EngineSource, TlsInfo};
use crate::backdrops::Part;
use crate::clock::Clock;
use crate::config::Settings;
use crate::error::ApiError;
use anyhow::{anyhow, Context, Result};
use respond::Routes;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use tiny_http::{ConnectionLimits, Listener, Method, Request, Server, SslConfig};

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
            certificate_sha256: certificate
                .fingerprint
                .split(':')
                .map(|pair| u8::from_str_radix(pair, 16).expect("the fingerprint is hex pairs"))
                .collect(),
            fingerprint: certificate.fingerprint,
        });
    }
    let limits = ConnectionLimits {
        socket_timeout: Some(settings.socket_timeout),
        head_deadline: settings.head_timeout,
        max_connections: settings.max_connections,
        max_per_address: settings.max_connections_per_address,
        ..ConnectionLimits::default()
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
    /// `addr()` is the bound address (port 0 picks a free one). `clock`
    /// dates usage and sessions (tests set it by hand).
    pub fn build(settings: Settings, engine: EngineSource, clock: Clock) -> Result<App> {
        let (server, addr, tls) = listen(&settings)?;
        let state = AppState::start(&settings, engine, clock, addr, tls)?;
        Ok(App {
            server: Arc::new(server),
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
        let refusals = Arc::new(refusals::RefusalLog::default());
        let workers: Vec<_> = (0..self.settings.http_workers)
            .map(|i| {
                let (server, state) = (self.server.clone(), self.state.clone());
                let refusals = refusals.clone();
                thread::Builder::new()
                    .name(format!("http-{i}"))
                    .spawn(move || {
                        while let Ok(request) = server.recv() {
                            serve(&state, &server, &refusals, request);
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
        self.state.stop_taking_requests();
        self.state
            .wait_for_requests_in_flight(Instant::now() + self.grace);
        // Before the workers go: the process may exit as soon as they have.
        self.state.pipeline.settle_trial();
        for _ in 0..self.workers {
            self.server.unblock();
        }
    }

    /// Requests still being served (past the grace, once `shutdown` returns).
    pub fn requests_in_flight(&self) -> usize {
        self.state.requests_in_flight()
    }
}

fn serve(state: &AppState, server: &Server, refusals: &refusals::RefusalLog, mut request: Request) {
    let started = Instant::now();
    let in_flight = state.serving();
    let method = request.method().clone();
    let path = decoded_path(request.url());
    // A panic in a handler costs its request a 500, never the worker.
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        route(state, server, &method, &path, &mut request)
    }))
    .unwrap_or_else(|_| {
        let panicked = ApiError::Internal(anyhow!("handler panicked"));
        api::Outcome::of(respond::error(&panicked), None)
    });
    let mut response = outcome.response;
    for (name, value) in SECURITY_HEADERS {
        response.add_header(respond::header(name, value));
    }
    if request.secure() {
        response.add_header(respond::header("Strict-Transport-Security", HSTS));
    }
    let status = response.status_code().0;
    let bytes = response.data_length().unwrap_or(0);
    state.stats.record_request(route_label(&path), status);
    let cut_out_call = method == Method::Post
        && matches!(
            path.as_str(),
            "/api/remove-bg" | REMOVE_BG_COMPATIBLE | "/try"
        );
    if cut_out_call {
        state
            .stats
            .record(state.clock.now_unix(), status, started.elapsed());
    }
    let client = request.remote_addr().map(|a| a.ip());
    if let Err(e) = request.respond(response) {
        log::debug!("writing the response failed: {e}");
        if let Some(charge) = outcome.charge {
            log::info!(
                "{method} {path}: the client left before its answer was written: not charged"
            );
            charge.refund(state);
        }
    }
    drop(outcome.held);
    drop(in_flight);
    if status < 400 || refusals.first_in_interval(client, status, Instant::now()) {
        log::info!(
            "{method} {} {status} account={} bytes={bytes} {}ms{}",
            match path.starts_with(PAIR_POLL) {
                true => format!("{PAIR_POLL}…").into(),
                false => shortened(&path, MAX_LOGGED_PATH),
            },
            outcome.account.as_deref().unwrap_or("-"),
            started.elapsed().as_millis(),
            outcome.served.map(|s| format!(" {s}")).unwrap_or_default()
        );
    }
}

/// The request target's path, its percent-escapes decoded (a backdrop
/// named "Été" is asked for as `%C3%A9t%C3%A9`); one that is not UTF-8
/// once decoded stays as sent, and matches no route.
fn decoded_path(target: &str) -> String {
    let raw = target.split('?').next().unwrap_or("");
    match percent_encoding::percent_decode_str(raw).decode_utf8() {
        Ok(path) => path.into_owned(),
        Err(_) => raw.to_owned(),
    }
}

/// HTTPS answers tell browsers to use HTTPS alone for a year. A browser
/// heeds it only over a certificate it trusts (RFC 6797, 8.1), so the
/// self-made certificate's warning can still be passed.
const HSTS: &str = "max-age=31536000";

/// remove.bg's own routes, so that its clients need only a new address.
const REMOVE_BG_COMPATIBLE: &str = "/v1.0/removebg";
const REMOVE_BG_ACCOUNT: &str = "/v1.0/account";
const REMOVE_BG_PREFIX: &str = "/v1.0/";

/// The backdrops a request may name, for a booth's key.
const BACKDROPS: &str = "/api/backdrops";
/// A backdrop's images, for a booth to keep: `<id>/background`, `<id>/overlay`.
const BACKDROP_IMAGES: &str = "/api/backdrops/";

/// A booth polls its pairing request at this path and its secret id; the
/// log leaves the id out.
const PAIR_POLL: &str = "/api/pair/";

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
        "/api/remove-bg" | REMOVE_BG_COMPATIBLE => "remove_bg",
        REMOVE_BG_ACCOUNT => "account",
        BACKDROPS => "backdrops",
        p if p.starts_with(BACKDROP_IMAGES) => "backdrops",
        "/try" => "try",
        "/healthz" | "/readyz" => "health",
        "/metrics" => "metrics",
        "/api/openapi.json" => "openapi",
        p if p == "/api/pair" || p.starts_with(PAIR_POLL) => "pair",
        p if p.starts_with("/assets/") || p == "/favicon.svg" => "assets",
        "/" | "/login" | "/logout" | "/setup" | "/docs" => "dashboard",
        p if ["/admin", "/account", "/try/", "/setup/"]
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

fn route<'s>(
    state: &'s AppState,
    server: &Server,
    method: &Method,
    path: &str,
    request: &mut Request,
) -> api::Outcome<'s> {
    let plain = |response| api::Outcome::of(response, None);
    let get = matches!(method, Method::Get | Method::Head);
    match (path, method) {
        ("/api/remove-bg", Method::Post) => api::remove_bg(state, request, Routes::Contract),
        (REMOVE_BG_COMPATIBLE, Method::Post) => api::remove_bg(state, request, Routes::RemoveBg),
        (REMOVE_BG_ACCOUNT, _) if get => api::account(state, request),
        (BACKDROPS, _) if get => api::backdrops(state, request),
        _ if path.starts_with(BACKDROP_IMAGES) => {
            let part = match path[BACKDROP_IMAGES.len()..].split_once('/') {
                Some((id, "background")) => Some((id, Part::Background)),
                Some((id, "overlay")) => Some((id, Part::Overlay)),
                _ => None,
            };
            match (part, get) {
                (Some((id, part)), true) => api::backdrop_image(state, request, id, part),
                (Some(_), false) => plain(respond::error(&ApiError::MethodNotAllowed {
                    allow: "GET, HEAD",
                })),
                (None, _) => plain(respond::error(&ApiError::NotFound)),
            }
        }
        ("/healthz", _) if get => plain(respond::json(200, &serde_json::json!({"status": "ok"}))),
        ("/readyz", _) if get => plain(readiness(state)),
        ("/api/openapi.json", _) if get => plain(dashboard::openapi_json()),
        ("/api/pair", Method::Post) => plain(pair::ask(state, request)),
        ("/api/pair", _) => plain(respond::error(&ApiError::MethodNotAllowed {
            allow: "POST",
        })),
        _ if path.starts_with(PAIR_POLL) => match (get, &path[PAIR_POLL.len()..]) {
            (true, id) if !id.contains('/') => plain(pair::poll(state, request, id)),
            (false, _) => plain(respond::error(&ApiError::MethodNotAllowed {
                allow: "GET, HEAD",
            })),
            _ => plain(respond::error(&ApiError::NotFound)),
        },
        ("/metrics", _) if get => plain(metrics::response(state, server)),
        ("/api/remove-bg" | REMOVE_BG_COMPATIBLE, _) => {
            plain(respond::error(&ApiError::MethodNotAllowed {
                allow: "POST",
            }))
        }
        (
            "/healthz" | "/readyz" | "/api/openapi.json" | "/metrics" | REMOVE_BG_ACCOUNT
            | BACKDROPS,
            _,
        ) => plain(respond::error(&ApiError::MethodNotAllowed {
            allow: "GET, HEAD",
        })),
        _ if path.starts_with("/api/") => plain(respond::error(&ApiError::NotFound)),
        _ if path.starts_with(REMOVE_BG_PREFIX) => api::remove_bg_unknown(state, request),
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
        crate::pages::message_page(
            "Not found",
            &crate::pages::Nav::Anonymous,
            "There is nothing at this address.",
        ),
    )
}

/// Ready when the model is loaded and the database takes writes.
fn readiness(state: &AppState) -> respond::Body {
    let health = state.readiness();
    let body = serde_json::json!({
        "model": health.model_name,
        "model_ready": health.model.is_ok(),
        "model_error": health.model.as_ref().err(),
        "database_writable": health.database.is_ok(),
        "database_error": health.database.as_ref().err(),
    });
    if health.is_ready() {
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
