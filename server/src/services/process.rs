//! The services on the monitored process (OMIS 8.1): stop, continue, kill, its state,
//! memory, registers, stack and breakpoints.

use sdm_overlay::setup::{hex_decode, hex_encode};

use crate::monitor::Monitor;
use sdm_omis::{Registry, Value};

use super::{bad, code_location, failed, int_param, str_param};

/// Registers the process services on `r`.
pub(super) fn register(r: &mut Registry<Monitor>) {
    r.register_base(
        "stop",
        Box::new(|m, _| {
            m.stop().map_err(failed)?;
            let pid = m.pid().map_or(0, i64::from);
            m.fire("process_stopped", None, vec![Value::Int(pid)]);
            Ok(vec![Value::Int(0)])
        }),
    );
    r.register_base(
        "cont",
        Box::new(|m, _| {
            m.cont().map_err(failed)?;
            let pid = m.pid().map_or(0, i64::from);
            m.fire("process_continued", None, vec![Value::Int(pid)]);
            Ok(vec![Value::Int(0)])
        }),
    );
    r.register_base(
        "kill",
        Box::new(|m, _| m.kill().map(|()| vec![Value::Int(0)]).map_err(failed)),
    );
    r.register_base(
        "process_info",
        Box::new(|m, _| {
            let (state, rss, ut, st, argv) = m.process_info().map_err(failed)?;
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
                .map_err(failed)
        }),
    );
    r.register_base(
        "write_memory",
        Box::new(|m, req| {
            let addr = int_param(req, 0, "address")? as u64;
            let text = str_param(req, 1, "hex bytes")?;
            let bytes =
                hex_decode(text).ok_or_else(|| bad("write_memory: bytes must be hex digits"))?;
            m.write_memory(addr, &bytes)
                .map(|()| vec![Value::Int(0)])
                .map_err(failed)
        }),
    );
    r.register_base(
        "read_int_registers",
        Box::new(|m, _| {
            let regs = m.registers().map_err(failed)?;
            Ok(regs
                .into_iter()
                .map(|(n, v)| Value::List(vec![Value::Str(n.into()), Value::Int(v as i64)]))
                .collect())
        }),
    );
    r.register_base(
        "stack_backtrace",
        Box::new(|m, _| {
            let frames = m.backtrace().map_err(failed)?;
            Ok(vec![frames_value(frames)])
        }),
    );
    r.register_base(
        "breakpoint",
        Box::new(|m, req| {
            m.set_breakpoint(&code_location(req)?)
                .map(|a| vec![Value::Int(a as i64)])
                .map_err(failed)
        }),
    );
}

/// Frames as a reply value, innermost first: `[pc, fp, "function", "file:line", "module",
/// offset]` each (the location empty where there is none; the offset is the pc's address in
/// the module's file).
pub(super) fn frames_value(frames: Vec<crate::monitor::Frame>) -> Value {
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
