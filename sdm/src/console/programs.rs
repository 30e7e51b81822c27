//! The programs under the console: starting or attaching to them, their input, waiting
//! for their end (a lost server counts as one), and the end of the session, which kills
//! or detaches them and drains what they printed.

use std::io::Write;
use std::time::Duration;

use nix::sys::signal::Signal;
use sdm_omis::Value;
use sdm_proto::{IdSet, Status, SyncMode};

use super::{
    COMMAND_TIMEOUT_MS, Console, DRAIN_PATIENCE, Ending, LIVENESS_CHECK, Line, lines, next_query,
    omis,
};

impl Console {
    /// Prints output and events until every rank's program has ended, forwarding `input`
    /// (if any) to the programs of `stdin_ids` as it comes, end of input included.
    /// Returns early with the signal when one of `interrupts` comes first: the programs
    /// still running are left for [`Console::shutdown`] to kill.
    pub async fn wait_for_exit(
        &mut self,
        mut input: Option<tokio::sync::mpsc::Receiver<Option<String>>>,
        stdin_ids: &IdSet,
        interrupts: &mut crate::interrupt::Interrupts,
        out: &mut dyn Write,
    ) -> anyhow::Result<Option<Signal>> {
        let all = self.session.all();
        // Like srun --input: ranks that get no input see end of file at once.
        let closed = &all - stdin_ids;
        if !closed.is_empty() || input.is_none() {
            let none = if input.is_none() { all.clone() } else { closed };
            self.write_stdin(&none, "", true).await?;
        }
        let mut next_check = tokio::time::Instant::now() + LIVENESS_CHECK;
        while !all.is_subset(&self.terminated) {
            if tokio::time::Instant::now() >= next_check {
                self.check_lost(&all, out).await?;
                next_check = tokio::time::Instant::now() + LIVENESS_CHECK;
                continue;
            }
            let tick = tokio::time::sleep(Duration::from_millis(20));
            tokio::select! {
                ev = self.session.next_event() => match ev {
                    Some(m) => self.incoming(m, out)?,
                    None => {
                        let missing = &all - &self.terminated;
                        anyhow::bail!("the tree went away before {missing} ended: {}", self.session.closed_reason());
                    }
                },
                chunk = async { input.as_mut().expect("guarded").recv().await }, if input.is_some() => {
                    let (data, eof) = match chunk {
                        Some(Some(d)) => (d, false),
                        Some(None) | None => (String::new(), true),
                    };
                    if eof {
                        input = None;
                    }
                    let live = stdin_ids - &self.terminated;
                    self.write_stdin(&live, &data, eof).await?;
                }
                () = tick => {}
                Some(q) = next_query(&mut self.queries) => self.answer(q).await,
                sig = interrupts.next() => {
                    self.print_received(false, out)?;
                    return Ok(Some(sig));
                }
            }
            self.flush_stdio(false, out)?;
        }
        self.print_received(true, out)?;
        Ok(None)
    }

    /// Pings the servers of the ranks still running; those the tree reports lost count as
    /// ended (printed on stderr with the reason), so waiting for the programs cannot hang
    /// on a dead server. Slow servers (timed out) are waited for.
    pub(super) async fn check_lost(
        &mut self,
        all: &IdSet,
        out: &mut dyn Write,
    ) -> anyhow::Result<()> {
        let running = all - &self.terminated;
        if running.is_empty() {
            return Ok(());
        }
        let groups = self
            .session
            .request(&running, SyncMode::Timeout(COMMAND_TIMEOUT_MS), "ping")
            .await?;
        for g in groups.iter().filter(|g| g.status == Status::Lost) {
            // What came before the loss is printed first.
            self.print_received(false, out)?;
            eprintln!(
                "sdm: {} lost: {}",
                g.sources,
                String::from_utf8_lossy(&g.payload)
            );
            self.lost.union_with(&g.sources);
            self.ended_silently(&g.sources, out)?;
        }
        Ok(())
    }

    /// Writes `data` to the programs of `ids` still running (`eof`: then ends their input).
    pub async fn write_stdin(&mut self, ids: &IdSet, data: &str, eof: bool) -> anyhow::Result<()> {
        let live = ids - &self.terminated;
        if !live.is_empty() {
            self.session
                .write_stdin(&live, data.as_bytes(), eof)
                .await?;
        }
        Ok(())
    }

    /// Ends the session without losing anything in flight: programs this console started
    /// and that still run are killed (those it attached to are detached), every rank's
    /// remaining output and every exit is received and printed (waiting as long as exits
    /// keep coming, at most 10 s for the next one; ranks whose end never
    /// came are named), then the tree is shut down. Returns how the programs ended.
    pub async fn shutdown(mut self) -> Ending {
        let mut out = std::io::stdout();
        let _ = self.print_received(false, &mut out);
        let running = &(&self.started - &self.attached) - &self.terminated;
        if !running.is_empty() {
            self.killed.union_with(&running);
            let text = format!("{} [] kill()", self.id());
            match self.request(&running, &text).await {
                Ok(lines) => {
                    for l in lines.iter().filter(|l| l.status == Status::Lost) {
                        self.lost.union_with(&l.ids);
                        let _ = self.ended_silently(&l.ids, &mut out);
                    }
                }
                Err(e) => eprintln!(
                    "sdm: could not end the programs of {running}: {}",
                    crate::cli::error_text(&e)
                ),
            }
        }
        let mut undrained = IdSet::new();
        loop {
            let missing = &(&self.started - &self.attached) - &self.terminated;
            if missing.is_empty() {
                break;
            }
            match tokio::time::timeout(DRAIN_PATIENCE, self.session.next_event()).await {
                Ok(Some(m)) => {
                    let _ = self.incoming(m, &mut out);
                }
                Ok(None) => {
                    eprintln!(
                        "sdm: {missing} did not drain: the tree went away ({})",
                        self.session.closed_reason()
                    );
                    undrained = missing;
                    break;
                }
                Err(_) => {
                    eprintln!(
                        "sdm: {missing} did not drain: no end reported within {} s",
                        DRAIN_PATIENCE.as_secs()
                    );
                    undrained = missing;
                    break;
                }
            }
        }
        // Events still on their way (replies of event actions that the last commands
        // raised) get a moment to arrive: until nothing has come for a short while.
        while let Ok(Some(m)) =
            tokio::time::timeout(Duration::from_millis(100), self.session.next_event()).await
        {
            let _ = self.incoming(m, &mut out);
        }
        let _ = self.flush_stdio(true, &mut out);
        let _ = out.flush();
        let ending = Ending {
            status: self.exit_status,
            not_started: self.not_started.clone(),
            lost: self.lost.clone(),
            undrained,
        };
        self.session.shutdown(Duration::from_secs(10)).await;
        ending
    }

    /// Starts `program` under control on every server, its stdio on a pty (`iof` "pty"),
    /// on pipes ("pipes") or left to the launcher ("runtime").
    pub async fn start_program(
        &mut self,
        program: &str,
        args: &[String],
        iof: &str,
    ) -> anyhow::Result<Vec<Line>> {
        let quoted: Vec<String> = args
            .iter()
            .map(|a| Value::Str(a.clone()).to_string())
            .collect();
        let id = self.id();
        let text = format!(
            "{id} [] sdm_start({}, [{}], {}{})",
            Value::Str(program.to_owned()),
            quoted.join(","),
            Value::Str(iof.to_owned()),
            if self.stop_at_main { ", 1" } else { "" }
        );
        self.state.program = Some(program.to_owned());
        let all = self.session.all();
        let lines = self.request(&all, &text).await?;
        self.note_started(&lines, false)?;
        Ok(lines)
    }

    /// Programs started from now on stop at `main` (`sdm run --stop-at-main`).
    pub fn set_stop_at_main(&mut self, on: bool) {
        self.stop_at_main = on;
    }

    /// Notes which ranks now run a program (replied with a pid) and which could not
    /// start one: those print nothing and are not waited for.
    pub(super) fn note_started(&mut self, lines: &[Line], attached: bool) -> anyhow::Result<()> {
        for l in lines {
            if l.started() {
                self.started.union_with(&l.ids);
                if attached {
                    self.attached.union_with(&l.ids);
                }
            } else {
                self.not_started.union_with(&l.ids);
                if l.status == Status::Lost {
                    self.lost.union_with(&l.ids);
                }
                self.ended_silently(&l.ids, &mut std::io::sink())?;
            }
        }
        Ok(())
    }

    /// Attaches rank `i` to the running process `pids[i]` (processes this tree did not
    /// start: they are detached, not killed, when it ends).
    pub async fn attach(&mut self, pids: &[u32]) -> anyhow::Result<Vec<Line>> {
        self.attach_with(pids, false).await
    }

    /// [`Console::attach`]; with `to_main`, each process (held by its launcher before its
    /// first instruction) is run to `main` and stays stopped there.
    pub async fn attach_with(&mut self, pids: &[u32], to_main: bool) -> anyhow::Result<Vec<Line>> {
        let flag = if to_main { ", 1" } else { "" };
        let mut pending = Vec::new();
        for (rank, pid) in pids.iter().enumerate() {
            let id = self.id();
            let dest = IdSet::single(rank as u32);
            let op = self
                .session
                .send_command(omis(&dest, format!("{id} [] sdm_attach({pid}{flag})")))
                .await?;
            pending.push((op, dest));
        }
        let mut out = Vec::new();
        for (op, dest) in pending {
            out.extend(lines(self.session.collect(op, &dest).await?));
        }
        self.note_started(&out, true)?;
        Ok(out)
    }
}
