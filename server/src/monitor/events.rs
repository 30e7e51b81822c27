//! Events of the monitored process: the poll that notices its exit and breakpoint hits,
//! the exit report sent after its last output line, and the stored OMIS event requests
//! (section 5.2) whose actions run at each occurrence.

use bytes::Bytes;
use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use sdm_omis::{ActionList, BasicReply, BasicRequest, Registry, Value};
use sdm_proto::Kind;

use super::{Monitor, ProcState, session};

impl Monitor {
    /// An event occurred here: runs the actions of the enabled requests waiting for it
    /// (OMIS section 5.2) and sends their replies up. `key` selects among definitions (a
    /// breakpoint's function, a user event's number); `params` are `$1`, `$2`…
    pub fn fire(&mut self, service: &str, key: Option<Value>, params: Vec<Value>) {
        const MAX_DEPTH: u32 = 8;
        let Some(reg) = self.registry.clone() else {
            return;
        };
        if self.firing >= MAX_DEPTH {
            let _ = self.events.send(format!(
                "error(\"event {service} not handled: actions raise events {MAX_DEPTH} deep\")"
            ));
            return;
        }
        self.firing += 1;
        let replies = run_event_actions(&reg, self, service, key.as_ref(), &params);
        self.firing -= 1;
        for r in replies {
            let _ = self.events.send(r);
        }
    }

    /// Reports the process's end (`event`) after its last output line: a helper thread
    /// waits for the output readers to reach end of file, then sends the event on the same
    /// queue as the output, so no line can arrive after the exit. The monitor thread never
    /// waits for output to drain (a reader may be blocked on a full queue).
    pub(super) fn report_exit(&mut self, event: String) {
        let Some(p) = self.proc.as_mut() else { return };
        p.stdin = None;
        let readers = std::mem::take(&mut p.readers);
        let (tx, rank) = (self.stdio.clone(), self.rank);
        // What the program started and left behind ends with it (it would hold the
        // output open); a process attached to is not ours to end.
        let session = p.child.is_some().then_some(p.pid);
        let spawned = std::thread::Builder::new()
            .name("sdm-exit".into())
            .spawn(move || {
                if let Some(sid) = session {
                    session::end_rest(sid, session::GRACE);
                }
                for r in readers {
                    let _ = r.join();
                }
                let _ = tx.blocking_send((Kind::Event, rank, Bytes::from(event)));
            });
        if let Err(e) = spawned {
            tracing::warn!("cannot report the process's exit: {e}");
        }
    }

    /// Notices breakpoint hits and exits; reports them as events.
    pub(super) fn poll(&mut self) {
        if self.symbolic() {
            return self.poll_symbolic();
        }
        let Some(p) = self.proc.as_mut() else { return };
        if !matches!(p.state, ProcState::Running) {
            return;
        }
        let flags = WaitPidFlag::WNOHANG | WaitPidFlag::__WALL;
        let st = match waitpid(p.pid, Some(flags)) {
            Ok(s) => s,
            Err(_) => return,
        };
        match st {
            WaitStatus::StillAlive => {}
            WaitStatus::Exited(_, c) => {
                p.state = ProcState::Exited(c);
                self.report_exit(format!("process_terminated(\"exited\",{c})"));
                let how = vec![Value::Str("exited".into()), Value::Int(i64::from(c))];
                self.fire("process_terminated", None, how);
            }
            WaitStatus::Signaled(_, s, _) => {
                p.state = ProcState::Signaled(s.to_string());
                self.report_exit(format!("process_terminated(\"killed\",\"{s}\")"));
                let how = vec![Value::Str("killed".into()), Value::Str(s.to_string())];
                self.fire("process_terminated", None, how);
            }
            WaitStatus::Stopped(pid, Signal::SIGTRAP) => {
                let hit = ptrace::getregs(pid).ok().and_then(|mut r| {
                    let addr = r.rip - 1;
                    p.breakpoints.get(&addr).map(|(_, name)| {
                        r.rip = addr;
                        let _ = ptrace::setregs(pid, r);
                        (addr, name.clone())
                    })
                });
                match hit {
                    Some((addr, name)) => {
                        p.state = ProcState::AtBreakpoint(addr);
                        // Said by function and line, so the hits of many ranks merge.
                        let place = self.hit_place(pid, addr);
                        let _ = self.events.send(format!(
                            "breakpoint({},{})",
                            Value::Str(name.clone()),
                            Value::Str(place)
                        ));
                        let key = Value::Str(name.clone());
                        let params = vec![Value::Str(name), Value::Int(addr as i64)];
                        self.fire("breakpoint", Some(key), params);
                    }
                    None => {
                        let _ = ptrace::cont(pid, Signal::SIGTRAP);
                    }
                }
            }
            WaitStatus::Stopped(pid, sig) => {
                let _ = ptrace::cont(pid, sig);
            }
            WaitStatus::PtraceEvent(pid, _, _) => {
                let _ = ptrace::cont(pid, None);
            }
            _ => {}
        }
    }
}

/// An asynchronous service request (OMIS section 5.2): an event and the actions to run
/// at each occurrence; stored disabled until `enable`.
#[derive(Debug, Clone)]
pub struct AsyncRequest {
    /// The event definition (its id is the request id).
    pub event: BasicRequest,
    /// What runs when the event occurs.
    pub actions: ActionList,
    /// Whether occurrences are being looked for.
    pub enabled: bool,
}

/// Whether a stored event definition matches an occurrence with `key` (the breakpoint's
/// function or address, the user event's number).
fn matches(def: &BasicRequest, key: Option<&Value>, params: &[Value]) -> bool {
    match (def.service.as_str(), def.params.first(), key) {
        ("breakpoint", Some(Value::Int(addr)), _) => params.get(1) == Some(&Value::Int(*addr)),
        ("breakpoint", Some(name), Some(k)) => name == k,
        ("user_event", Some(n), Some(k)) => n == k,
        ("user_event", _, _) => false,
        _ => true,
    }
}

/// `$0` is this node, `$n` the occurrence's n-th parameter.
fn substitute(v: &Value, node: u32, params: &[Value]) -> Value {
    match v {
        Value::Ref(0) => Value::Int(i64::from(node)),
        Value::Ref(n) => params
            .get(*n as usize - 1)
            .cloned()
            .unwrap_or(Value::List(Vec::new())),
        Value::List(items) => {
            Value::List(items.iter().map(|x| substitute(x, node, params)).collect())
        }
        other => other.clone(),
    }
}

/// Runs the actions of every enabled request waiting for `service` (with `key` and the
/// occurrence's `params`); returns one reply text per request that ran.
pub fn run_event_actions(
    registry: &Registry<Monitor>,
    m: &mut Monitor,
    service: &str,
    key: Option<&Value>,
    params: &[Value],
) -> Vec<String> {
    let due: Vec<ActionList> = m
        .requests
        .values()
        .filter(|r| r.enabled && r.event.service == service && matches(&r.event, key, params))
        .map(|r| r.actions.clone())
        .collect();
    let mut out = Vec::new();
    for actions in due {
        let mut replies = Vec::new();
        for a in actions.actions() {
            let mut a = a.clone();
            a.params = a
                .params
                .iter()
                .map(|v| substitute(v, m.rank, params))
                .collect();
            let outcome = registry.call(m, &a);
            replies.push(BasicReply::answer(a.id, &a.service, outcome));
        }
        out.push(sdm_omis::Reply(replies).to_string());
    }
    out
}
