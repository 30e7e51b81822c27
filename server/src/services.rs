//! The OMIS services every server offers over its [`Monitor`]: the base services of OMIS
//! section 8 that this monitor implements, plus the `sdm` extension (section 6: one prefix,
//! one register function) for what OMIS leaves out (starting a program, a status line).
//!
//! Requests arrive as OMIS text; replies leave as OMIS text with empty sender nodes, so
//! identical results from many servers are byte-identical and merge in the tree; the
//! front-end fills in the senders from the merged group.
//!
//! One file per service family: `node` (who and where), `process` (stop, memory, stack),
//! `events` (asynchronous requests, user events), `sdm` and `symbolic` (the extension).

use std::sync::Arc;

use crate::monitor::{AsyncRequest, Monitor, ProcState};
use sdm_proto::IdSet;

use sdm_omis::{
    ActionList, BasicReply, BasicRequest, ErrorKind, Registry, ServiceError, Value, parse_request,
};

mod events;
mod node;
mod process;
mod sdm;
mod symbolic;

/// A bad parameter or request, described by `what`.
fn bad(what: impl Into<String>) -> ServiceError {
    ServiceError::bad_argument(what)
}

/// A monitor's failure as a service's: its kind, with the monitor's error underneath.
fn failed(e: crate::Error) -> ServiceError {
    use crate::error::ErrorKind as Monitor;
    let kind = match e.kind() {
        Monitor::NoProcess => ErrorKind::NoProcess,
        Monitor::ProcessState => ErrorKind::WrongState,
        Monitor::Symbol | Monitor::BadInput => ErrorKind::BadArgument,
        Monitor::UnknownService => ErrorKind::UnknownService,
        _ => ErrorKind::Failed,
    };
    ServiceError::with_source(kind, e.to_string(), e)
}

fn int_param(req: &BasicRequest, i: usize, what: &str) -> Result<i64, ServiceError> {
    match req.params.get(i) {
        Some(Value::Int(v)) => Ok(*v),
        other => Err(bad(format!(
            "{}: parameter {} ({what}) must be an integer, got {other:?}",
            req.service,
            i + 1
        ))),
    }
}

fn str_param<'a>(req: &'a BasicRequest, i: usize, what: &str) -> Result<&'a str, ServiceError> {
    match req.params.get(i) {
        Some(Value::Str(v)) => Ok(v),
        other => Err(bad(format!(
            "{}: parameter {} ({what}) must be a string, got {other:?}",
            req.service,
            i + 1
        ))),
    }
}

/// The first parameter as a breakpoint location: a function name, or an address (as `0x…`).
fn code_location(req: &BasicRequest) -> Result<String, ServiceError> {
    match req.params.first() {
        Some(Value::Int(a)) => Ok(format!("{a:#x}")),
        Some(Value::Str(s)) => Ok(s.clone()),
        other => Err(bad(format!(
            "{}: expected a function name or an address, got {other:?}",
            req.service
        ))),
    }
}

/// The registry of every service a server offers.
pub fn registry() -> Arc<Registry<Monitor>> {
    let mut r: Registry<Monitor> = Registry::new();
    node::register(&mut r);
    process::register(&mut r);
    events::register(&mut r);
    // The spec's spellings of services registered here by a shorter name: section 8.1.1
    // calls the service `continue`; section 5.3.2's example reads registers with
    // `read_int_regs`.
    for (alias, name) in SPEC_SPELLINGS {
        r.register_alias(alias, name)
            .expect("aliases of registered services");
    }
    r.add_extension("sdm", |x| {
        sdm::register(x);
        symbolic::register(x);
    })
    .expect("the sdm prefix is registered once");
    Arc::new(r)
}

/// Services the spec spells otherwise than the name they are registered under here, as
/// (the spec's spelling, the registered name); both are accepted.
pub const SPEC_SPELLINGS: [(&str, &str); 2] = [
    ("continue", "cont"),
    ("read_int_regs", "read_int_registers"),
];

/// Runs one OMIS request text on this server's monitor; returns the reply text (sender
/// nodes left empty for the front-end to fill in). A service that fails answers with its
/// failure's kind (`stop!no_process(…)`); a request that does not parse gets
/// `0 [] error!bad_request(…)` naming the position and the problem.
pub fn execute(registry: &Registry<Monitor>, m: &mut Monitor, text: &str) -> String {
    let req = match parse_request(text) {
        Ok(r) => r,
        Err(e) => {
            let why =
                ServiceError::with_source(ErrorKind::BadRequest, format!("bad request: {e}"), e);
            return BasicReply::answer(0, "error", Err(why)).to_string();
        }
    };
    if let Some(ev) = req.event {
        return define_async(m, ev, req.actions);
    }
    let actions = match &req.actions {
        sdm_omis::ActionList::Seq(v) | sdm_omis::ActionList::Par(v) => v,
    };
    let mut replies = Vec::new();
    for action in actions {
        // About a process that has ended, the answer is how it ended (the same on every
        // rank that ended alike, so they merge), not each service's own failure.
        if let Some(end) = ended(m, &action.service) {
            replies.push(BasicReply {
                id: action.id,
                senders: IdSet::new(),
                service: ENDED.into(),
                results: end,
                failure: Some(ErrorKind::Ended),
            });
            continue;
        }
        let outcome = registry.call(m, action);
        replies.push(BasicReply::answer(action.id, &action.service, outcome));
    }
    sdm_omis::Reply(replies).to_string()
}

/// The service name of the reply to a request that needs a live process when the
/// process has ended: `process_terminated("exited",N)` or `process_terminated("killed",
/// "SIGNAME")`, as the event of its end says.
pub const ENDED: &str = "process_terminated";

/// The services that act on a live process (by the names they are asked by).
const NEED_A_LIVE_PROCESS: [&str; 19] = [
    "stop",
    "cont",
    "continue",
    "stack_backtrace",
    "read_memory",
    "write_memory",
    "read_int_registers",
    "read_int_regs",
    "breakpoint",
    "process_info",
    "sdm_print",
    "sdm_locals",
    "sdm_frame",
    "sdm_list",
    "sdm_break",
    "sdm_watch",
    "sdm_step",
    "sdm_stacks",
    "sdm_gdb",
];

/// How the process ended, as reply results, if `service` needs a live process and the
/// monitor's process has ended.
fn ended(m: &Monitor, service: &str) -> Option<Vec<Value>> {
    if !NEED_A_LIVE_PROCESS.contains(&service) {
        return None;
    }
    match m.state()? {
        ProcState::Exited(c) => Some(vec![Value::Str("exited".into()), Value::Int(i64::from(c))]),
        ProcState::Signaled(s) => Some(vec![Value::Str("killed".into()), Value::Str(s)]),
        _ => None,
    }
}

/// The events a request may wait for, and what each passes to its actions as `$1`, `$2`…
pub const EVENTS: [(&str, &str); 5] = [
    ("breakpoint", "the function name and the address"),
    ("process_stopped", "the pid (stopped by the stop service)"),
    (
        "process_continued",
        "the pid (continued by the cont service)",
    ),
    (
        "process_terminated",
        "how it ended and the exit code or signal",
    ),
    ("user_event", "the parameters given to raise_event"),
];

/// Stores `event: actions` on this node. The actions run where the event occurs, so their
/// receivers must be `[$0]` or this node.
fn define_async(m: &mut Monitor, event: BasicRequest, actions: ActionList) -> String {
    let fail = |e: String| BasicReply::answer(event.id, &event.service, Err(bad(e))).to_string();
    if !EVENTS.iter().any(|(n, _)| *n == event.service) {
        let known: Vec<&str> = EVENTS.iter().map(|(n, _)| *n).collect();
        return fail(format!(
            "{} is not an event (events: {})",
            event.service,
            known.join(", ")
        ));
    }
    for a in actions.actions() {
        let here = a.nodes.refs == [0] && a.nodes.ids.is_empty()
            || a.nodes.refs.is_empty() && a.nodes.ids == IdSet::single(m.rank);
        if !here {
            return fail(format!(
                "action {} ({}) must run where the event occurs: give it the receiver [$0]",
                a.id, a.service
            ));
        }
    }
    match event.service.as_str() {
        // Planted when the request is enabled (and removed when none waits for it).
        "breakpoint" => match event.params.first() {
            Some(Value::Str(_) | Value::Int(_)) => {}
            other => {
                return fail(format!(
                    "breakpoint needs a function name or an address, got {other:?}"
                ));
            }
        },
        "user_event" => match event.params.first() {
            Some(Value::Int(n)) if m.user_events.contains(n) => {}
            Some(Value::Int(n)) => return fail(format!("user event {n} is not defined")),
            _ => return fail("user_event needs the event number".into()),
        },
        _ => {}
    }
    if m.requests.contains_key(&event.id) {
        return fail(format!("request {} already exists on this node", event.id));
    }
    let id = event.id;
    let service = event.service.clone();
    m.requests.insert(
        id,
        AsyncRequest {
            event,
            actions,
            enabled: false,
        },
    );
    format!("{id} [] {service}(0)")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `text` on a fresh monitor (no process started) and returns the reply text.
    fn run(text: &str) -> String {
        let (tx, _rx) = tokio::sync::mpsc::channel(1);
        let (m, _events) = crate::monitor::MonitorHandle::new(0, 1, tx);
        let reg = registry();
        let reg2 = reg.clone();
        drop(m.submit(move |m| m.registry = Some(reg2)));
        let text = text.to_owned();
        m.submit(move |m| execute(&reg, m, &text))
            .blocking_recv()
            .expect("the monitor answers")
    }

    #[test]
    fn section_8_names_are_accepted_as_the_spec_spells_them() {
        let reg = registry();
        // Every section 8 service this monitor implements, by the spec's name.
        for name in [
            "stop",
            "continue",
            "kill",
            "write_memory",
            "process_info",
            "stack_backtrace",
            "read_memory",
            "read_int_registers",
            "read_int_regs",
            "breakpoint",
            "enable",
            "disable",
            "delete",
            "define_user_event",
            "raise_event",
            "destroy_user_event",
            "print",
            "extensions",
            "number_of_nodes",
            "list_nodes",
            "node_info",
        ] {
            assert!(reg.get(name).is_some(), "{name} is not accepted");
        }
        for (alias, name) in SPEC_SPELLINGS {
            assert!(
                reg.get(alias).is_some() && reg.get(name).is_some(),
                "{alias}"
            );
        }
    }

    #[test]
    fn continue_runs_cont_and_replies_under_the_name_it_was_asked_by() {
        // No process: the reply is cont's own failure, under the service name `continue`.
        assert_eq!(
            run("1 [] continue()"),
            run("1 [] cont()").replace("cont!", "continue!")
        );
        let reply = sdm_omis::parse_reply(&run("1 [] continue()")).unwrap();
        assert_eq!(reply.0[0].failure, Some(ErrorKind::NoProcess));
        // A parameter of the wrong type is the caller's mistake, whatever the process.
        let reply = sdm_omis::parse_reply(&run("2 [] print(3)")).unwrap();
        assert_eq!(reply.0[0].failure, Some(ErrorKind::BadArgument));
        let reply = sdm_omis::parse_reply(&run("3 [] nosuch()")).unwrap();
        assert_eq!(reply.0[0].failure, Some(ErrorKind::UnknownService));
        assert_eq!(run("2 [] extensions()"), "2 [] extensions([\"sdm\"])");
    }
}
