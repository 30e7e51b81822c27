//! Launch mode under a launcher that keeps no MPIR table (MPICH's hydra): each task is
//! started under `sdm hold-task` (holdtask.rs), which holds it stopped before its first
//! instruction, and the job's table is read from the launcher's process tree on every
//! host (tasks.rs) once every rank is there and held. The launcher itself runs untraced
//! throughout; releasing the job is continuing its tasks.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use sdm_server::mpir::ProcDesc;

use crate::tasks::Reader;

/// How a held job's tasks are found: where, and how long they may take to be held.
pub(crate) struct Finding {
    /// Reads the launcher's process tree on each host.
    pub reader: Reader,
    /// How long the tasks may take to be there and held.
    pub patience: Duration,
}

/// A job started with its tasks held: the launcher, and the table once all `n` are held.
/// Dropped before [`TreeHeld::release`] (the tree could not start), the launcher is ended
/// and with it the job: its tasks would otherwise stay stopped for good.
pub(crate) struct TreeHeld {
    /// The launcher (its standard output piped when captured), until released.
    launcher: Option<Child>,
    /// The tasks, by rank.
    pub table: Vec<ProcDesc>,
}

impl TreeHeld {
    /// The launcher, to wait for or end with the session; its tasks go on when the
    /// servers attached to them continue them.
    pub(crate) fn release(mut self) -> Option<Child> {
        self.launcher.take()
    }
}

impl Drop for TreeHeld {
    fn drop(&mut self) {
        let Some(mut launcher) = self.launcher.take() else {
            return;
        };
        // hydra ends its job on SIGTERM; SIGKILL after a while if it has not.
        sdm_server::hold::end_launcher(&mut launcher, sdm_server::hold::END_GRACE);
    }
}

/// Starts `argv` (the launcher, its arguments, then `sdm hold-task -- PROGRAM...`) with its
/// standard error on `stderr` and standard input this one's only with `input`; returns once
/// its `n` tasks are held, or an error naming why not (the launcher ended, or the patience
/// of `finding` passed). On every error the launcher is ended as [`TreeHeld`]'s drop ends
/// it (SIGTERM first), so hydra takes its proxies and held tasks with it.
pub(crate) fn start(
    argv: &[String],
    n: u32,
    input: bool,
    stderr: std::os::fd::OwnedFd,
    finding: &Finding,
) -> anyhow::Result<TreeHeld> {
    let (reader, patience) = (&finding.reader, finding.patience);
    let launcher = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(if input {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .with_context(|| format!("cannot start {}", argv[0]))?;
    let mut held = TreeHeld {
        launcher: Some(launcher),
        table: Vec::new(),
    };
    let deadline = std::time::Instant::now() + patience;
    loop {
        let Some(launcher) = held.launcher.as_mut() else {
            anyhow::bail!("{} was released before its tasks were held", argv[0]);
        };
        if let Some(status) = launcher.try_wait()? {
            anyhow::bail!(
                "{} ended ({status}) before its {n} tasks were held",
                argv[0]
            );
        }
        let found = match held_table(launcher, n, reader)? {
            Ok(table) => {
                held.table = table;
                return Ok(held);
            }
            Err(found) => found,
        };
        if std::time::Instant::now() > deadline {
            anyhow::bail!(
                "{}'s {n} tasks were not all held within {} s ({found}); it was ended",
                argv[0],
                patience.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The launcher's table once its `n` tasks are all there and held; `Ok(Err(what))` while
/// not (ranks still starting), saying what was found.
fn held_table(
    launcher: &Child,
    n: u32,
    reader: &Reader,
) -> anyhow::Result<Result<Vec<ProcDesc>, String>> {
    match reader.trees_held(&[(String::new(), launcher.id())]) {
        Ok((table, true)) if table.len() == n as usize => Ok(Ok(table)),
        Ok((table, _)) => Ok(Err(format!("{} tasks found, not all held", table.len()))),
        Err(e)
            if e.downcast_ref::<sdm_server::proctree::RankError>()
                .is_some() =>
        {
            Ok(Err(e.to_string()))
        }
        Err(e) => Err(e),
    }
}
