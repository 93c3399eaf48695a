//! The appliance's start-up: the app served over HTTP, and what watches it
//! and tells the world (the status LED, DNS-SD, systemd, signals).

use crate::app::EngineSource;
use crate::clock::Clock;
use crate::config::Settings;
use crate::discovery;
use crate::domain::AccountName;
use crate::http::App;
use crate::led::{Led, NoLight};
use crate::store::Store;
use crate::systemd::{self, Notifier};
use anyhow::Result;

/// Serves until SIGTERM or SIGINT: the app over HTTP, with the status LED,
/// the DNS-SD announcement and systemd's notifications and watchdog around
/// it. `demo` makes a demo account on an empty database and prints its key.
pub fn serve(settings: Settings, demo: bool) -> Result<()> {
    let notifier = Notifier::from_env();
    let led_config = settings.led.clone();
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
    let app = App::build(settings, EngineSource::Load, Clock::default())?;
    let light = led_config.open().unwrap_or_else(|why| {
        log::error!("{why}; running without a status LED");
        Box::new(NoLight)
    });
    let led_state = app.state();
    let led = Led::start(light, led_config.idle_level(), move || {
        led_state.led_state()
    });
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
        match discovery::announce(app.addr(), https_port, &name, discovery::MDNS_PORT) {
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
                std::thread::spawn(move || shutdown.shutdown());
            } else {
                // An operator who asks twice does not want to wait.
                log::warn!("second signal: stopping now");
                std::process::exit(1);
            }
        }
    });
    app.run();
    led.stop();
    log::info!("stopped");
    Ok(())
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
