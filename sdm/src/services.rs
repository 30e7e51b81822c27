//! The OMIS services every server offers over its [`Monitor`]: the base services of OMIS
//! section 8 that this monitor implements, plus the `sdm` extension (section 6: one prefix,
//! one register function) for what OMIS leaves out (starting a program, a status line).
//!
//! Requests arrive as OMIS text; replies leave as OMIS text with empty sender nodes, so
//! identical results from many servers are byte-identical and merge in the tree; the
//! front-end fills in the senders from the merged group.

use std::sync::Arc;

use sdm_overlay::auth::{hex_decode, hex_encode};

use crate::monitor::Monitor;
use crate::omis::{BasicReply, BasicRequest, Registry, ServiceError, Value, parse_request};

fn err(e: impl Into<String>) -> ServiceError {
    ServiceError(e.into())
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

/// The registry of every service a server offers.
pub fn registry() -> Arc<Registry<Monitor>> {
    let mut r: Registry<Monitor> = Registry::new();
    r.register_base(
        "node_info",
        Box::new(|m, _| {
            Ok(vec![
                Value::Int(i64::from(m.rank)),
                Value::Str(crate::service::hostname()),
                Value::Int(i64::from(std::process::id())),
            ])
        }),
    );
    r.register_base(
        "number_of_nodes",
        Box::new(|m, _| Ok(vec![Value::Int(i64::from(m.servers))])),
    );
    r.register_base(
        "list_nodes",
        Box::new(|m, _| {
            Ok(vec![Value::List(vec![
                Value::Int(i64::from(m.rank)),
                Value::Str(crate::service::hostname()),
            ])])
        }),
    );
    r.register_base(
        "print",
        Box::new(|_, req| Ok(vec![Value::Str(str_param(req, 0, "text")?.to_owned())])),
    );
    r.register_base(
        "stop",
        Box::new(|m, _| m.stop().map(|()| vec![Value::Int(0)]).map_err(err)),
    );
    r.register_base(
        "cont",
        Box::new(|m, _| m.cont().map(|()| vec![Value::Int(0)]).map_err(err)),
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
            Ok(vec![Value::List(
                frames
                    .into_iter()
                    .map(|f| {
                        Value::List(vec![
                            Value::Int(f.pc as i64),
                            Value::Int(f.fp as i64),
                            Value::Str(f.function),
                            Value::Str(f.location.unwrap_or_default()),
                        ])
                    })
                    .collect(),
            )])
        }),
    );
    r.register_base(
        "breakpoint",
        Box::new(|m, req| {
            let target = match req.params.first() {
                Some(Value::Int(a)) => format!("{a:#x}"),
                Some(Value::Str(s)) => s.clone(),
                other => {
                    return Err(err(format!(
                        "breakpoint: expected a function name or an address, got {other:?}"
                    )));
                }
            };
            m.set_breakpoint(&target)
                .map(|a| vec![Value::Int(a as i64)])
                .map_err(err)
        }),
    );
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
                m.start(&program, &args, mode)
                    .map(|pid| vec![Value::Int(i64::from(pid))])
                    .map_err(err)
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
            "status",
            Box::new(|m: &mut Monitor, _: &BasicRequest| {
                m.status().map(|s| vec![Value::Str(s)]).map_err(err)
            }),
        );
    })
    .expect("the sdm prefix is registered once");
    Arc::new(r)
}

/// Runs one OMIS request text on this server's monitor; returns the reply text (sender
/// nodes left empty for the front-end to fill in). Bad requests get an error reply naming
/// the position and the problem.
pub fn execute(registry: &Registry<Monitor>, m: &mut Monitor, text: &str) -> String {
    let req = match parse_request(text) {
        Ok(r) => r,
        Err(e) => return format!("0 [] error(\"bad request: {}\")", escape(&e.to_string())),
    };
    if let Some(ev) = &req.event {
        return format!(
            "{} [] {}(\"error: event-action requests are not supported yet; use breakpoint(...) and the process_stopped events it raises\")",
            ev.id, ev.service
        );
    }
    let actions = match &req.actions {
        crate::omis::ActionList::Seq(v) | crate::omis::ActionList::Par(v) => v,
    };
    let mut replies = Vec::new();
    for action in actions {
        let results = match registry.call(m, action) {
            Ok(v) => v,
            Err(e) => vec![Value::Str(format!("error: {e}"))],
        };
        replies.push(BasicReply {
            id: action.id,
            senders: sdm_proto::IdSet::new(),
            service: action.service.clone(),
            results,
        });
    }
    crate::omis::Reply(replies).to_string()
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}
