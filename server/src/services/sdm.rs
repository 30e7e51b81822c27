//! The `sdm` extension (OMIS chapter 6): what OMIS leaves out, such as starting or attaching
//! to a program, its standard input, every thread's stack and a status line.

use crate::monitor::{Leave, Monitor};
use sdm_omis::{BasicRequest, ExtensionRegistrar, ServiceError, Value};

use super::process::frames_value;
use super::{bad, code_location, failed, int_param, str_param};

/// Registers the `sdm` extension's services through `x`.
pub(super) fn register(x: &mut ExtensionRegistrar<'_, Monitor>) {
    x.register("start", Box::new(start));
    x.register(
        "stdin",
        Box::new(|m: &mut Monitor, req: &BasicRequest| {
            let data = str_param(req, 0, "data")?;
            let eof = matches!(req.params.get(1), Some(Value::Int(1)));
            m.write_stdin(data.as_bytes(), eof)
                .map(|()| vec![Value::Int(0)])
                .map_err(failed)
        }),
    );
    x.register(
        "attach",
        Box::new(|m: &mut Monitor, req: &BasicRequest| {
            let pid = int_param(req, 0, "pid")?;
            let pid =
                u32::try_from(pid).map_err(|_| bad(format!("sdm_attach: {pid} is not a pid")))?;
            let p = m.attach(pid).map_err(failed)?;
            // `sdm_attach(PID, 1)`: a task its launcher holds before its start runs to
            // `main` (in this one job: the monitor's poll must not continue it first).
            if req.params.len() > 1 && int_param(req, 1, "run to main")? != 0 {
                m.run_attached_to_main().map_err(failed)?;
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
            m.detach_process(leave)
                .map(|p| vec![Value::Int(i64::from(p))])
                .map_err(failed)
        }),
    );
    x.register(
        "delete_breakpoint",
        Box::new(|m: &mut Monitor, req: &BasicRequest| {
            m.clear_breakpoint(&code_location(req)?)
                .map(|()| vec![Value::Int(0)])
                .map_err(failed)
        }),
    );
    // Every thread's stack: `[[tid, "name", [frame, ...]], ...]`, the main thread first.
    // `sdm_stacks(1)` adds each thread's state letter when `stop` stopped the process (`R`:
    // running on a CPU; empty where unknown): `[tid, "name", [frame, ...], "R"]`.
    x.register(
        "stacks",
        Box::new(|m: &mut Monitor, req: &BasicRequest| {
            let states = !req.params.is_empty() && int_param(req, 0, "with states")? != 0;
            let threads = m.thread_backtraces().map_err(failed)?;
            Ok(vec![Value::List(
                threads
                    .into_iter()
                    .map(|t| {
                        let mut v = vec![
                            Value::Int(i64::from(t.tid)),
                            Value::Str(t.name),
                            frames_value(t.frames),
                        ];
                        if states {
                            v.push(Value::Str(t.state.map(String::from).unwrap_or_default()));
                        }
                        Value::List(v)
                    })
                    .collect(),
            )])
        }),
    );
    x.register(
        "status",
        Box::new(|m: &mut Monitor, _: &BasicRequest| {
            m.status().map(|s| vec![Value::Str(s)]).map_err(failed)
        }),
    );
}

/// `sdm_start("PROGRAM", ["ARG", ...], "pty"|"pipes"|"runtime", STOP_AT_MAIN)`: starts the
/// program under the monitor; the reply is its pid.
fn start(m: &mut Monitor, req: &BasicRequest) -> Result<Vec<Value>, ServiceError> {
    let program = str_param(req, 0, "program")?.to_owned();
    let args: Vec<String> = match req.params.get(1) {
        None => Vec::new(),
        Some(Value::List(items)) => items
            .iter()
            .map(|v| match v {
                Value::Str(s) => Ok(s.clone()),
                other => Err(bad(format!(
                    "sdm_start: arguments must be strings, got {other:?}"
                ))),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(bad(format!(
                "sdm_start: parameter 2 must be a list of strings, got {other:?}"
            )));
        }
    };
    let mode = match req.params.get(2) {
        None => crate::monitor::IoMode::Pty,
        Some(Value::Str(s)) => s.parse().map_err(failed)?,
        Some(other) => {
            return Err(bad(format!(
                "sdm_start: parameter 3 must be \"pty\", \"pipes\" or \"runtime\", got {other:?}"
            )));
        }
    };
    // Parameter 4, 1: stopped at `main` (`sdm run --stop-at-main`).
    let started = match req.params.get(3) {
        None | Some(Value::Int(0)) => m.start(&program, &args, mode),
        Some(Value::Int(1)) => m.start_at_main(&program, &args, mode),
        Some(other) => {
            return Err(bad(format!(
                "sdm_start: parameter 4 (stop at main) must be 0 or 1, got {other:?}"
            )));
        }
    };
    started
        .map(|pid| vec![Value::Int(i64::from(pid))])
        .map_err(failed)
}
