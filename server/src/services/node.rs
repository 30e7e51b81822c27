//! The services about the node and the monitor itself: who and where it is, how many
//! nodes the job has, `print`, and the extensions it offers (OMIS 8.2.3, 8.3).

use crate::monitor::Monitor;
use sdm_omis::{Registry, Value};

use super::str_param;

/// Registers the node services on `r`.
pub(super) fn register(r: &mut Registry<Monitor>) {
    r.register_base(
        "node_info",
        Box::new(|m, _| {
            Ok(vec![
                Value::Int(i64::from(m.rank)),
                Value::Str(crate::monitor::hostname()),
                Value::Int(i64::from(std::process::id())),
            ])
        }),
    );
    r.register_base(
        "number_of_nodes",
        // The job's nodes in OMIS's sense: its ranks.
        Box::new(|m, _| Ok(vec![Value::Int(i64::from(m.size.unwrap_or(m.servers)))])),
    );
    r.register_base(
        "list_nodes",
        Box::new(|m, _| {
            Ok(vec![Value::List(vec![
                Value::Int(i64::from(m.rank)),
                Value::Str(crate::monitor::hostname()),
            ])])
        }),
    );
    r.register_base(
        "print",
        Box::new(|_, req| Ok(vec![Value::Str(str_param(req, 0, "text")?.to_owned())])),
    );
    // OMIS 1.0 section 8.2.3: the prefixes of the extensions this monitor has.
    r.register_base(
        "extensions",
        Box::new(|m, _| {
            let prefixes = m
                .registry
                .as_ref()
                .map(|r| r.prefixes())
                .unwrap_or_default();
            Ok(vec![Value::List(
                prefixes.into_iter().map(Value::Str).collect(),
            )])
        }),
    );
}
