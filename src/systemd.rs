//! systemd's notify protocol (sd_notify(3)) without libsystemd: plain
//! datagrams to `$NOTIFY_SOCKET`. `READY=1` once the port is bound and the
//! model has loaded (or failed to: the server still answers, degraded),
//! `STATUS=` lines for `systemctl status`, `WATCHDOG=1` while the server
//! answers its own health check, and `STOPPING=1` on shutdown. Outside
//! systemd every call is a no-op.

use crate::app::AppState;
use crate::engine::InferError;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Default)]
pub struct Notifier {
    target: Option<Arc<(UnixDatagram, std::os::unix::net::SocketAddr)>>,
}

impl Notifier {
    /// The notifier `$NOTIFY_SOCKET` asks for: a path, or `@name` for a
    /// socket in the abstract namespace.
    pub fn from_env() -> Notifier {
        match std::env::var_os("NOTIFY_SOCKET") {
            Some(socket) => Notifier::to(socket.into()),
            None => Notifier::default(),
        }
    }

    pub fn to(socket: PathBuf) -> Notifier {
        let address = match socket.to_str().and_then(|s| s.strip_prefix('@')) {
            Some(name) => abstract_address(name),
            None => std::os::unix::net::SocketAddr::from_pathname(&socket),
        };
        match (UnixDatagram::unbound(), address) {
            (Ok(sock), Ok(address)) => Notifier {
                target: Some(Arc::new((sock, address))),
            },
            (Err(e), _) | (_, Err(e)) => {
                log::warn!(
                    "NOTIFY_SOCKET {}: {e}; not notifying systemd",
                    socket.display()
                );
                Notifier::default()
            }
        }
    }

    pub fn send(&self, message: &str) {
        if let Some(target) = &self.target {
            let (sock, address) = &**target;
            if let Err(e) = sock.send_to_addr(message.as_bytes(), address) {
                log::warn!("notifying systemd ({message}): {e}");
            }
        }
    }

    pub fn ready(&self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={status}"));
    }

    pub fn status(&self, status: &str) {
        self.send(&format!("STATUS={status}"));
    }

    pub fn watchdog(&self) {
        self.send("WATCHDOG=1");
    }

    pub fn stopping(&self) {
        self.send("STOPPING=1\nSTATUS=stopping: finishing requests in flight");
    }
}

#[cfg(target_os = "linux")]
fn abstract_address(name: &str) -> std::io::Result<std::os::unix::net::SocketAddr> {
    use std::os::linux::net::SocketAddrExt;
    std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
}

#[cfg(not(target_os = "linux"))]
fn abstract_address(_: &str) -> std::io::Result<std::os::unix::net::SocketAddr> {
    Err(std::io::Error::other("abstract sockets are Linux only"))
}

/// The watchdog interval systemd expects pings within (`WATCHDOG_USEC`),
/// when it is meant for this process (`WATCHDOG_PID`, if set).
pub fn watchdog_interval() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    if let Ok(pid) = std::env::var("WATCHDOG_PID") {
        if pid.parse::<u32>().ok()? != std::process::id() {
            return None;
        }
    }
    (usec > 0).then(|| Duration::from_micros(usec))
}

/// Whether the server at `addr` answers `GET /healthz` with 200 within
/// `timeout`: the accept loop and a request worker are alive. On an HTTPS
/// port (`plain` false) the answer is the 400 that tells plain HTTP to use
/// HTTPS: the accept loop and the connection threads are alive.
pub fn answers_health_check(addr: SocketAddr, plain: bool, timeout: Duration) -> bool {
    let probe = || -> std::io::Result<bool> {
        let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")?;
        let mut head = [0u8; 12];
        stream.read_exact(&mut head)?;
        Ok(&head
            == if plain {
                b"HTTP/1.1 200"
            } else {
                b"HTTP/1.1 400"
            })
    };
    probe().unwrap_or(false)
}

/// Tells systemd when the server is ready (the model loaded or failed to)
/// and, every half watchdog interval from the start, that it still answers
/// its own health check. Runs for the life of the process.
pub fn supervise(
    state: Arc<AppState>,
    addr: SocketAddr,
    plain: bool,
    notifier: Notifier,
    watchdog: Option<Duration>,
) {
    let model = state.pipeline.default_model().spec.name.clone();
    notifier.status(&format!("loading model {model}"));
    // Fed while the model loads too: a process that runs itself again (a
    // restore on the setup page) loads under the watchdog systemd armed at
    // its first READY=1, and a load can outlast it.
    if let Some(interval) = watchdog {
        let notifier = notifier.clone();
        std::thread::spawn(move || feed_watchdog(addr, plain, &notifier, interval));
    }
    loop {
        match state.pipeline.default_model().inference.ready() {
            Err(InferError::Loading) => std::thread::sleep(Duration::from_millis(50)),
            Ok(()) => {
                let inference = &state.pipeline.default_model().inference;
                let engine = inference.engine_name().unwrap_or("?");
                break notifier.ready(&format!("serving model {model} ({engine}) on {addr}"));
            }
            Err(e) => break notifier.ready(&format!("degraded: {e}; answering 503 on {addr}")),
        }
    }
}

/// Every half `interval`, `WATCHDOG=1` if the server at `addr` answers its
/// own health check.
fn feed_watchdog(addr: SocketAddr, plain: bool, notifier: &Notifier, interval: Duration) {
    let probe = if addr.ip().is_unspecified() {
        SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), addr.port())
    } else {
        addr
    };
    loop {
        std::thread::sleep(interval / 2);
        if answers_health_check(probe, plain, interval / 4) {
            notifier.watchdog();
        } else {
            log::warn!(
                "the server did not answer its own health check; systemd's watchdog is not fed"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_reach_the_socket_systemd_names() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let systemd = UnixDatagram::bind(&path).unwrap();
        let notifier = Notifier::to(path);
        notifier.ready("serving");
        notifier.watchdog();
        notifier.stopping();
        let mut buf = [0u8; 256];
        let mut next = || {
            let n = systemd.recv(&mut buf).unwrap();
            String::from_utf8_lossy(&buf[..n]).into_owned()
        };
        assert_eq!(next(), "READY=1\nSTATUS=serving");
        assert_eq!(next(), "WATCHDOG=1");
        assert!(next().starts_with("STOPPING=1\n"));
    }

    #[test]
    fn an_abstract_socket_is_named_with_an_at_sign() {
        let name = format!("cutout-test-{}", std::process::id());
        let systemd = UnixDatagram::bind_addr(&abstract_address(&name).unwrap()).unwrap();
        Notifier::to(format!("@{name}").into()).status("hello");
        let mut buf = [0u8; 64];
        let n = systemd.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STATUS=hello");
    }

    #[test]
    fn without_a_socket_nothing_is_sent_and_nothing_fails() {
        Notifier::default().ready("x");
    }
}
