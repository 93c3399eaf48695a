//! The binary as systemd runs it: the notify protocol against a fake
//! `NOTIFY_SOCKET`, the status LED against a fake sysfs LED, and the
//! configuration file's precedence.

use crate::helpers::cutout_binary;
use std::os::unix::net::UnixDatagram;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

struct Service {
    child: Child,
    notify: UnixDatagram,
    /// The server's stderr, shown when it stops notifying.
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Service {
    /// `cutout serve` of U2NetP with systemd's environment; `extra` adds
    /// arguments before `serve`, `env` more variables.
    fn start(models: &std::path::Path, extra: &[&str], env: &[(&str, String)]) -> Service {
        Service::serving("u2netp", models, extra, env)
    }

    fn serving(
        model: &str,
        models: &std::path::Path,
        extra: &[&str],
        env: &[(&str, String)],
    ) -> Service {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("notify");
        let log = dir.path().join("serve.log");
        let notify = UnixDatagram::bind(&socket).unwrap();
        notify
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let mut command = Command::new(cutout_binary());
        command
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .arg("--models-dir")
            .arg(models)
            .args(extra)
            .args(["serve", "--listen", "127.0.0.1:0", "--model", model])
            .env("NOTIFY_SOCKET", &socket)
            .env("WATCHDOG_USEC", "400000")
            .env("CUTOUT_MDNS_ENABLED", "false")
            .env("CUTOUT_PIPELINE_BENCH_WHEN_IDLE", "false")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        for (k, v) in env {
            command.env(k, v);
        }
        Service {
            child: command.spawn().unwrap(),
            notify,
            log,
            _dir: dir,
        }
    }

    fn next(&self) -> String {
        let mut buf = [0u8; 512];
        let n = self.notify.recv(&mut buf).unwrap_or_else(|e| {
            panic!(
                "no notification within a minute ({e}); the server's /proc stat: {:?}; \
                 its log:\n{}",
                std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())),
                std::fs::read_to_string(&self.log).unwrap_or_default()
            )
        });
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    /// The notifications up to and including the first that contains `what`.
    fn until(&self, what: &str) -> Vec<String> {
        let mut seen = vec![];
        loop {
            let message = self.next();
            let done = message.contains(what);
            seen.push(message);
            if done {
                return seen;
            }
        }
    }

    fn terminate(mut self) -> (Vec<String>, std::process::ExitStatus) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
        let seen = self.until("STOPPING=1");
        (seen, self.child.wait().unwrap())
    }
}

#[test]
fn systemd_hears_loading_ready_watchdog_pings_and_stopping() {
    let service = Service::start(&crate::helpers::models_dir(), &[], &[]);
    assert_eq!(service.next(), "STATUS=loading model u2netp");
    let ready = service.until("READY=1").pop().unwrap();
    assert!(
        ready.starts_with("READY=1\nSTATUS=serving model u2netp (")
            && ready.contains(") on 127.0.0.1:"),
        "{ready}"
    );
    service.until("WATCHDOG=1");
    service.until("WATCHDOG=1");
    let (seen, exit) = service.terminate();
    assert!(
        seen.last()
            .unwrap()
            .starts_with("STOPPING=1\nSTATUS=stopping"),
        "{seen:?}"
    );
    assert!(exit.success());
}

/// A restore on the setup page runs the program again in its process, whose
/// watchdog systemd armed at the first READY=1: the load that follows (IS-Net's
/// takes seconds here, minutes on an emulated board) is under it too.
#[test]
fn the_watchdog_is_fed_while_the_model_loads() {
    let env = [("WATCHDOG_USEC", "200000".to_owned())];
    let service = Service::serving("isnet", &crate::helpers::models_dir(), &[], &env);
    let seen = service.until("READY=1");
    let pings = seen.iter().filter(|m| *m == "WATCHDOG=1").count();
    assert!(pings >= 2, "{seen:?}");
    service.until("WATCHDOG=1");
    // Stopped while the blend's other models may load still: exit's
    // handlers tore ONNX Runtime down under such a load (SIGSEGV).
    let (_, exit) = service.terminate();
    assert!(exit.success(), "{exit}");
}

#[test]
fn with_https_alone_the_watchdog_is_fed_while_the_https_port_accepts() {
    let env = [
        ("CUTOUT_TLS_LISTEN", "127.0.0.1:0".to_owned()),
        ("CUTOUT_TLS_PLAIN_HTTP", "false".to_owned()),
    ];
    let service = Service::start(&crate::helpers::models_dir(), &[], &env);
    service.until("READY=1");
    service.until("WATCHDOG=1");
    service.until("WATCHDOG=1");
    let (_, exit) = service.terminate();
    assert!(exit.success());
}

#[test]
fn a_server_on_loopback_alone_is_not_announced_on_the_lan() {
    let data = tempfile::tempdir().unwrap();
    let env = [("CUTOUT_MDNS_ENABLED", "true".to_owned())];
    let server = crate::helpers::Server::start_with(
        data.path(),
        &crate::helpers::models_dir(),
        "info",
        &[],
        &env,
    );
    let log = std::fs::read_to_string(&server.log).unwrap();
    assert!(log.contains("not announced on the LAN"), "{log}");
    assert!(!log.contains("announced as"), "{log}");
}

#[test]
fn a_model_that_fails_to_load_is_reported_ready_but_degraded() {
    let empty = tempfile::tempdir().unwrap();
    let service = Service::start(empty.path(), &[], &[]);
    let ready = service.until("READY=1");
    assert!(
        ready
            .last()
            .unwrap()
            .contains("STATUS=degraded: model failed to load"),
        "{ready:?}"
    );
    let (_, exit) = service.terminate();
    assert!(exit.success());
}

/// A fake sysfs LED (owned by the mmc0 trigger, as a Pi's is at boot)
/// and the environment that points the server at it.
fn fake_led() -> (tempfile::TempDir, Vec<(&'static str, String)>) {
    let led = tempfile::tempdir().unwrap();
    std::fs::write(led.path().join("max_brightness"), "255\n").unwrap();
    std::fs::write(led.path().join("trigger"), "[mmc0] none\n").unwrap();
    std::fs::write(led.path().join("brightness"), "0\n").unwrap();
    let env = vec![
        ("CUTOUT_LED_BACKEND", "sysfs".to_owned()),
        ("CUTOUT_LED_SYSFS_PATH", led.path().display().to_string()),
    ];
    (led, env)
}

#[test]
fn the_sysfs_led_blinks_while_starting_and_is_off_after_a_clean_stop() {
    let (led, mut env) = fake_led();
    env.push(("CUTOUT_LED_IDLE", "dim".to_owned()));
    let service = Service::start(&crate::helpers::models_dir(), &[], &env);
    service.until("READY=1");
    let brightness = || std::fs::read_to_string(led.path().join("brightness")).unwrap();
    crate::helpers::wait_until("the idle LED is dim", || brightness() == "31");
    assert_eq!(
        std::fs::read_to_string(led.path().join("trigger")).unwrap(),
        "none"
    );
    let (_, exit) = service.terminate();
    assert!(exit.success());
    assert_eq!(brightness(), "0");
}

#[test]
fn the_command_line_beats_the_environment_which_beats_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cutout.toml");
    let data = |name: &str| dir.path().join(name).display().to_string();
    std::fs::write(&config, format!("data_dir = \"{}\"\n", data("from-file"))).unwrap();
    let run = |args: &[&str], env: Option<String>| {
        let mut command = Command::new(cutout_binary());
        command
            .arg("--config")
            .arg(&config)
            .args(args)
            .args(["account", "create", "acme", "--plan", "pro"]);
        if let Some(env) = env {
            command.env("CUTOUT_DATA_DIR", env);
        }
        assert!(command.output().unwrap().status.success());
    };
    run(&[], None);
    run(&[], Some(data("from-env")));
    run(&["--data-dir", &data("from-flag")], Some(data("from-env")));
    for place in ["from-file", "from-env", "from-flag"] {
        assert!(dir.path().join(place).join("cutout.db").exists(), "{place}");
    }

    std::fs::write(&config, "listen = \"x\"\n\n[server]\nqueue_capcity = 3\n").unwrap();
    let out = Command::new(cutout_binary())
        .arg("--config")
        .arg(&config)
        .args(["account", "list"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.contains("line 4") && stderr.contains("queue_capcity"),
        "{stderr}"
    );
}

#[test]
fn the_appliance_is_found_by_dns_sd_on_loopback() {
    use cutout::discovery::{announce, HTTP_SERVICE_TYPE, SERVICE_TYPE};
    use mdns_sd::{ServiceDaemon, ServiceEvent};
    let app = crate::helpers::spawn_app();
    // Not 5353: the test must not talk to (or be answered by) real responders.
    let mdns_port = 25_353 + (std::process::id() % 1000) as u16;
    let _announcer = announce(app.addr, Some(8443), "cutout test booth", mdns_port).unwrap();

    let browser = ServiceDaemon::new_with_port(mdns_port).unwrap();
    for (service_type, path) in [(SERVICE_TYPE, "/api/remove-bg"), (HTTP_SERVICE_TYPE, "/")] {
        let events = browser.browse(service_type).unwrap();
        let found = loop {
            match events
                .recv_timeout(Duration::from_secs(60))
                .expect("resolved within a minute, even on a loaded machine")
            {
                ServiceEvent::ServiceResolved(found)
                    if found.get_fullname().starts_with("cutout test booth.") =>
                {
                    break found
                }
                _ => {}
            }
        };
        assert_eq!(found.get_port(), app.addr.port());
        assert_eq!(found.get_property_val_str("path"), Some(path));
        assert_eq!(found.get_property_val_str("https_port"), Some("8443"));
        assert!(
            found
                .get_addresses()
                .iter()
                .any(|a| a.to_ip_addr() == app.addr.ip()),
            "{:?}",
            found.get_addresses()
        );
    }
    let _ = browser.shutdown();
}

#[test]
fn a_corrupt_model_leaves_the_server_up_answering_503_with_the_led_blinking_fast() {
    use crate::helpers::*;
    let models = tempfile::tempdir().unwrap();
    let mut weights = std::fs::read(models_dir().join("u2netp.tract.onnx")).unwrap();
    let middle = weights.len() / 2;
    weights[middle] ^= 0xFF;
    std::fs::write(models.path().join("u2netp.tract.onnx"), weights).unwrap();
    let (led, env) = fake_led();
    let data = tempfile::tempdir().unwrap();
    let key = cli_account(data.path(), "acme", "pro");
    let server = Server::start_with(data.path(), models.path(), "warn", &[], &env);

    let ready = request(server.addr, "GET", "/readyz", &[], b"");
    assert_eq!(ready.status, 503);
    assert!(ready.text().contains("sha256"), "{}", ready.text());
    let reply = post_form(
        server.addr,
        Some(&key),
        Multipart::new().file("image_file", &jpeg(64, 48)),
    );
    assert_eq!(
        (reply.status, reply.error_code().as_str()),
        (503, "service_unavailable")
    );
    // Degraded is a 4 Hz blink: eight changes a second (starting is 1 Hz).
    let mut changes = 0;
    let mut last = String::new();
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_millis(1500) {
        let now = std::fs::read_to_string(led.path().join("brightness")).unwrap();
        changes += usize::from(now != last);
        last = now;
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(changes >= 8, "{changes} LED changes in 1.5 s");
    let log = std::fs::read_to_string(&server.log).unwrap();
    assert!(
        log.contains("u2netp"),
        "the log says the model failed: {log}"
    );
}

#[test]
fn onnxruntime_that_crashed_two_starts_gives_way_to_tract_and_unplugs_count_nothing() {
    use crate::helpers::{cli_account, jpeg, models_dir, Multipart, Server};
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let trial = data.join(cutout::engine::TRIAL_FILE);
    let start = || {
        Server::start_with(
            &data,
            &models_dir(),
            "info",
            &["--engine", "onnxruntime"],
            &[],
        )
    };
    let signal = |server: &Server, name: &str| {
        let pid = server.child.id().to_string();
        Command::new("kill").args([name, &pid]).status().unwrap();
    };
    let key = cli_account(&data, "booth", "pro");
    let mut form = Multipart::new();
    form.file("image_file", &jpeg(64, 48));
    let cut_out =
        |server: &Server| crate::helpers::post_form(server.addr, Some(&key), &form).status;

    // Unplugged during start three times, before any cut-out: no crash of
    // the library, so ONNX Runtime still serves.
    for _ in 0..3 {
        let server = start();
        assert!(!trial.exists(), "nothing is counted while nothing crashed");
        server.kill_9();
    }
    let mut server = start();
    let log = std::fs::read_to_string(&server.log).unwrap();
    assert!(
        log.contains("on onnxruntime") && !log.contains("tract instead"),
        "{log}"
    );
    assert_eq!(cut_out(&server), 200);
    // A clean stop counts nothing either.
    signal(&server, "-TERM");
    assert!(server.child.wait().unwrap().success());
    assert!(!trial.exists());

    // Two starts that a fault ended while the library was on trial (before
    // its first cut-out), as an instruction this CPU lacks ends them.
    for _ in 0..2 {
        let mut server = start();
        signal(&server, "-ILL");
        let died = server.child.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&died),
            Some(4)
        );
    }
    let server = start();
    let log = std::fs::read_to_string(&server.log).unwrap();
    assert!(
        log.contains("crashed the process 2 times") && log.contains("serving with tract instead"),
        "{log}"
    );
    assert!(log.contains("serving u2netp on tract"), "{log}");
    assert_eq!(cut_out(&server), 200);
    assert!(trial.exists(), "kept, for the operator to delete");
}
