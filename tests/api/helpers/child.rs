//! The `cutout` binary as a child process, and its command line.

use super::models_dir;
use std::net::SocketAddr;
use std::time::Duration;

/// The `cutout` binary the tests run: this build's, or the one
/// `TEST_CUTOUT_BINARY` names (`make test-aarch64`: the aarch64 build, which
/// the kernel hands to qemu).
pub fn cutout_binary() -> std::path::PathBuf {
    std::env::var_os("TEST_CUTOUT_BINARY")
        .map_or_else(|| env!("CARGO_BIN_EXE_cutout").into(), Into::into)
}

/// The `cutout` binary serving U2NetP on a free port of 127.0.0.1, with
/// its log (stderr) in a file: what systemd runs, so a test can measure its
/// memory, read its log or kill it.
pub struct Server {
    pub child: std::process::Child,
    pub addr: SocketAddr,
    /// Outside the data directory, which a test may fill or make read-only.
    pub log: std::path::PathBuf,
    _log_dir: tempfile::TempDir,
}

impl Server {
    /// Serves `data` with `RUST_LOG=rust_log`; `extra` are more `serve` options.
    pub fn start(data: &std::path::Path, rust_log: &str, extra: &[&str]) -> Server {
        Server::start_with(data, &models_dir(), rust_log, extra, &[])
    }

    /// `start` with another models directory and more environment.
    pub fn start_with(
        data: &std::path::Path,
        models: &std::path::Path,
        rust_log: &str,
        extra: &[&str],
        env: &[(&str, String)],
    ) -> Server {
        let command = std::process::Command::new(cutout_binary());
        Server::spawn(command, data, models, rust_log, extra, env)
    }

    /// `start` under the packaged unit's system call filter, as systemd
    /// applies it (tests/unit_filter.py), with more environment.
    pub fn start_under_unit_filter(
        data: &std::path::Path,
        extra: &[&str],
        env: &[(&str, String)],
    ) -> Server {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut command = std::process::Command::new("python3");
        command
            .arg(root.join("tests/unit_filter.py"))
            .arg(root.join("systemd/cutout.service"))
            .arg(cutout_binary());
        Server::spawn(command, data, &models_dir(), "info", extra, env)
    }

    /// `start` inside `cgroup`'s memory limit, as a unit's `MemoryMax`
    /// or a small board holds it, with `RUST_LOG=info`.
    pub fn start_in(cgroup: &super::Cgroup, data: &std::path::Path, extra: &[&str]) -> Server {
        let command = cgroup.command(&cutout_binary());
        Server::spawn(command, data, &models_dir(), "info", extra, &[])
    }

    /// Sends SIGTERM, as `systemctl stop` does; how long until it exited,
    /// whether it exited with success, and its log.
    pub fn stop(mut self) -> (Duration, bool, String) {
        let asked = std::time::Instant::now();
        let pid = self.child.id().to_string();
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        let status = self.child.wait().unwrap();
        let took = asked.elapsed();
        (
            took,
            status.success(),
            std::fs::read_to_string(&self.log).unwrap(),
        )
    }

    /// `start` under a limit of `files` open files, as a unit's
    /// `LimitNOFILE` sets it.
    pub fn start_with_open_files(data: &std::path::Path, rust_log: &str, files: u32) -> Server {
        Server::start_limited(data, rust_log, files, &[])
    }

    /// `start_with_open_files` with more environment.
    pub fn start_limited(
        data: &std::path::Path,
        rust_log: &str,
        files: u32,
        env: &[(&str, String)],
    ) -> Server {
        let mut command = std::process::Command::new("sh");
        command.args([
            "-c",
            &format!("ulimit -n {files} && exec \"$0\" \"$@\""),
            &cutout_binary().to_string_lossy(),
        ]);
        Server::spawn(command, data, &models_dir(), rust_log, &[], env)
    }

    fn spawn(
        mut command: std::process::Command,
        data: &std::path::Path,
        models: &std::path::Path,
        rust_log: &str,
        extra: &[&str],
        env: &[(&str, String)],
    ) -> Server {
        use std::os::unix::net::UnixDatagram;
        std::fs::create_dir_all(data).unwrap();
        let socket = data.join("notify");
        let _ = std::fs::remove_file(&socket);
        let notify = UnixDatagram::bind(&socket).unwrap();
        notify
            .set_read_timeout(Some(Duration::from_secs(120)))
            .unwrap();
        let log_dir = tempfile::tempdir().unwrap();
        let log = log_dir.path().join("cutout.log");
        let child = serve_command(&mut command, data, models, extra)
            .env("NOTIFY_SOCKET", &socket)
            .env("RUST_LOG", rust_log)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(std::process::Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log)
                    .unwrap(),
            )
            .spawn()
            .unwrap();
        // READY comes with "serving model … on ADDR" or "degraded: … on ADDR".
        let mut buf = [0u8; 512];
        let addr = loop {
            let n = notify.recv(&mut buf).expect("READY within two minutes");
            let message = String::from_utf8_lossy(&buf[..n]).into_owned();
            if message.starts_with("READY=1\n") {
                let (_, addr) = message.rsplit_once(" on ").expect("an address");
                break addr.trim().parse().unwrap();
            }
        };
        Server {
            child,
            addr,
            log,
            _log_dir: log_dir,
        }
    }

    /// The resident set now, in KiB.
    pub fn rss_kib(&self) -> u64 {
        rss_kib(self.child.id()).expect("the server is running")
    }

    /// The log once it holds `line`: a request's line is written after its
    /// answer is sent, so a client can see the answer before the log does.
    pub fn log_once_it_says(&self, line: &str) -> String {
        let read = || std::fs::read_to_string(&self.log).unwrap();
        super::wait_until(&format!("the log says {line:?}"), || read().contains(line));
        read()
    }

    pub fn kill_9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `command` (the binary, or what execs it) made `cutout serve` of `data`
/// with `models`: on a free loopback port, U2NetP unless `extra` (more
/// `serve` options) names a model, not announced, no board measurement in
/// the background unless a test asks.
pub fn serve_command<'c>(
    command: &'c mut std::process::Command,
    data: &std::path::Path,
    models: &std::path::Path,
    extra: &[&str],
) -> &'c mut std::process::Command {
    command
        .arg("--data-dir")
        .arg(data)
        .arg("--models-dir")
        .arg(models)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(if extra.contains(&"--model") {
            &[][..]
        } else {
            &["--model", "u2netp"]
        })
        .args(extra)
        .env("CUTOUT_MDNS_ENABLED", "false")
        .env("CUTOUT_PIPELINE_BENCH_WHEN_IDLE", "false")
}

/// The resident set of process `pid`, in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Runs the `cutout` command line on `data`; returns its stdout.
pub fn cutout_cli(data: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new(cutout_binary())
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(out.status.success(), "cutout {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// `cutout admin set-password` on `data`, `stdin` typed.
pub fn cli_set_password(data: &std::path::Path, stdin: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = std::process::Command::new(cutout_binary())
        .arg("--data-dir")
        .arg(data)
        .args(["admin", "set-password"])
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// A new account on `plan` with one key, made with the command line.
pub fn cli_account(data: &std::path::Path, name: &str, plan: &str) -> String {
    cutout_cli(data, &["account", "create", name, "--plan", plan]);
    let out = cutout_cli(data, &["key", "create", name]);
    out.lines().last().unwrap().trim().to_owned()
}

/// The names in `dir` that start with a dot: scratch files and directories
/// a command or the server left behind.
pub fn dot_files(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect()
}
