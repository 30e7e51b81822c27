//! The symbolic services of the `sdm` extension, run by gdb on the process (see
//! `monitor::symbolic`): values, frames, source, source breakpoints, stepping.

use crate::monitor::{FrameMove, Monitor, Step};
use sdm_omis::{BasicRequest, ExtensionRegistrar, Value};

use super::{bad, failed, str_param};

/// The symbolic services (run by gdb on the process, see `monitor::symbolic`): values,
/// frames, source, source breakpoints, stepping. Results are texts without addresses or
/// pids, so the replies of processes in the same state merge.
pub(super) fn register(x: &mut ExtensionRegistrar<'_, Monitor>) {
    x.register(
        "print",
        Box::new(|m: &mut Monitor, req: &BasicRequest| {
            let expr = str_param(req, 0, "expression")?;
            m.evaluate(expr)
                .map(|v| vec![Value::Str(v)])
                .map_err(failed)
        }),
    );
    x.register(
        "gdb",
        Box::new(|m: &mut Monitor, req: &BasicRequest| {
            let command = str_param(req, 0, "gdb command")?;
            m.gdb_console(command)
                .map(|v| vec![Value::Str(v)])
                .map_err(failed)
        }),
    );
    x.register(
        "locals",
        Box::new(|m: &mut Monitor, _: &BasicRequest| {
            m.locals()
                .map(|l| vec![Value::List(l.into_iter().map(Value::Str).collect())])
                .map_err(failed)
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
                    return Err(bad(format!(
                        "sdm_frame: expected a frame number, \"up\" or \"down\", got {other:?}"
                    )));
                }
            };
            m.select_frame(to)
                .map(|f| vec![Value::Str(f)])
                .map_err(failed)
        }),
    );
    x.register(
        "list",
        Box::new(|m: &mut Monitor, _: &BasicRequest| {
            m.list_source().map(|t| vec![Value::Str(t)]).map_err(failed)
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
                    return Err(bad(format!(
                        "sdm_break: parameter 2 (condition) must be a string, got {other:?}"
                    )));
                }
            };
            let temporary = matches!(req.params.get(2), Some(Value::Int(1)));
            m.break_at(location, cond, temporary)
                .map(|at| vec![Value::Str(at)])
                .map_err(failed)
        }),
    );
    x.register(
        "watch",
        Box::new(|m: &mut Monitor, req: &BasicRequest| {
            let expr = str_param(req, 0, "expression")?;
            m.watch(expr).map(|w| vec![Value::Str(w)]).map_err(failed)
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
                    return Err(bad(format!(
                        "sdm_step: expected \"step\", \"next\", \"finish\" or \"until\" [LOCATION], got {other:?}"
                    )));
                }
            };
            m.step(&how).map(|at| vec![Value::Str(at)]).map_err(failed)
        }),
    );
}
