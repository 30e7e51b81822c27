//! A running job's process table from its launcher's PMIx server: the first namespace
//! (in the server's order: jobs before the tools that connected since) whose
//! `PMIX_QUERY_PROC_TABLE` has processes, complete once every rank has its pid.

use std::path::Path;
use std::time::{Duration, Instant};

use super::PmixError;
use super::ffi::{
    PMIX_ERR_COMM_FAILURE, PMIX_ERR_LOST_CONNECTION, PMIX_ERR_UNREACH, PMIX_PROC_STATE_CONNECTED,
    PMIX_PROC_STATE_TERMINATED,
};
use super::tool::{Entry, Tool};
use crate::mpir::{ProcDesc, ProcTable, TableSource};

/// How long a job still starting gets to have every rank running.
const PATIENCE: Duration = Duration::from_secs(10);

/// Reads the process table of the job `launcher` (a PMIx launcher mapping `library`)
/// runs, waiting a few seconds for ranks still starting.
pub fn read_proctable(launcher: u32, library: &Path) -> Result<ProcTable, PmixError> {
    let tmpdir = super::launcher_tmpdir(launcher);
    let tool = Tool::connect(launcher, library, tmpdir.as_deref())?;
    let deadline = Instant::now() + PATIENCE;
    loop {
        match job_table(&tool, launcher, None, false) {
            Ok((_, t)) => return Ok(t),
            Err(PmixError::NotReady { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => return Err(e),
        }
    }
}

/// The job's namespace and table: the first namespace with processes (with `n`, one of
/// `n` processes). Every rank must have its pid, and with `connected`, have connected to
/// its server (a rank held by `PMIX_DEBUG_STOP_IN_INIT` waits in `PMIx_Init` from then on);
/// [`PmixError::NotReady`] otherwise, [`PmixError::Ended`] for ranks that already ended.
pub(super) fn job_table(
    tool: &Tool,
    launcher: u32,
    n: Option<u32>,
    connected: bool,
) -> Result<(String, ProcTable), PmixError> {
    let namespaces = tool.namespaces()?;
    for nspace in &namespaces {
        let entries = match tool.proc_table(nspace) {
            Ok(entries) => entries,
            // The server is gone: that is the error, not a missing job.
            Err(e) if unreachable(&e) => return Err(e),
            // A namespace the server cannot answer for (a tool's) is not the job.
            Err(_) => continue,
        };
        if entries.is_empty() || n.is_some_and(|n| entries.len() != n as usize) {
            continue;
        }
        check(launcher, nspace, &entries, connected)?;
        let tasks = entries
            .into_iter()
            .map(|e| ProcDesc {
                rank: e.rank,
                host: e.host,
                executable: e.executable,
                pid: e.pid,
            })
            .collect();
        let table = ProcTable {
            launcher,
            tasks,
            source: TableSource::Pmix,
        };
        return Ok((nspace.clone(), table));
    }
    match n {
        // A job being launched may not be in the server's tables yet.
        Some(_) => Err(PmixError::NotReady {
            launcher,
            nspace: namespaces.join(","),
            missing: "all".into(),
        }),
        _ => Err(PmixError::NoJob {
            launcher,
            namespaces: namespaces.join(","),
        }),
    }
}

/// Whether `e` says the launcher's server cannot be reached any more.
fn unreachable(e: &PmixError) -> bool {
    matches!(
        e,
        PmixError::Call { status, .. }
            if [PMIX_ERR_UNREACH, PMIX_ERR_COMM_FAILURE, PMIX_ERR_LOST_CONNECTION].contains(status)
    )
}

/// Whether every rank `0..len` is there and running (connected, with `connected`).
fn check(launcher: u32, nspace: &str, entries: &[Entry], connected: bool) -> Result<(), PmixError> {
    let ended: sdm_proto::IdSet = entries
        .iter()
        .filter(|e| e.state >= PMIX_PROC_STATE_TERMINATED)
        .map(|e| e.rank)
        .collect();
    if !ended.is_empty() {
        return Err(PmixError::Ended {
            launcher,
            nspace: nspace.to_owned(),
            ranks: ended.to_string(),
        });
    }
    let len = entries.len() as u32;
    let mut missing: sdm_proto::IdSet = (0..len)
        .filter(|r| entries.binary_search_by_key(r, |e| e.rank).is_err())
        .collect();
    for e in entries {
        if e.pid == 0 || (connected && e.state < PMIX_PROC_STATE_CONNECTED) {
            missing.insert(e.rank);
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(PmixError::NotReady {
            launcher,
            nspace: nspace.to_owned(),
            missing: missing.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(rank: u32, pid: u32, state: u8) -> Entry {
        Entry {
            rank,
            host: "h".into(),
            executable: "x".into(),
            pid,
            state,
        }
    }

    fn call(status: i32) -> PmixError {
        PmixError::Call {
            launcher: 1,
            call: "PMIx_Query_info",
            status,
            name: String::new(),
        }
    }

    #[test]
    fn only_a_lost_server_ends_the_search_for_the_job() {
        assert!(unreachable(&call(PMIX_ERR_UNREACH)));
        assert!(unreachable(&call(PMIX_ERR_LOST_CONNECTION)));
        // A tool's namespace has no proc table: the next namespace may be the job.
        assert!(!unreachable(&call(-46)));
        assert!(!unreachable(&PmixError::Busy));
    }

    #[test]
    fn a_table_is_ready_when_every_rank_runs() {
        let ok = [entry(0, 10, 6), entry(1, 11, 6)];
        assert!(check(1, "j@1", &ok, true).is_ok());
        // Forked but not yet in PMIx_Init: ready for attach, not yet held.
        let forked = [entry(0, 10, 5), entry(1, 11, 6)];
        assert!(check(1, "j@1", &forked, false).is_ok());
        match check(1, "j@1", &forked, true) {
            Err(PmixError::NotReady { missing, .. }) => assert_eq!(missing, "[0]"),
            other => panic!("{other:?}"),
        }
        let gap = [entry(0, 10, 6), entry(2, 12, 6), entry(3, 0, 2)];
        match check(1, "j@1", &gap, false) {
            Err(PmixError::NotReady { missing, .. }) => assert_eq!(missing, "[1,3]"),
            other => panic!("{other:?}"),
        }
        let ended = [entry(0, 10, 6), entry(1, 11, 20)];
        assert!(matches!(
            check(1, "j@1", &ended, false),
            Err(PmixError::Ended { .. })
        ));
    }
}
