//! The init command: the front-end's first command, which hands every node the routing
//! table (server id -> address), the tree shape and the connection policy.
//!
//! It travels down the tree like any command, tagged [`INIT_SERVICE`], its payload the `Init`
//! protobuf of `proto/sdm.proto`; each node reads it before it has a `Node`, connects to its
//! children, then lets the `Node` forward it. Every server answers `ready`, so the
//! acknowledgements merge on the way up.

use std::time::Duration;

use prost::Message as _;
use sdm_proto::IdSet;
use sdm_proto::pb;
use sdm_topology::{NodeId, Placement, PlacementError, Shape, ShapeError, Topology, Tree};

use crate::auth::SessionKey;
use crate::filters::Registry;
use crate::setup::ConnectPolicy;
use crate::template::MergeMode;
use crate::transport::{Address, AddressError};

/// The service tag of the init command ([`sdm_proto::Message::service`]): servers
/// recognise it by this tag, not by its payload.
pub const INIT_SERVICE: &str = "sdm.init";

/// What the init command carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitSpec {
    /// Number of servers.
    pub servers: u32,
    /// Tree shape (`binomial`, `kary:K`, …).
    pub topology: String,
    /// Address of each server; none for a server that never reported one.
    pub table: Table,
    /// Connection rounds per child.
    pub attempts: u32,
    /// Delay between rounds, ms.
    pub delay_ms: u64,
    /// Ports probed per round.
    pub probe_span: u16,
    /// Limit of one handshake, ms.
    pub handshake_ms: u64,
    /// How long interior nodes hold stdio lines to merge identical ones, ms (0: never).
    pub stdio_window_ms: u64,
    /// How servers send their programs' lines up (templated lines, or as they are).
    pub stdio_merge: MergeMode,
    /// Filter plugins (paths of shared libraries, see `sdm_filters::plugin`) every daemon
    /// loads before it serves, so commands can name their filters. A path must be valid on
    /// the daemon's host; a plugin that does not load there is logged, and ops naming its
    /// filter come back lost with the registry's "no such filter" error.
    pub filter_plugins: Vec<String>,
    /// Service plugins (paths of shared libraries implementing `sdm_service.h`) every
    /// server loads before it serves, so commands can name their services. The same rules
    /// as for [`InitSpec::filter_plugins`]: a path valid on the daemon's host; one that does
    /// not load is logged, and commands for its service get an error reply naming it.
    pub service_plugins: Vec<String>,
    /// Where the master accepts orphans re-attaching (it fills this in before passing the
    /// init down); `None` if it does not listen.
    pub master: Option<String>,
    /// Which ranks each server serves (the ids commands are addressed to).
    pub placement: Placement,
}

/// Why an init command is not valid: it says what was wrong (which field, which server).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InitError {
    /// The payload is not an `Init` protobuf (e.g. another command came first).
    #[error("init command: not an Init message ({0}); expected the init command first")]
    Decode(String),
    /// The payload does not decode as a protobuf `Init` (the decoder's error is the source).
    #[error("init command: not an Init message ({0}); expected the init command first")]
    NotInit(#[source] prost::DecodeError),
    /// A line of the routing table is not `ID ADDRESS` and a line break (1-based number).
    #[error("init command: table line {0} is not `ID ADDRESS` and a line break")]
    TableLine(usize),
    /// A line of the routing table names a server outside the tree or out of order.
    #[error("init command: table line {line} names server {id}: ids must ascend below {servers}")]
    TableOrder {
        /// 1-based line number.
        line: usize,
        /// The id it names.
        id: u32,
        /// Servers in the tree.
        servers: u32,
    },
    /// An address given for the table is empty or has white space in it.
    #[error("init command: address of server {0} is empty or has white space in it")]
    TableEntry(u32),
    /// `probe_span` does not fit a port count.
    #[error("init command: probe_span {0} is larger than 65535")]
    ProbeSpan(u32),
    /// The tree shape is not one sdm knows.
    #[error("init command: {0}")]
    Topology(#[from] ShapeError),
    /// The placement of ranks on servers is not valid.
    #[error("init command: {0}")]
    Placement(#[from] PlacementError),
    /// A server's address does not parse.
    #[error("init command: address of server {server}: {error}")]
    Address {
        /// The server whose address is bad.
        server: u32,
        /// What is wrong with it.
        error: AddressError,
    },
}

/// The routing table of the init command: server id -> the address it reported, for the
/// servers a node needs (the whole tree at the master; a subtree and its ancestors below,
/// [`InitSpec::for_child`]). It is kept as the text it travels as, a line `ID ADDRESS` per
/// entry in ascending id order, so a node takes the command without a string per server and
/// parses only the entries it uses: with a thousand servers, every node decoding every
/// address (twice) was a tenth of the tree's set-up, and sending every node the whole table
/// made the init's traffic grow as the square of the tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Table {
    /// `ID ADDRESS\n` per entry.
    text: String,
    len: usize,
}

impl Table {
    /// A table of the servers `0..` in order, each with its address or none (never
    /// reported); an address with white space in it is refused.
    pub fn new<S: AsRef<str>>(
        entries: impl IntoIterator<Item = Option<S>>,
    ) -> Result<Self, InitError> {
        let mut t = Table::default();
        for (id, e) in (0u32..).zip(entries) {
            let Some(e) = e else { continue };
            let e = e.as_ref();
            if !one_word(e) {
                return Err(InitError::TableEntry(id));
            }
            t.push(id, e);
        }
        Ok(t)
    }

    fn push(&mut self, id: u32, address: &str) {
        use std::fmt::Write as _;
        let _ = writeln!(self.text, "{id} {address}");
        self.len += 1;
    }

    /// A table from its wire text: entries below `servers`, ids ascending.
    fn from_text(text: String, servers: u32) -> Result<Self, InitError> {
        let mut len = 0;
        let mut last = None;
        for (line, entry) in (1usize..).zip(text.split_terminator('\n')) {
            let (id, _) = parse_entry(entry).ok_or(InitError::TableLine(line))?;
            if id >= servers || last.is_some_and(|l| l >= id) {
                return Err(InitError::TableOrder { line, id, servers });
            }
            last = Some(id);
            len += 1;
        }
        if !text.is_empty() && !text.ends_with('\n') {
            return Err(InitError::TableLine(len));
        }
        Ok(Self { text, len })
    }

    /// Entries (servers with an address here).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The entries, ids ascending.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &str)> {
        self.text.split_terminator('\n').filter_map(parse_entry)
    }

    /// Server `id`'s address, if it has one here.
    pub fn get(&self, id: u32) -> Option<&str> {
        self.iter()
            .take_while(|&(i, _)| i <= id)
            .find(|&(i, _)| i == id)
            .map(|(_, a)| a)
    }

    /// The entries whose ids `keep` accepts.
    pub fn subset(&self, mut keep: impl FnMut(u32) -> bool) -> Table {
        let mut t = Table::default();
        for (id, a) in self.iter().filter(|&(id, _)| keep(id)) {
            t.push(id, a);
        }
        t
    }
}

/// Whether `address` can be a table entry: one word, not empty.
fn one_word(address: &str) -> bool {
    !address.is_empty() && !address.contains(char::is_whitespace)
}

/// One line of the table's text (without its line break): the id and the address.
fn parse_entry(line: &str) -> Option<(u32, &str)> {
    let (id, address) = line.split_once(' ')?;
    Some((id.parse().ok()?, address)).filter(|_| one_word(address))
}

impl InitSpec {
    /// The protobuf form.
    pub fn to_pb(&self) -> pb::Init {
        pb::Init {
            servers: self.servers,
            topology: self.topology.clone(),
            table: self.table.text.clone(),
            attempts: self.attempts,
            delay_ms: self.delay_ms,
            probe_span: u32::from(self.probe_span),
            handshake_ms: self.handshake_ms,
            stdio_window_ms: self.stdio_window_ms,
            stdio_merge: u32::from(self.stdio_merge == MergeMode::Template),
            filter_plugins: self.filter_plugins.clone(),
            service_plugins: self.service_plugins.clone(),
            master: self.master.clone(),
            placement: self.placement.to_string(),
        }
    }

    /// The command payload: the encoded `Init` protobuf.
    pub fn to_payload(&self) -> bytes::Bytes {
        bytes::Bytes::from(self.to_pb().encode_to_vec())
    }

    /// Parses and checks a payload (table size, shape); the error names what was wrong.
    /// Addresses are parsed where they are used ([`InitSpec::addresses_of`]); the
    /// front-end checks them all before sending ([`InitSpec::addresses`]).
    pub fn from_payload(p: &[u8]) -> Result<Self, InitError> {
        let m = pb::Init::decode(p).map_err(InitError::NotInit)?;
        if m.topology.is_empty() {
            // Every init names its tree shape; bytes that decode to none are something else.
            return Err(InitError::Decode("it names no tree shape".into()));
        }
        let spec = InitSpec {
            servers: m.servers,
            topology: m.topology,
            table: Table::from_text(m.table, m.servers)?,
            attempts: m.attempts,
            delay_ms: m.delay_ms,
            probe_span: u16::try_from(m.probe_span)
                .map_err(|_| InitError::ProbeSpan(m.probe_span))?,
            handshake_ms: m.handshake_ms,
            stdio_window_ms: m.stdio_window_ms,
            stdio_merge: match m.stdio_merge {
                0 => MergeMode::Exact,
                1 => MergeMode::Template,
                other => {
                    return Err(InitError::Decode(format!(
                        "unknown stdio merge mode {other}"
                    )));
                }
            },
            filter_plugins: m.filter_plugins,
            service_plugins: m.service_plugins,
            master: m.master,
            placement: m.placement.parse()?,
        };
        if let Placement::Sets(s) = &spec.placement
            && s.len() != spec.servers as usize
        {
            return Err(InitError::Topology(ShapeError::Tree {
                origin: "of the init command".into(),
                message: format!(
                    "{} servers placed, {} in the command",
                    s.len(),
                    spec.servers
                ),
            }));
        }
        if let Some(m) = spec.shape()?.servers().filter(|&m| m != spec.servers) {
            return Err(InitError::Topology(ShapeError::Tree {
                origin: "of the init command".into(),
                message: format!("{m} servers in the tree, {} in the command", spec.servers),
            }));
        }
        Ok(spec)
    }

    /// The tree shape.
    pub fn shape(&self) -> Result<Shape, InitError> {
        Ok(self.topology.parse()?)
    }

    /// The tree: its shape over the servers, and the ranks each serves.
    pub fn tree(&self) -> Result<Tree, InitError> {
        let shape = self.shape()?;
        Ok(Tree::new(
            std::sync::Arc::from(shape.build(self.servers)),
            self.placement.clone(),
        ))
    }

    /// The routing table as one node needs it: the addresses of `ids` parsed (a node's
    /// children and ancestors), every other entry `None`. Parsing only these keeps a tree's
    /// start-up linear in its size (each node would otherwise parse every address).
    pub fn addresses_of(
        &self,
        ids: impl IntoIterator<Item = u32>,
    ) -> Result<Vec<Option<Address>>, InitError> {
        let mut wanted: Vec<u32> = ids.into_iter().collect();
        wanted.sort_unstable();
        self.parse_where(|id| wanted.binary_search(&id).is_ok())
    }

    /// The routing table, parsed.
    pub fn addresses(&self) -> Result<Vec<Option<Address>>, InitError> {
        self.parse_where(|_| true)
    }

    /// The addresses of the entries `keep` accepts, parsed, at their ids.
    fn parse_where(&self, keep: impl Fn(u32) -> bool) -> Result<Vec<Option<Address>>, InitError> {
        let mut out = vec![None; self.servers as usize];
        for (id, a) in self.table.iter() {
            if let Some(slot) = out.get_mut(id as usize)
                && keep(id)
            {
                *slot = Some(
                    a.parse()
                        .map_err(|error| InitError::Address { server: id, error })?,
                );
            }
        }
        Ok(out)
    }

    /// The init command as `child` takes it from the node `me` of `topo`: the table cut to
    /// the child's subtree (`share`, the ids it forwards to) and the ancestors it re-attaches
    /// to, `me` and up. Every node needs only these, so the command's size falls with depth
    /// instead of every node taking every address. (The rest is copied field by field: the
    /// whole table is not.) With `share` this server alone, it is what its own init
    /// service takes.
    pub fn for_child(&self, topo: &dyn Topology, me: NodeId, share: &IdSet) -> InitSpec {
        let mut up: Vec<u32> = Vec::new();
        let mut at = Some(me);
        while let Some(a) = at {
            up.extend(a.server());
            at = topo.parent(a);
        }
        InitSpec {
            servers: self.servers,
            topology: self.topology.clone(),
            table: self
                .table
                .subset(|id| share.contains(id) || up.contains(&id)),
            attempts: self.attempts,
            delay_ms: self.delay_ms,
            probe_span: self.probe_span,
            handshake_ms: self.handshake_ms,
            stdio_window_ms: self.stdio_window_ms,
            stdio_merge: self.stdio_merge,
            filter_plugins: self.filter_plugins.clone(),
            service_plugins: self.service_plugins.clone(),
            master: self.master.clone(),
            placement: self.placement.clone(),
        }
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn spec() -> InitSpec {
        InitSpec {
            servers: 2,
            topology: "binomial".into(),
            table: Table::new([Some("tcp://127.0.0.1:7000"), None]).unwrap(),
            attempts: 3,
            delay_ms: 100,
            probe_span: 1,
            handshake_ms: 1000,
            stdio_window_ms: 20,
            stdio_merge: MergeMode::Exact,
            filter_plugins: vec!["/opt/tool/libcsum.so".into()],
            service_plugins: vec!["/opt/tool/libchecksum.so".into()],
            master: Some("tcp://127.0.0.1:7100".into()),
            placement: Placement::Identity,
        }
    }

    #[test]
    fn round_trip_and_errors_name_what_was_wrong() {
        let spec = spec();
        assert_eq!(InitSpec::from_payload(&spec.to_payload()).unwrap(), spec);
        for junk in [&b"\xff\xff\xff"[..], b"", b"ping"] {
            assert!(
                matches!(
                    InitSpec::from_payload(junk),
                    Err(InitError::Decode(_) | InitError::NotInit(_))
                ),
                "{junk:?}"
            );
        }
        // The protobuf decoder's error is the source.
        let e = InitSpec::from_payload(b"\xff\xff\xff").unwrap_err();
        let source = std::error::Error::source(&e);
        assert!(
            source.is_some_and(|s| s.is::<prost::DecodeError>()),
            "{e:?}"
        );
        let mut bad = spec.clone();
        bad.servers = 1;
        bad.topology = "flat".into();
        bad.table = Table::new([None, Some("tcp://127.0.0.1:7001")]).unwrap();
        assert_eq!(
            InitSpec::from_payload(&bad.to_payload()),
            Err(InitError::TableOrder {
                line: 1,
                id: 1,
                servers: 1
            })
        );
        let mut bad = spec.clone();
        bad.topology = "tree".into();
        assert!(matches!(
            InitSpec::from_payload(&bad.to_payload()),
            Err(InitError::Topology(_))
        ));
        // A bad address is named where it is parsed: by the front-end checking the whole
        // table, and by the nodes that connect to it; the others never read it.
        let mut bad = spec.clone();
        bad.table = Table::new([Some("tcp://127.0.0.1:7000"), Some("nowhere")]).unwrap();
        let got = InitSpec::from_payload(&bad.to_payload()).unwrap();
        assert!(matches!(
            got.addresses(),
            Err(InitError::Address { server: 1, .. })
        ));
        assert!(matches!(
            got.addresses_of([0, 1]),
            Err(InitError::Address { server: 1, .. })
        ));
        let only0 = got.addresses_of([0]).unwrap();
        assert_eq!(only0.len(), 2);
        assert!(only0[0].is_some() && only0[1].is_none());
        let mut wide = spec.to_pb();
        wide.probe_span = 70_000;
        assert_eq!(
            InitSpec::from_payload(&wide.encode_to_vec()),
            Err(InitError::ProbeSpan(70_000))
        );
    }

    #[test]
    fn the_table_travels_as_lines_and_refuses_what_would_break_them() {
        let t = Table::new([Some("tcp://a:1"), None, Some("tcp://b:2")]).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t.get(0), Some("tcp://a:1"));
        assert_eq!(t.get(1), None);
        assert_eq!(t.get(2), Some("tcp://b:2"));
        assert_eq!(t.get(3), None);
        assert_eq!(
            t.iter().collect::<Vec<_>>(),
            [(0, "tcp://a:1"), (2, "tcp://b:2")]
        );
        assert!(Table::new::<&str>([]).unwrap().is_empty());
        for bad in ["tcp://b:2\ntcp://c:3", "tcp://b: 2", ""] {
            assert_eq!(
                Table::new([Some("tcp://a:1"), Some(bad)]),
                Err(InitError::TableEntry(1)),
                "{bad:?}"
            );
        }
        let decode = |table: &str| {
            let mut wire = spec().to_pb();
            wire.table = table.into();
            InitSpec::from_payload(&wire.encode_to_vec())
        };
        assert_eq!(
            decode("0 tcp://x:1\n1 tcp://y:2").unwrap_err(),
            InitError::TableLine(2)
        );
        assert_eq!(
            decode("0 tcp://x:1\nzero tcp://y:2\n").unwrap_err(),
            InitError::TableLine(2)
        );
        assert_eq!(
            decode("0 tcp://x:1\n1\n").unwrap_err(),
            InitError::TableLine(2)
        );
        assert_eq!(
            decode("1 tcp://x:1\n0 tcp://y:2\n").unwrap_err(),
            InitError::TableOrder {
                line: 2,
                id: 0,
                servers: 2
            }
        );
        let got = decode("1 tcp://127.0.0.1:9\n").unwrap();
        assert_eq!(got.addresses_of([1, 1, 0]).unwrap().len(), 2);
        assert!(got.addresses_of([1]).unwrap()[1].is_some());
    }

    #[test]
    fn a_child_takes_its_subtree_and_its_ancestors() {
        let n = 16;
        let spec = InitSpec {
            servers: n,
            topology: "binomial".into(),
            table: Table::new((0..n).map(|i| Some(format!("tcp://h:{}", 7000 + i)))).unwrap(),
            ..spec()
        };
        let topo = spec.shape().unwrap().build(n);
        let mut visited = 0;
        // Walk the tree as the init does, each node cutting the table for each child.
        let mut stack = vec![(NodeId::Master, spec.clone())];
        while let Some((me, at)) = stack.pop() {
            for c in topo.children(me) {
                let share = topo.subtree(c);
                let next = at.for_child(&*topo, me, &share);
                let mut up = Vec::new();
                let mut a = topo.parent(c);
                while let Some(p) = a {
                    up.extend(p.server());
                    a = topo.parent(p);
                }
                let ids: Vec<u32> = next.table.iter().map(|(id, _)| id).collect();
                let mut want: Vec<u32> = share.iter().chain(up).collect();
                want.sort_unstable();
                assert_eq!(ids, want, "{c}");
                for id in ids {
                    assert_eq!(next.table.get(id), spec.table.get(id));
                }
                let wire = InitSpec::from_payload(&next.to_payload()).unwrap();
                assert_eq!(wire, next);
                visited += 1;
                stack.push((c, wire));
            }
        }
        assert_eq!(visited, n);
    }

    fn any_spec() -> impl Strategy<Value = InitSpec> {
        let addr = prop_oneof![
            Just(None),
            (1u16..u16::MAX).prop_map(|p| Some(format!("tcp://10.0.0.1:{p}"))),
        ];
        (
            prop::collection::vec(addr, 0..40),
            prop_oneof![
                Just("binomial"),
                Just("flat"),
                Just("kary:3"),
                Just("knomial:4")
            ],
            (
                any::<u32>(),
                any::<u64>(),
                any::<u16>(),
                any::<u64>(),
                any::<u64>(),
            ),
            prop::collection::vec("[a-z/.]{0,12}", 0..3),
            prop::collection::vec("[a-z/.]{0,12}", 0..3),
            prop::option::of("tcp://[a-z]{1,8}:[1-9][0-9]{0,3}"),
        )
            .prop_map(
                |(
                    table,
                    shape,
                    (attempts, delay_ms, probe_span, handshake_ms, stdio_window_ms),
                    filter_plugins,
                    service_plugins,
                    master,
                )| {
                    let n = table.len() as u32;
                    InitSpec {
                        servers: n,
                        topology: shape.to_owned(),
                        table: Table::new(table).unwrap(),
                        attempts,
                        delay_ms,
                        probe_span,
                        handshake_ms,
                        stdio_window_ms,
                        stdio_merge: if attempts % 2 == 0 {
                            MergeMode::Template
                        } else {
                            MergeMode::Exact
                        },
                        filter_plugins,
                        service_plugins,
                        master,
                        placement: match stdio_window_ms % 3 {
                            0 => Placement::Identity,
                            1 => Placement::blocks((attempts % 7) + 2, n * 3),
                            _ => Placement::sets(
                                (0..n).map(|s| IdSet::range(s * 2..=s * 2 + 1)).collect(),
                            )
                            .unwrap(),
                        },
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn every_valid_spec_round_trips(spec in any_spec()) {
            prop_assert_eq!(InitSpec::from_payload(&spec.to_payload()).unwrap(), spec);
        }

        #[test]
        fn junk_is_refused_or_valid_never_a_panic(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(spec) = InitSpec::from_payload(&bytes) {
                prop_assert!(spec.table.iter().all(|(id, _)| id < spec.servers));
                prop_assert_eq!(InitSpec::from_payload(&spec.to_payload()).unwrap(), spec);
            }
        }
    }
}
