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

/// A job started with its tasks held: the launcher, and the table once all `n` are held.
pub(crate) struct TreeHeld {
    /// The launcher (its standard output piped when captured).
    pub launcher: Child,
    /// The tasks, by rank.
    pub table: Vec<ProcDesc>,
}

/// Starts `argv` (the launcher, its arguments, then `sdm hold-task -- PROGRAM...`) with its
/// standard error on `stderr` and standard input this one's only with `input`; returns once
/// its `n` tasks are held, or an error naming why not (the launcher ended).
pub(crate) fn start(
    argv: &[String],
    n: u32,
    input: bool,
    stderr: std::os::fd::OwnedFd,
    reader: &Reader,
) -> anyhow::Result<TreeHeld> {
    let mut launcher = Command::new(&argv[0])
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
    let root = [(String::new(), launcher.id())];
    loop {
        if let Some(status) = launcher.try_wait()? {
            anyhow::bail!(
                "{} ended ({status}) before its {n} tasks were held",
                argv[0]
            );
        }
        // Ranks still starting are missing: asked again until each is there and held.
        match reader.trees_held(&root) {
            Ok((table, true)) if table.len() == n as usize => {
                return Ok(TreeHeld { launcher, table });
            }
            Ok(_) => {}
            Err(e)
                if e.downcast_ref::<sdm_server::proctree::RankError>()
                    .is_some() => {}
            Err(e) => {
                let _ = launcher.kill();
                let _ = launcher.wait();
                return Err(e);
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
