//! The OMIS request and reply trees (OMIS 1.0, sections 5.2 and 7): values, node lists, basic
//! requests, composite requests (event + action list) and replies.

use crate::status::{ErrorKind, ServiceError};
use sdm_proto::IdSet;

/// One parameter or result value (OMIS 1.0 section 7: `parameter`).
///
/// OMIS specifies 32-bit integers; we store `i64` so that 64-bit addresses and sizes fit, and
/// refuse anything outside `i64` when parsing.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// An integer: `42`, `-7`, `0x1F`.
    Int(i64),
    /// A double precision float: `1.5`, `-2e3`, `.5`; also `inf`, `-inf` and `nan`.
    Float(f64),
    /// A quoted string with C escapes: `"a\"b\n"`.
    Str(String),
    /// An untyped list: `[1,[2,"a"],3.0]`.
    List(Vec<Value>),
    /// `$n`: the event's `n`-th output parameter; `$0` is the node the event occurred on.
    Ref(u32),
}

/// One entry of a receiver node list (OMIS 1.0 section 7: `node ::= integer | '$' integer`).
///
/// [`Nodes`] stores entries in a compact form; this enum is the per-entry view of it, see
/// [`Nodes::from_nodes`] and [`Nodes::nodes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Node {
    /// A node number.
    Id(u32),
    /// `$n`: a node number taken from the event's `n`-th output parameter (`$0`: the node the
    /// event occurred on).
    Ref(u32),
}

/// A receiver node list: `[]` (all nodes), `[1]`, `[0-1023]`, `[0-3,7,$0]`.
///
/// Node numbers live in an [`IdSet`] so that a list of a million nodes stays a handful of
/// ranges: it parses and prints in range form. `$n` references are kept apart, in the order
/// written. Order among node numbers, and duplicates, carry no meaning in OMIS (the request
/// goes to every listed node once) and are not kept.
///
/// Invariant: `all` is `true` exactly when the list was `[]`, and then `ids` and `refs` are
/// empty. A value with `all == false` and nothing in `ids` or `refs` names no node at all;
/// OMIS cannot write that, and it prints as `[]` (which reads back as "all").
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Nodes {
    /// The node numbers listed.
    pub ids: IdSet,
    /// The `$n` references listed, in the order written.
    pub refs: Vec<u32>,
    /// `true` for `[]`: the request is broadcast to all nodes.
    pub all: bool,
}

impl Nodes {
    /// `[]`: every node.
    pub fn all() -> Self {
        Self {
            ids: IdSet::new(),
            refs: Vec::new(),
            all: true,
        }
    }

    /// The node numbers in `ids`, no references.
    pub fn ids(ids: IdSet) -> Self {
        Self {
            ids,
            refs: Vec::new(),
            all: false,
        }
    }

    /// A list built from single entries; no entries gives [`Nodes::all`].
    pub fn from_nodes(nodes: impl IntoIterator<Item = Node>) -> Self {
        let mut out = Self::ids(IdSet::new());
        for n in nodes {
            match n {
                Node::Id(id) => {
                    out.ids.insert(id);
                }
                Node::Ref(r) => out.refs.push(r),
            }
        }
        if out.ids.is_empty() && out.refs.is_empty() {
            out.all = true;
        }
        out
    }

    /// `true` if this is `[]` (all nodes), also for the unwritable "nothing listed" value.
    pub fn is_all(&self) -> bool {
        self.all || (self.ids.is_empty() && self.refs.is_empty())
    }

    /// Every entry one by one: node numbers ascending, then references in order. Empty for
    /// `[]`. This expands ranges, so it is as long as the list; prefer `ids` for big lists.
    pub fn nodes(&self) -> Vec<Node> {
        self.ids
            .iter()
            .map(Node::Id)
            .chain(self.refs.iter().copied().map(Node::Ref))
            .collect()
    }
}

/// A basic service request: `request_id receiver_nodes service_name(parameters)`, e.g.
/// `123 [1] process_info([231,345,654], 9)`.
#[derive(Debug, Clone, PartialEq)]
pub struct BasicRequest {
    /// The tool's request identifier, sent back with every reply to this request.
    pub id: i64,
    /// Where the request goes.
    pub nodes: Nodes,
    /// The service name (a C identifier), e.g. `stop` or `pe_start_integrator`.
    pub service: String,
    /// The input parameters.
    pub params: Vec<Value>,
}

/// The actions of a request: executed in parallel (`a, b, c`) or in sequence (`a; b; c`).
///
/// A single action is `Par(vec![a])`. Lists are never empty when parsed; an empty list prints
/// as nothing, which does not parse back.
#[derive(Debug, Clone, PartialEq)]
pub enum ActionList {
    /// `a; b; c`: one after the other, even across nodes.
    Seq(Vec<BasicRequest>),
    /// `a, b, c` (or a single action): in any order or at once.
    Par(Vec<BasicRequest>),
}

impl ActionList {
    /// The actions, whichever the kind.
    pub fn actions(&self) -> &[BasicRequest] {
        match self {
            ActionList::Seq(v) | ActionList::Par(v) => v,
        }
    }
}

/// A (possibly composite) service request: `[event ':'] action_list`, e.g.
/// `15 [1] user_event(5): 16 [1] print([$1]), 17 [1] stop($1)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The event definition (a basic asynchronous service), if any. Without one, the
    /// actions run at once.
    pub event: Option<BasicRequest>,
    /// What to do (at once, or each time the event occurs).
    pub actions: ActionList,
}

/// A basic reply: `request_id sender_nodes service_name(results)`, e.g. `1 [0-1023] stop(0)`.
///
/// `senders` holds every node that produced these results (OMIS lets identical results from
/// several nodes be unified into one reply, see [`unify`](super::unify)).
#[derive(Debug, Clone, PartialEq)]
pub struct BasicReply {
    /// The request identifier of the basic request answered.
    pub id: i64,
    /// The nodes that sent these results.
    pub senders: IdSet,
    /// The service that was requested.
    pub service: String,
    /// The result parameters (for a failure, the message saying why).
    pub results: Vec<Value>,
    /// `Some` when the service failed: what kind of failure, printed after the service
    /// name (`stop!no_process("…")`).
    pub failure: Option<ErrorKind>,
}

impl BasicReply {
    /// The reply to request `id` for `service` (no senders: the tool fills them in): its
    /// results, or the failure's kind and its message with the errors underneath.
    pub fn answer(id: i64, service: &str, outcome: Result<Vec<Value>, ServiceError>) -> Self {
        let (results, failure) = match outcome {
            Ok(v) => (v, None),
            Err(e) => (vec![Value::Str(e.full_message())], Some(e.kind())),
        };
        Self {
            id,
            senders: IdSet::new(),
            service: service.to_owned(),
            results,
            failure,
        }
    }

    /// Whether the service failed (the reply carries an [`ErrorKind`]).
    pub fn is_failure(&self) -> bool {
        self.failure.is_some()
    }
}

/// A reply: one or more basic replies separated by `;`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Reply(pub Vec<BasicReply>);
