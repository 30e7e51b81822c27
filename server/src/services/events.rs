//! Asynchronous service requests (OMIS 8.2.1: enable, disable, delete) and user defined
//! events (8.2.2: define, raise, destroy).

use crate::monitor::Monitor;
use sdm_omis::{Registry, Value};

use super::{bad, failed, int_param};

/// Registers the request and user event services on `r`.
pub(super) fn register(r: &mut Registry<Monitor>) {
    for (name, on) in [
        ("enable", Some(true)),
        ("disable", Some(false)),
        ("delete", None),
    ] {
        r.register_base(
            name,
            Box::new(move |m, req| {
                let id = int_param(req, 0, "request id")?;
                let Some(r) = m.requests.get(&id) else {
                    return Err(bad(format!("{name}: no request {id} on this node")));
                };
                // A breakpoint is planted while its request is enabled, and only then.
                let target = match (r.event.service.as_str(), r.event.params.first()) {
                    ("breakpoint", Some(Value::Str(t))) => Some(t.clone()),
                    ("breakpoint", Some(Value::Int(a))) => Some(format!("{a:#x}")),
                    _ => None,
                };
                let was = r.enabled;
                let now = on.unwrap_or(false);
                if let Some(t) = &target {
                    let others = m.requests.iter().any(|(i, o)| {
                        *i != id
                            && o.enabled
                            && o.event.service == "breakpoint"
                            && o.event.params.first() == r.event.params.first()
                    });
                    if now && !was {
                        m.set_breakpoint(t).map_err(failed)?;
                    } else if !now && was && !others {
                        m.clear_breakpoint(t).map_err(failed)?;
                    }
                }
                match on {
                    Some(on) => m.requests.get_mut(&id).expect("known").enabled = on,
                    None => drop(m.requests.remove(&id)),
                }
                Ok(vec![Value::Int(0)])
            }),
        );
    }
    r.register_base(
        "define_user_event",
        Box::new(|m, req| {
            let n = int_param(req, 0, "event number")?;
            if !m.user_events.insert(n) {
                return Err(bad(format!(
                    "define_user_event: event {n} is already defined"
                )));
            }
            Ok(vec![Value::Int(0)])
        }),
    );
    r.register_base(
        "destroy_user_event",
        Box::new(|m, req| {
            let n = int_param(req, 0, "event number")?;
            if !m.user_events.remove(&n) {
                return Err(bad(format!("destroy_user_event: event {n} is not defined")));
            }
            // "All asynchronous service requests using this event will be deleted."
            m.requests.retain(|_, r| {
                !(r.event.service == "user_event" && r.event.params.first() == Some(&Value::Int(n)))
            });
            Ok(vec![Value::Int(0)])
        }),
    );
    r.register_base(
        "raise_event",
        Box::new(|m, req| {
            let n = int_param(req, 0, "event number")?;
            if !m.user_events.contains(&n) {
                return Err(bad(format!(
                    "raise_event: event {n} is not defined (define_user_event first)"
                )));
            }
            let params = match req.params.get(1) {
                None => Vec::new(),
                Some(Value::List(v)) => v.clone(),
                Some(other) => vec![other.clone()],
            };
            m.fire("user_event", Some(Value::Int(n)), params);
            Ok(vec![Value::Int(0)])
        }),
    );
}
