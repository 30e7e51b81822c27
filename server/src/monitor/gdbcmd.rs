//! gdb's own console commands on a held process (`sdm_gdb`): what the console's gdb
//! spellings (`info args`, `x/`, `set var`, `display`, `ptype`) and `gdb COMMAND` run,
//! answered with the text gdb prints. Commands that move or let go of the process are
//! refused: the monitor must keep knowing its state (the console's `cont`, `next`,
//! `detach`… do those).

use super::symbolic::{PATIENCE, gdb_err, quote};
use super::{MonResult, Monitor};
use crate::error::{Error, ErrorKind};

/// gdb commands (and their abbreviations) that run, stop, end or let go of the process.
const REFUSED: &[&str] = &[
    "advance",
    "attach",
    "c",
    "cont",
    "continue",
    "detach",
    "fg",
    "finish",
    "jump",
    "k",
    "kill",
    "n",
    "next",
    "nexti",
    "ni",
    "q",
    "quit",
    "r",
    "run",
    "s",
    "signal",
    "si",
    "start",
    "starti",
    "step",
    "stepi",
    "u",
    "until",
    "interrupt",
    "queue-signal",
    "shell",
    "pipe",
    "!",
    "|",
];

impl Monitor {
    /// Runs the gdb console command `command` on the (stopped) held process, handing it
    /// to gdb first; returns what gdb printed.
    pub fn gdb_console(&mut self, command: &str) -> MonResult<String> {
        let command = command.trim();
        let verb = command
            .split(|c: char| c.is_whitespace() || c == '/')
            .next()
            .unwrap_or("");
        if command.is_empty() {
            return Err(Error::new(ErrorKind::BadInput, "no gdb command given"));
        }
        if REFUSED.contains(&verb) {
            return Err(Error::new(
                ErrorKind::BadInput,
                format!(
                    "gdb {verb:?} would move or let go of the process: use the console's own \
                     command (cont, next, step, finish, until, kill, detach)"
                ),
            ));
        }
        let h = self.held_stopped()?;
        let d = h
            .gdb
            .command(
                &format!("-interpreter-exec console {}", quote(command)),
                PATIENCE,
            )
            .map_err(gdb_err)?;
        Ok(d.console.trim_end().to_owned())
    }
}
