//! What every dashboard request passes before its page. It must name the
//! appliance in `Host` (a DNS-rebinding page, whose name points at the
//! appliance, is refused); it comes over HTTPS where HTTPS is on (plain
//! HTTP is redirected, so passwords and cookies never cross the LAN in
//! clear); and a POST's `Origin`, where a browser sends one, is the
//! dashboard's own. The API is not gated here: its key is a header no other
//! site's page can send without the appliance's leave (CORS).

use super::respond::{body, header, Body};
use super::session::{header_value, is_https};
use crate::app::AppState;
use crate::pages::{message_page, Nav};
use std::net::IpAddr;
use tiny_http::{Method, Request};

/// `Some(answer)` where the request may not reach the dashboard as it is.
pub fn check(state: &AppState, method: &Method, request: &Request) -> Option<Body> {
    let host = header_value(request, "Host");
    if let Some(host) = host {
        if !allowed_host(state, host) {
            return Some(super::dashboard::html(
                421,
                message_page(
                    "Unknown address",
                    &Nav::Anonymous,
                    "This appliance answers only to its own names and addresses. Open it by its \
                     address or NAME.local, or add the name you use to allowed_hosts in cutout.toml.",
                ),
            ));
        }
    }
    if let Some(tls) = state.tls.as_ref().filter(|_| !request.secure()) {
        let name = host.map_or_else(|| tls.addr.ip().to_string(), |h| split_port(h).0.to_owned());
        let name = if name.contains(':') {
            format!("[{name}]")
        } else {
            name
        };
        // A setup link's token came over the LAN in clear: it is not sent
        // on, and the page over HTTPS asks for the link the log printed.
        let target = match request.url() {
            url if url.starts_with("/setup?") => "/setup",
            url => url,
        };
        let location = format!("https://{name}:{}{target}", tls.addr.port());
        return Some(
            body(Vec::new())
                .with_status_code(307)
                .with_header(header("Location", location))
                .with_header(header("Cache-Control", "no-store")),
        );
    }
    if *method == Method::Post && !same_origin(request, host) {
        return Some(super::dashboard::html(
            403,
            message_page(
                "Form from another site",
                &Nav::Anonymous,
                "This form was sent from a page that is not this appliance's. Open the dashboard \
                 at the appliance's address and try again.",
            ),
        ));
    }
    None
}

/// A browser's `Origin` on a POST must be this dashboard's own; a client
/// that sends none (not a browser) is held to the CSRF token alone.
fn same_origin(request: &Request, host: Option<&str>) -> bool {
    let Some(origin) = header_value(request, "Origin") else {
        return true;
    };
    let scheme = if is_https(request) { "https" } else { "http" };
    host.is_some_and(|host| origin.eq_ignore_ascii_case(&format!("{scheme}://{host}")))
}

/// `Host` names this appliance: one of `dashboard_names` (localhost, its
/// host name bare and `.local`, the configured ones) or one of its own
/// addresses.
fn allowed_host(state: &AppState, host: &str) -> bool {
    let name = split_port(host)
        .0
        .trim_end_matches('.')
        .to_ascii_lowercase();
    if state.dashboard_names.contains(&name) {
        return true;
    }
    match name.parse::<IpAddr>() {
        Ok(ip) => ip.is_loopback() || is_own_address(ip),
        Err(_) => false,
    }
}

/// Whether `ip` is one of this machine's addresses now (they change with
/// DHCP, so they are asked for each time, not remembered).
fn is_own_address(ip: IpAddr) -> bool {
    if_addrs::get_if_addrs().is_ok_and(|interfaces| interfaces.iter().any(|i| i.ip() == ip))
}

/// `host[:port]` or `[v6][:port]` into the name and what follows it.
fn split_port(host: &str) -> (&str, &str) {
    if let Some(rest) = host.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((ip, port)) => (ip, port),
            None => (host, ""),
        };
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => (name, port),
        _ => (host, ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_is_split_from_names_and_addresses() {
        assert_eq!(split_port("booth.local:8443").0, "booth.local");
        assert_eq!(split_port("booth.local").0, "booth.local");
        assert_eq!(split_port("[::1]:8080").0, "::1");
        assert_eq!(split_port("[fe80::1]").0, "fe80::1");
        assert_eq!(split_port("192.168.1.5:80").0, "192.168.1.5");
    }

    #[test]
    fn the_machines_own_addresses_are_its_names() {
        assert!(is_own_address(IpAddr::from([127, 0, 0, 1])));
        assert!(!is_own_address(IpAddr::from([203, 0, 113, 77])));
    }
}
