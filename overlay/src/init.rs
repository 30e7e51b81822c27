//! The init command: the front-end's first command, which hands every node the routing
//! table (server id -> address), the tree shape and the connection policy.
//!
//! It travels down the tree like any command (its payload is `sdm-init ` + JSON); each node
//! reads it before it has a `Node`, connects to its children, then lets the `Node` forward
//! it. Every server answers `ready`, so the acknowledgements merge on the way up.

use std::time::Duration;

use crate::auth::SessionKey;
use crate::filters::Registry;
use crate::setup::ConnectPolicy;
use crate::transport::Address;
use sdm_topology::Shape;
use serde::{Deserialize, Serialize};

/// Payload prefix of the init command.
pub const INIT_PREFIX: &str = "sdm-init ";

/// The service tag of the init command ([`sdm_proto::Message::service`]): servers
/// recognise it by this tag, not by its payload.
pub const INIT_SERVICE: &str = "sdm.init";

/// What the init command carries.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct InitSpec {
    /// Number of servers.
    pub servers: u32,
    /// Tree shape (`binomial`, `kary:K`, …).
    pub topology: String,
    /// Address of each server; `null` for a server that never reported one.
    pub table: Vec<Option<String>>,
    /// Connection rounds per child.
    pub attempts: u32,
    /// Delay between rounds, ms.
    pub delay_ms: u64,
    /// Ports probed per round.
    pub probe_span: u16,
    /// Limit of one handshake, ms.
    pub handshake_ms: u64,
    /// How long interior nodes hold stdio lines to merge identical ones, ms (0: never).
    #[serde(default)]
    pub stdio_window_ms: u64,
    /// Filter plugins (paths of shared libraries, see `sdm_filters::plugin`) every daemon
    /// loads before it serves, so commands can name their filters. A path must be valid on
    /// the daemon's host; a plugin that does not load there is logged, and ops naming its
    /// filter come back lost with the registry's "no such filter" error.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub filter_plugins: Vec<String>,
    /// Service plugins (paths of shared libraries implementing `sdm_service.h`) every
    /// server loads before it serves, so commands can name their services. The same rules
    /// as for [`InitSpec::filter_plugins`]: a path valid on the daemon's host; one that does
    /// not load is logged, and commands for its service get an error reply naming it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_plugins: Vec<String>,
    /// Where the master accepts orphans re-attaching (it fills this in before passing the
    /// init down); `None` if it does not listen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub master: Option<String>,
}

impl InitSpec {
    /// The command payload.
    pub fn to_payload(&self) -> String {
        format!(
            "{INIT_PREFIX}{}",
            serde_json::to_string(self).expect("serializable")
        )
    }

    /// Parses a payload; the error names what was wrong.
    pub fn from_payload(p: &[u8]) -> Result<Self, String> {
        let text = std::str::from_utf8(p).map_err(|_| "init command is not UTF-8".to_owned())?;
        let json = text
            .strip_prefix(INIT_PREFIX)
            .ok_or_else(|| format!("expected the init command first, got {:?}", truncate(text)))?;
        let spec: InitSpec =
            serde_json::from_str(json).map_err(|e| format!("init command: {e}"))?;
        if spec.table.len() != spec.servers as usize {
            return Err(format!(
                "init command: table has {} entries for {} servers",
                spec.table.len(),
                spec.servers
            ));
        }
        spec.shape()?;
        spec.addresses()?;
        Ok(spec)
    }

    /// The tree shape.
    pub fn shape(&self) -> Result<Shape, String> {
        self.topology
            .parse()
            .map_err(|e| format!("init command: {e}"))
    }

    /// The routing table, parsed.
    pub fn addresses(&self) -> Result<Vec<Option<Address>>, String> {
        self.table
            .iter()
            .enumerate()
            .map(|(i, a)| match a {
                None => Ok(None),
                Some(a) => a
                    .parse()
                    .map(Some)
                    .map_err(|e| format!("init command: address of server {i}: {e}")),
            })
            .collect()
    }

    /// The filter registry of a daemon: the built-ins plus every plugin of
    /// [`filter_plugins`](Self::filter_plugins) that loads (the others are logged).
    pub fn registry(&self) -> Registry {
        let mut r = Registry::new();
        for p in &self.filter_plugins {
            match r.load_plugin(p) {
                Ok(name) => tracing::debug!(plugin = %p, "loaded filter {name:?}"),
                Err(e) => tracing::warn!(plugin = %p, "{e}"),
            }
        }
        r
    }

    /// The connection policy, with the session key.
    pub fn policy(&self, key: SessionKey) -> ConnectPolicy {
        ConnectPolicy {
            attempts: self.attempts,
            delay: Duration::from_millis(self.delay_ms),
            probe_span: self.probe_span,
            handshake_timeout: Duration::from_millis(self.handshake_ms),
            ..ConnectPolicy::new(key)
        }
    }
}

fn truncate(s: &str) -> String {
    s.chars().take(40).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let spec = InitSpec {
            servers: 2,
            topology: "binomial".into(),
            table: vec![Some("tcp://127.0.0.1:7000".into()), None],
            attempts: 3,
            delay_ms: 100,
            probe_span: 1,
            handshake_ms: 1000,
            stdio_window_ms: 20,
            filter_plugins: vec!["/opt/tool/libcsum.so".into()],
            service_plugins: vec!["/opt/tool/libchecksum.so".into()],
            master: Some("tcp://127.0.0.1:7100".into()),
        };
        let back = InitSpec::from_payload(spec.to_payload().as_bytes()).unwrap();
        assert_eq!(back, spec);
        assert!(
            InitSpec::from_payload(b"ping")
                .unwrap_err()
                .contains("init command first")
        );
        let mut bad = spec.clone();
        bad.servers = 3;
        assert!(
            InitSpec::from_payload(bad.to_payload().as_bytes())
                .unwrap_err()
                .contains("2 entries")
        );
        let mut bad = spec;
        bad.topology = "tree".into();
        assert!(InitSpec::from_payload(bad.to_payload().as_bytes()).is_err());
    }
}
