//! Console commands that are not typed at a prompt: `-c` commands, command files (`-x
//! FILE`: one command a line, blank lines and `#` comments skipped, as gdb's `-x`), and
//! commands read from standard input one a line until its end (`-x -`, and `sdm attach`
//! without a terminal), the programs' output printing between them.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use crate::console::{Console, Flow};

/// One command of a script and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The command.
    pub text: String,
    /// `FILE:LINE` for a command from a file or standard input; none for a `-c` command.
    pub place: Option<String>,
}

impl Step {
    /// How an error in this command names it: `FILE:LINE: command`, or the `-c` command.
    pub fn named(&self) -> String {
        match &self.place {
            Some(p) => format!("{p}: {}", self.text),
            None => self.text.clone(),
        }
    }
}

/// What a console runs in order: `-c` commands, then each `-x` file's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Commands read in advance (`-c`, a command file).
    Steps(Vec<Step>),
    /// Commands read from standard input as they come, until its end (`-x -`).
    Stdin,
}

/// The console's script: the `-c` commands, then the files of `-x` (`-` for standard
/// input), each file read now so a missing one is named before anything starts.
pub fn sources(commands: &[String], files: &[PathBuf]) -> anyhow::Result<Vec<Source>> {
    let mut out = Vec::new();
    if !commands.is_empty() {
        out.push(Source::Steps(
            commands
                .iter()
                .map(|c| Step {
                    text: c.clone(),
                    place: None,
                })
                .collect(),
        ));
    }
    for f in files {
        if f.as_os_str() == "-" {
            out.push(Source::Stdin);
        } else {
            let text = std::fs::read_to_string(f)
                .with_context(|| format!("-x {}: cannot read the command file", f.display()))?;
            out.push(Source::Steps(steps(&f.display().to_string(), &text)));
        }
    }
    Ok(out)
}

/// The commands of a command file `name` holding `text`: one a line, blank lines and
/// lines starting with `#` skipped.
pub fn steps(name: &str, text: &str) -> Vec<Step> {
    text.lines()
        .enumerate()
        .filter_map(|(i, l)| command_of(l).map(|c| (i, c)))
        .map(|(i, c)| Step {
            text: c.to_owned(),
            place: Some(format!("{name}:{}", i + 1)),
        })
        .collect()
}

/// The command a script line holds, if any (blank lines and `#` comments hold none).
fn command_of(line: &str) -> Option<&str> {
    let l = line.trim();
    (!l.is_empty() && !l.starts_with('#')).then_some(l)
}

/// What running a script came to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcome {
    /// A command failed (an error, an error reply, a lost or timed-out server).
    pub failed: bool,
    /// A command was `quit`: nothing after it runs.
    pub quit: bool,
}

impl Outcome {
    /// Adds what running one command gave; says whether to go on. A closed standard
    /// output ends the script (the caller exits quietly, as `head` expects).
    fn add(&mut self, step: &Step, r: anyhow::Result<Flow>) -> anyhow::Result<bool> {
        match r {
            Ok(Flow::Continue { failed }) => self.failed |= failed,
            Ok(Flow::Quit) => self.quit = true,
            Err(e) if crate::cli::broken_pipe(&e) => return Err(e),
            Err(e) => {
                eprintln!("sdm: {}: {}", step.named(), crate::cli::error_text(&e));
                self.failed = true;
            }
        }
        Ok(!self.quit)
    }
}

/// Runs `sources` in order on `console`, printing to `out`, until their end or `quit`.
pub async fn run(
    console: &mut Console,
    sources: &[Source],
    out: &mut dyn Write,
) -> anyhow::Result<Outcome> {
    let mut o = Outcome::default();
    for s in sources {
        match s {
            Source::Steps(steps) => {
                for step in steps {
                    let r = console.command(&step.text, out).await;
                    if !o.add(step, r)? {
                        return Ok(o);
                    }
                }
            }
            Source::Stdin => {
                from_stdin(console, out, &mut o).await?;
                if o.quit {
                    return Ok(o);
                }
            }
        }
    }
    Ok(o)
}

/// Runs the commands read from standard input, one a line, until its end (or `quit`);
/// while waiting for the next line, the programs' output and events print.
async fn from_stdin(
    console: &mut Console,
    out: &mut dyn Write,
    o: &mut Outcome,
) -> anyhow::Result<()> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<String>(1);
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.blocking_send(line).is_err() {
                break;
            }
        }
    });
    let mut number = 0usize;
    loop {
        let far = tokio::time::Instant::now() + Duration::from_secs(3600);
        tokio::select! {
            line = rx.recv() => {
                let Some(line) = line else { return Ok(()) };
                number += 1;
                let Some(text) = command_of(&line) else { continue };
                let step = Step { text: text.to_owned(), place: Some(format!("stdin:{number}")) };
                let r = console.command(&step.text, out).await;
                out.flush()?;
                if !o.add(&step, r)? {
                    return Ok(());
                }
            }
            r = console.pump(far, out) => r?,
        }
    }
}

/// Whether `files` names standard input (`-x -`).
pub fn reads_stdin(files: &[PathBuf]) -> bool {
    files.iter().any(|f| f == Path::new("-"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_blank_lines_are_skipped_and_lines_keep_their_numbers() {
        let s = steps(
            "f.sdm",
            "# setup\n\nstop\n   # indented comment\n  bt --classes  \ncont\n",
        );
        let got: Vec<(&str, &str)> = s
            .iter()
            .map(|s| (s.text.as_str(), s.place.as_deref().unwrap()))
            .collect();
        assert_eq!(
            got,
            [
                ("stop", "f.sdm:3"),
                ("bt --classes", "f.sdm:5"),
                ("cont", "f.sdm:6")
            ]
        );
        assert_eq!(s[1].named(), "f.sdm:5: bt --classes");
    }

    #[test]
    fn a_missing_command_file_is_named() {
        let e = sources(&[], &[PathBuf::from("/nonexistent/cmds")]).unwrap_err();
        assert!(
            format!("{e:#}").starts_with("-x /nonexistent/cmds: cannot read the command file"),
            "{e:#}"
        );
    }

    #[test]
    fn commands_come_first_then_files_in_order() {
        let s = sources(&["stop".into()], &[PathBuf::from("-")]).unwrap();
        assert_eq!(
            s,
            [
                Source::Steps(vec![Step {
                    text: "stop".into(),
                    place: None
                }]),
                Source::Stdin
            ]
        );
    }
}
