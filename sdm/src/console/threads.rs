//! Threads in the console: `info threads` (every thread of every rank, merged by number,
//! name and place) and `thread N` (the one thread `bt` shows); and the request both `bt` and
//! `info threads` make, with the running ranks stopped for it and continued after.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::anyhow;
use sdm_omis::Value;
use sdm_proto::IdSet;

use super::{Console, Line, line_failed};
use crate::stacks::FrameFields;

impl Console {
    /// Sends `service()` to `dest`, the running ranks among them stopped for it and
    /// continued after (only those); returns the replies, and whether continuing failed
    /// somewhere (printed as `verb`'s failure).
    pub(super) async fn request_stopped(
        &mut self,
        verb: &str,
        dest: &IdSet,
        service: &str,
        out: &mut dyn Write,
    ) -> anyhow::Result<(Vec<Line>, bool)> {
        let stopped = self.stop_running(dest).await?;
        let id = self.id();
        let replies = self.request(dest, &format!("{id} [] {service}()")).await?;
        let mut failed = false;
        if !stopped.is_empty() {
            let id = self.id();
            let cont = self.request(&stopped, &format!("{id} [] cont()")).await?;
            let bad: Vec<Line> = cont.into_iter().filter(line_failed).collect();
            failed = self.print_lines(verb, &bad, out, crate::words::reply)?;
        }
        Ok((replies, failed))
    }

    /// `info threads [IDS]`: each thread of each rank, `[ranks] N "name" place`, merged
    /// where number, name and place agree; in thread order, then by lowest rank.
    pub(super) async fn info_threads(
        &mut self,
        rest: &str,
        out: &mut dyn Write,
    ) -> anyhow::Result<bool> {
        let dest = self.ranks(rest)?;
        let (lines, mut failed) = self
            .request_stopped("info threads", &dest, "sdm_stacks", out)
            .await?;
        let mut merged: BTreeMap<(usize, String, String), IdSet> = BTreeMap::new();
        let mut other = Vec::new();
        for l in &lines {
            match l
                .reply
                .as_ref()
                .and_then(|r| r.results.first())
                .and_then(threads_of)
            {
                Some(threads) => {
                    for (n, (name, place)) in threads.into_iter().enumerate() {
                        merged
                            .entry((n + 1, name, place))
                            .or_default()
                            .union_with(&l.ids);
                    }
                }
                None => other.push(l.clone()),
            }
        }
        let mut rows: Vec<_> = merged.into_iter().collect();
        rows.sort_by_key(|((n, ..), ids)| (*n, ids.first()));
        for ((n, name, place), ids) in rows {
            if self.json {
                let j = serde_json::json!({"command": "info threads", "ranks": ids.to_string(),
                    "thread": n, "name": name, "place": place});
                writeln!(out, "{j}")?;
            } else {
                writeln!(out, "{ids} {n} {} {place}", Value::Str(name))?;
            }
        }
        failed |= self.print_lines("info threads", &other, out, crate::words::reply)?;
        Ok(failed)
    }

    /// `thread [N|all]`: the thread `bt` shows; prints the choice.
    pub(super) fn select_thread(&mut self, rest: &str, out: &mut dyn Write) -> anyhow::Result<()> {
        match rest.trim() {
            "" => {}
            "all" => self.thread = None,
            n => {
                let n = crate::stacks::parse_thread(n).map_err(|e| anyhow!("thread {e}"))?;
                self.thread = Some(n);
            }
        }
        match self.thread {
            Some(n) => writeln!(out, "thread {n}")?,
            None => writeln!(out, "thread all")?,
        }
        Ok(())
    }
}

/// The name and place of each thread in a reply to `sdm_stacks`, in its order. The place
/// is the innermost frame, and where that has no source line, the innermost that has:
/// `pause, called from wait_here at prog.c:16`.
fn threads_of(v: &Value) -> Option<Vec<(String, String)>> {
    let Value::List(threads) = v else {
        return None;
    };
    threads
        .iter()
        .map(|t| {
            let Value::List(parts) = t else { return None };
            let (Some(Value::Str(name)), Some(Value::List(frames))) = (parts.get(1), parts.get(2))
            else {
                return None;
            };
            let fields: Vec<FrameFields> =
                frames.iter().filter_map(FrameFields::from_value).collect();
            let place = match fields.first() {
                None => "no frames".to_owned(),
                Some(f) if f.line.is_some() => f.label(false),
                Some(f) => match fields.iter().find(|f| f.line.is_some()) {
                    Some(own) => format!("{}, called from {}", f.label(false), own.label(false)),
                    None => f.label(false),
                },
            };
            Some((name.clone(), place))
        })
        .collect()
}
