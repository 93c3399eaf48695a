//! A throw-away PostgreSQL server from Debian's packages: a cluster made by
//! `initdb` in a temporary directory, served by `pg_ctl` on a free port of
//! 127.0.0.1, as the `postgres` user when the tests run as root (the server
//! refuses root). One is shared by the test binary (`shared_postgres`),
//! each test in a database of its own; a test that stops the server starts
//! its own (`Postgres::start`).

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// The role cutout connects as, and its password (checked: TCP connections
/// need it).
pub const ROLE: &str = "cutout";
pub const PASSWORD: &str = "not-a-real-secret";

pub struct Postgres {
    pub port: u16,
    dir: tempfile::TempDir,
    bin: PathBuf,
    as_postgres: bool,
}

/// The server the whole test binary shares.
pub fn shared_postgres() -> &'static Postgres {
    static SERVER: OnceLock<Postgres> = OnceLock::new();
    SERVER.get_or_init(Postgres::start)
}

/// Where Debian installs the server's programs (the newest version).
fn server_bin() -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect(
            "PostgreSQL's server in /usr/lib/postgresql: apt-get install postgresql (.ci/run does)",
        )
        .filter_map(|e| Some(e.ok()?.path().join("bin")))
        .filter(|bin| bin.join("pg_ctl").exists())
        .collect();
    versions.sort();
    versions
        .pop()
        .expect("pg_ctl under /usr/lib/postgresql/*/bin: apt-get install postgresql")
}

impl Postgres {
    pub fn start() -> Postgres {
        let as_postgres = std::fs::metadata("/proc/self").unwrap().uid() == 0;
        let dir = tempfile::Builder::new()
            .prefix("cutout-pg")
            .tempdir()
            .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let server = Postgres {
            port,
            dir,
            bin: server_bin(),
            as_postgres,
        };
        if as_postgres {
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(server.dir.path())
                .status()
                .unwrap();
            assert!(status.success());
        }
        let password_file = server.dir.path().join("pw");
        std::fs::write(&password_file, PASSWORD).unwrap();
        server.run(
            "initdb",
            &[
                "-D".as_ref(),
                server.data().as_os_str(),
                "-U".as_ref(),
                ROLE.as_ref(),
                "--pwfile".as_ref(),
                password_file.as_os_str(),
                "--auth-local=trust".as_ref(),
                "--auth-host=scram-sha-256".as_ref(),
                "-E".as_ref(),
                "UTF8".as_ref(),
            ],
        );
        server.start_again();
        server.stop_when_this_process_ends();
        server
    }

    /// The shared server is never dropped: a watcher stops it and removes
    /// its directory once this test process has ended, however it ended.
    /// The watcher outlives this process, so it is never waited for.
    #[allow(clippy::zombie_processes)]
    fn stop_when_this_process_ends(&self) {
        let pg_ctl = format!(
            "{}{} stop -m immediate -D {}",
            if self.as_postgres {
                "runuser -u postgres -- "
            } else {
                ""
            },
            self.bin.join("pg_ctl").display(),
            self.data().display()
        );
        Command::new("sh")
            .arg("-c")
            .arg(format!(
                "while kill -0 {} 2>/dev/null; do sleep 1; done; {pg_ctl} >/dev/null 2>&1; rm -rf {}",
                std::process::id(),
                self.dir.path().display()
            ))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// One of the server's programs, as the `postgres` user under root.
    fn command(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(program);
            c
        } else {
            Command::new(program)
        }
    }

    fn run(&self, program: &str, args: &[&std::ffi::OsStr]) {
        let output = self
            .command(program)
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{program} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Starts the server (again), waiting until it takes connections.
    pub fn start_again(&self) {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c max_connections=300",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("log");
        self.run(
            "pg_ctl",
            &[
                "start".as_ref(),
                "-w".as_ref(),
                "-D".as_ref(),
                self.data().as_os_str(),
                "-l".as_ref(),
                log.as_os_str(),
                "-o".as_ref(),
                options.as_ref(),
            ],
        );
    }

    /// Stops the server at once, as a crash or a pulled cable would.
    pub fn stop(&self) {
        self.run(
            "pg_ctl",
            &[
                "stop".as_ref(),
                "-m".as_ref(),
                "immediate".as_ref(),
                "-D".as_ref(),
                self.data().as_os_str(),
            ],
        );
    }

    /// A new, empty database; its URL, without the password.
    pub fn database(&self) -> String {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "t{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        );
        let mut admin = postgres::Config::new()
            .host_path(self.dir.path())
            .port(self.port)
            .user(ROLE)
            .dbname("postgres")
            .connect(postgres::NoTls)
            .unwrap();
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap();
        format!("postgres://{ROLE}@127.0.0.1:{}/{name}", self.port)
    }

    /// `database()` with the password in the URL.
    pub fn database_with_password(&self) -> String {
        self.database()
            .replacen(&format!("{ROLE}@"), &format!("{ROLE}:{PASSWORD}@"), 1)
    }

    /// A file holding the password, for `[store] password_file`.
    pub fn password_file(&self) -> PathBuf {
        self.dir.path().join("pw")
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .args(["stop", "-m", "immediate", "-D"])
            .arg(self.data())
            .output();
    }
}
