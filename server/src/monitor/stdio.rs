//! A started program's standard streams: how they are wired ([`IoMode`]: a pty, pipes, or
//! the launcher's), the reader threads that send its output lines to the node, its stdin,
//! and the idle marker the front-end aligns lines by.

use std::os::fd::{AsFd, OwnedFd};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use bytes::Bytes;
use sdm_proto::Kind;

use super::{MonResult, Monitor, Output, ProcState, STDERR, STDOUT, errno, idle, raw, state, sys};
use crate::error::{Error, ErrorKind};

/// How a started process's stdio is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoMode {
    /// A pseudo-terminal: stdout and stderr interleave as on a terminal.
    Pty,
    /// Pipes: stdout and stderr stay apart.
    Pipes,
    /// Left to the launcher (the seed's attach case): inherited from the server.
    Runtime,
}

impl std::str::FromStr for IoMode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "pty" => Ok(Self::Pty),
            "pipes" => Ok(Self::Pipes),
            "runtime" => Ok(Self::Runtime),
            _ => Err(Error::new(
                ErrorKind::BadInput,
                format!("unknown stdio mode {s:?}: expected pty, pipes or runtime"),
            )),
        }
    }
}

/// Reads `fd` line by line and sends each line (tagged with `stream`) as stdio; blocks when
/// the channel is full, which blocks the process when its output buffer fills. What it
/// holds is kept in a tap, added to `taps` with a copy of `fd`, for the idle watch.
fn spawn_reader(
    fd: std::fs::File,
    stream: u8,
    (tx, rank): (Output, u32),
    taps: &mut Vec<(Arc<idle::Tap>, std::os::fd::OwnedFd)>,
) -> std::thread::JoinHandle<()> {
    let tap = Arc::new(idle::Tap::default());
    if let Ok(copy) = fd.try_clone() {
        taps.push((tap.clone(), copy.into()));
    }
    std::thread::Builder::new()
        .name("sdm-stdio".into())
        .spawn(move || {
            idle::read_lines(fd, stream, &tap, |line| {
                tx.blocking_send((Kind::Stdio, rank, line)).is_ok()
            })
        })
        .expect("spawning a stdio reader")
}

/// Wires `cmd`'s stdio as `mode` says; returns the pty master for a pty.
pub(super) fn wire(cmd: &mut Command, mode: IoMode) -> MonResult<Option<OwnedFd>> {
    match mode {
        IoMode::Pty => {
            let pty = nix::pty::openpty(None, None).map_err(|e| sys("openpty", e))?;
            use nix::sys::termios::{LocalFlags, OutputFlags, SetArg, tcgetattr, tcsetattr};
            let mut t = tcgetattr(&pty.slave).map_err(|e| sys("tcgetattr", e))?;
            // No echo of forwarded input, no CR added to output lines.
            t.local_flags.remove(LocalFlags::ECHO | LocalFlags::ECHONL);
            t.output_flags.remove(OutputFlags::ONLCR);
            tcsetattr(&pty.slave, SetArg::TCSANOW, &t).map_err(|e| sys("tcsetattr", e))?;
            let dup = |f: &OwnedFd| f.try_clone().map_err(|e| sys("dup pty", e));
            cmd.stdin(Stdio::from(dup(&pty.slave)?))
                .stdout(Stdio::from(dup(&pty.slave)?))
                .stderr(Stdio::from(pty.slave));
            Ok(Some(pty.master))
        }
        IoMode::Pipes => {
            cmd.stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            Ok(None)
        }
        IoMode::Runtime => {
            let out = std::io::stderr()
                .as_fd()
                .try_clone_to_owned()
                .map_err(|e| sys("dup stderr", e))?;
            cmd.stdin(Stdio::null()).stdout(out);
            Ok(None)
        }
    }
}

/// A started program's streams as the monitor holds them.
pub(super) struct Streams {
    /// Where stdin data goes; `None` when the launcher has it.
    pub(super) stdin: Option<std::fs::File>,
    /// Whether stdin is a pty (end of input is ^D) or a pipe (end of input is close).
    pub(super) stdin_is_pty: bool,
    /// The threads reading its output.
    pub(super) readers: Vec<std::thread::JoinHandle<()>>,
    /// What the readers hold, with a copy of their fds, for the idle watch.
    pub(super) taps: Vec<(Arc<idle::Tap>, OwnedFd)>,
}

/// Starts the readers of `child`'s output (wired by [`wire`] as `mode` says, `master` the
/// pty's) sending to `out`, and takes its stdin.
pub(super) fn read(
    child: &mut Child,
    mode: IoMode,
    master: Option<OwnedFd>,
    out: (Output, u32),
) -> MonResult<Streams> {
    let mut readers = Vec::new();
    let mut taps = Vec::new();
    let (stdin, stdin_is_pty) = match (mode, master) {
        (IoMode::Pty, Some(m)) => {
            let w = std::fs::File::from(m.try_clone().map_err(|e| sys("dup pty", e))?);
            readers.push(spawn_reader(
                std::fs::File::from(m),
                STDOUT,
                out.clone(),
                &mut taps,
            ));
            (Some(w), true)
        }
        (IoMode::Pipes, _) => {
            let stdout = child.stdout.take().expect("piped");
            let stderr = child.stderr.take().expect("piped");
            readers.push(spawn_reader(
                std::fs::File::from(OwnedFd::from(stdout)),
                STDOUT,
                out.clone(),
                &mut taps,
            ));
            readers.push(spawn_reader(
                std::fs::File::from(OwnedFd::from(stderr)),
                STDERR,
                out,
                &mut taps,
            ));
            let w = child
                .stdin
                .take()
                .map(|s| std::fs::File::from(OwnedFd::from(s)));
            (w, false)
        }
        _ => (None, false),
    };
    Ok(Streams {
        stdin,
        stdin_is_pty,
        readers,
        taps,
    })
}

impl Monitor {
    /// Writes `data` to the process's stdin; `eof` then ends its input (^D on a pty, close
    /// on a pipe).
    pub fn write_stdin(&mut self, data: &[u8], eof: bool) -> MonResult<()> {
        use std::io::Write;
        let p = self.proc()?;
        let Some(w) = p.stdin.as_mut() else {
            return if data.is_empty() {
                Ok(())
            } else {
                Err(state("the process's stdin is closed".into()).with_pid(raw(p.pid)))
            };
        };
        w.write_all(data)
            .map_err(|e| errno(p.pid, "writing stdin", e))?;
        if eof {
            if p.stdin_is_pty {
                // ^D ends input at the start of a line; a partial line needs two.
                let eot: &[u8] = if data.is_empty() || data.ends_with(b"\n") {
                    b"\x04"
                } else {
                    b"\x04\x04"
                };
                w.write_all(eot)
                    .map_err(|e| errno(p.pid, "writing stdin", e))?;
            } else {
                p.stdin = None;
            }
        }
        Ok(())
    }

    /// Sends an idle marker up when the started program has gone idle with all its output
    /// sent (see [`idle`]): the front-end stops waiting for its later lines.
    pub(super) fn check_idle(&mut self) {
        let alive = self.proc.as_ref().is_some_and(|p| {
            matches!(
                p.state,
                ProcState::Running | ProcState::Stopped | ProcState::AtBreakpoint(_)
            )
        });
        let Some(w) = self.idle.as_mut().filter(|_| alive) else {
            return;
        };
        let (tx, rank) = (&self.stdio, self.rank);
        w.check(std::time::Instant::now(), || {
            let marker = Bytes::from_static(&[sdm_overlay::stdio::IDLE]);
            tx.try_send((Kind::Stdio, rank, marker)).is_ok()
        });
    }
}
