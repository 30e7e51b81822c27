//! The OMIS services every server offers over its [`Monitor`]: the base services of OMIS
//! section 8 that this monitor implements, plus the `sdm` extension (section 6: one prefix,
//! one register function) for what OMIS leaves out (starting a program, a status line).
//!
//! Requests arrive as OMIS text; replies leave as OMIS text with empty sender nodes, so
//! identical results from many servers are byte-identical and merge in the tree; the
//! front-end fills in the senders from the merged group.

use std::sync::Arc;

use sdm_overlay::setup::{hex_decode, hex_encode};

use crate::monitor::{AsyncRequest, FrameMove, Leave, Monitor, ProcState, Step};
use sdm_proto::IdSet;

use sdm_omis::{
    ActionList, BasicReply, BasicRequest, Registry, ServiceError, Value, parse_request,
};

fn err(e: impl std::fmt::Display) -> ServiceError {
    ServiceError(e.to_string())
}

fn int_param(req: &BasicRequest, i: usize, what: &str) -> Result<i64, ServiceError> {
    match req.params.get(i) {
        Some(Value::Int(v)) => Ok(*v),
        other => Err(err(format!(
            "{}: parameter {} ({what}) must be an integer, got {other:?}",
            req.service,
            i + 1
        ))),
    }
}

fn str_param<'a>(req: &'a BasicRequest, i: usize, what: &str) -> Result<&'a str, ServiceError> {
    match req.params.get(i) {
        Some(Value::Str(v)) => Ok(v),
        other => Err(err(format!(
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
        other => Err(err(format!(
            "{}: expected a function name or an address, got {other:?}",
            req.service
        ))),
    }
}

/// The registry of every service a server offers.
pub fn registry() -> Arc<Registry<Monitor>> {
    let mut r: Registry<Monitor> = Registry::new();
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
    r.register_base(
        "stop",
        Box::new(|m, _| {
            m.stop().map_err(err)?;
            let pid = m.pid().map_or(0, i64::from);
            m.fire("process_stopped", None, vec![Value::Int(pid)]);
            Ok(vec![Value::Int(0)])
        }),
    );
    r.register_base(
        "cont",
        Box::new(|m, _| {
            m.cont().map_err(err)?;
            let pid = m.pid().map_or(0, i64::from);
            m.fire("process_continued", None, vec![Value::Int(pid)]);
            Ok(vec![Value::Int(0)])
        }),
    );
    // Asynchronous service requests (OMIS 8.2.1) and user defined events (8.2.2).
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
                    return Err(err(format!("{name}: no request {id} on this node")));
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
                        m.set_breakpoint(t).map_err(err)?;
                    } else if !now && was && !others {
                        m.clear_breakpoint(t).map_err(err)?;
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
                return Err(err(format!(
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
                return Err(err(format!("destroy_user_event: event {n} is not defined")));
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
                return Err(err(format!(
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
    r.register_base(
        "kill",
        Box::new(|m, _| m.kill().map(|()| vec![Value::Int(0)]).map_err(err)),
    );
    r.register_base(
        "process_info",
        Box::new(|m, _| {
            let (state, rss, ut, st, argv) = m.process_info().map_err(err)?;
            Ok(vec![
                Value::Str(state),
                Value::Int(rss as i64),
                Value::Float(ut),
                Value::Float(st),
                Value::List(argv.into_iter().map(Value::Str).collect()),
            ])
        }),
    );
    r.register_base(
        "read_memory",
        Box::new(|m, req| {
            let addr = int_param(req, 0, "address")? as u64;
            let len = int_param(req, 1, "length")? as usize;
            m.read_memory(addr, len)
                .map(|b| vec![Value::Str(hex_encode(&b))])
                .map_err(err)
        }),
    );
    r.register_base(
        "write_memory",
        Box::new(|m, req| {
            let addr = int_param(req, 0, "address")? as u64;
            let text = str_param(req, 1, "hex bytes")?;
            let bytes =
                hex_decode(text).ok_or_else(|| err("write_memory: bytes must be hex digits"))?;
            m.write_memory(addr, &bytes)
                .map(|()| vec![Value::Int(0)])
                .map_err(err)
        }),
    );
    r.register_base(
        "read_int_registers",
        Box::new(|m, _| {
            let regs = m.registers().map_err(err)?;
            Ok(regs
                .into_iter()
                .map(|(n, v)| Value::List(vec![Value::Str(n.into()), Value::Int(v as i64)]))
                .collect())
        }),
    );
    r.register_base(
        "stack_backtrace",
        Box::new(|m, _| {
            let frames = m.backtrace().map_err(err)?;
            Ok(vec![frames_value(frames)])
        }),
    );
    r.register_base(
        "breakpoint",
        Box::new(|m, req| {
            m.set_breakpoint(&code_location(req)?)
                .map(|a| vec![Value::Int(a as i64)])
                .map_err(err)
        }),
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
    // The spec's spellings of services registered here by a shorter name: section 8.1.1
    // calls the service `continue`; section 5.3.2's example reads registers with
    // `read_int_regs`.
    for (alias, name) in SPEC_SPELLINGS {
        r.register_alias(alias, name)
            .expect("aliases of registered services");
    }
    r.add_extension("sdm", |x| {
        x.register(
            "start",
            Box::new(|m: &mut Monitor, req: &BasicRequest| {
                let program = str_param(req, 0, "program")?.to_owned();
                let args: Vec<String> = match req.params.get(1) {
                    None => Vec::new(),
                    Some(Value::List(items)) => items
                        .iter()
                        .map(|v| match v {
                            Value::Str(s) => Ok(s.clone()),
                            other => Err(err(format!(
                                "sdm_start: arguments must be strings, got {other:?}"
                            ))),
                        })
                        .collect::<Result<_, _>>()?,
                    Some(other) => {
                        return Err(err(format!(
                            "sdm_start: parameter 2 must be a list of strings, got {other:?}"
                        )));
                    }
                };
                let mode = match req.params.get(2) {
                    None => crate::monitor::IoMode::Pty,
                    Some(Value::Str(s)) => s.parse().map_err(err)?,
                    Some(other) => return Err(err(format!("sdm_start: parameter 3 must be \"pty\", \"pipes\" or \"runtime\", got {other:?}"))),
                };
                // Parameter 4, 1: stopped at `main` (`sdm run --stop-at-main`).
                let started = match req.params.get(3) {
                    None | Some(Value::Int(0)) => m.start(&program, &args, mode),
                    Some(Value::Int(1)) => m.start_at_main(&program, &args, mode),
                    Some(other) => return Err(err(format!("sdm_start: parameter 4 (stop at main) must be 0 or 1, got {other:?}"))),
                };
                started.map(|pid| vec![Value::Int(i64::from(pid))]).map_err(err)
            }),
        );
        x.register(
            "stdin",
            Box::new(|m: &mut Monitor, req: &BasicRequest| {
                let data = str_param(req, 0, "data")?;
                let eof = matches!(req.params.get(1), Some(Value::Int(1)));
                m.write_stdin(data.as_bytes(), eof).map(|()| vec![Value::Int(0)]).map_err(err)
            }),
        );
        x.register(
            "attach",
            Box::new(|m: &mut Monitor, req: &BasicRequest| {
                let pid = int_param(req, 0, "pid")?;
                let pid = u32::try_from(pid).map_err(|_| err(format!("sdm_attach: {pid} is not a pid")))?;
                let p = m.attach(pid).map_err(err)?;
                // `sdm_attach(PID, 1)`: a task its launcher holds before its start runs to
                // `main` (in this one job: the monitor's poll must not continue it first).
                if req.params.len() > 1 && int_param(req, 1, "run to main")? != 0 {
                    m.run_attached_to_main().map_err(err)?;
                }
                Ok(vec![Value::Int(i64::from(p))])
            }),
        );
        x.register(
            "detach",
            Box::new(|m: &mut Monitor, req: &BasicRequest| {
                // `sdm_detach(1)`: a stopped process stays stopped (`detach --stopped`).
                let leave = match req.params.first() {
                    None => Leave::Running,
                    Some(_) if int_param(req, 0, "stay stopped")? != 0 => Leave::Stopped,
                    Some(_) => Leave::Running,
                };
                m.detach_process(leave).map(|p| vec![Value::Int(i64::from(p))]).map_err(err)
            }),
        );
        x.register(
            "delete_breakpoint",
            Box::new(|m: &mut Monitor, req: &BasicRequest| {
                m.clear_breakpoint(&code_location(req)?).map(|()| vec![Value::Int(0)]).map_err(err)
            }),
        );
        symbolic_services(x);
        // Every thread's stack: `[[tid, "name", [frame, ...]], ...]`, the main thread first.
        x.register(
            "stacks",
            Box::new(|m: &mut Monitor, _: &BasicRequest| {
                let threads = m.thread_backtraces().map_err(err)?;
                Ok(vec![Value::List(
                    threads
                        .into_iter()
                        .map(|t| {
                            Value::List(vec![
                                Value::Int(i64::from(t.tid)),
                                Value::Str(t.name),
                                frames_value(t.frames),
                            ])
                        })
                        .collect(),
                )])
            }),
        );
        x.register(
            "status",
            Box::new(|m: &mut Monitor, _: &BasicRequest| {
                m.status().map(|s| vec![Value::Str(s)]).map_err(err)
            }),
        );
    })
    .expect("the sdm prefix is registered once");
    Arc::new(r)
}

/// Frames as a reply value, innermost first: `[pc, fp, "function", "file:line", "module",
/// offset]` each (the location empty where there is none; the offset is the pc's address in
/// the module's file).
fn frames_value(frames: Vec<crate::monitor::Frame>) -> Value {
    Value::List(
        frames
            .into_iter()
            .map(|f| {
                Value::List(vec![
                    Value::Int(f.pc as i64),
                    Value::Int(f.fp as i64),
                    Value::Str(f.function),
                    Value::Str(f.location.unwrap_or_default()),
                    Value::Str(f.module),
                    Value::Int(f.offset as i64),
                ])
            })
            .collect(),
    )
}

/// The symbolic services (run by gdb on the process, see `monitor::symbolic`): values,
/// frames, source, source breakpoints, stepping. Results are texts without addresses or
/// pids, so the replies of processes in the same state merge.
fn symbolic_services(x: &mut sdm_omis::ExtensionRegistrar<'_, Monitor>) {
    x.register(
        "print",
        Box::new(|m: &mut Monitor, req: &BasicRequest| {
            let expr = str_param(req, 0, "expression")?;
            m.evaluate(expr).map(|v| vec![Value::Str(v)]).map_err(err)
        }),
    );
    x.register(
        "gdb",
        Box::new(|m: &mut Monitor, req: &BasicRequest| {
            let command = str_param(req, 0, "gdb command")?;
            m.gdb_console(command)
                .map(|v| vec![Value::Str(v)])
                .map_err(err)
        }),
    );
    x.register(
        "locals",
        Box::new(|m: &mut Monitor, _: &BasicRequest| {
            m.locals()
                .map(|l| vec![Value::List(l.into_iter().map(Value::Str).collect())])
                .map_err(err)
        }),
    );
    x.register(
        "frame",
        Box::new(|m: &mut Monitor, req: &BasicRequest| {
            let to = match req.params.first() {
                Some(Value::Int(n)) if *n >= 0 => FrameMove::To(*n as u32),
                Some(Value::Str(s)) if s == "up" => FrameMove::Up,
                Some(Value::Str(s)) if s == "down" => FrameMove::Down,
                other => {
                    return Err(err(format!(
                        "sdm_frame: expected a frame number, \"up\" or \"down\", got {other:?}"
                    )));
                }
            };
            m.select_frame(to).map(|f| vec![Value::Str(f)]).map_err(err)
        }),
    );
    x.register(
        "list",
        Box::new(|m: &mut Monitor, _: &BasicRequest| {
            m.list_source().map(|t| vec![Value::Str(t)]).map_err(err)
        }),
    );
    x.register(
        "break",
        Box::new(|m: &mut Monitor, req: &BasicRequest| {
            let location = str_param(req, 0, "location")?;
            let cond = match req.params.get(1) {
                None => None,
                Some(Value::Str(c)) if c.is_empty() => None,
                Some(Value::Str(c)) => Some(c.as_str()),
                other => {
                    return Err(err(format!(
                        "sdm_break: parameter 2 (condition) must be a string, got {other:?}"
                    )));
                }
            };
            let temporary = matches!(req.params.get(2), Some(Value::Int(1)));
            m.break_at(location, cond, temporary)
                .map(|at| vec![Value::Str(at)])
                .map_err(err)
        }),
    );
    x.register(
        "watch",
        Box::new(|m: &mut Monitor, req: &BasicRequest| {
            let expr = str_param(req, 0, "expression")?;
            m.watch(expr).map(|w| vec![Value::Str(w)]).map_err(err)
        }),
    );
    x.register(
        "step",
        Box::new(|m: &mut Monitor, req: &BasicRequest| {
            let how = match (str_param(req, 0, "how")?, req.params.get(1)) {
                ("step", None) => Step::Step,
                ("next", None) => Step::Next,
                ("finish", None) => Step::Finish,
                ("until", None) => Step::Until(None),
                ("until", Some(Value::Str(loc))) => Step::Until(Some(loc.clone())),
                ("until", Some(Value::Int(line))) => Step::Until(Some(line.to_string())),
                (other, _) => {
                    return Err(err(format!(
                        "sdm_step: expected \"step\", \"next\", \"finish\" or \"until\" [LOCATION], got {other:?}"
                    )));
                }
            };
            m.step(&how).map(|at| vec![Value::Str(at)]).map_err(err)
        }),
    );
}

/// Services the spec spells otherwise than the name they are registered under here, as
/// (the spec's spelling, the registered name); both are accepted.
pub const SPEC_SPELLINGS: [(&str, &str); 2] = [
    ("continue", "cont"),
    ("read_int_regs", "read_int_registers"),
];

/// Runs one OMIS request text on this server's monitor; returns the reply text (sender
/// nodes left empty for the front-end to fill in). Bad requests get an error reply naming
/// the position and the problem.
pub fn execute(registry: &Registry<Monitor>, m: &mut Monitor, text: &str) -> String {
    let req = match parse_request(text) {
        Ok(r) => r,
        Err(e) => return format!("0 [] error(\"bad request: {}\")", escape(&e.to_string())),
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
            });
            continue;
        }
        let results = match registry.call(m, action) {
            Ok(v) => v,
            Err(e) => vec![Value::Str(format!("error: {e}"))],
        };
        replies.push(BasicReply {
            id: action.id,
            senders: IdSet::new(),
            service: action.service.clone(),
            results,
        });
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
    let fail = |e: String| {
        format!(
            "{} [] {}(\"error: {}\")",
            event.id,
            event.service,
            escape(&e)
        )
    };
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

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
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
        // No process: the reply is cont's own error, under the service name `continue`.
        assert_eq!(
            run("1 [] continue()"),
            run("1 [] cont()").replace("cont(", "continue(")
        );
        assert!(run("1 [] continue()").contains("no process"));
        assert_eq!(run("2 [] extensions()"), "2 [] extensions([\"sdm\"])");
    }
}
