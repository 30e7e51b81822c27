//! Flame graphs from the console: `bt --flame FILE.svg --folded FILE` writes the sampled
//! stacks' graphs and names the files; `sdm top --flame` takes its CPU samples here (stop,
//! walk the threads that were running, continue). The graphs themselves: [`crate::flame`].

use std::io::Write;

use sdm_proto::IdSet;

use super::{Console, Line, line_failed};
use crate::stacks::{BtArgs, Stacks};

impl Console {
    /// Writes the flame graph and folded stacks `a` asks for (nothing where none), whole job
    /// and per class, and prints one line per graph naming its files (JSON with `--json`).
    pub(super) fn write_flame(
        &self,
        stacks: &Stacks,
        a: &BtArgs,
        out: &mut dyn Write,
    ) -> anyhow::Result<()> {
        if !a.flame.wanted() {
            return Ok(());
        }
        let s = if a.samples == 1 { "" } else { "s" };
        let title = format!("sdm bt, {} sample{s}", a.samples);
        let written = crate::flame::write_all(&stacks.traces, &a.flame, &title)?;
        crate::flame::print_written(&written, &stacks.traces, self.json || a.json, out)
    }

    /// One CPU sample of `dest` for `sdm top --flame`: the running ranks are stopped, every
    /// thread's stack and state read, and the ranks continued; the threads that were running
    /// (state `R`) go into `stacks` (`a.on_cpu` set). Ranks that could not be continued are
    /// printed to `out`; says whether there were any.
    pub async fn sample_cpu_stacks(
        &mut self,
        dest: &IdSet,
        stacks: &mut Stacks,
        a: &BtArgs,
        out: &mut dyn Write,
    ) -> anyhow::Result<bool> {
        let stopped = self.stop_running(dest).await?;
        let id = self.id();
        let replies = self
            .request(dest, &format!("{id} [] sdm_stacks(1)"))
            .await?;
        let mut failed = false;
        if !stopped.is_empty() {
            let id = self.id();
            let cont = self.request(&stopped, &format!("{id} [] cont()")).await?;
            let bad: Vec<Line> = cont.into_iter().filter(line_failed).collect();
            failed = self.print_lines("top", &bad, out, crate::words::reply)?;
        }
        // Ranks that ended or are gone have no stack: `top` reports them in its table.
        Self::add_stacks(&replies, stacks, a);
        Ok(failed)
    }
}
