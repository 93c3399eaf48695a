//! The appliance's start-up: the app served over HTTP, and what watches it
//! and tells the world (the status LED, DNS-SD, systemd, signals).

use crate::app::{AppState, EngineSource};
use crate::board::{Board, Report};
use crate::button::Button;
use crate::clock::Clock;
use crate::config::Settings;
use crate::discovery;
use crate::domain::AccountName;
use crate::http::App;
use crate::ladder;
use crate::led::{self, Led, NoLight};
use crate::store::Store;
use crate::systemd::{self, Notifier};
use anyhow::Result;
use std::time::{Duration, Instant};

/// Serves until SIGTERM or SIGINT: the app over HTTP, with the status LED,
/// the DNS-SD announcement and systemd's notifications and watchdog around
/// it. `demo` makes a demo account on an empty database and prints its key.
pub fn serve(settings: Settings, demo: bool) -> Result<()> {
    let notifier = Notifier::from_env();
    let led_config = settings.led.clone();
    let button_config = settings.button.clone();
    let mdns = settings.mdns.clone();
    if let Some(board) = &settings.board {
        log::info!(
            "board: {}; its defaults: {}; serving {} on {}",
            board.description,
            board.defaults,
            settings
                .model
                .as_deref()
                .unwrap_or("the manifest's default"),
            settings.engine.kind
        );
    }
    let ladder_settings = settings.clone();
    let app = App::build(settings, EngineSource::Load, Clock::default())?;
    let report = Report::load(&ladder_settings.data_dir);
    let measured = serve_best_rung(&app.state(), &ladder_settings, report.as_ref());
    // The photo a measurement writes, removed on stop if one was under way.
    let measured_photo = (ladder_settings.pipeline.bench_when_idle
        && !measured
        && ladder_settings.pipeline.bench_photo.is_none())
    .then(|| ladder_settings.data_dir.join(BENCH_PHOTO));
    if ladder_settings.pipeline.bench_when_idle && !measured {
        let state = app.state();
        // Never waited for on stop: its child ends with this process
        // (`ladder::end_with`), and its photo is made again next time.
        std::thread::spawn(move || measure_when_idle(&state, &ladder_settings));
    }
    let light = led_config.open().unwrap_or_else(|why| {
        log::error!("{why}; running without a status LED");
        Box::new(NoLight)
    });
    let led_state = app.state();
    let led = Led::start(light, led_config.idle_level(), move || {
        led_state.led_state()
    });
    let _button = match button_config.open() {
        None => None,
        Some(Ok(input)) => {
            let state = app.state();
            Some(Button::start(input, move || state.button_pressed()))
        }
        Some(Err(why)) => {
            log::error!(
                "{why}; running without the button (setup and pairing on the dashboard only)"
            );
            None
        }
    };
    if demo {
        print_demo_key(app.state().store.as_ref(), app.addr())?;
    }
    // Where plain HTTP is off, `addr` is HTTPS's.
    let plain_http = app.tls_addr() != Some(app.addr());
    if plain_http {
        log::info!("listening on http://{}", app.addr());
    }
    let _announcer = if app.addr().ip().is_loopback() {
        log::info!("listening on loopback only: not announced on the LAN (DNS-SD)");
        None
    } else if mdns.enabled.unwrap_or(true) {
        let name = mdns
            .name
            .unwrap_or_else(|| format!("cutout on {}", discovery::hostname()));
        let https_port = app.tls_addr().map(|a| a.port());
        let port = mdns.port.unwrap_or(discovery::MDNS_PORT);
        match discovery::announce(app.addr(), https_port, &name, port) {
            Ok(announcer) => {
                log::info!("announced as {name:?} ({})", discovery::SERVICE_TYPE);
                Some(announcer)
            }
            Err(e) => {
                log::warn!("cannot announce on the LAN (mDNS): {e}");
                None
            }
        }
    } else {
        None
    };
    let (state, addr, watchdog) = (app.state(), app.addr(), systemd::watchdog_interval());
    let supervisor = notifier.clone();
    std::thread::spawn(move || systemd::supervise(state, addr, plain_http, supervisor, watchdog));
    let shutdown = app.shutdown_handle();
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ])?;
    std::thread::spawn(move || {
        for (n, signal) in signals.forever().enumerate() {
            if n == 0 {
                log::info!("signal {signal}: finishing requests in flight, then stopping");
                notifier.stopping();
                let shutdown = shutdown.clone();
                std::thread::spawn(move || {
                    shutdown.shutdown();
                    // A request still running past the grace is not waited
                    // for: the grace ends when it says, within systemd's
                    // TimeoutStopSec. Its client gets no answer and no charge.
                    let running = shutdown.requests_in_flight();
                    if running > 0 {
                        log::warn!(
                            "the grace period is over: stopping with {running} requests unanswered"
                        );
                        crate::engine::exit_leaving_the_libraries(0);
                    }
                });
            } else {
                // An operator who asks twice does not want to wait.
                log::warn!("second signal: stopping now");
                crate::engine::exit_leaving_the_libraries(1);
            }
        }
    });
    app.run();
    if let Some(photo) = measured_photo {
        let _ = std::fs::remove_file(photo);
    }
    led.stop();
    log::info!("stopped");
    Ok(())
}

/// Serves `type=auto` with the best rung within the budget by `report`'s
/// measurement of this board, or the paper estimate without one; says so
/// in the log and on the Status page. Whether it was measured.
fn serve_best_rung(state: &AppState, settings: &Settings, report: Option<&Report>) -> bool {
    let engine = settings.engine.kind;
    let ladder = report.and_then(|r| r.ladder.as_ref());
    let ladder = ladder::measured_for(ladder, &state.pipeline, engine);
    let budget = settings.pipeline.budget_seconds;
    let board = Board::detect().name;
    let (rung, mut lines) = ladder::best_rung(&state.pipeline, engine, ladder, &board, budget);
    state.pipeline.serve(rung);
    let (person, line) = ladder::best_person_rung(&state.pipeline, engine, ladder, &board, budget);
    state.pipeline.serve_person(person);
    lines.push(line);
    for line in &lines {
        log::info!("{line}");
    }
    *state.ladder.lock().unwrap_or_else(|p| p.into_inner()) = lines;
    ladder.is_some()
}

/// The 12 MP photo the server measures its board with, in the data directory.
const BENCH_PHOTO: &str = "bench-photo.jpg";

/// How long the server must be idle before it measures its board.
const IDLE_BEFORE_MEASURING: Duration = Duration::from_secs(10);

/// Once the server has been idle a while, times each rung on this board
/// (`ladder::measure_ladder`, in child processes at the lowest priority,
/// so requests that come meanwhile go first), saves the report and serves
/// the best rung that fits. Its progress is on the Status page.
fn measure_when_idle(state: &AppState, settings: &Settings) {
    let mut idle_since: Option<Instant> = None;
    loop {
        if state.is_stopping() {
            return;
        }
        if state.led_state() == led::State::Idle {
            if idle_since.get_or_insert_with(Instant::now).elapsed() >= IDLE_BEFORE_MEASURING {
                break;
            }
        } else {
            idle_since = None;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let progress = |line: String| {
        log::info!("{line}");
        state
            .ladder
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(line);
    };
    let photo = match &settings.pipeline.bench_photo {
        Some(photo) => photo.clone(),
        None => {
            let photo = settings.data_dir.join(BENCH_PHOTO);
            if let Err(e) = std::fs::write(&photo, ladder::test_photo()) {
                progress(format!(
                    "cannot measure this board: writing {}: {e}",
                    photo.display()
                ));
                return;
            }
            photo
        }
    };
    let model = state.pipeline.default_model().spec.name.clone();
    let engine = settings.engine.kind;
    progress(format!(
        "measuring this board in the background: type=auto's and type=person's rungs for {model} on {engine}, cheapest first, with {}",
        photo.display()
    ));
    let measured = ladder::measure_ladder(
        settings,
        &model,
        &photo,
        settings.pipeline.budget_seconds,
        Duration::MAX,
        &|| state.is_stopping(),
        |row| progress(row.line()),
    );
    if settings.pipeline.bench_photo.is_none() {
        let _ = std::fs::remove_file(&photo);
    }
    let ladder = match measured {
        Ok(ladder) => ladder,
        Err(e) => {
            progress(format!("measuring this board failed: {e:#}"));
            return;
        }
    };
    let board = Board::detect();
    let mut report = Report::load(&settings.data_dir).unwrap_or_else(|| Report {
        at_unix: state.clock.now_unix(),
        board: board.describe(),
        memory_mib: board.memory >> 20,
        rows: Vec::new(),
        recommended: None,
        ladder: None,
    });
    report.ladder = Some(ladder);
    if let Err(e) = report.save(&settings.data_dir) {
        log::error!(
            "cannot save the board's measurement in {}: {e}",
            settings.data_dir.display()
        );
    }
    serve_best_rung(state, settings, Some(&report));
}

fn print_demo_key(store: &dyn Store, addr: std::net::SocketAddr) -> Result<()> {
    if !store.is_empty()? {
        return Ok(());
    }
    let now = Clock::default().now_unix();
    let name = AccountName::parse("demo").expect("a valid name");
    store.create_account(&name, "pro", now)?;
    let key = store.create_key("demo", "demo", now)?;
    println!(
        "Demo account `demo` (Pro plan) created. Its API key, shown only this once:\n\n    {}\n",
        key.expose()
    );
    println!(
        "Try it:\n\n    curl -f -H 'X-Api-Key: {}' -F image_file=@photo.jpg http://{addr}/api/remove-bg -o cutout.png\n",
        key.expose()
    );
    Ok(())
}
