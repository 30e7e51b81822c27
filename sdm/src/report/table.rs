//! The report's per-rank table: rank, host, pid, state, the class and leaf frame of the
//! rank's stack. Up to [`FULL_TABLE`] ranks get a row each; a larger job's rows that agree
//! on everything but rank and pid are one row with the rank set and the pids' count and
//! span, so a report of 100,000 ranks stays a page a browser opens.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use sdm_overlay::filters::builtin::StackClass;
use sdm_proto::IdSet;

use super::{escape, swatch};

/// The most ranks shown one row each.
pub const FULL_TABLE: usize = 256;

/// What the report knows of one rank.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RankRow {
    /// The rank.
    pub rank: u32,
    /// The host its process runs on.
    pub host: String,
    /// Its process (its main thread's id), where its stack came back.
    pub pid: Option<u32>,
    /// Its state before `bt` stopped it (`running (S: sleeping)`, `stopped`, `exited 0`).
    pub state: String,
    /// The frames of its stack (the thread `bt` shows, the main one by default) as they
    /// are merged, outermost first; empty without a stack.
    pub path: Vec<String>,
}

impl RankRow {
    /// The class (an index into `classes`) the rank's stack ends in.
    fn class(&self, classes: &[StackClass]) -> Option<usize> {
        if self.path.is_empty() {
            return None;
        }
        // A class is its path's end: one class per path.
        classes.iter().position(|c| c.path == self.path)
    }
}

/// One row of the table: the ranks it stands for and their pids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row<'a> {
    /// The ranks.
    pub ranks: IdSet,
    /// Their pids, as known.
    pub pids: Vec<u32>,
    /// The fields they agree on (the first rank's row).
    pub like: &'a RankRow,
    /// Their class.
    pub class: Option<usize>,
}

/// What the ranks of one compressed row agree on: host, state, class, stack.
type RowKey<'a> = (&'a str, &'a str, Option<usize>, &'a [String]);

/// The table's rows: one per rank up to [`FULL_TABLE`] ranks, else one per set of ranks
/// that agree on host, state, class and stack.
pub fn rows<'a>(ranks: &'a [RankRow], classes: &[StackClass]) -> Vec<Row<'a>> {
    let one = |r: &'a RankRow| Row {
        ranks: IdSet::single(r.rank),
        pids: r.pid.into_iter().collect(),
        like: r,
        class: r.class(classes),
    };
    if ranks.len() <= FULL_TABLE {
        return ranks.iter().map(one).collect();
    }
    let mut merged: BTreeMap<RowKey<'a>, Row<'a>> = BTreeMap::new();
    for r in ranks {
        let class = r.class(classes);
        merged
            .entry((&r.host, &r.state, class, &r.path))
            .and_modify(|row| {
                row.ranks.insert(r.rank);
                row.pids.extend(r.pid);
            })
            .or_insert_with(|| one(r));
    }
    let mut out: Vec<Row<'a>> = merged.into_values().collect();
    out.sort_by_key(|r| r.ranks.first());
    out
}

/// The pids of a row: the one pid, or how many and their span.
fn pids_text(pids: &[u32]) -> String {
    match (pids, pids.iter().min(), pids.iter().max()) {
        ([], ..) => "?".into(),
        ([p], ..) => p.to_string(),
        (_, Some(lo), Some(hi)) => format!("{} pids, {lo}&ndash;{hi}", pids.len()),
        _ => unreachable!("a non-empty list has a minimum and a maximum"),
    }
}

/// Writes the table into `h`.
pub(super) fn write(h: &mut String, ranks: &[RankRow], classes: &[StackClass]) {
    let rows = rows(ranks, classes);
    h.push_str("<section id=\"ranks\"><h2>Ranks</h2>\n");
    if rows.len() < ranks.len() {
        let _ = writeln!(
            h,
            "<p class=\"muted\">{} ranks in {} rows: ranks that agree on all but their pid \
             are one row (more than {FULL_TABLE} ranks).</p>",
            ranks.len(),
            rows.len()
        );
    }
    h.push_str(
        "<table><thead><tr><th>rank</th><th>host</th><th>pid</th><th>state</th>\
         <th>class</th><th>leaf frame</th></tr></thead><tbody>\n",
    );
    for row in rows {
        let ranks = row.ranks.to_string();
        let shown = ranks.trim_start_matches('[').trim_end_matches(']');
        let (class, data) = match row.class {
            Some(k) => (swatch(k), format!(" data-class=\"{k}\"")),
            None => (String::new(), String::new()),
        };
        let leaf = row.like.path.last().map_or("(no stack)", String::as_str);
        let _ = writeln!(
            h,
            "<tr{data} data-ranks=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{class}</td><td><code>{}</code></td></tr>",
            escape(&ranks),
            escape(shown),
            escape(&row.like.host),
            pids_text(&row.pids),
            escape(&row.like.state),
            escape(leaf)
        );
    }
    h.push_str("</tbody></table></section>\n");
}
