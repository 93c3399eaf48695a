//! DNS-SD over multicast DNS, so booths find the appliance without anyone
//! typing an address: `_cutout._tcp` (for clients of the API) and
//! `_http._tcp` (for browsers looking for the dashboard), with the paths in
//! TXT records. mdns-sd runs its own thread; dropping the `Announcer` sends
//! the goodbye packets.

use mdns_sd::{ServiceDaemon, ServiceInfo};
use std::net::SocketAddr;

/// The port multicast DNS uses (RFC 6762); tests pick another.
pub const MDNS_PORT: u16 = 5353;
pub const SERVICE_TYPE: &str = "_cutout._tcp.local.";
pub const HTTP_SERVICE_TYPE: &str = "_http._tcp.local.";

pub struct Announcer {
    daemon: ServiceDaemon,
    names: Vec<String>,
}

/// The machine's host name, as the kernel knows it.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "cutout".into())
}

/// Announces the server at `addr` as `instance`, with HTTPS's port in the
/// TXT records when it is on. A server on every address (`0.0.0.0`) is
/// announced with every address of the machine; one bound to a single
/// address, with that one.
pub fn announce(
    addr: SocketAddr,
    https_port: Option<u16>,
    instance: &str,
    mdns_port: u16,
) -> Result<Announcer, mdns_sd::Error> {
    let daemon = ServiceDaemon::new_with_port(mdns_port)?;
    let host = format!("{}.local.", hostname());
    let version = env!("CARGO_PKG_VERSION");
    let https_port = https_port.map(|p| p.to_string());
    let https = https_port.as_deref().map(|p| ("https_port", p));
    let services = [
        (
            SERVICE_TYPE,
            [
                ("path", "/api/remove-bg"),
                ("dashboard", "/"),
                ("version", version),
            ],
        ),
        (
            HTTP_SERVICE_TYPE,
            [
                ("path", "/"),
                ("api", "/api/remove-bg"),
                ("version", version),
            ],
        ),
    ]
    .map(|(service, txt)| (service, txt.into_iter().chain(https).collect::<Vec<_>>()));
    let mut names = vec![];
    for (service_type, txt) in services {
        let info = if addr.ip().is_unspecified() {
            ServiceInfo::new(service_type, instance, &host, (), addr.port(), &txt[..])?
                .enable_addr_auto()
        } else {
            ServiceInfo::new(
                service_type,
                instance,
                &host,
                addr.ip(),
                addr.port(),
                &txt[..],
            )?
        };
        names.push(info.get_fullname().to_owned());
        daemon.register(info)?;
    }
    Ok(Announcer { daemon, names })
}

impl Drop for Announcer {
    fn drop(&mut self) {
        // Bounded, all names together: a stop must not hang on the network.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        for name in &self.names {
            if let Ok(done) = self.daemon.unregister(name) {
                let _ = done
                    .recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()));
            }
        }
        let _ = self.daemon.shutdown();
    }
}
