//! The interactive console of `sdm run` and `sdm attach` on a terminal: a line editor
//! (rustyline: history in ~/.sdm_history, tab completion of commands and of the program's
//! functions) on a thread of its own, the command loop, and the output printed through a
//! [`Screen`] so that neither printing nor a flood of output ever keeps a typed command
//! (or Ctrl-C) from running.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use crate::console::{Console, Flow};
use crate::screen::{Printer, Screen, Stream};

/// How long the end of the console waits for the terminal to take what is still queued.
const FINISH_PATIENCE: Duration = Duration::from_secs(5);

/// Runs the interactive console until `quit`, end of input (Ctrl-D) or the tree's end;
/// output and events keep printing while a line is typed (above the prompt, unless
/// `json`: JSON lines are never mixed with a prompt's repaints); Ctrl-C at the prompt
/// stops the programs, as in gdb.
pub async fn line_editor(console: &mut Console, json: bool) -> anyhow::Result<()> {
    let (line_tx, mut line_rx) = tokio::sync::mpsc::channel::<String>(1);
    // After each command: the prompt for the next (it shows the focus).
    let (done_tx, done_rx) = std::sync::mpsc::channel::<String>();
    let (printer_tx, printer_rx) = tokio::sync::oneshot::channel::<Option<Printer>>();
    let history = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".sdm_history"));
    let functions = console
        .program()
        .map(|p| crate::commands::function_names(std::path::Path::new(p)))
        .unwrap_or_default();
    std::thread::spawn(move || {
        edit_lines(&line_tx, &done_rx, printer_tx, history, functions, !json)
    });
    let screen = Screen::start(printer_rx.await.ok().flatten());
    console.set_stderr(Some(Box::new(screen.writer(Stream::Err))));
    console.set_room(Some(screen.room()));
    let r = command_loop(console, &mut line_rx, &done_tx, &screen).await;
    console.set_room(None);
    console.set_stderr(None);
    // The editor thread ends (a `quit` waits for its `done`), and its printer with it.
    drop(done_tx);
    tokio::task::spawn_blocking(move || screen.finish(FINISH_PATIENCE)).await?;
    r
}

/// Takes typed lines and runs them; between them (and during `sleep`), prints the
/// programs' output, taken from the tree only while the terminal keeps up (the console
/// waits on the screen's [`crate::screen::Room`]).
async fn command_loop(
    console: &mut Console,
    lines: &mut tokio::sync::mpsc::Receiver<String>,
    done: &std::sync::mpsc::Sender<String>,
    screen: &Screen,
) -> anyhow::Result<()> {
    let mut out = screen.writer(Stream::Out);
    let mut err = screen.writer(Stream::Err);
    loop {
        let far = tokio::time::Instant::now() + Duration::from_secs(3600);
        tokio::select! {
            line = lines.recv() => {
                let Some(line) = line else { return Ok(()) };
                match console.command(&line, &mut out).await {
                    Ok(Flow::Continue { .. }) => {}
                    Ok(Flow::Quit) => return Ok(()),
                    Err(e) => writeln!(err, "sdm: {}", crate::cli::error_text(&e))?,
                }
                out.flush()?;
                err.flush()?;
                let _ = done.send(console.prompt());
            }
            // Cancelled when a line comes: nothing is lost, an event is taken whole.
            r = console.pump(far, &mut out) => r?,
        }
    }
}

/// The editor thread: reads lines at the prompt and hands each to the command loop, then
/// waits for it to be done (and for the next prompt) before reading the next.
fn edit_lines(
    lines: &tokio::sync::mpsc::Sender<String>,
    done: &std::sync::mpsc::Receiver<String>,
    printer: tokio::sync::oneshot::Sender<Option<Printer>>,
    history: Option<PathBuf>,
    functions: Vec<String>,
    print_above_prompt: bool,
) {
    use rustyline::error::ReadlineError;
    let mut rl = match rustyline::Editor::<
        crate::commands::Completion,
        rustyline::history::DefaultHistory,
    >::new()
    {
        Ok(rl) => rl,
        Err(e) => {
            eprintln!("sdm: no line editor: {e}");
            return;
        }
    };
    rl.set_helper(Some(crate::commands::Completion { functions }));
    if let Some(h) = &history {
        let _ = rl.load_history(h);
    }
    let p = if print_above_prompt {
        rl.create_external_printer()
            .ok()
            .map(|p| Box::new(p) as Printer)
    } else {
        None
    };
    let _ = printer.send(p);
    let signals = SignalKeys::off();
    let mut prompt = String::from("sdm> ");
    loop {
        let line = match rl.readline(&prompt) {
            Ok(line) => {
                let _ = rl.add_history_entry(line.as_str());
                line
            }
            // As in gdb, Ctrl-C stops the programs.
            Err(ReadlineError::Interrupted) => "stop".into(),
            Err(_) => break,
        };
        // Wait for the command to finish before prompting again.
        match lines
            .blocking_send(line)
            .ok()
            .and_then(|()| done.recv().ok())
        {
            Some(p) => prompt = p,
            None => break,
        }
    }
    if let Some(h) = &history {
        let _ = rl.save_history(h);
    }
    drop(signals);
}

/// The terminal without signal keys while the console runs: between two `readline`s
/// (a command running) Ctrl-C would otherwise be SIGINT for sdm and its local servers,
/// which share its process group; without it, Ctrl-C waits as a key, and the next
/// `readline` takes it as Ctrl-C: stop. The terminal's mode comes back when this drops.
struct SignalKeys(Option<nix::sys::termios::Termios>);

impl SignalKeys {
    fn off() -> SignalKeys {
        use nix::sys::termios::{LocalFlags, SetArg, tcgetattr, tcsetattr};
        let saved = tcgetattr(std::io::stdin()).ok();
        if let Some(t) = &saved {
            let mut quiet = t.clone();
            quiet.local_flags.remove(LocalFlags::ISIG);
            let _ = tcsetattr(std::io::stdin(), SetArg::TCSANOW, &quiet);
        }
        SignalKeys(saved)
    }
}

impl Drop for SignalKeys {
    fn drop(&mut self) {
        if let Some(t) = &self.0 {
            let _ = nix::sys::termios::tcsetattr(
                std::io::stdin(),
                nix::sys::termios::SetArg::TCSANOW,
                t,
            );
        }
    }
}
