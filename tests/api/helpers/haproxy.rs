//! HAProxy from Debian's package in front of several appliances: round
//! robin over them on a free port of 127.0.0.1, in the foreground as a
//! child of the test.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

pub struct Haproxy {
    pub addr: SocketAddr,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Haproxy {
    pub fn round_robin(backends: &[SocketAddr]) -> Haproxy {
        let addr: SocketAddr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let servers: String = backends
            .iter()
            .enumerate()
            .map(|(i, b)| format!("    server appliance{i} {b}\n"))
            .collect();
        let config = format!(
            "defaults\n    mode http\n    timeout connect 5s\n    timeout client 60s\n    timeout server 60s\n\
             frontend api\n    bind {addr}\n    default_backend appliances\n\
             backend appliances\n    balance roundrobin\n{servers}"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("haproxy.cfg");
        std::fs::write(&path, config).unwrap();
        let haproxy = ["/usr/sbin/haproxy", "haproxy"]
            .into_iter()
            .find(|p| Command::new(p).arg("-v").output().is_ok())
            .expect("haproxy: apt-get install haproxy (.ci/run does)");
        let child = Command::new(haproxy)
            .arg("-db")
            .arg("-f")
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        super::wait_until("HAProxy listens", || {
            std::net::TcpStream::connect(addr).is_ok()
        });
        Haproxy {
            addr,
            child,
            _dir: dir,
        }
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
