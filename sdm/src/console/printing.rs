//! The console's printing: the programs' output and events as they arrive (aligned across
//! ranks, merged, or one line per rank with `--label`), and merged result lines of a
//! command, as text or JSON lines.

use std::io::Write;
use std::time::Duration;

use sdm_omis::BasicReply;
use sdm_overlay::stdio::{STDERR, StdioLine};
use sdm_overlay::template;
use sdm_proto::{IdSet, LinkEndKind, Message, Status};

use super::{Console, Line, line_failed, next_query};

impl Console {
    /// Handles one message that is not a reply: output is aligned across ranks and events
    /// merged (an event never passes its sources' output), then printed; a program's end
    /// is noted as it arrives.
    pub(super) fn incoming(&mut self, m: Message, out: &mut dyn Write) -> anyhow::Result<()> {
        let line = StdioLine {
            kind: m.kind,
            sources: m.source,
            index: m.op,
            payload: m.payload,
        };
        let now = std::time::Instant::now();
        let due = match sdm_client::iof::exit_status(&line) {
            Some(status) => {
                if !line.sources.is_subset(&self.killed) {
                    self.exit_status = self.exit_status.max(status);
                }
                self.terminated.union_with(&line.sources);
                self.stdio.push_end(now, line)
            }
            None => self.stdio.push(now, line),
        };
        for l in due {
            self.print_line(&l, out)?;
        }
        Ok(())
    }

    /// `ranks` will print nothing more (their program never started, their server was
    /// lost): output stops waiting for them.
    pub(super) fn ended_silently(
        &mut self,
        ranks: &IdSet,
        out: &mut dyn Write,
    ) -> anyhow::Result<()> {
        self.terminated.union_with(ranks);
        for l in self.stdio.end(std::time::Instant::now(), ranks) {
            self.print_line(&l, out)?;
        }
        Ok(())
    }

    /// Prints stdio lines whose coalescing window has passed (`all`: everything).
    pub(super) fn flush_stdio(&mut self, all: bool, out: &mut dyn Write) -> anyhow::Result<()> {
        let lines = if all {
            self.stdio.drain()
        } else {
            self.stdio.expire(std::time::Instant::now())
        };
        for l in lines {
            self.print_line(&l, out)?;
        }
        Ok(())
    }

    pub(super) fn print_line(&mut self, l: &StdioLine, out: &mut dyn Write) -> anyhow::Result<()> {
        if l.kind != sdm_proto::Kind::Stdio {
            self.note_hit(&l.sources, &l.payload);
            return self.print_event(&l.sources, &l.payload, out);
        }
        let stream = template::stream_of(&l.payload);
        let mut err = std::io::stderr();
        let json = self.json;
        let label = self.label;
        let w: &mut dyn Write = match (stream == STDERR, self.stderr.as_mut()) {
            (true, Some(e)) => e,
            (true, None) => &mut err,
            (false, _) => out,
        };
        let name = if stream == STDERR { "stderr" } else { "stdout" };
        if template::is_template(&l.payload) {
            return print_template(l, name, json, label, w);
        }
        let text = String::from_utf8_lossy(l.payload.get(1..).unwrap_or_default());
        print_text(w, &l.sources, &text, name, json, label)
    }

    /// Prints the output and events already received (without waiting), then the merged
    /// lines that are due (`all`: every one held).
    pub(super) fn print_received(&mut self, all: bool, out: &mut dyn Write) -> anyhow::Result<()> {
        while let Some(m) = self.session.queued_event() {
            self.incoming(m, out)?;
        }
        self.flush_stdio(all, out)
    }

    /// Prints output and events as they come, for at most 20 ms or until `until` (taking
    /// none while the terminal's [`crate::screen::Room`] is full).
    pub async fn pump(
        &mut self,
        until: tokio::time::Instant,
        out: &mut dyn Write,
    ) -> anyhow::Result<()> {
        let tick = tokio::time::Instant::now() + Duration::from_millis(20);
        if let Some(room) = &self.room
            && tokio::time::timeout_at(until.min(tick), room.wait())
                .await
                .is_err()
        {
            // The terminal is behind: the output waits in the tree (its programs in write).
            return Ok(());
        }
        tokio::select! {
            () = tokio::time::sleep_until(until.min(tick)) => {}
            ev = self.session.next_event() => match ev {
                Some(m) => self.incoming(m, out)?,
                None => anyhow::bail!("the tree went away: {}", self.session.closed_reason()),
            },
            Some(q) = next_query(&mut self.queries) => self.answer(q).await,
        }
        self.flush_stdio(false, out)
    }

    /// Prints merged result lines (`show` puts a reply in words); returns whether one of
    /// them is a failure: an error reply, a lost or timed-out server.
    pub(super) fn print_lines(
        &self,
        cmd: &str,
        lines: &[Line],
        out: &mut dyn Write,
        show: impl Fn(&BasicReply) -> String,
    ) -> anyhow::Result<bool> {
        let mut failed = false;
        // Replies that differ (each rank's pid, say) but read the same merge into one line.
        // A failure never merges with a success that reads the same.
        let mut shown: Vec<Shown> = Vec::new();
        for l in lines {
            let bad = line_failed(l);
            failed |= bad;
            let text = l.shown(&show);
            match shown.iter_mut().find(|s| {
                s.status == l.status && s.bad == bad && s.link_end == l.link_end && s.text == text
            }) {
                Some(s) => s.ids.union_with(&l.ids),
                None => shown.push(Shown {
                    status: l.status,
                    bad,
                    link_end: l.link_end,
                    text,
                    ids: l.ids.clone(),
                }),
            }
        }
        shown.sort_by_key(|s| s.ids.first());
        for Shown {
            status,
            bad,
            link_end,
            text,
            ids,
        } in shown
        {
            if self.json {
                let mut line = serde_json::json!({"command": cmd, "ids": ids.to_string(), "status": status_name(status), "failed": bad, "result": text});
                if let Some(end) = link_end {
                    line["link_end"] = link_end_name(end).into();
                }
                writeln!(out, "{line}")?;
            } else if text.contains('\n') {
                // Source lines, locals: one per line under the ranks they hold for.
                writeln!(out, "{ids}")?;
                for l in text.lines() {
                    writeln!(out, "    {l}")?;
                }
            } else {
                writeln!(out, "{ids} {text}")?;
            }
        }
        Ok(failed)
    }

    pub(super) fn print_event(
        &self,
        sources: &IdSet,
        payload: &[u8],
        out: &mut dyn Write,
    ) -> anyhow::Result<()> {
        let text = String::from_utf8_lossy(payload);
        if self.json {
            writeln!(
                out,
                "{}",
                serde_json::json!({"event": text, "ids": sources.to_string()})
            )?;
        } else {
            let text = crate::words::event(&text, |at| self.state.breakpoint_number(at));
            if self.label {
                for id in sources.iter() {
                    writeln!(out, "[{id}] {text}")?;
                }
            } else {
                writeln!(out, "{sources} {text}")?;
            }
        }
        Ok(())
    }
}

/// One printed result line: result lines that read the same, merged.
struct Shown {
    status: Status,
    /// A failure (never merged with a success that reads the same).
    bad: bool,
    link_end: Option<LinkEndKind>,
    text: String,
    ids: IdSet,
}

/// The `--json` name of how a lost server's link ended.
pub(crate) fn link_end_name(end: LinkEndKind) -> &'static str {
    match end {
        LinkEndKind::Goodbye => "goodbye",
        LinkEndKind::Closed => "closed",
        LinkEndKind::Io => "io",
        LinkEndKind::Protocol => "protocol",
        LinkEndKind::Silent => "silent",
        LinkEndKind::Unreachable => "unreachable",
    }
}

fn status_name(s: Status) -> &'static str {
    match s {
        Status::Replied => "replied",
        Status::Lost => "lost",
        Status::TimedOut => "timed_out",
        Status::Error => "error",
    }
}

/// Prints one line of text of `ids`: as JSON, once per rank (`label`), or merged.
fn print_text(
    w: &mut dyn Write,
    ids: &IdSet,
    text: &str,
    stream: &str,
    json: bool,
    label: bool,
) -> anyhow::Result<()> {
    if json {
        let line = serde_json::json!({"ids": ids.to_string(), "stream": stream, "line": text});
        writeln!(w, "{line}")?;
    } else if label {
        for id in ids.iter() {
            writeln!(w, "[{id}] {text}")?;
        }
    } else {
        writeln!(w, "{ids} {text}")?;
    }
    Ok(())
}

/// Prints a templated line: the template of its ranges (JSON: with the template and each
/// slot's statistics), then each outlier's exact line.
fn print_template(
    l: &StdioLine,
    stream: &str,
    json: bool,
    label: bool,
    w: &mut dyn Write,
) -> anyhow::Result<()> {
    let lines = match template::expanded(&l.payload, &l.sources) {
        Some(x) if json && !x.main.slots.iter().all(|s| s.min == s.max) => {
            let slots: Vec<serde_json::Value> = (x.main.slots.iter())
                .map(|s| {
                    serde_json::json!({"min": s.min, "max": s.max,
                        "min_at": s.min_at.as_ref().map(ToString::to_string),
                        "max_at": s.max_at.as_ref().map(ToString::to_string),
                        "mean": s.mean})
                })
                .collect();
            let line = serde_json::json!({"ids": x.main.ranks.to_string(), "stream": stream,
                "line": x.main.text, "template": x.main.pattern, "count": x.main.ranks.len(),
                "slots": slots});
            writeln!(w, "{line}")?;
            x.outliers
        }
        // (As `sdm_client`'s output handlers get them.)
        Some(x) => x.lines(),
        None => template::lines(&l.payload, &l.sources),
    };
    for (ids, text) in &lines {
        print_text(w, ids, text, stream, json, label)?;
    }
    Ok(())
}
