//! remove.bg's `image_url` and `bg_image_url`: a file fetched over HTTP or
//! HTTPS, only from the addresses the operator allows (`[fetch] allow`).
//! Each host is resolved once, here, and only the addresses that passed
//! the check are connected to, so a DNS answer cannot change between the
//! check and the connection; each redirect is checked again. Knows no
//! server: `http::api` calls it inside the request's slot.

use ipnet::IpNet;
use std::io::Read;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use url::Url;

/// How long a host's name may take to resolve, and then to connect to it.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the answer, every redirect's included, may take to arrive whole
/// once connected.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);
pub const MAX_REDIRECTS: usize = 3;

#[derive(Debug, PartialEq, thiserror::Error)]
pub enum FetchError {
    #[error("no address is allowed")]
    NoneAllowed,
    #[error("not an http or https URL")]
    NotHttp,
    /// Every refusal of a host says the same, whatever its name resolved
    /// to or whether it did: the answer is no map of the appliance's network.
    #[error("{host} is not on a network this appliance fetches from")]
    Refused { host: String },
    #[error("more than {MAX_REDIRECTS} redirects")]
    TooManyRedirects,
    #[error("it answered {0}")]
    Status(u16),
    #[error("it is over {0} bytes")]
    TooLarge(u64),
    #[error("it came with Content-Encoding: {0}, which is not undone here")]
    Encoded(String),
    /// Found by the caller, which knows what a photo is.
    #[error("what it sent is not a JPEG, PNG or WEBP image")]
    NotAnImage,
    #[error("{0}")]
    Failed(String),
}

/// The file at `url`, at most `most` bytes, fetched only from addresses in
/// `allow`: loopback, link-local and multicast addresses only where a
/// network of their own kind is listed (`0.0.0.0/0` does not let in
/// 127.0.0.1; `127.0.0.1/32` does).
pub fn fetch(allow: &[IpNet], url: &str, most: u64) -> Result<Vec<u8>, FetchError> {
    if allow.is_empty() {
        return Err(FetchError::NoneAllowed);
    }
    let mut url = Url::parse(url.trim()).map_err(|_| FetchError::NotHttp)?;
    let deadline = Instant::now() + CONNECT_TIMEOUT + READ_TIMEOUT;
    let refused = Arc::new(Mutex::new(None));
    // Redirects are followed here, so that each hop's URL is checked too.
    let agent = ureq::AgentBuilder::new()
        .redirects(0)
        .timeout_connect(CONNECT_TIMEOUT)
        .resolver(Checked {
            allow: allow.to_vec(),
            refused: refused.clone(),
        })
        .build();
    for _ in 0..=MAX_REDIRECTS {
        if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
            return Err(FetchError::NotHttp);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let answer = agent.request_url("GET", &url).timeout(left).call();
        if let Some(refusal) = refused.lock().unwrap().take() {
            return Err(refusal);
        }
        let response = match answer {
            Ok(response) => response,
            Err(ureq::Error::Status(status, _)) => return Err(FetchError::Status(status)),
            Err(ureq::Error::Transport(e)) => return Err(FetchError::Failed(transport(&e))),
        };
        match response.status() {
            200 => {
                let encoding = response.header("Content-Encoding");
                if let Some(e) = encoding.filter(|e| !e.eq_ignore_ascii_case("identity")) {
                    return Err(FetchError::Encoded(e.to_owned()));
                }
                return read_body(response, most);
            }
            301 | 302 | 303 | 307 | 308 => {
                let location = response
                    .header("Location")
                    .ok_or(FetchError::Status(response.status()))?;
                url = url
                    .join(location)
                    .map_err(|_| FetchError::Failed(format!("a bad redirect to {location:?}")))?;
            }
            status => return Err(FetchError::Status(status)),
        }
    }
    Err(FetchError::TooManyRedirects)
}

fn read_body(response: ureq::Response, most: u64) -> Result<Vec<u8>, FetchError> {
    let declared = response
        .header("Content-Length")
        .and_then(|n| n.parse::<u64>().ok());
    if declared.is_some_and(|n| n > most) {
        return Err(FetchError::TooLarge(most));
    }
    let mut body = Vec::with_capacity(declared.unwrap_or(0) as usize);
    response
        .into_reader()
        .take(most + 1)
        .read_to_end(&mut body)
        .map_err(|e| FetchError::Failed(read_failure(&e)))?;
    if body.len() as u64 > most {
        return Err(FetchError::TooLarge(most));
    }
    Ok(body)
}

fn read_failure(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
            format!(
                "it did not send the file within {} s",
                READ_TIMEOUT.as_secs()
            )
        }
        _ => format!("reading the file failed: {e}"),
    }
}

fn transport(e: &ureq::Transport) -> String {
    use ureq::ErrorKind::*;
    match e.kind() {
        ConnectionFailed => format!(
            "no connection within {} s: {}",
            CONNECT_TIMEOUT.as_secs(),
            e.message().unwrap_or("refused")
        ),
        Io if e.to_string().contains("timed out") => {
            format!("it did not answer within {} s", READ_TIMEOUT.as_secs())
        }
        _ => e.to_string(),
    }
}

/// ureq's resolver: the host's addresses that `allow` lets in, resolved
/// once; where it has none, the refusal is kept for the caller.
struct Checked {
    allow: Vec<IpNet>,
    refused: Arc<Mutex<Option<FetchError>>>,
}

impl ureq::Resolver for Checked {
    fn resolve(&self, netloc: &str) -> std::io::Result<Vec<SocketAddr>> {
        let host = netloc.rsplit_once(':').map_or(netloc, |(host, _)| host);
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let refuse = |why: String| {
            log::info!("not fetched from {netloc}: {why}");
            let refusal = FetchError::Refused { host: host.clone() };
            let message = refusal.to_string();
            *self.refused.lock().unwrap() = Some(refusal);
            Err(std::io::Error::other(message))
        };
        let addresses = match resolve(netloc) {
            Some(addresses) if !addresses.is_empty() => addresses,
            _ => return refuse("it cannot be resolved".into()),
        };
        let (allowed, refused): (Vec<_>, Vec<_>) = addresses
            .into_iter()
            .partition(|a| is_allowed(&self.allow, a.ip()));
        // Only the allowed ones are connected to (localhost's 127.0.0.1,
        // where 127.0.0.1/32 is allowed and its ::1 is not).
        match (allowed.is_empty(), refused.first()) {
            (true, Some(address)) => refuse(format!("it is at {}, not allowed", address.ip())),
            _ => Ok(allowed),
        }
    }
}

/// `netloc`'s addresses, or `None` if the lookup fails or takes longer
/// than `CONNECT_TIMEOUT` (the system resolver has no timeout of its own
/// to set; a slow lookup finishes on its own thread).
fn resolve(netloc: &str) -> Option<Vec<SocketAddr>> {
    let (sender, receiver) = mpsc::channel();
    let netloc = netloc.to_owned();
    thread::Builder::new()
        .name("resolve".into())
        .spawn(move || {
            let addresses = netloc.to_socket_addrs().map(Iterator::collect);
            sender.send(addresses).ok();
        })
        .ok()?;
    receiver.recv_timeout(CONNECT_TIMEOUT).ok()?.ok()
}

/// The kinds of address that are never reached through a wider network.
#[derive(PartialEq)]
enum Kind {
    Ordinary,
    Loopback,
    LinkLocal,
    /// Multicast, and IPv4's broadcast.
    Multicast,
    Unspecified,
}

fn kind(address: IpAddr) -> Kind {
    match address {
        IpAddr::V4(a) if a.is_loopback() => Kind::Loopback,
        IpAddr::V4(a) if a.is_link_local() => Kind::LinkLocal,
        IpAddr::V4(a) if a.is_multicast() || a.is_broadcast() => Kind::Multicast,
        IpAddr::V4(a) if a.is_unspecified() => Kind::Unspecified,
        IpAddr::V6(a) if a.is_loopback() => Kind::Loopback,
        IpAddr::V6(a) if a.segments()[0] & 0xffc0 == 0xfe80 => Kind::LinkLocal,
        IpAddr::V6(a) if a.is_multicast() => Kind::Multicast,
        IpAddr::V6(a) if a.is_unspecified() => Kind::Unspecified,
        _ => Kind::Ordinary,
    }
}

/// Whether a network in `allow` holds `address`; an address of a special
/// kind only through a network of that kind.
pub fn is_allowed(allow: &[IpNet], address: IpAddr) -> bool {
    // ::ffff:127.0.0.1 is 127.0.0.1.
    let address = match address {
        IpAddr::V6(a) => a.to_ipv4_mapped().map_or(address, IpAddr::V4),
        IpAddr::V4(_) => address,
    };
    let kind_of = kind(address);
    // A network's kind is its first address's: 0.0.0.0/0 is ordinary.
    let kind_of_net = |net: &IpNet| match kind(net.network()) {
        Kind::Unspecified => Kind::Ordinary,
        other => other,
    };
    kind_of != Kind::Unspecified
        && allow
            .iter()
            .any(|net| net.contains(&address) && kind_of_net(net) == kind_of)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|n| n.parse().unwrap()).collect()
    }

    #[test]
    fn special_addresses_pass_only_through_a_network_of_their_own_kind() {
        let everything = nets(&["0.0.0.0/0", "::/0"]);
        for refused in [
            "127.0.0.1",
            "169.254.169.254",
            "224.0.0.251",
            "255.255.255.255",
            "0.0.0.0",
            "::1",
            "fe80::1",
            "ff02::fb",
            "::ffff:127.0.0.1",
        ] {
            assert!(
                !is_allowed(&everything, refused.parse().unwrap()),
                "{refused}"
            );
        }
        assert!(is_allowed(&everything, "192.168.1.20".parse().unwrap()));
        let lan = nets(&["192.168.1.0/24", "127.0.0.1/32", "fe80::/10"]);
        assert!(is_allowed(&lan, "192.168.1.20".parse().unwrap()));
        assert!(!is_allowed(&lan, "192.168.2.20".parse().unwrap()));
        assert!(is_allowed(&lan, "127.0.0.1".parse().unwrap()));
        assert!(is_allowed(&lan, "::ffff:127.0.0.1".parse().unwrap()));
        assert!(!is_allowed(&lan, "127.0.0.2".parse().unwrap()));
        assert!(is_allowed(&lan, "fe80::1".parse().unwrap()));
    }

    #[test]
    fn nothing_is_fetched_while_nothing_is_allowed_or_from_other_schemes() {
        assert_eq!(
            fetch(&[], "http://192.168.1.2/a.jpg", 10),
            Err(FetchError::NoneAllowed)
        );
        let all = nets(&["0.0.0.0/0"]);
        for url in ["ftp://192.168.1.2/a.jpg", "file:///etc/passwd", "not a url"] {
            assert_eq!(fetch(&all, url, 10), Err(FetchError::NotHttp), "{url}");
        }
    }
}
