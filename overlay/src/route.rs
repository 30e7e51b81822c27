//! Which local address reaches a host: the source address the kernel picks for the route
//! there, so the front-end and the daemons bind and advertise addresses other hosts reach.
//!
//! The kernel is asked with a UDP socket connected to the host (`connect` on UDP sends no
//! packet; it only chooses the route and the source address). Host texts are IP literals
//! (IPv6 with or without brackets) or names the system resolver knows.
//!
//! ```
//! use std::net::IpAddr;
//! use sdm_overlay::setup;
//!
//! // The route to this host's loopback leaves from loopback.
//! let src = setup::source_for("127.0.0.1").unwrap();
//! assert!(src.is_loopback());
//! // IPv6 hosts go into addresses in brackets.
//! let v6: IpAddr = "::1".parse().unwrap();
//! assert_eq!(setup::host_text(v6), "[::1]");
//! assert_eq!(setup::bracketed("fe80::1"), "[fe80::1]");
//! assert_eq!(setup::bracketed("node07"), "node07");
//! ```

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, ToSocketAddrs, UdpSocket};

/// Why no address could be found for a host, or why an address would not be reachable.
#[derive(Debug, thiserror::Error)]
#[error("{what}")]
pub struct RouteError {
    what: String,
    /// The resolver's or socket's error, when one caused it.
    #[source]
    source: Option<std::io::Error>,
}

impl RouteError {
    fn new(what: String) -> Self {
        Self { what, source: None }
    }
}

/// `host` without the brackets of an IPv6 literal (`[::1]` is `::1`).
pub fn unbracketed(host: &str) -> &str {
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// `host` as the host part of an address: an IPv6 literal in brackets, anything else as it is.
pub fn bracketed(host: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}

/// `ip` as the host part of an address (`10.0.0.1`, `[fe80::1]`).
pub fn host_text(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

/// The first address of `host`: an IP literal as it is, a name through the system resolver.
pub fn resolve(host: &str) -> Result<IpAddr, RouteError> {
    let bare = unbracketed(host);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(ip);
    }
    (bare, 0)
        .to_socket_addrs()
        .map_err(|e| RouteError {
            what: format!("cannot resolve host {host:?}: {e}"),
            source: Some(e),
        })?
        .next()
        .map(|a| a.ip())
        .ok_or_else(|| RouteError::new(format!("host {host:?} resolves to no address")))
}

/// This host's address on the route to `host` (the source address the kernel would use).
pub fn source_for(host: &str) -> Result<IpAddr, RouteError> {
    let ip = resolve(host)?;
    // The loopback address is its own route's source (a thousand local servers asked this
    // at once; a socket each was a measurable part of their start-up).
    if ip == Ipv4Addr::LOCALHOST || ip == Ipv6Addr::LOCALHOST {
        return Ok(ip);
    }
    let any: IpAddr = match ip {
        IpAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        IpAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    };
    let fail = |e: std::io::Error| RouteError {
        what: format!("no route to {host} ({ip}): {e}"),
        source: Some(e),
    };
    let sock = UdpSocket::bind((any, 0)).map_err(fail)?;
    // The discard port: connecting a UDP socket sends nothing, it only picks the route.
    sock.connect((ip, 9)).map_err(fail)?;
    Ok(sock.local_addr().map_err(fail)?.ip())
}

/// Whether `ip` belongs to this host (this network namespace): loopback, unspecified, or an
/// address a socket can bind.
pub(crate) fn is_local(ip: IpAddr) -> bool {
    ip.is_loopback() || ip.is_unspecified() || UdpSocket::bind((ip, 0)).is_ok()
}

/// Checks that a daemon advertising `advertised` can be reached by a parent when the
/// front-end is at `frontend` (a host): a loopback address is only good when the front-end,
/// and so the tree, is on this host. The error names both addresses and what to pass.
pub fn check_advertised(advertised: &str, frontend: &str) -> Result<(), RouteError> {
    let Ok(adv) = resolve(advertised) else {
        // A name only the parent's resolver knows: nothing to check here.
        return Ok(());
    };
    if !adv.is_loopback() {
        return Ok(());
    }
    let fe = resolve(frontend)?;
    if is_local(fe) {
        return Ok(());
    }
    Err(RouteError::new(format!(
        "would advertise the loopback address {advertised} while the front-end is at \
         {frontend}, on another host, so no parent could connect; pass --bind ADDR or \
         --advertise ADDR with an address of this host the others reach"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name the resolver refuses keeps the resolver's error as the source.
    #[test]
    fn resolver_error_is_the_source() {
        let e = resolve("no-such-host.invalid").unwrap_err();
        assert!(e.to_string().contains("cannot resolve host"), "{e}");
        let source = std::error::Error::source(&e);
        assert!(source.is_some_and(|s| s.is::<std::io::Error>()), "{e:?}");
    }

    #[test]
    fn brackets_come_and_go() {
        assert_eq!(unbracketed("[::1]"), "::1");
        assert_eq!(unbracketed("::1"), "::1");
        assert_eq!(unbracketed("10.0.0.1"), "10.0.0.1");
        assert_eq!(bracketed("::1"), "[::1]");
        assert_eq!(bracketed("[::1]"), "[::1]");
        assert_eq!(bracketed("h1"), "h1");
        assert_eq!(host_text("10.1.2.3".parse().unwrap()), "10.1.2.3");
        assert_eq!(host_text("fd00::7".parse().unwrap()), "[fd00::7]");
    }

    #[test]
    fn bracketed_ipv6_makes_addresses_that_parse() {
        let ip: IpAddr = "::1".parse().unwrap();
        let a: crate::transport::Address = format!("tcp://{}:4000", host_text(ip)).parse().unwrap();
        assert_eq!(a.to_string(), "tcp://[::1]:4000");
        assert_eq!(resolve("[::1]").unwrap(), ip);
    }

    #[test]
    fn loopback_routes_from_loopback() {
        let here: IpAddr = Ipv4Addr::LOCALHOST.into();
        assert_eq!(source_for("127.0.0.1").unwrap(), here);
        assert!(source_for("localhost").unwrap().is_loopback());
        // Another loopback address asks the kernel (no shortcut).
        assert!(source_for("127.0.0.2").unwrap().is_loopback());
        // IPv6 loopback where this host has it (a container may turn IPv6 off).
        if UdpSocket::bind("[::1]:0").is_ok() {
            assert_eq!(
                source_for("[::1]").unwrap(),
                "::1".parse::<IpAddr>().unwrap()
            );
        }
    }

    #[test]
    fn loopback_is_fine_for_a_local_front_end_only() {
        check_advertised("127.0.0.1", "127.0.0.1").unwrap();
        check_advertised("[::1]", "localhost").unwrap();
        // TEST-NET-1 (RFC 5737) is never an address of this host.
        let e = check_advertised("127.0.0.1", "192.0.2.1").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("127.0.0.1") && msg.contains("192.0.2.1"),
            "{msg}"
        );
        assert!(msg.contains("--advertise"), "{msg}");
        check_advertised("192.0.2.7", "192.0.2.1").unwrap();
    }

    #[test]
    fn unknown_hosts_are_named() {
        let e = resolve("no-such-host.invalid").unwrap_err().to_string();
        assert!(e.contains("no-such-host.invalid"), "{e}");
    }
}
