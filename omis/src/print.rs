//! Printing OMIS requests, replies and values in the canonical form of the spec's own
//! examples: `123 [1] process_info([231,345,654], 9)`, replies joined by `"; "`.
//!
//! Canonical form: fields of a basic request or reply separated by one space (not the
//! grammar's commas); top-level parameters separated by `", "`, list elements by `","`;
//! parallel actions by `", "`, sequential ones by `"; "`, the event followed by `": "`; node
//! lists in range form (`[0-3,7]`, then any `$n`); integers in decimal; floats in Rust's
//! shortest round-trip form, always with a `.` or an exponent (`12.0`, `1e-7`), or `inf`,
//! `-inf`, `nan`; strings quoted, with `\"`, `\\`, `\n`, `\t`, `\r` and `\xNN` for other
//! control characters (non-ASCII characters are written as they are). Whatever prints,
//! parses back to an equal value (NaN aside, which is never equal to itself).

use std::fmt::{self, Display, Formatter, Write};

use sdm_proto::IdSet;

use super::ast::{ActionList, BasicReply, BasicRequest, Nodes, Reply, Request, Value};

/// Writes `items` separated by `sep`.
fn join<T: Display>(f: &mut Formatter<'_>, items: &[T], sep: &str) -> fmt::Result {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(sep)?;
        }
        item.fmt(f)?;
    }
    Ok(())
}

/// Writes the runs of `ids` as `0-3,7` (no brackets); returns whether anything was written.
fn write_runs(f: &mut Formatter<'_>, ids: &IdSet) -> Result<bool, fmt::Error> {
    let mut any = false;
    for r in ids.runs() {
        if any {
            f.write_char(',')?;
        }
        any = true;
        if r.start() == r.end() {
            write!(f, "{}", r.start())?;
        } else {
            write!(f, "{}-{}", r.start(), r.end())?;
        }
    }
    Ok(any)
}

/// Writes `s` quoted, with C escapes.
fn write_string(f: &mut Formatter<'_>, s: &str) -> fmt::Result {
    f.write_char('"')?;
    let mut plain = 0;
    for (i, c) in s.char_indices() {
        let esc: Option<&str> = match c {
            '"' => Some("\\\""),
            '\\' => Some("\\\\"),
            '\n' => Some("\\n"),
            '\t' => Some("\\t"),
            '\r' => Some("\\r"),
            c if c.is_ascii_control() => None,
            _ => continue,
        };
        f.write_str(&s[plain..i])?;
        match esc {
            Some(e) => f.write_str(e)?,
            None => write!(f, "\\x{:02x}", c as u32)?,
        }
        plain = i + c.len_utf8();
    }
    f.write_str(&s[plain..])?;
    f.write_char('"')
}

/// Writes a float so that it reads back as a float.
fn write_float(f: &mut Formatter<'_>, x: f64) -> fmt::Result {
    if x.is_nan() {
        f.write_str("nan")
    } else if x.is_infinite() {
        f.write_str(if x > 0.0 { "inf" } else { "-inf" })
    } else {
        // Debug is the shortest round-trip form and always has a '.' or an exponent.
        write!(f, "{x:?}")
    }
}

impl Display for Value {
    /// The canonical form: `42`, `1.5`, `"a\n"`, `[1,[2,"a"],3.0]`, `$1`.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => write_float(f, *x),
            Value::Str(s) => write_string(f, s),
            Value::List(items) => {
                f.write_char('[')?;
                join(f, items, ",")?;
                f.write_char(']')
            }
            Value::Ref(n) => write!(f, "${n}"),
        }
    }
}

impl Display for Nodes {
    /// `[]` for all nodes, else the range form followed by references: `[0-3,7,$0]`.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_char('[')?;
        if !self.all {
            let mut any = write_runs(f, &self.ids)?;
            for r in &self.refs {
                if any {
                    f.write_char(',')?;
                }
                any = true;
                write!(f, "${r}")?;
            }
        }
        f.write_char(']')
    }
}

impl Display for BasicRequest {
    /// `id nodes service(p1, p2)`, e.g. `19 [$0] stop($1)`.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}(", self.id, self.nodes, self.service)?;
        join(f, &self.params, ", ")?;
        f.write_char(')')
    }
}

impl Display for ActionList {
    /// Parallel actions joined by `", "`, sequential ones by `"; "`.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            ActionList::Par(v) => join(f, v, ", "),
            ActionList::Seq(v) => join(f, v, "; "),
        }
    }
}

impl Display for Request {
    /// `event: actions`, or just the actions.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        if let Some(e) = &self.event {
            write!(f, "{e}: ")?;
        }
        self.actions.fmt(f)
    }
}

impl Display for BasicReply {
    /// `id senders service(r1, r2)`, e.g. `1 [0-1023] stop(0)`; a failure names its kind
    /// after the service: `1 [0-3] stop!no_process("…")`.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "{} [", self.id)?;
        write_runs(f, &self.senders)?;
        write!(f, "] {}", self.service)?;
        if let Some(kind) = self.failure {
            write!(f, "!{kind}")?;
        }
        f.write_char('(')?;
        join(f, &self.results, ", ")?;
        f.write_char(')')
    }
}

impl Display for Reply {
    /// The basic replies joined by `"; "`.
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        join(f, &self.0, "; ")
    }
}
