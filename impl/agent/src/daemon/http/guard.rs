//! Who may ask. The agent runs commands as root for whoever reaches its port, and a web page
//! the operator opens can reach a loopback port too: by a cross-site request (a form or a
//! `fetch` with `Content-Type: text/plain`, which needs no preflight), or by DNS rebinding
//! (a name of the attacker's that resolves to 127.0.0.1, so that the page's own origin is the
//! agent). Both are refused, ACLs or not: a request whose `Host` names neither a loopback
//! address, `localhost`, this machine's host name nor the agent's bind address (rebinding),
//! and a write whose `Origin` is not the agent's own (cross-site): one of its names at its
//! port, or the request's own `Host` (the web UI, served from the address it writes to). API clients (the CLI,
//! Nomad's Go and Python clients) send a `Host` that is the address they were given, and no
//! `Origin`.

use super::{error, ApiError, Method};
use std::net::{IpAddr, SocketAddr};

/// Refuses a request that a browser sent on a web page's behalf (see the module's text).
pub(super) fn browser_guard(
    bind: SocketAddr,
    method: &Method,
    host: Option<&str>,
    origin: Option<&str>,
) -> Result<(), ApiError> {
    if let Some(host) = host {
        if !allowed_host(bind, strip_port(host)) {
            return Err(error(
                403,
                format!(
                    "Forbidden: the request's Host {host:?} is neither a loopback name nor this \
                     agent's address (a web page cannot reach the agent through a name that \
                     resolves to it)"
                ),
            ));
        }
    }
    let write = !matches!(method, Method::Get | Method::Head | Method::Options);
    if let (true, Some(origin)) = (write, origin) {
        if !own_origin(bind, origin) && !origin_is_host(origin, host) {
            return Err(error(
                403,
                format!(
                    "Forbidden: a write from the web page at {origin:?}, not from this agent's \
                     own origin (a cross-site request)"
                ),
            ));
        }
    }
    Ok(())
}

/// `host` without its `:port` (IPv6 literals keep their brackets off).
fn strip_port(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split_once(']').map_or(rest, |(ip, _)| ip);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// A `Host` the agent answers: one of its own names, or any IP literal when it listens on
/// every address (an IP literal is no name a web page's author controls).
fn allowed_host(bind: SocketAddr, name: &str) -> bool {
    own_host(bind, name) || (bind.ip().is_unspecified() && name.parse::<IpAddr>().is_ok())
}

/// `localhost`, this machine's host name, a loopback address or the bind address.
fn own_host(bind: SocketAddr, name: &str) -> bool {
    name.eq_ignore_ascii_case("localhost")
        || name.eq_ignore_ascii_case(&host_name())
        || name
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback() || ip == bind.ip())
}

/// Whether `origin` (`scheme://host[:port]`) is the agent's own: one of its own hosts at
/// its port.
fn own_origin(bind: SocketAddr, origin: &str) -> bool {
    let Some((scheme, rest)) = origin.split_once("://") else {
        return false; // "null", among others: an opaque origin
    };
    let default_port = match scheme {
        "http" => 80,
        "https" => 443,
        _ => return false,
    };
    let port = if let Some(after) = rest.strip_prefix('[') {
        after.split_once("]:").map(|(_, port)| port)
    } else {
        rest.rsplit_once(':').map(|(_, port)| port)
    };
    let port = match port {
        None => default_port,
        Some(port) => match port.parse::<u16>() {
            Ok(port) => port,
            Err(_) => return false,
        },
    };
    // A web page's own host: never "any address", even when the agent listens on every
    // one (a page served from another machine's address is not the agent's).
    port == bind.port() && own_host(bind, strip_port(rest))
}

/// Whether `origin` is the request's own `Host` (which passed [`allowed_host`]): the page
/// was served from the address the browser sent this request to, the agent's — the web UI
/// opened at an agent bound to every address, through one of them.
fn origin_is_host(origin: &str, host: Option<&str>) -> bool {
    let Some(host) = host else {
        return false;
    };
    ["http://", "https://"].iter().any(|scheme| {
        origin
            .strip_prefix(scheme)
            .is_some_and(|rest| rest.eq_ignore_ascii_case(host))
    })
}

/// This machine's host name (a name of its own, not one a web page's author controls).
fn host_name() -> String {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(crate::daemon::hostname).clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loopback() -> SocketAddr {
        "127.0.0.1:4646".parse().unwrap()
    }

    #[test]
    fn api_clients_pass() {
        for host in [
            "127.0.0.1:4646",
            "localhost:4646",
            "LOCALHOST",
            "[::1]:4646",
            "127.0.0.2",
        ] {
            assert_eq!(
                browser_guard(loopback(), &Method::Put, Some(host), None),
                Ok(()),
                "{host}"
            );
        }
        assert_eq!(browser_guard(loopback(), &Method::Post, None, None), Ok(()));
        let own = Some("http://127.0.0.1:4646");
        assert_eq!(
            browser_guard(loopback(), &Method::Delete, Some("127.0.0.1:4646"), own),
            Ok(())
        );
    }

    #[test]
    fn a_rebound_name_is_refused_for_reads_too() {
        for method in [Method::Get, Method::Put] {
            let refused = browser_guard(loopback(), &method, Some("evil.example:4646"), None);
            let message = refused.unwrap_err().message;
            assert!(message.contains("\"evil.example:4646\""), "{message}");
        }
        // An address the agent is not bound to.
        assert!(browser_guard(loopback(), &Method::Get, Some("10.1.2.3:4646"), None).is_err());
    }

    #[test]
    fn a_cross_site_write_is_refused_and_a_read_is_not() {
        let host = Some("127.0.0.1:4646");
        for origin in [
            "http://evil.example",
            "null",
            "http://127.0.0.1:8080",
            "file://",
        ] {
            let refused = browser_guard(loopback(), &Method::Post, host, Some(origin));
            assert_eq!(refused.map_err(|e| e.status), Err(403), "{origin}");
        }
        let read = browser_guard(loopback(), &Method::Get, host, Some("http://evil.example"));
        assert_eq!(read, Ok(()));
    }

    #[test]
    fn an_agent_bound_to_every_address_takes_ip_literals_only() {
        let any: SocketAddr = "0.0.0.0:4646".parse().unwrap();
        assert_eq!(
            browser_guard(any, &Method::Get, Some("192.0.2.7:4646"), None),
            Ok(())
        );
        assert!(browser_guard(any, &Method::Get, Some("evil.example"), None).is_err());
        // A page served from some address at the agent's port is not the agent's origin.
        let page = Some("http://203.0.113.9:4646");
        assert!(browser_guard(any, &Method::Post, Some("127.0.0.1:4646"), page).is_err());
        let own = Some("http://127.0.0.1:4646");
        assert_eq!(
            browser_guard(any, &Method::Post, Some("127.0.0.1:4646"), own),
            Ok(())
        );
        // The web UI opened through one of its addresses writes through the same one.
        let ui = Some("http://192.0.2.7:4646");
        assert_eq!(
            browser_guard(any, &Method::Post, Some("192.0.2.7:4646"), ui),
            Ok(())
        );
        // Not through another, nor from a rebound name that matches its own Host.
        assert!(browser_guard(any, &Method::Post, Some("192.0.2.8:4646"), ui).is_err());
        let rebound = Some("http://evil.example:4646");
        let host = Some("evil.example:4646");
        assert!(browser_guard(any, &Method::Post, host, rebound).is_err());
    }
}
