//! The names of the stock services every `sdm server` has: the tags front-ends give
//! commands ([`crate::Message::for_service`]) and servers dispatch by.

/// The built-in service: `ping`, `info`, `value`, `sleep MS`; the empty tag means this one.
pub const SDM: &str = "sdm";
/// OMIS requests (`1 [] stop()`), run by the node-local monitor.
pub const OMIS: &str = "omis";
/// The monitored program's own counters, as a JSON object.
pub const COUNTERS: &str = "counters";
/// The monitored program's metrics from /proc, as a JSON object (for `sdm top`).
pub const PROCSTAT: &str = "procstat";
/// An expression evaluated by the symbolic debugger, as a JSON object `{"EXPR": "42"}`
/// (the `stats` filter's leaf input: `print -stats`).
pub const EVALUATE: &str = "evaluate";
