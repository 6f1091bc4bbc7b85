//! Host names and origins: which `Host` the dashboard answers to (against DNS rebinding) and
//! which `Origin` counts as its own pages (against cross-site actions).

use axum::http::header;
use axum::http::request::Parts;

/// The host and port the request was addressed to: the request target's authority (HTTP/2,
/// or an absolute URI), else the `Host` header.
pub(crate) fn request_host(parts: &Parts) -> Option<String> {
    if let Some(authority) = parts.uri.authority() {
        return Some(authority.as_str().to_owned());
    }
    parts
        .headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// `host[:port]` (`[v6]:port` for IPv6) as the lower-case host and the port, if any; `None`
/// when it is no host.
pub(crate) fn split_host(authority: &str) -> Option<(String, Option<u16>)> {
    let authority = authority.trim();
    // Userinfo never belongs in a Host header; refuse rather than guess.
    if authority.is_empty() || authority.contains(['@', '/', '\\', ' ']) {
        return None;
    }
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (format!("[{inside}]"), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_owned(), Some(p)),
            None => (authority.to_owned(), None),
        }
    };
    let port = match port {
        Some(p) => Some(p.parse::<u16>().ok()?),
        None => None,
    };
    let mut host = host.to_ascii_lowercase();
    // `localhost.` is `localhost`.
    if host.ends_with('.') && host.len() > 1 {
        host.pop();
    }
    if host.is_empty() || (host.contains(':') && !host.starts_with('[')) {
        return None;
    }
    Some((host, port))
}

/// Whether the dashboard answers to `host` (lower case, no port): localhost, an IP address,
/// or a configured name.
pub(crate) fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let ip = host.parse::<std::net::Ipv4Addr>().is_ok()
        || host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .is_some_and(|h| h.parse::<std::net::Ipv6Addr>().is_ok());
    ip || host == "localhost" || host.ends_with(".localhost") || configured(host, allowed)
}

/// Whether `host` is one of [`Options::allowed_hosts`](crate::Options::allowed_hosts)
/// (`.example.com`: it or a name under it).
fn configured(host: &str, allowed: &[String]) -> bool {
    allowed.iter().any(|a| match a.strip_prefix('.') {
        Some(domain) => host == domain || host.ends_with(a.as_str()),
        None => host == a,
    })
}

/// Whether an action's `Origin` is the dashboard itself: the host and port the request was
/// addressed to (a port left out is the scheme's default), or a configured host.
pub(crate) fn origin_allowed(origin: &str, own: Option<&str>, allowed: &[String]) -> bool {
    let Some((scheme, authority)) = origin.trim().split_once("://") else {
        return false; // `null` (a sandboxed page, a redirect from elsewhere) or garbage
    };
    let Some((host, port)) = split_host(authority) else {
        return false;
    };
    if configured(&host, allowed) {
        return true;
    }
    let Some((own_host, own_port)) = own.and_then(split_host) else {
        return false;
    };
    let default = match scheme.to_ascii_lowercase().as_str() {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    };
    let same_port = match (own_port, port) {
        (Some(a), Some(b)) => a == b,
        (Some(a), None) | (None, Some(a)) => Some(a) == default,
        (None, None) => true,
    };
    host == own_host && same_port
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::Options;

    #[test]
    fn hosts_split_into_name_and_port() {
        let split = |a: &str| split_host(a);
        let host = |h: &str, port: Option<u16>| Some((h.to_owned(), port));
        assert_eq!(split("LocalHost:8080"), host("localhost", Some(8080)));
        assert_eq!(split("[::1]:80"), host("[::1]", Some(80)));
        assert_eq!(split("[::1]"), host("[::1]", None));
        assert_eq!(split("dq.example."), host("dq.example", None));
        assert_eq!(split("a:b:c"), None);
        assert_eq!(split("evil.example:99999"), None);
        assert_eq!(split("user@evil.example"), None);
        assert_eq!(split(""), None);
    }

    #[test]
    fn only_loopback_names_ip_addresses_and_configured_hosts_are_answered() {
        let none: &[String] = &[];
        for ok in [
            "localhost",
            "app.localhost",
            "127.0.0.1",
            "10.1.2.3",
            "[::1]",
            "[fe80::1]",
        ] {
            assert!(host_allowed(ok, none), "{ok}");
        }
        for refused in [
            "evil.example",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "[evil]",
        ] {
            assert!(!host_allowed(refused, none), "{refused}");
        }
        let options = Options::new().allowed_hosts(["DQ.Internal.Example:8443", ".corp.example"]);
        let allowed = &options.allowed_hosts;
        assert!(host_allowed("dq.internal.example", allowed));
        assert!(host_allowed("corp.example", allowed));
        assert!(host_allowed("dq.eu.corp.example", allowed));
        assert!(!host_allowed("evilcorp.example", allowed));
    }

    #[test]
    fn an_origin_must_be_the_host_the_request_was_sent_to() {
        let none: &[String] = &[];
        assert!(origin_allowed(
            "http://127.0.0.1:8080",
            Some("127.0.0.1:8080"),
            none
        ));
        assert!(origin_allowed(
            "https://dq.example",
            Some("dq.example"),
            none
        ));
        assert!(origin_allowed(
            "http://dq.example",
            Some("dq.example:80"),
            none
        ));
        assert!(!origin_allowed(
            "http://127.0.0.1:3000",
            Some("127.0.0.1:8080"),
            none
        ));
        assert!(!origin_allowed(
            "http://evil.example",
            Some("127.0.0.1:8080"),
            none
        ));
        assert!(!origin_allowed("null", Some("127.0.0.1:8080"), none));
        assert!(!origin_allowed(
            "https://dq.example:8443",
            Some("dq.example"),
            none
        ));
        let behind_proxy = Options::new().allowed_hosts(["dq.example"]).allowed_hosts;
        assert!(origin_allowed(
            "https://dq.example",
            Some("127.0.0.1:8080"),
            &behind_proxy
        ));
    }
}
