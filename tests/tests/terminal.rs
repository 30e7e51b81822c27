//! The interactive console on a real terminal (a tmux pane on its own tmux server, typed at
//! with `send-keys`, everything it shows logged with `pipe-pane`): with sixteen ranks
//! printing as fast as they can, Ctrl-C (at the prompt, and while a command runs), `bt`,
//! `cont`, `sleep`, `status`, `kill` and `quit` are each answered, and sdm ends. Waits are hang guards only; the checks are on what was shown.

use sdm_e2e as support;

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// How long any one answer may take before the test calls the console hung.
const HANG: Duration = Duration::from_secs(60);

/// A command running in a tmux pane, on a tmux server of the test's own (killed at the
/// end, with everything in it).
struct Pane {
    socket: String,
    dir: PathBuf,
    log: PathBuf,
}

impl Pane {
    /// Runs `args` (the `sdm` command's arguments) in a 200x50 pane, with HOME in a
    /// directory of the test's (the line editor's history goes there); its exit status
    /// goes to `status` in that directory.
    fn start(name: &str, args: &[&str]) -> Pane {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("sdm-terminal-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let pane = Pane {
            socket: format!("sdm-test-{name}-{}", std::process::id()),
            log: dir.join("shown"),
            dir,
        };
        let go = pane.dir.join("go");
        let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
        // The command waits for `go`, so the log misses nothing it shows.
        let script = format!(
            "while [ ! -e '{go}' ]; do sleep 0.05; done; HOME='{dir}' '{sdm}' {args}; echo $? > '{dir}/status'",
            go = go.display(),
            dir = pane.dir.display(),
            sdm = support::sdm(),
            args = quoted.join(" "),
        );
        pane.tmux(&[
            "new-session",
            "-d",
            "-s",
            "main",
            "-x",
            "200",
            "-y",
            "50",
            "sh",
            "-c",
            &script,
        ]);
        pane.tmux(&[
            "pipe-pane",
            "-t",
            "main",
            "-o",
            &format!("cat >> '{}'", pane.log.display()),
        ]);
        std::fs::write(&go, "").unwrap();
        pane
    }

    fn tmux(&self, args: &[&str]) {
        let out = Command::new("tmux")
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .output()
            .expect("tmux");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Types `keys` (tmux key names: `C-c`, `Enter`, or text).
    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "main"];
        args.extend_from_slice(keys);
        self.tmux(&args);
    }

    /// How much the pane has shown so far.
    fn shown(&self) -> u64 {
        std::fs::metadata(&self.log).map_or(0, |m| m.len())
    }

    /// Waits until the pane shows `needle` after `from` bytes of its output; returns
    /// where that showing ends. Panics, with the tail of the output, after [`HANG`].
    fn wait_for(&self, from: u64, needle: &str) -> u64 {
        let t0 = Instant::now();
        let mut pos = from;
        let mut tail: Vec<u8> = Vec::new();
        loop {
            if let Ok(mut f) = std::fs::File::open(&self.log) {
                f.seek(SeekFrom::Start(pos)).unwrap();
                let mut more = Vec::new();
                f.read_to_end(&mut more).unwrap();
                pos += more.len() as u64;
                tail.extend_from_slice(&more);
                if let Some(i) = find(&tail, needle.as_bytes()) {
                    return pos - (tail.len() - i - needle.len()) as u64;
                }
                // Keep what a match split by a read could start with.
                let keep = tail.len().saturating_sub(needle.len());
                tail.drain(..keep);
            }
            assert!(
                t0.elapsed() < HANG,
                "no {needle:?} shown within {HANG:?}; the pane shows:\n{}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What the pane shows now.
    fn screen(&self) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket, "capture-pane", "-p", "-t", "main"])
            .output()
            .expect("tmux");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The command's exit status, once it has ended (waiting at most [`HANG`]).
    fn status(&self) -> i32 {
        let t0 = Instant::now();
        let path = self.dir.join("status");
        loop {
            if let Ok(s) = std::fs::read_to_string(&path)
                && s.ends_with('\n')
            {
                return s.trim().parse().unwrap();
            }
            assert!(
                t0.elapsed() < HANG,
                "sdm did not end within {HANG:?}; the pane shows:\n{}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Types `keys` and waits for `answer` to be shown; returns where it ends, and says how
/// long it took and how much output came in between.
fn answered(pane: &Pane, keys: &[&str], answer: &str) -> u64 {
    let from = pane.shown();
    let t0 = Instant::now();
    pane.keys(keys);
    let end = pane.wait_for(from, answer);
    eprintln!(
        "{keys:?}: {answer:?} after {:.2} s, {} KiB shown in between",
        t0.elapsed().as_secs_f64(),
        (end - from) / 1024
    );
    end
}

#[test]
#[cfg_attr(not(sdm_have_tmux), ignore = "needs tmux")]
fn a_flood_of_output_never_keeps_commands_from_being_answered() {
    let pane = Pane::start("flood", &["run", "-n", "16", "--", "yes", "flood"]);
    let at = pane.wait_for(0, "sdm> ");
    // The flood is on: well past what a terminal's buffers and the tree's windows hold.
    let at = pane.wait_for(at, "] flood");
    let at = pane.wait_for(at + 1024 * 1024, "] flood");
    assert!(at > 1024 * 1024);
    answered(&pane, &["C-c"], "[0-15] stopped");
    answered(&pane, &["bt --classes", "Enter"], "(representative ");
    let at = answered(&pane, &["cont", "Enter"], "[0-15] running");
    let at = pane.wait_for(at + 1024 * 1024, "] flood");
    // A command that takes output itself (`sleep` prints while it waits), then the next.
    let from = pane.shown().max(at);
    pane.keys(&["sleep 1", "Enter"]);
    pane.wait_for(from, "sleep 1");
    answered(&pane, &["status", "Enter"], "[0-15] running");
    // Ctrl-C while a command runs: a stop once it is done, never a signal that ends sdm.
    let from = pane.shown();
    pane.keys(&["sleep 2", "Enter"]);
    pane.wait_for(from, "sleep 2");
    answered(&pane, &["C-c"], "[0-15] stopped");
    answered(&pane, &["kill", "Enter"], "[0-15] killed");
    pane.keys(&["quit", "Enter"]);
    assert_eq!(pane.status(), 0, "{}", pane.screen());
}
