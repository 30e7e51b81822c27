//! `bt --html FILE` in the console: what the hang report ([`crate::report`]) needs beyond
//! the merged stacks, asked of the ranks before `bt` stops them (each rank's host and
//! state) and read from the stacks they return (pid, the frames of the thread shown), then
//! the page written.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use sdm_omis::Value;
use sdm_proto::IdSet;

use super::{Console, Line};
use crate::report::{RankRow, Report, Sources};
use crate::stacks::{BtArgs, Stacks};

/// Each rank's host and state, asked before `bt` stops the running ones.
#[derive(Debug, Default)]
pub(super) struct RankFacts {
    host: HashMap<u32, String>,
    state: HashMap<u32, String>,
}

/// The meaning of a `/proc/PID/stat` state letter.
fn proc_state(letter: &str) -> Option<&'static str> {
    Some(match letter {
        "R" => "R: on a CPU",
        "S" => "S: sleeping",
        "D" => "D: in the kernel, uninterruptible",
        "T" => "T: stopped",
        "t" => "t: stopped by its tracer",
        "Z" => "Z: zombie",
        "I" => "I: idle",
        _ => return None,
    })
}

/// The results of `lines` per rank: each rank of a line gets its first result, or the
/// line's failure in words.
fn per_rank(lines: &[Line]) -> HashMap<u32, Result<Value, String>> {
    let mut out = HashMap::new();
    for l in lines {
        let result = match (&l.reply, l.status) {
            (Some(r), sdm_proto::Status::Replied) if !crate::words::is_error(r) => {
                r.results.first().cloned().ok_or_else(String::new)
            }
            _ => Err(l.shown(crate::words::reply)),
        };
        for rank in l.ids.iter() {
            out.insert(rank, result.clone());
        }
    }
    out
}

impl Console {
    /// Asks `dest` for each rank's host (`list_nodes`) and state: `sdm_status`'s word
    /// (`running`, `stopped`, `exited 0`) and, for a live process, its state letter in
    /// /proc (a hung rank spinning on a CPU or asleep in the kernel).
    pub(super) async fn rank_facts(&mut self, dest: &IdSet) -> anyhow::Result<RankFacts> {
        let id = self.id();
        let nodes = per_rank(&self.request(dest, &format!("{id} [] list_nodes()")).await?);
        let id = self.id();
        let status = per_rank(&self.request(dest, &format!("{id} [] sdm_status()")).await?);
        let id = self.id();
        let info = per_rank(
            &self
                .request(dest, &format!("{id} [] process_info()"))
                .await?,
        );
        let mut facts = RankFacts::default();
        for rank in dest.iter() {
            if let Some(Ok(Value::List(node))) = nodes.get(&rank)
                && let Some(Value::Str(host)) = node.get(1)
            {
                facts.host.insert(rank, host.clone());
            }
            let word = match status.get(&rank) {
                Some(Ok(Value::Str(s))) => s.split(" in ").next().unwrap_or(s).to_owned(),
                Some(Err(why)) => why.clone(),
                _ => "unknown".to_owned(),
            };
            let state = match info.get(&rank) {
                Some(Ok(Value::Str(letter))) => match proc_state(letter) {
                    Some(meaning) => format!("{word} ({meaning})"),
                    None => word,
                },
                _ => word,
            };
            facts.state.insert(rank, state);
        }
        Ok(facts)
    }

    /// Writes the report of `stacks` into `path`, the ranks' rows from `facts` and from
    /// `replies` (the last sample's replies to `sdm_stacks`); says where on `out` (in JSON:
    /// `{"command": "bt", "report": PATH}`, a line after the view's).
    pub(super) fn write_report(
        &self,
        path: &Path,
        stacks: &Stacks,
        a: &BtArgs,
        facts: RankFacts,
        replies: &[Line],
        out: &mut dyn Write,
    ) -> anyhow::Result<()> {
        let mut rows: HashMap<u32, RankRow> = HashMap::new();
        for l in replies {
            let Some(Value::List(threads)) = l.reply.as_ref().and_then(|r| r.results.first())
            else {
                continue;
            };
            let (pid, path) = rank_stack(threads, a);
            for rank in l.ids.iter() {
                let row = rows.entry(rank).or_default();
                row.pid = pid;
                row.path.clone_from(&path);
            }
        }
        let dest = self.ranks(&a.ids)?;
        let mut ranks: Vec<RankRow> = Vec::with_capacity(dest.len() as usize);
        for rank in dest.iter() {
            let mut row = rows.remove(&rank).unwrap_or_default();
            row.rank = rank;
            row.host = facts.host.get(&rank).cloned().unwrap_or_else(|| "?".into());
            row.state = facts.state.get(&rank).cloned().unwrap_or_default();
            ranks.push(row);
        }
        // Sources are read through the processes of this host.
        let here = sdm_server::monitor::hostname();
        let local = ranks
            .iter()
            .filter(|r| crate::cli::is_this_host(&r.host, &here))
            .filter_map(|r| r.pid);
        let sources = Sources::of_processes(local);
        let missing = replies
            .iter()
            .filter(|l| {
                !matches!(
                    l.reply.as_ref().and_then(|r| r.results.first()),
                    Some(Value::List(_))
                )
            })
            .map(|l| (l.ids.clone(), l.shown(crate::words::reply)))
            .collect();
        let report = Report {
            stacks,
            ranks,
            missing,
            job_size: self.session.all().len(),
            samples: a.samples,
            when: std::time::SystemTime::now(),
            command_line: self.invocation.clone(),
            console_commands: self.history.clone(),
            sources: &sources,
        };
        crate::report::write(path, &report)?;
        if self.json || a.json {
            let j = serde_json::json!({"command": "bt", "report": path.display().to_string()});
            writeln!(out, "{j}")?;
        } else {
            writeln!(out, "report written to {}", path.display())?;
        }
        Ok(())
    }
}

/// A rank's pid (its main thread's id) and the frames of the thread `bt` shows (the main
/// one unless `a.thread`), as merged, from its reply to `sdm_stacks`.
fn rank_stack(threads: &[Value], a: &BtArgs) -> (Option<u32>, Vec<String>) {
    let thread = |n: usize| match threads.get(n) {
        Some(Value::List(parts)) => Some(parts),
        _ => None,
    };
    let pid = match thread(0).and_then(|t| t.first()) {
        Some(Value::Int(tid)) => u32::try_from(*tid).ok(),
        _ => None,
    };
    let shown = a.thread.map_or(0, |n| n as usize - 1);
    let path = match thread(shown).and_then(|t| t.get(2)) {
        Some(Value::List(frames)) => crate::stacks::merged_frames(frames, a).1,
        _ => Vec::new(),
    };
    (pid, path)
}
