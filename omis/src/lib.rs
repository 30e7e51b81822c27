//! sdm-omis: OMIS, the On-line Monitoring Interface Specification 1.0 (seeds/000), the
//! payload protocol the sdm overlay carries, with its parser, printer, reply unification and
//! service table.
//!
//! # Quick start
//!
//! ```
//! use sdm_omis::{Value, parse_reply, parse_request};
//!
//! // A request to stop two servers' processes, as a tool sends it.
//! let req = parse_request("7 [0,3] stop()").unwrap();
//! assert_eq!(req.actions.actions()[0].service, "stop");
//!
//! // The merged reply the tree sends back: one entry per group of identical answers.
//! let reply = parse_reply("7 [0,3] stop(0)").unwrap();
//! assert_eq!(reply.0[0].results, vec![Value::Int(0)]);
//! ```
//!
//! A crate of its own, below both `sdm-client` (the front-end builds requests and reads
//! replies) and `sdm-server` (the daemons parse requests and run the services), so neither
//! has to depend on the other. Pure text: no I/O, no features.
//!
//! A request is `[event ':'] action_list`, each part a basic request
//! `request_id receiver_nodes service(parameters)`, e.g.
//! `11 [1] start_lib_call([1123], "pvm_send"): 12 [1] raise_event(5, [$1])`; actions are
//! joined by `,` (parallel) or `;` (sequential). A reply is basic replies joined by `;`, e.g.
//! `16 [2] print(1234); 1 [0-1023] stop(0)`.
//!
//! [`parse_request`] and [`parse_reply`] accept the fields of a basic request or reply
//! separated by commas (the grammar of section 7) or by whitespace (the spec's examples).
//! `Display` prints the canonical form, the one of the spec's examples:
//! `123 [1] process_info([231,345,654], 9)`: fields separated by a space, parameters by
//! `", "`, list elements by `","`, actions by `", "` or `"; "`, the event followed by `": "`,
//! node lists in range form. Parsing what was printed gives the value back.

mod ast;
mod parse;
mod print;
mod registry;
mod status;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fmt::Write;

pub use ast::{ActionList, BasicReply, BasicRequest, Node, Nodes, Reply, Request, Value};
pub use parse::{ParseError, parse_reply, parse_request};
pub use registry::{ExtensionRegistrar, Handler, Registry, handler};
pub use status::{ErrorKind, ServiceError, UnknownKind};

/// Merges basic replies that answer the same request with the same results (OMIS 1.0
/// section 5.2.2: "identical results on different nodes may be unified; sender_nodes
/// contains the list of all nodes that produce the given result"): one reply per distinct
/// `(id, service, results)`, its senders the union of theirs, in the order each first
/// appears.
///
/// "Same results" means the same canonical text, so `0.0` and `-0.0` stay apart while two
/// NaNs merge, and `1` (an integer) never merges with `1.0` (a float).
pub fn unify(replies: Vec<BasicReply>) -> Vec<BasicReply> {
    let mut out: Vec<BasicReply> = Vec::with_capacity(replies.len().min(64));
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut key = String::new();
    for r in replies {
        key.clear();
        // Writing to a String cannot fail.
        let _ = write!(key, "{} {}", r.id, r.service);
        if let Some(kind) = r.failure {
            let _ = write!(key, "!{kind}");
        }
        key.push('(');
        for (i, v) in r.results.iter().enumerate() {
            let _ = write!(key, "{}{v}", if i > 0 { ", " } else { "" });
        }
        if let Some(&i) = index.get(key.as_str()) {
            out[i].senders.union_with(&r.senders);
        } else {
            index.insert(key.clone(), out.len());
            out.push(r);
        }
    }
    out
}
