//! A real browser for the HTML report's tests: Debian's chromium, headless. [`load`] opens a
//! page with a recorder of its errors put first in its `<head>` (every `error` and
//! `unhandledrejection` event, Content-Security-Policy violations, `console.error` and
//! `console.warn`) and returns the DOM as it stands after the load, the errors counted in an
//! attribute of its root element; [`screenshot`] renders a page to a PNG of a given size and
//! reads the size back from the PNG's header. Each chromium run is killed, failing the
//! test, if it has not ended in `CHROMIUM_DEADLINE`.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A hang guard: a headless chromium still running after this long is stuck (killed, with
/// its helper processes), not slow.
const CHROMIUM_DEADLINE: Duration = Duration::from_secs(120);

/// Injected first into the page: records each error into the root element's attributes
/// (`data-sdm-errors`, their count; `data-sdm-error-log`, their text), notes the load
/// (`data-sdm-loaded`), and then clicks the first class swatch to see the page's script
/// dim the other classes' rows (`data-sdm-dimmed`: how many rows it dimmed), and clicks
/// again to undo it.
const RECORDER: &str = r##"<script>
(function () {
  var root = document.documentElement, n = 0, log = [];
  function record(what) {
    n += 1;
    log.push(String(what));
    root.setAttribute("data-sdm-errors", String(n));
    root.setAttribute("data-sdm-error-log", log.join(" | "));
  }
  root.setAttribute("data-sdm-errors", "0");
  window.addEventListener("error", function (e) { record("error: " + (e.message || e.type)); }, true);
  window.addEventListener("unhandledrejection", function (e) { record("rejection: " + e.reason); });
  document.addEventListener("securitypolicyviolation", function (e) {
    record("csp: " + e.violatedDirective + " " + e.blockedURI);
  });
  ["error", "warn"].forEach(function (level) {
    var orig = console[level];
    console[level] = function () {
      record("console." + level + ": " + Array.prototype.join.call(arguments, " "));
      return orig.apply(console, arguments);
    };
  });
  window.addEventListener("load", function () {
    root.setAttribute("data-sdm-loaded", "1");
    var sw = document.querySelector("#classes .sw");
    if (sw) {
      sw.click();
      root.setAttribute("data-sdm-dimmed", String(document.querySelectorAll("#ranks tr.dim").length));
      sw.click();
    }
  });
})();
</script>"##;

/// What a loaded page left.
#[derive(Debug)]
pub struct Loaded {
    /// The DOM serialized after the load (`--dump-dom`).
    pub dom: String,
}

impl Loaded {
    /// The value of the root element's attribute `name`, as chromium serialized it.
    pub fn root_attribute(&self, name: &str) -> Option<&str> {
        let start = self.dom.find("<html")?;
        let tag = &self.dom[start..start + self.dom[start..].find('>')?];
        let at = tag.find(&format!(" {name}=\""))? + name.len() + 3;
        let len = tag[at..].find('"')?;
        Some(&tag[at..at + len])
    }

    /// How many errors the page had (the recorder's count).
    pub fn errors(&self) -> u32 {
        self.root_attribute("data-sdm-errors")
            .and_then(|n| n.parse().ok())
            .expect("the error recorder ran (no count in the DOM)")
    }
}

/// A headless chromium command with a profile of its own (tests run at once).
fn chromium(profile: &Path) -> Command {
    let mut c = Command::new("chromium");
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--hide-scrollbars",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    c
}

/// What a chromium run left: its exit status and what it wrote.
struct Ran {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: String,
}

/// Runs `cmd` (a chromium command) in `dir`'s files for its output, in a process group of
/// its own; past [`CHROMIUM_DEADLINE`] kills the group and panics naming the command.
fn run(mut cmd: Command, dir: &Path) -> Ran {
    let (out, err) = (dir.join("stdout"), dir.join("stderr"));
    let file = |p: &Path| Stdio::from(std::fs::File::create(p).expect("a file for chromium"));
    let mut child = cmd
        .stdout(file(&out))
        .stderr(file(&err))
        .process_group(0)
        .spawn()
        .expect("running chromium");
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("waiting for chromium") {
            break s;
        }
        if start.elapsed() > CHROMIUM_DEADLINE {
            let group = nix::unistd::Pid::from_raw(-(child.id() as i32));
            let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
            let _ = child.wait();
            panic!("chromium hung: still running after {CHROMIUM_DEADLINE:?}, killed: {cmd:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    Ran {
        status,
        stdout: std::fs::read(&out).expect("chromium's output"),
        stderr: String::from_utf8_lossy(&std::fs::read(&err).unwrap_or_default()).into_owned(),
    }
}

/// A fresh directory for one browser run.
fn scratch(tag: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let d = std::env::temp_dir().join(format!(
        "sdm-browser-{}-{tag}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d).expect("a directory for the browser");
    d
}

/// Loads the page `html` (a file) with the recorder first in its head; the DOM after
/// the load.
pub fn load(html: &Path) -> Loaded {
    let dir = scratch("load");
    let page = std::fs::read_to_string(html).expect("the page");
    let at = page.find("<head>").expect("the page has a <head>") + "<head>".len();
    let copy = dir.join("page.html");
    std::fs::write(&copy, format!("{}{RECORDER}{}", &page[..at], &page[at..])).unwrap();
    let mut cmd = chromium(&dir.join("profile"));
    cmd.arg("--dump-dom")
        .arg(format!("file://{}", copy.display()));
    let out = run(cmd, &dir);
    assert!(
        out.status.success(),
        "chromium --dump-dom failed ({:?}): {}",
        out.status,
        out.stderr
    );
    let _ = std::fs::remove_dir_all(&dir);
    Loaded {
        dom: String::from_utf8(out.stdout).expect("the DOM is UTF-8"),
    }
}

/// Renders `html` at `width` x `height` into the PNG `png`; returns the size its header
/// gives.
pub fn screenshot(html: &Path, png: &Path, width: u32, height: u32) -> (u32, u32) {
    let dir = scratch("shot");
    let mut cmd = chromium(&dir.join("profile"));
    cmd.arg(format!("--window-size={width},{height}"))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", html.display()));
    let out = run(cmd, &dir);
    assert!(
        out.status.success(),
        "chromium --screenshot failed ({:?}): {}",
        out.status,
        out.stderr
    );
    let _ = std::fs::remove_dir_all(&dir);
    png_size(&std::fs::read(png).expect("the screenshot"))
}

/// The width and height in a PNG's header (its IHDR chunk, first after the signature).
pub fn png_size(png: &[u8]) -> (u32, u32) {
    const SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";
    assert!(png.len() > 24 && png.starts_with(SIGNATURE), "not a PNG");
    assert_eq!(&png[12..16], b"IHDR", "no IHDR chunk first");
    let word = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().unwrap());
    (word(16), word(20))
}
