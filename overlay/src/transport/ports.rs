//! Port ranges: where a site's firewall lets the tree listen (`--port-range 40000-40999`),
//! and binding the first free port of a range.
//!
//! Every listener of a tree (the front-end's, the master's for re-attaching orphans, each
//! server's) can be held to one range; outgoing connections use the system's ephemeral
//! ports, as any client does.

use std::fmt;
use std::io;
use std::str::FromStr;

use super::{Address, Listener, Transport};

/// An inclusive range of ports, `first-last` (or one port).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    first: u16,
    last: u16,
}

/// A port range that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("port range {text:?}: {why} (expected FIRST-LAST, e.g. 40000-40999)")]
pub struct PortRangeError {
    text: String,
    why: &'static str,
}

impl PortRange {
    /// `first..=last`; `None` if empty or starting at port 0.
    pub fn new(first: u16, last: u16) -> Option<Self> {
        (first > 0 && first <= last).then_some(Self { first, last })
    }

    /// The first port.
    pub fn first(&self) -> u16 {
        self.first
    }

    /// The last port.
    pub fn last(&self) -> u16 {
        self.last
    }

    /// Number of ports.
    pub fn len(&self) -> u32 {
        u32::from(self.last - self.first) + 1
    }

    /// Never empty: there is at least one port.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The ports in the order a node starting at offset `start` tries them: from
    /// `first + start % len` to the end, then from `first` (so nodes on one host with
    /// different offsets try different ports first).
    pub fn ports_from(&self, start: u32) -> impl Iterator<Item = u16> + '_ {
        let len = self.len();
        (0..len).map(move |k| self.first + ((start % len + k) % len) as u16)
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

impl FromStr for PortRange {
    type Err = PortRangeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why| PortRangeError {
            text: s.to_owned(),
            why,
        };
        let (a, b) = s.split_once('-').unwrap_or((s, s));
        let port = |p: &str| {
            p.trim()
                .parse::<u16>()
                .map_err(|_| err("not a port number"))
        };
        let (first, last) = (port(a)?, port(b)?);
        if first == 0 {
            return Err(err("port 0 is not a port to listen on"));
        }
        Self::new(first, last).ok_or_else(|| err("the first port is above the last"))
    }
}

/// Binds `scheme://host:PORT` on the first free port of `range`, trying them in the order
/// of [`PortRange::ports_from`]`(start)`; without a range, an ephemeral port. A port in use
/// moves on to the next; any other error, or every port taken, is returned, naming the
/// range.
pub async fn bind_in_range(
    transport: &dyn Transport,
    scheme: &str,
    host: &str,
    range: Option<PortRange>,
    start: u32,
) -> io::Result<Box<dyn Listener>> {
    let addr = |port: u16| -> io::Result<Address> {
        format!("{scheme}://{host}:{port}")
            .parse()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
    };
    let Some(range) = range else {
        return transport.bind(&addr(0)?).await;
    };
    let mut last = None;
    for port in range.ports_from(start) {
        match transport.bind(&addr(port)?).await {
            Ok(l) => return Ok(l),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        format!(
            "no free port in {range} on {host} ({} ports tried; last: {})",
            range.len(),
            last.map(|e| e.to_string()).unwrap_or_default()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::{TcpTransport, TransportConfig};

    #[test]
    fn ranges_parse_and_refuse_with_the_reason() {
        let r: PortRange = "40000-40009".parse().unwrap();
        assert_eq!((r.first(), r.last(), r.len()), (40000, 40009, 10));
        assert_eq!(r.to_string(), "40000-40009");
        assert_eq!("5000".parse::<PortRange>().unwrap().len(), 1);
        for (bad, why) in [
            ("9-3", "the first port is above the last"),
            ("0-10", "port 0 is not a port to listen on"),
            ("x", "not a port number"),
            ("1-70000", "not a port number"),
        ] {
            let e = bad.parse::<PortRange>().unwrap_err().to_string();
            assert!(e.contains(why) && e.contains(bad), "{e}");
        }
    }

    #[test]
    fn every_port_is_tried_once_from_the_offset() {
        let r = PortRange::new(100, 103).unwrap();
        assert_eq!(r.ports_from(0).collect::<Vec<_>>(), [100, 101, 102, 103]);
        assert_eq!(r.ports_from(6).collect::<Vec<_>>(), [102, 103, 100, 101]);
    }

    #[tokio::test]
    async fn binding_skips_taken_ports_and_names_a_full_range() {
        let t = TcpTransport::new(&TransportConfig::default());
        // Find two adjacent free ports by holding an ephemeral one and its neighbour.
        let (a, b) = loop {
            let l = t.bind(&"tcp://127.0.0.1:0".parse().unwrap()).await.unwrap();
            let port: u16 = l
                .local_addr()
                .target()
                .rsplit_once(':')
                .unwrap()
                .1
                .parse()
                .unwrap();
            if port < u16::MAX
                && let Ok(m) = t
                    .bind(&format!("tcp://127.0.0.1:{}", port + 1).parse().unwrap())
                    .await
            {
                break ((l, port), (m, port + 1));
            }
        };
        let range = PortRange::new(a.1, b.1).unwrap();
        let err = bind_in_range(&t, "tcp", "127.0.0.1", Some(range), 0)
            .await
            .err()
            .expect("every port of the range is taken");
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        assert!(
            err.to_string()
                .contains(&format!("no free port in {range}")),
            "{err}"
        );
        // Free the second: it is found, from either offset.
        let b_port = b.1;
        drop(b.0);
        let l = bind_in_range(&t, "tcp", "127.0.0.1", Some(range), 0)
            .await
            .unwrap();
        assert_eq!(l.local_addr().target(), format!("127.0.0.1:{b_port}"));
        drop(a);
    }
}
