//! Runs a [`Node`] over real links with tokio: one task per node reads and writes all its
//! links itself, keeps one timer for the node's deadline, and hands commands for this
//! server to a handler ([`run_node`]). Links come from [`crate::setup`].
//!
//! - `turn`: the node driver (a turn: read what woke the task, hand it to the node, write
//!   what the node asked for);
//! - `link`: a link's framed halves and its queues, control ahead of bulk;
//! - `wake`: which sources woke the task, and the handlers' replies waiting for it.

use std::sync::Arc;

use bytes::Bytes;
use sdm_proto::{IdSet, Kind, Status};
use sdm_topology::NodeId;
use tokio::sync::mpsc;

use crate::error::LinkError;
use crate::node::Node;
use crate::transport::Link;
use wake::Inbox;

mod link;
mod turn;
mod wake;

/// A command delivered to this server, with the means to answer it.
#[derive(Debug)]
pub struct Delivery {
    /// Operation id.
    pub op: u64,
    /// This server's ranks in the command's destination: the command runs once for them.
    pub ranks: IdSet,
    /// Kind of the request (command or stdio).
    pub kind: Kind,
    /// Filter the command asked for.
    pub filter: sdm_proto::FilterName,
    /// Service the command is for (empty: the built-in `sdm` service); see
    /// `sdm_proto::Message::service`.
    pub service: sdm_proto::ServiceName,
    /// Opaque request bytes.
    pub payload: Bytes,
    /// Where the answer goes.
    pub reply: Replier,
}

/// Answers one [`Delivery`]; may be moved to another task and used later.
#[derive(Debug)]
pub struct Replier {
    op: u64,
    /// The ranks this replier answers for.
    ranks: IdSet,
    to: ReplyTo,
}

#[derive(Debug)]
enum ReplyTo {
    /// The node's task, through its [`Inbox`].
    Node(Arc<Inbox>),
    /// A channel, as `(op, payload)` (for testing handlers without a node).
    Channel(mpsc::UnboundedSender<(u64, Bytes)>),
}

impl ReplyTo {
    fn clone_to(&self) -> Self {
        match self {
            ReplyTo::Node(i) => ReplyTo::Node(i.clone()),
            ReplyTo::Channel(t) => ReplyTo::Channel(t.clone()),
        }
    }
}

impl Replier {
    /// A replier for op `op` whose reply goes to `tx` as `(op, payload)` (for testing
    /// handlers without a node).
    pub fn new(op: u64, tx: mpsc::UnboundedSender<(u64, Bytes)>) -> Self {
        Self {
            op,
            ranks: IdSet::single(0),
            to: ReplyTo::Channel(tx),
        }
    }

    /// This replier answering for `ranks` instead (for testing handlers of several ranks
    /// without a node).
    pub fn for_ranks(mut self, ranks: IdSet) -> Self {
        self.ranks = ranks;
        self
    }

    /// The ranks this replier answers for.
    pub fn ranks(&self) -> &IdSet {
        &self.ranks
    }

    /// One replier per rank this one answers for: each rank's reply goes up on its own,
    /// and the node merges them through the command's filter.
    pub fn split(self) -> Vec<(u32, Replier)> {
        self.ranks
            .iter()
            .map(|r| {
                (
                    r,
                    Replier {
                        op: self.op,
                        ranks: IdSet::single(r),
                        to: self.to.clone_to(),
                    },
                )
            })
            .collect()
    }

    /// Sends the local reply, for all the ranks this replier answers for. If the node is
    /// gone, the reply is dropped.
    pub fn send(self, payload: impl Into<Bytes>) {
        self.answer(Status::Replied, payload.into());
    }

    /// Refuses the request for all the ranks this replier answers for: `why` goes up as an
    /// error group ([`Status::Error`]), outside the command's filter, so the front-end knows
    /// the request failed without reading its text.
    pub fn fail(self, why: impl Into<Bytes>) {
        self.answer(Status::Error, why.into());
    }

    fn answer(self, status: Status, payload: Bytes) {
        match self.to {
            ReplyTo::Node(inbox) => inbox.push((self.op, self.ranks, status, payload)),
            // Handler tests read the payload only.
            ReplyTo::Channel(tx) => {
                let _ = tx.send((self.op, payload));
            }
        }
    }
}

/// Runs a command locally: called on the node's task, so it must not block; spawn for
/// anything slow and answer through [`Delivery::reply`].
pub type LocalHandler = Box<dyn FnMut(Delivery) + Send>;

pub use crate::liveness::{KEEPALIVE_ENV, Liveness};

/// Events a server's local side sends up (kind, the local rank it is from, payload).
/// The channel is bounded, and the driver stops reading it while the node says so
/// ([`crate::Output::PauseLocal`]): a full channel makes the producer (the process's output
/// reader) wait, which makes the process wait: backpressure, never a dropped line.
pub type LocalEvents = mpsc::Receiver<(Kind, u32, Bytes)>;

/// Finds a new parent after the parent link died: resolves to a live ancestor and a fresh,
/// authenticated link to it, or `None` to give up (the node then ends).
pub type Reattach =
    Box<dyn FnMut() -> futures::future::BoxFuture<'static, Option<(NodeId, Link)>> + Send>;

/// How a node survives failures around it (both optional).
#[derive(Default)]
pub struct Recovery {
    /// Links from descendants orphaned by a dead node between us, with their ids: their
    /// subtrees are routed to them from then on ([`Node::handle_adopt`]).
    pub adoptions: Option<mpsc::Receiver<(NodeId, Link)>>,
    /// Called when the parent link dies (but for a goodbye); a new link keeps the node
    /// (and its children) running under a new parent.
    pub reattach: Option<Reattach>,
}

/// What [`run_node`] runs a node with besides its links and handler (all optional).
#[derive(Default)]
pub struct Options {
    /// This server's own output and events, sent up (none: a node with no local side).
    pub events: Option<LocalEvents>,
    /// Adopting orphans and re-attaching to a live ancestor.
    pub recovery: Recovery,
    /// Keepalive settings instead of [`Liveness::from_env`].
    pub liveness: Option<Liveness>,
}

/// Runs `node` until its parent link ends and no new parent is found (a goodbye from the
/// parent, no [`Recovery::reattach`], or no live ancestor). `children` holds each child's
/// link, or the error that kept it from connecting (those ids are reported lost on every
/// command). At the end the node says goodbye to its children and closes their links.
///
/// One task drives the node and all its links: no task or channel between a socket and
/// the node, so a frame costs one wake-up per hop.
pub async fn run_node(
    node: Node,
    parent: Link,
    children: Vec<(NodeId, Result<Link, LinkError>)>,
    handler: LocalHandler,
    options: Options,
) {
    turn::drive(node, parent, children, handler, options).await;
}

#[cfg(test)]
mod tests;
