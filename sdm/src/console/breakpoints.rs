//! Breakpoints by function or address in the console: `break`, `info break`, `delete`,
//! numbered by the console and set on the ranks asked for.

use std::io::Write;

use anyhow::anyhow;
use sdm_omis::Value;

use super::{Console, Line, line_failed, ok_ids};

impl Console {
    /// `break LOCATION [IDS]`: sets the breakpoint, numbered by the console; returns
    /// whether it failed somewhere.
    pub(super) async fn set_breakpoint(
        &mut self,
        rest: &str,
        out: &mut dyn Write,
    ) -> anyhow::Result<bool> {
        let (target, idtext) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        if target.is_empty() {
            anyhow::bail!("break: give a function name or a 0x address (`help break`)");
        }
        let dest = self.ranks(idtext.trim())?;
        let id = self.id();
        let lines = self
            .request(&dest, &format!("{id} [] breakpoint({})", location(target)))
            .await?;
        let set = ok_ids(&lines);
        if !set.is_empty() {
            let n = self.state.add_breakpoint(target, &set);
            if self.json {
                writeln!(
                    out,
                    "{}",
                    serde_json::json!({"command": "break", "number": n, "location": target, "ids": set.to_string()})
                )?;
            } else {
                writeln!(out, "{set} breakpoint {n} at {target}")?;
            }
        }
        let bad: Vec<Line> = lines.into_iter().filter(line_failed).collect();
        self.print_lines("break", &bad, out, crate::words::reply)
    }

    /// `info break`: the breakpoints with their numbers, locations and ranks.
    pub(super) fn info_break(&self, out: &mut dyn Write) -> anyhow::Result<()> {
        if self.json {
            let list: Vec<serde_json::Value> = self
                .state
                .breakpoints
                .iter()
                .map(|b| serde_json::json!({"number": b.number, "location": b.location, "ids": b.ranks.to_string()}))
                .collect();
            writeln!(
                out,
                "{}",
                serde_json::json!({"command": "info break", "breakpoints": list})
            )?;
        } else {
            write!(out, "{}", self.state.breakpoint_table())?;
        }
        Ok(())
    }

    /// `delete [N...]`: removes breakpoints (all without numbers) from their servers;
    /// returns whether one could not be removed somewhere.
    pub(super) async fn delete_breakpoints(
        &mut self,
        rest: &str,
        out: &mut dyn Write,
    ) -> anyhow::Result<bool> {
        let mut chosen = Vec::new();
        for w in rest.split_whitespace() {
            let n: u32 = w
                .parse()
                .map_err(|_| anyhow!("delete: {w:?} is not a breakpoint number"))?;
            let b = self.state.breakpoints.iter().find(|b| b.number == n);
            chosen.push(
                b.cloned().ok_or_else(|| {
                    anyhow!("delete: no breakpoint {n} (`info break` lists them)")
                })?,
            );
        }
        if rest.is_empty() {
            chosen = self.state.breakpoints.clone();
        }
        let mut failed = false;
        for b in chosen {
            let id = self.id();
            let text = format!("{id} [] sdm_delete_breakpoint({})", location(&b.location));
            let lines = self.request(&b.ranks, &text).await?;
            let gone = ok_ids(&lines);
            self.state.remove_ranks(b.number, &gone);
            if !gone.is_empty() {
                if self.json {
                    writeln!(
                        out,
                        "{}",
                        serde_json::json!({"command": "delete", "number": b.number, "ids": gone.to_string()})
                    )?;
                } else {
                    writeln!(out, "{gone} deleted breakpoint {}", b.number)?;
                }
            }
            let bad: Vec<Line> = lines.into_iter().filter(line_failed).collect();
            failed |= self.print_lines("delete", &bad, out, crate::words::reply)?;
        }
        Ok(failed)
    }
}

/// A breakpoint location as an OMIS parameter: an address stays a number, a function
/// name becomes a string.
fn location(target: &str) -> String {
    if target.starts_with("0x") {
        target.to_owned()
    } else {
        Value::Str(target.into()).to_string()
    }
}
