//! The console's symbolic debugger commands (`print`, `info locals`, `frame`, `up`, `down`,
//! `list`, `break FILE:LINE [if COND]`, `tbreak`, `watch`, `step`, `next`, `finish`,
//! `until`), gdb's own spellings passed to the ranks' gdbs (`ptype`, `whatis`, `x/`,
//! `set var`, `display`, `info args` and other `info` topics, `gdb COMMAND`) and its
//! process groups (`group`, `focus`, set algebra over id-sets).
//!
//! The commands become the `sdm_*` symbolic OMIS services; replies of ranks in the same
//! state are byte-identical and merge in the tree, so `print i` prints `[0-6] i = 42`.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::anyhow;
use sdm_omis::Value;
use sdm_proto::IdSet;

use super::{Console, Line, known_ids, line_failed, ok_ids};

/// Named id-sets, the focus and the classes of the last `bt --classes`.
#[derive(Debug, Default)]
pub(super) struct Groups {
    named: BTreeMap<String, IdSet>,
    /// The group commands act on when they name no ranks (`None`: all).
    focus: Option<(String, IdSet)>,
    /// The rank classes of the last `bt` (class K is `classes[K-1]`).
    pub(super) classes: Vec<IdSet>,
}

/// A token of an id-set expression.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ids(String),
    Name(String),
    Op(char),
}

fn tokens(s: &str) -> anyhow::Result<Vec<Tok>> {
    let b = s.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'[' {
            let end = s[i..]
                .find(']')
                .ok_or_else(|| anyhow!("ids {s:?}: `[` without `]`"))?;
            out.push(Tok::Ids(s[i..=i + end].to_owned()));
            i += end + 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < b.len()
                && (b[i].is_ascii_digit()
                    || (matches!(b[i], b',' | b'-')
                        && b.get(i + 1).is_some_and(u8::is_ascii_digit)))
            {
                i += 1;
            }
            out.push(Tok::Ids(format!("[{}]", &s[start..i])));
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(Tok::Name(s[start..i].to_owned()));
        } else if matches!(c, b'|' | b'&' | b'-') {
            out.push(Tok::Op(c as char));
            i += 1;
        } else {
            anyhow::bail!(
                "ids {s:?}: unexpected {:?} (ranks such as 0-3,7, group names, | & -)",
                c as char
            );
        }
    }
    Ok(out)
}

impl Groups {
    /// The ranks `s` names, within `all`: ranks (`2`, `0-3,7`, `[0-3,7]`), group names,
    /// `all`, combined left to right with `|` (union), `&` (intersection) and `-`
    /// (difference). Empty: the focus (all ranks without one).
    pub(super) fn resolve(&self, all: &IdSet, s: &str) -> anyhow::Result<IdSet> {
        let s = s.trim();
        if s.is_empty() {
            return Ok(self
                .focus
                .as_ref()
                .map_or_else(|| all.clone(), |(_, ids)| ids.clone()));
        }
        let toks = tokens(s)?;
        let operand = |t: &Tok| -> anyhow::Result<IdSet> {
            match t {
                Tok::Ids(text) => {
                    let ids = text.parse::<IdSet>().map_err(|e| anyhow!("{e}"))?;
                    known_ids(all, &ids)
                }
                Tok::Name(n) if n == "all" => Ok(all.clone()),
                Tok::Name(n) => self.named.get(n).cloned().ok_or_else(|| {
                    anyhow!("no group {n:?} (`group` lists the groups; `group {n} IDS` makes one)")
                }),
                Tok::Op(o) => Err(anyhow!("ids {s:?}: {o:?} needs a set on its left")),
            }
        };
        let mut it = toks.iter();
        let mut acc = operand(it.next().expect("not empty"))?;
        while let Some(t) = it.next() {
            let Tok::Op(op) = t else {
                anyhow::bail!("ids {s:?}: expected |, & or - between sets");
            };
            let rhs = operand(
                it.next()
                    .ok_or_else(|| anyhow!("ids {s:?}: {op:?} needs a set on its right"))?,
            )?;
            acc = match op {
                '|' => &acc | &rhs,
                '&' => &acc & &rhs,
                _ => &acc - &rhs,
            };
        }
        Ok(acc)
    }

    /// Whether `s` reads as an id-set expression here (so the end of a command is its
    /// ranks, not part of an expression): it starts with `[…]`, a group name or `all`,
    /// and names ranks the tree has.
    fn is_ids(&self, all: &IdSet, s: &str) -> bool {
        let s = s.trim();
        let first = s
            .split(|c: char| c.is_whitespace() || matches!(c, '|' | '&' | '-'))
            .next()
            .unwrap_or("");
        (s.starts_with('[') || self.named.contains_key(first) || first == "all")
            && self.resolve(all, s).is_ok()
    }

    /// `text` (an OMIS request) with every node list that names groups, `[odd]` or
    /// `[workers - 0]`, replaced by the ranks it stands for; strings are left alone.
    pub(super) fn expand(&self, all: &IdSet, text: &str) -> anyhow::Result<String> {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        let mut quoted = false;
        while let Some(i) = rest.find(['"', '[', '\\']) {
            out.push_str(&rest[..i]);
            let c = rest.as_bytes()[i];
            rest = &rest[i..];
            match c {
                b'\\' => {
                    let n = rest.chars().take(2).map(char::len_utf8).sum::<usize>();
                    out.push_str(&rest[..n]);
                    rest = &rest[n..];
                }
                b'"' => {
                    quoted = !quoted;
                    out.push('"');
                    rest = &rest[1..];
                }
                _ => {
                    let inner_end = rest.find(']');
                    let named = !quoted
                        && inner_end.is_some_and(|e| {
                            rest[1..e]
                                .trim_start()
                                .starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                        });
                    match inner_end {
                        Some(e) if named => {
                            out.push_str(&self.resolve(all, &rest[1..e])?.to_string());
                            rest = &rest[e + 1..];
                        }
                        _ => {
                            out.push('[');
                            rest = &rest[1..];
                        }
                    }
                }
            }
        }
        out.push_str(rest);
        Ok(out)
    }

    /// The focus's name, for the prompt.
    pub(super) fn focus_name(&self) -> Option<&str> {
        self.focus.as_ref().map(|(n, _)| n.as_str())
    }
}

/// Splits `rest` into its text and a trailing id-set expression (the longest that starts
/// with `[…]`, a group name or `all` after whitespace), if any.
fn split_ids<'a>(g: &Groups, all: &IdSet, rest: &'a str) -> (&'a str, &'a str) {
    let rest = rest.trim();
    let starts = rest
        .char_indices()
        .filter(|&(i, c)| i > 0 && !c.is_whitespace() && rest[..i].ends_with(char::is_whitespace))
        .map(|(i, _)| i);
    for i in starts {
        if g.is_ids(all, &rest[i..]) {
            return (rest[..i].trim_end(), &rest[i..]);
        }
    }
    (rest, "")
}

impl Console {
    /// The prompt: `sdm> `, or `sdm [NAME]> ` while a group has the focus.
    pub fn prompt(&self) -> String {
        match self.groups.focus_name() {
            Some(n) => format!("sdm [{n}]> "),
            None => "sdm> ".into(),
        }
    }

    /// The ranks `s` names (see [`Groups::resolve`]).
    pub(super) fn ranks(&self, s: &str) -> anyhow::Result<IdSet> {
        self.groups.resolve(&self.session.all(), s)
    }

    /// `group` (list), `group NAME IDS`, `group NAME = IDS`, `group NAME = class K`,
    /// `group -d NAME`.
    pub(super) fn group(&mut self, rest: &str, out: &mut dyn Write) -> anyhow::Result<()> {
        let rest = rest.trim();
        if rest.is_empty() {
            if self.groups.named.is_empty() {
                writeln!(out, "No groups.")?;
            }
            for (n, ids) in &self.groups.named {
                writeln!(out, "{n} {ids}")?;
            }
            return Ok(());
        }
        if let Some(name) = rest.strip_prefix("-d ") {
            let name = name.trim();
            if self.groups.named.remove(name).is_none() {
                anyhow::bail!("group -d: no group {name:?}");
            }
            if self.groups.focus_name() == Some(name) {
                self.groups.focus = None;
            }
            return Ok(());
        }
        let (name, def) = rest
            .split_once(char::is_whitespace)
            .ok_or_else(|| anyhow!("group: usage: group NAME IDS | group NAME = class K"))?;
        if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            || !name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            || name == "all"
        {
            anyhow::bail!("group: {name:?} cannot name a group (letters, digits, _; not `all`)");
        }
        let def = def.trim();
        let def = def.strip_prefix('=').map_or(def, str::trim);
        let ids = match def.strip_prefix("class ") {
            Some(k) => {
                let k: usize = k
                    .trim()
                    .parse()
                    .map_err(|_| anyhow!("group: class {k:?} is not a class number"))?;
                if self.groups.classes.is_empty() {
                    anyhow::bail!("group: no classes yet: run `bt --classes` first");
                }
                self.groups
                    .classes
                    .get(k.wrapping_sub(1))
                    .cloned()
                    .ok_or_else(|| {
                        anyhow!(
                            "group: no class {k}: the last `bt` had classes 1 to {}",
                            self.groups.classes.len()
                        )
                    })?
            }
            None => self.ranks(def)?,
        };
        if ids.is_empty() {
            anyhow::bail!("group: {def:?} names no ranks");
        }
        writeln!(out, "group {name} {ids}")?;
        if let Some((f, set)) = self.groups.focus.as_mut()
            && f == name
        {
            *set = ids.clone();
        }
        self.groups.named.insert(name.to_owned(), ids);
        Ok(())
    }

    /// `focus IDS|NAME` (later commands without ranks act on them), `focus` (back to all).
    pub(super) fn focus(&mut self, rest: &str, out: &mut dyn Write) -> anyhow::Result<()> {
        let rest = rest.trim();
        if rest.is_empty() || rest == "all" {
            self.groups.focus = None;
            writeln!(out, "focus {}", self.session.all())?;
            return Ok(());
        }
        let ids = self.ranks(rest)?;
        writeln!(out, "focus {rest} {ids}")?;
        self.groups.focus = Some((rest.to_owned(), ids));
        Ok(())
    }

    /// Sends `service(params)` to `dest` and prints the merged replies (`show` words a
    /// reply's text result); returns whether one failed.
    async fn symbolic(
        &mut self,
        cmd: &str,
        dest: &IdSet,
        call: String,
        out: &mut dyn Write,
        show: impl Fn(&str) -> String,
    ) -> anyhow::Result<bool> {
        let id = self.id();
        let text = format!("{id} [] {call}");
        let lines = self
            .request_within(dest, &text, super::SYMBOLIC_TIMEOUT_MS)
            .await?;
        self.print_lines(cmd, &lines, out, |r| match r.results.first() {
            Some(Value::Str(s)) if !crate::words::is_error(r) => show(s),
            Some(Value::List(items)) => {
                let lines: Vec<String> = items
                    .iter()
                    .map(|v| match v {
                        Value::Str(s) => s.clone(),
                        other => other.to_string(),
                    })
                    .collect();
                if lines.is_empty() {
                    "No locals.".into()
                } else {
                    lines.join("\n")
                }
            }
            _ => crate::words::reply(r),
        })
    }

    /// The debugger commands; `None` when `verb` is not one of them.
    pub(super) async fn debug_command(
        &mut self,
        verb: &str,
        rest: &str,
        out: &mut dyn Write,
    ) -> anyhow::Result<Option<bool>> {
        let all = self.session.all();
        let q = |s: &str| Value::Str(s.to_owned()).to_string();
        let failed = match verb {
            "print" | "p" if rest.starts_with("-stats") => {
                let (expr, ids) = split_ids(&self.groups, &all, rest["-stats".len()..].trim());
                if expr.is_empty() {
                    anyhow::bail!("print -stats: give an expression (`help print`)");
                }
                let dest = self.ranks(ids)?;
                self.print_stats(expr, &dest, out).await?
            }
            "print" | "p" => {
                let (expr, ids) = split_ids(&self.groups, &all, rest);
                if expr.is_empty() {
                    anyhow::bail!("print: give an expression (`help print`)");
                }
                let dest = self.ranks(ids)?;
                let call = format!("sdm_print({})", q(expr));
                self.symbolic("print", &dest, call, out, |v| format!("{expr} = {v}"))
                    .await?
            }
            "locals" => {
                let dest = self.ranks(rest)?;
                self.symbolic(
                    "info locals",
                    &dest,
                    "sdm_locals()".into(),
                    out,
                    str::to_owned,
                )
                .await?
            }
            "frame" | "f" => self.frame(rest, out).await?,
            "up" | "down" => {
                let dest = self.ranks(rest)?;
                let call = format!("sdm_frame({})", q(verb));
                self.symbolic(verb, &dest, call, out, str::to_owned).await?
            }
            "list" | "l" => {
                let dest = self.ranks(rest)?;
                self.symbolic("list", &dest, "sdm_list()".into(), out, str::to_owned)
                    .await?
            }
            "step" | "s" | "next" | "n" | "finish" => {
                let how = match verb {
                    "s" => "step",
                    "n" => "next",
                    v => v,
                };
                let dest = self.ranks(rest)?;
                let call = format!("sdm_step({})", q(how));
                self.symbolic(how, &dest, call, out, str::to_owned).await?
            }
            "until" | "u" => self.until(rest, out).await?,
            "watch" => {
                let (expr, ids) = split_ids(&self.groups, &all, rest);
                if expr.is_empty() {
                    anyhow::bail!("watch: give an expression (`help watch`)");
                }
                let dest = self.ranks(ids)?;
                let call = format!("sdm_watch({})", q(expr));
                self.symbolic("watch", &dest, call, out, str::to_owned)
                    .await?
            }
            "tbreak" => self.source_breakpoint(rest, true, out).await?,
            // gdb's own spellings the native console has no answer for.
            "ptype" | "whatis" | "display" => self.gdb_with_expr(verb, rest, out).await?,
            "set" => match rest.strip_prefix("var ") {
                Some(assign) => self.gdb_with_expr("set var", assign, out).await?,
                None => anyhow::bail!("set: expected `set var NAME = VALUE [IDS]`"),
            },
            v if v == "x" || v.starts_with("x/") => self.gdb_with_expr(v, rest, out).await?,
            "gdb" => self.gdb_with_expr("", rest, out).await?,
            _ => return Ok(None),
        };
        Ok(Some(failed))
    }

    /// `frame N [IDS]`: selects frame N of the ranks' stacks; returns whether one failed.
    async fn frame(&mut self, rest: &str, out: &mut dyn Write) -> anyhow::Result<bool> {
        let (n, ids) = match rest.split_once(char::is_whitespace) {
            Some((n, ids)) => (n, ids),
            None if rest.chars().all(|c| c.is_ascii_digit()) => (rest, ""),
            None => ("", rest),
        };
        let dest = self.ranks(ids)?;
        let arg = if n.is_empty() {
            anyhow::bail!("frame: give a frame number, e.g. `frame 1` (`up`, `down` move by one)");
        } else {
            n.parse::<u32>()
                .map_err(|_| anyhow!("frame: {n:?} is not a frame number"))?
                .to_string()
        };
        self.symbolic(
            "frame",
            &dest,
            format!("sdm_frame({arg})"),
            out,
            str::to_owned,
        )
        .await
    }

    /// `until [LOCATION] [IDS]`: runs the ranks to the next line or to LOCATION; returns
    /// whether one failed.
    async fn until(&mut self, rest: &str, out: &mut dyn Write) -> anyhow::Result<bool> {
        let all = self.session.all();
        let q = |s: &str| Value::Str(s.to_owned()).to_string();
        let (loc, ids) = match rest.split_once(char::is_whitespace) {
            Some((l, ids)) => (l, ids),
            None if self.groups.is_ids(&all, rest) => ("", rest),
            None => (rest, ""),
        };
        let dest = self.ranks(ids)?;
        let call = if loc.is_empty() {
            format!("sdm_step({})", q("until"))
        } else {
            format!("sdm_step({},{})", q("until"), q(loc))
        };
        self.symbolic("until", &dest, call, out, str::to_owned)
            .await
    }

    /// `HEAD ARGS [IDS]` run by the ranks' gdbs (`ptype x`, `x/4x &a`, `set var x = 1`;
    /// `gdb COMMAND` with an empty head), answers merged by value.
    async fn gdb_with_expr(
        &mut self,
        head: &str,
        rest: &str,
        out: &mut dyn Write,
    ) -> anyhow::Result<bool> {
        let all = self.session.all();
        let (args, ids) = split_ids(&self.groups, &all, rest);
        let cmd = if head.is_empty() { "gdb" } else { head };
        if args.is_empty() {
            anyhow::bail!("{cmd}: give an expression or command (`help {cmd}`)");
        }
        let command = format!("{head} {args}");
        let dest = self.ranks(ids)?;
        self.run_gdb(cmd, command.trim(), &dest, out).await
    }

    /// `info TOPIC [IDS]` (a topic the console has no answer for) from the ranks' gdbs.
    pub(super) async fn gdb_info(
        &mut self,
        topic: &str,
        ids: &str,
        out: &mut dyn Write,
    ) -> anyhow::Result<bool> {
        let dest = self.ranks(ids)?;
        self.run_gdb("info", &format!("info {topic}"), &dest, out)
            .await
    }

    /// Runs the gdb console command `command` on `dest` (`sdm_gdb`); prints what gdb said.
    async fn run_gdb(
        &mut self,
        cmd: &str,
        command: &str,
        dest: &IdSet,
        out: &mut dyn Write,
    ) -> anyhow::Result<bool> {
        let call = format!("sdm_gdb({})", Value::Str(command.to_owned()));
        self.symbolic(cmd, dest, call, out, |v| {
            if v.is_empty() {
                "done".into()
            } else {
                v.to_owned()
            }
        })
        .await
    }

    /// `print -stats EXPR`: the numeric value of EXPR on `dest` reduced in the tree by the
    /// `stats` filter: minimum, mean and maximum, with the ranks holding the extremes.
    async fn print_stats(
        &mut self,
        expr: &str,
        dest: &IdSet,
        out: &mut dyn Write,
    ) -> anyhow::Result<bool> {
        use sdm_client::service;
        use sdm_overlay::filters::builtin::Stats;
        use sdm_proto::{Status, SyncMode};
        let groups = self
            .session
            .request_command(service::filtered(
                service::EVALUATE,
                dest,
                SyncMode::Timeout(super::SYMBOLIC_TIMEOUT_MS),
                "stats",
                expr.to_owned(),
            ))
            .await?;
        let mut failed = false;
        let mut other = Vec::new();
        for g in groups {
            let decoded = (g.status == Status::Replied)
                .then(|| Stats::decode(&g.payload).ok())
                .flatten();
            // Ranks that answered with an error instead of a value (the same error of
            // many ranks merged in the tree).
            let errors = match decoded {
                Some(_) => Stats::decode_errors(&g.payload).unwrap_or_default(),
                None => Vec::new(),
            };
            let erred = errors.iter().fold(IdSet::new(), |acc, (ids, _)| &acc | ids);
            let valued = &g.sources - &erred;
            match decoded.as_ref().and_then(|keys| keys.get(expr)) {
                None if !errors.is_empty() => {}
                Some(k) => {
                    let mean = k.mean.map_or_else(|| "?".into(), |m| m.to_string());
                    if self.json {
                        writeln!(
                            out,
                            "{}",
                            serde_json::json!({"command": "print -stats", "ids": valued.to_string(), "expression": expr,
                                "min": k.min.to_string(), "min_ids": k.min_ids.to_string(), "mean": mean,
                                "max": k.max.to_string(), "max_ids": k.max_ids.to_string(), "count": k.count})
                        )?;
                    } else {
                        writeln!(
                            out,
                            "{valued} {expr}: min {} {}, mean {mean}, max {} {}",
                            k.min, k.min_ids, k.max, k.max_ids
                        )?;
                    }
                }
                None => {
                    failed = true;
                    other.push(g);
                }
            }
            for (ids, error) in &errors {
                failed = true;
                if self.json {
                    writeln!(
                        out,
                        "{}",
                        serde_json::json!({"command": "print -stats", "ids": ids.to_string(), "expression": expr, "error": error})
                    )?;
                } else {
                    writeln!(out, "{ids} error: {error}")?;
                }
            }
        }
        // Ranks without a number say why: the value is not a number, the process runs...
        let lines: Vec<Line> = super::lines(other)
            .into_iter()
            .map(|mut l| {
                if l.status == Status::Replied {
                    l.text = l.text.trim_start_matches("error: ").to_owned();
                    l.text = format!("error: {}", l.text);
                }
                l
            })
            .collect();
        Ok(self.print_lines("print -stats", &lines, out, crate::words::reply)? | failed)
    }

    /// A temporary breakpoint hit on `ranks` is gone there (gdb deleted it): `info break`
    /// no longer lists them for it.
    pub(super) fn note_hit(&mut self, ranks: &IdSet, payload: &[u8]) {
        let text = String::from_utf8_lossy(payload);
        let Some(r) = sdm_omis::parse_reply(&format!("0 [] {text}"))
            .ok()
            .and_then(|r| r.0.into_iter().next())
        else {
            return;
        };
        let at_breakpoint = r.results.first() == Some(&Value::Str("breakpoint".into()));
        if r.service == "stopped_at"
            && at_breakpoint
            && let Some(Value::Str(location)) = r.results.get(1)
            && let Some(n) = self.state.breakpoint_number(location)
            && self.temporary.contains(&n)
        {
            self.state.remove_ranks(n, ranks);
        }
    }

    /// `break LOCATION [IDS] [if COND]` for a source location or a condition, and
    /// `tbreak` (deleted at its first hit): set through the symbolic backend, numbered by
    /// the console like the other breakpoints.
    pub(super) async fn source_breakpoint(
        &mut self,
        rest: &str,
        temporary: bool,
        out: &mut dyn Write,
    ) -> anyhow::Result<bool> {
        let (head, cond) = match rest.split_once(" if ") {
            Some((h, c)) => (h.trim(), c.trim()),
            None => (rest.trim(), ""),
        };
        let (location, ids) = head.split_once(char::is_whitespace).unwrap_or((head, ""));
        let cmd = if temporary { "tbreak" } else { "break" };
        if location.is_empty() {
            anyhow::bail!("{cmd}: give FILE:LINE or a function (`help {cmd}`)");
        }
        let dest = self.ranks(ids)?;
        // Running ranks are stopped for the insertion and continued after it, as `bt`
        // does for its walk.
        let paused = self.stop_running(&dest).await?;
        let id = self.id();
        let text = format!(
            "{id} [] sdm_break({},{},{})",
            Value::Str(location.to_owned()),
            Value::Str(cond.to_owned()),
            i32::from(temporary)
        );
        let lines = self
            .request_within(&dest, &text, super::SYMBOLIC_TIMEOUT_MS)
            .await?;
        let resumed = self.resume(&paused, cmd, out).await?;
        let set = ok_ids(&lines);
        if !set.is_empty() {
            let n = self.state.add_breakpoint(location, &set);
            if temporary {
                self.temporary.insert(n);
            }
            let at: Vec<String> = lines
                .iter()
                .filter(|l| !line_failed(l))
                .filter_map(|l| match l.reply.as_ref()?.results.first()? {
                    Value::Str(s) => Some(s.clone()),
                    _ => None,
                })
                .collect();
            let mut at = at;
            at.dedup();
            let cond = if cond.is_empty() {
                String::new()
            } else {
                format!(" if {cond}")
            };
            if self.json {
                writeln!(
                    out,
                    "{}",
                    serde_json::json!({"command": cmd, "number": n, "location": location, "at": at, "condition": cond.trim_start_matches(" if "), "ids": set.to_string()})
                )?;
            } else {
                let kind = if temporary {
                    "temporary breakpoint"
                } else {
                    "breakpoint"
                };
                writeln!(out, "{set} {kind} {n} at {}{cond}", at.join(", "))?;
            }
        }
        let bad: Vec<Line> = lines.into_iter().filter(line_failed).collect();
        Ok(self.print_lines(cmd, &bad, out, crate::words::reply)? | resumed)
    }

    /// Stops the ranks of `dest` whose programs run; returns those it stopped.
    pub(super) async fn stop_running(&mut self, dest: &IdSet) -> anyhow::Result<IdSet> {
        let id = self.id();
        let status = self.request(dest, &format!("{id} [] sdm_status()")).await?;
        let running: IdSet = status
            .iter()
            .filter(|l| {
                l.reply.as_ref().and_then(|r| r.results.first())
                    == Some(&Value::Str("running".into()))
            })
            .fold(IdSet::new(), |acc, l| &acc | &l.ids);
        if running.is_empty() {
            return Ok(running);
        }
        let id = self.id();
        Ok(ok_ids(
            &self.request(&running, &format!("{id} [] stop()")).await?,
        ))
    }

    /// Continues the ranks [`Console::stop_running`] stopped; prints those that could not
    /// continue and says whether there were any.
    async fn resume(
        &mut self,
        ranks: &IdSet,
        cmd: &str,
        out: &mut dyn Write,
    ) -> anyhow::Result<bool> {
        if ranks.is_empty() {
            return Ok(false);
        }
        let id = self.id();
        let cont = self.request(ranks, &format!("{id} [] cont()")).await?;
        let bad: Vec<Line> = cont.into_iter().filter(line_failed).collect();
        self.print_lines(cmd, &bad, out, crate::words::reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn groups() -> Groups {
        let mut g = Groups::default();
        g.named.insert("odd".into(), "[1,3,5,7]".parse().unwrap());
        g.named.insert("workers".into(), "[0-5]".parse().unwrap());
        g
    }

    #[test]
    fn set_algebra_over_ranks_and_groups() {
        let g = groups();
        let all = IdSet::all(8);
        let r = |s: &str| g.resolve(&all, s).unwrap().to_string();
        assert_eq!(r(""), "[0-7]");
        assert_eq!(r("odd"), "[1,3,5,7]");
        assert_eq!(r("workers - [0]"), "[1-5]");
        assert_eq!(r("workers-0"), "[1-5]");
        assert_eq!(r("odd | 0-1"), "[0-1,3,5,7]");
        assert_eq!(r("odd & workers"), "[1,3,5]");
        assert_eq!(r("all - odd"), "[0,2,4,6]");
        assert_eq!(r("2-3,6"), "[2-3,6]");
        let e = |s: &str| g.resolve(&all, s).unwrap_err().to_string();
        assert!(e("evens").contains("no group \"evens\""), "{}", e("evens"));
        assert!(e("odd |").contains("needs a set on its right"));
        assert!(e("9").contains("no server 9"), "{}", e("9"));
        assert!(e("odd workers").contains("expected |, & or -"));
    }

    #[test]
    fn omis_node_lists_may_name_groups() {
        let g = groups();
        let all = IdSet::all(8);
        assert_eq!(
            g.expand(&all, r#"1 [odd] stop(); 2 [workers - 0] print("[odd]")"#)
                .unwrap(),
            r#"1 [1,3,5,7] stop(); 2 [1-5] print("[odd]")"#
        );
        assert_eq!(g.expand(&all, "3 [0-2] cont()").unwrap(), "3 [0-2] cont()");
        assert!(g.expand(&all, "4 [evens] stop()").is_err());
    }

    #[test]
    fn trailing_ranks_are_split_from_expressions() {
        let g = groups();
        let all = IdSet::all(8);
        assert_eq!(split_ids(&g, &all, "a[rank]"), ("a[rank]", ""));
        assert_eq!(split_ids(&g, &all, "a[rank] [3]"), ("a[rank]", "[3]"));
        assert_eq!(split_ids(&g, &all, "x + 1"), ("x + 1", ""));
        assert_eq!(split_ids(&g, &all, "rank odd"), ("rank", "odd"));
        assert_eq!(split_ids(&g, &all, "p->x [0-3]"), ("p->x", "[0-3]"));
        assert_eq!(
            split_ids(&g, &all, "rank * 2 odd | [6]"),
            ("rank * 2", "odd | [6]")
        );
        assert_eq!(split_ids(&g, &all, "x - 1"), ("x - 1", ""));
    }
}
