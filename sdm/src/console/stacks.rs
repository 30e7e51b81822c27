//! `bt` in the console: stack traces of the ranks sampled as STAT does and merged into one
//! call-prefix tree, printed as the tree, its classes, JSON, DOT or SVG, written as flame
//! graphs (`--flame`, `--folded`: see `console/flame.rs`) or as the hang report (`--html`,
//! see report.rs).

use std::io::Write;

use super::{Console, Line};

impl Console {
    /// `bt`: stack traces of the ranks as one call-prefix tree, sampled as STAT does:
    /// running programs are stopped, walked and continued (only those this command
    /// stopped), `--samples K` times `--interval MS` apart, every sample counted in the
    /// tree (STAT's 3D view); `--classes`, `--dot`, `--svg` and `--json` choose the view.
    pub(super) async fn sampled_backtrace(
        &mut self,
        rest: &str,
        out: &mut dyn Write,
    ) -> anyhow::Result<bool> {
        let mut a = crate::stacks::BtArgs::parse(rest)?;
        a.thread = a.thread.or(self.thread);
        let dest = self.ranks(&a.ids)?;
        let mut stacks = crate::stacks::Stacks::default();
        let mut failed = false;
        let mut no_stack: Vec<Line> = Vec::new();
        // The report's per-rank facts are asked before the ranks are stopped for `bt`.
        let facts = match a.html {
            Some(_) => Some(self.rank_facts(&dest).await?),
            None => None,
        };
        let mut last = Vec::new();
        for k in 0..a.samples {
            if k > 0 {
                let until = tokio::time::Instant::now() + a.interval;
                while tokio::time::Instant::now() < until {
                    self.pump(until, out).await?;
                }
            }
            let (replies, cont_failed) =
                self.request_stopped("bt", &dest, "sdm_stacks", out).await?;
            failed |= cont_failed;
            // A rank without a stack is reported once, from the last sample.
            no_stack = Self::add_stacks(&replies, &mut stacks, &a);
            last = replies;
        }
        self.groups.classes = stacks.tree.classes().into_iter().map(|c| c.ids).collect();
        self.print_stacks(&stacks, &a, out)?;
        self.write_flame(&stacks, &a, out)?;
        if let (Some(path), Some(facts)) = (&a.html, facts) {
            self.write_report(path, &stacks, &a, facts, &last, out)?;
        }
        if let (Some(n), false) = (a.thread, stacks.without_thread.is_empty()) {
            writeln!(
                out,
                "{} no thread {n} (`info threads` lists them)",
                stacks.without_thread
            )?;
            failed = true;
        }
        Ok(self.print_lines("bt", &no_stack, out, crate::words::reply)? | failed)
    }

    /// Merges the stacks of `lines` (replies to `sdm_stacks`) into `stacks`, as `a` asks;
    /// returns the lines that hold no stack (an error, lost, timed out).
    pub(super) fn add_stacks(
        lines: &[Line],
        stacks: &mut crate::stacks::Stacks,
        a: &crate::stacks::BtArgs,
    ) -> Vec<Line> {
        let mut other = Vec::new();
        for l in lines {
            let added = l
                .reply
                .as_ref()
                .and_then(|r| r.results.first())
                .is_some_and(|threads| stacks.add_threads(threads, &l.ids, a));
            if !added {
                other.push(l.clone());
            }
        }
        other
    }

    /// Prints `stacks` as `bt` was asked (`a`): the tree or the classes, as text or JSON,
    /// and writes its DOT or SVG file.
    pub(super) fn print_stacks(
        &self,
        stacks: &crate::stacks::Stacks,
        a: &crate::stacks::BtArgs,
        out: &mut dyn Write,
    ) -> anyhow::Result<()> {
        let tree = &stacks.tree;
        if let Some(path) = &a.dot {
            crate::stacks::write_dot(tree, path)?;
        }
        if let Some(path) = &a.svg {
            crate::stacks::write_svg(tree, path)?;
        }
        match (a.classes, self.json || a.json) {
            (true, true) => writeln!(
                out,
                "{}",
                serde_json::json!({"command": "bt", "samples": a.samples, "classes": stacks.classes_json()})
            )?,
            (true, false) => crate::stacks::print_classes(tree, out)?,
            (false, true) => writeln!(
                out,
                "{}",
                serde_json::json!({"command": "bt", "samples": a.samples, "tree": stacks.tree_json()})
            )?,
            (false, false) => crate::stacks::print_tree(tree, out)?,
        }
        Ok(())
    }
}
