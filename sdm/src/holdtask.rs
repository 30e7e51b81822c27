//! `sdm hold-task -- PROGRAM ARGS...`: one task of a job `sdm run` launches through a
//! launcher without MPIR (MPICH's hydra here), held for the tool as slurmstepd holds srun's
//! tasks for a debugger. This process forks the task, which traces itself and execs
//! PROGRAM; at the exec stop the task is stopped with SIGSTOP and let go untraced: it
//! waits before the dynamic linker ran one instruction, in state `T`, until the server that
//! attaches to it continues it. The task keeps this process's environment and descriptors
//! (the launcher's PMI connection); this process waits for it and exits as it did. Should
//! this process die, the task is killed (`PR_SET_PDEATHSIG`): a launcher ending its job
//! ends both.

use std::ffi::CString;

use anyhow::Context;
use nix::sys::ptrace;
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, execvp, fork};

/// Runs `program` held (see the module documentation); returns its exit status (128 + N
/// when signal N ended it). Must run before any other thread exists (it forks).
pub(crate) fn run(program: &[String]) -> anyhow::Result<i32> {
    let argv: Vec<CString> = program
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()
        .context("a program argument holds a NUL byte")?;
    anyhow::ensure!(!argv.is_empty(), "no program to hold");
    // SAFETY: no other thread exists (the caller runs before any), and the child only
    // makes system calls before exec or _exit.
    match unsafe { fork() }.context("fork")? {
        ForkResult::Child => {
            let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
            reset_signals();
            if ptrace::traceme().is_ok() {
                let _ = execvp(&argv[0], &argv);
            }
            // SAFETY: _exit ends the child without the parent's exit handlers and buffers.
            unsafe { libc::_exit(127) }
        }
        ForkResult::Parent { child } => hold_then_wait(child, &program[0]),
    }
}

/// Gives the task the signal state a shell would: SIGPIPE at its default (an ignored
/// disposition survives exec, and Rust ignores SIGPIPE) and no signal blocked.
fn reset_signals() {
    // SAFETY: no handler function is installed; signal() is async-signal-safe.
    let _ =
        unsafe { nix::sys::signal::signal(Signal::SIGPIPE, nix::sys::signal::SigHandler::SigDfl) };
    let _ = nix::sys::signal::sigprocmask(
        nix::sys::signal::SigmaskHow::SIG_SETMASK,
        Some(&nix::sys::signal::SigSet::empty()),
        None,
    );
}

/// At the task's exec stop: stopped, untraced; then waits for its end.
fn hold_then_wait(child: Pid, program: &str) -> anyhow::Result<i32> {
    match waitpid(child, None).context("waiting for the task's exec")? {
        WaitStatus::Stopped(_, Signal::SIGTRAP) => {
            // The SIGSTOP is pending at the detach: the task stops as soon as it is let go.
            kill(child, Signal::SIGSTOP).context("stopping the task")?;
            ptrace::detach(child, None).context("letting the task go")?;
        }
        WaitStatus::Exited(_, 127) => anyhow::bail!("cannot run {program}"),
        other => return Ok(status_code(other).unwrap_or(1)),
    }
    loop {
        match waitpid(child, None) {
            Ok(s) => {
                if let Some(code) = status_code(s) {
                    return Ok(code);
                }
            }
            Err(nix::Error::EINTR) => {}
            Err(e) => return Err(e).context("waiting for the task"),
        }
    }
}

/// The exit status a shell would give an ended task; `None` while it has not ended.
fn status_code(s: WaitStatus) -> Option<i32> {
    match s {
        WaitStatus::Exited(_, c) => Some(c),
        WaitStatus::Signaled(_, sig, _) => Some(128 + sig as i32),
        _ => None,
    }
}
