//! Python ranks' stacks (issue 39, item 4): the Python frames of CPython processes merged
//! into their native stacks by the servers, through real daemons (`sdm attach --pids`).
//!
//! - tests/programs/mpi_barrier.py, 8 mpi4py ranks under Open MPI 5's `mpirun`, 7 waiting
//!   in `comm.Barrier()` called from `step()` and the last looping in `compute()` called
//!   from `step()`: `bt --classes` is two classes through the module's frame and `step`,
//!   one into `mpi4py.MPI.Comm.Barrier`, the other into `compute`; the tree goes on from
//!   the Barrier into libmpi's native frames.
//! - tests/programs/py_threads.py under Debian's python3 (3.11), pyenv's 3.13 and 3.10
//!   (threads known by their `pthread_t`, not their OS id): both
//!   threads' Python frames and the main thread's in every `bt` view (tree, `--classes`,
//!   `--samples`, `--json`, DOT, SVG), the GIL holder marked, `info threads` naming the
//!   Python threads.
//! - A process that maps a `python*` file but is no interpreter py-spy can read: its
//!   native stack with a note, the rank answered.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use sdm_e2e::sdm;

/// Debian's interpreter (3.11).
const DEBIAN_PYTHON: &str = "/usr/bin/python3";
/// The newest CPython installed here.
const PYENV_PYTHON: &str = "/root/.pyenv/versions/3.13.0/bin/python3";
/// A CPython before 3.11: its threads are matched by their `pthread_t`.
const PYENV_PYTHON_310: &str = "/root/.pyenv/versions/3.10.13/bin/python3";
/// mpi4py's interpreter and Open MPI 5's launcher (deploy/ci-setup.sh's venv).
const VENV_PYTHON: &str = "/opt/sdm-venv/bin/python";
const VENV_MPIRUN: &str = "/opt/sdm-venv/bin/mpirun";

/// tests/programs/NAME.
fn program(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("programs")
        .join(name)
}

/// The line of tests/programs/NAME holding `marker`.
fn line_of(name: &str, marker: &str) -> u32 {
    let text = std::fs::read_to_string(program(name)).unwrap();
    text.lines()
        .position(|l| l.contains(marker))
        .map(|i| i as u32 + 1)
        .unwrap_or_else(|| panic!("no {marker} in {name}"))
}

/// A started command, killed when dropped, whatever happens.
struct Running(Child);

impl Running {
    /// `cmd`, once `n` lines `ready` came out of it (its output drained after).
    fn start(cmd: &mut Command, n: u32) -> Self {
        let mut child = cmd
            .current_dir(std::env::temp_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        let out = child.stdout.take().unwrap();
        let running = Running(child);
        let mut lines = BufReader::new(out).lines();
        for _ in 0..n {
            let l = lines.next().expect("a ready line").unwrap();
            assert_eq!(l, "ready");
        }
        std::thread::spawn(move || for _ in lines {});
        running
    }
}

impl Drop for Running {
    /// SIGTERM first, so a launcher (Open MPI 5's prterun) ends its ranks, which SIGKILL
    /// would orphan; SIGKILL after 10 s.
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while matches!(self.0.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Processes killed (SIGKILL) when dropped: the ranks of a job, which outlive their
/// launcher killed (the late one would spin on).
struct Killed(Vec<u32>);

impl Drop for Killed {
    fn drop(&mut self) {
        for &pid in &self.0 {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// `sdm attach --pids PIDS -c stop -c C... -c detach`: what it printed (stdout, stderr),
/// asserting it succeeded.
fn attach(pids: &[u32], commands: &[&str]) -> (String, String) {
    let list: Vec<String> = pids.iter().map(u32::to_string).collect();
    let mut cmd = Command::new(sdm());
    cmd.args(["attach", "--pids", &list.join(","), "-c", "stop"]);
    for c in commands {
        cmd.args(["-c", c]);
    }
    let out = cmd.args(["-c", "detach"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{:?}: {stdout}{stderr}", out.status);
    (stdout, stderr)
}

/// The lines of `bt --classes` (those naming a representative).
fn classes(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.contains("(representative"))
        .collect()
}

/// The rank (`OMPI_COMM_WORLD_RANK`) in the environment of `pid`.
fn rank_of(pid: u32) -> Option<u32> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|&b| b == 0).find_map(|v| {
        std::str::from_utf8(v)
            .ok()?
            .strip_prefix("OMPI_COMM_WORLD_RANK=")?
            .parse()
            .ok()
    })
}

#[test]
#[cfg_attr(
    not(sdm_have_mpi4py),
    ignore = "needs mpi4py over Open MPI 5 in /opt/sdm-venv (deploy/ci-setup.sh, then touch tests/build.rs)"
)]
fn an_mpi4py_job_hung_at_a_barrier_is_two_classes_through_python_frames() {
    const N: u32 = 8;
    let script = program("mpi_barrier.py");
    let job = Running::start(
        Command::new(VENV_MPIRUN)
            .args(["--allow-run-as-root", "--oversubscribe", "-n", "8"])
            .arg(VENV_PYTHON)
            .arg(&script),
        N,
    );
    let mut ranks: Vec<(u32, u32)> = sdm_e2e::descendants_of(job.0.id())
        .into_iter()
        .filter_map(|pid| Some((rank_of(pid)?, pid)))
        .collect();
    ranks.sort();
    let _ranks = Killed(ranks.iter().map(|r| r.1).collect());
    assert_eq!(
        ranks.iter().map(|r| r.0).collect::<Vec<_>>(),
        (0..N).collect::<Vec<_>>()
    );
    let pids: Vec<u32> = ranks.iter().map(|r| r.1).collect();
    let (out, err) = attach(&pids, &["bt --classes", "bt"]);
    let context = format!("{out}{err}");
    let name = "mpi_barrier.py";
    let module = format!("<module> at {name}:{}", line_of(name, "# module: the call"));
    // The main threads' classes (Open MPI's own threads are classes of their own).
    let main: Vec<&str> = classes(&out)
        .into_iter()
        .filter(|l| l.contains(&module))
        .collect();
    assert_eq!(main.len(), 2, "{context}");
    let waiting = format!(
        "{module} > step at {name}:{} > mpi4py.MPI.Comm.Barrier",
        line_of(name, "# step: the waiting ranks")
    );
    assert!(
        main[0].starts_with("[0-6] (representative 0) ") && main[0].ends_with(&waiting),
        "{context}"
    );
    let computing = format!(
        "{module} > step at {name}:{} > compute at {name}:{}",
        line_of(name, "# step: the late rank"),
        line_of(name, "# compute: the late rank's loop")
    );
    assert!(
        main[1].starts_with("[7] (representative 7) ") && main[1].contains(&computing),
        "{context}"
    );
    // The tree goes on below the Barrier into libmpi.
    let tree: Vec<&str> = out
        .lines()
        .filter(|l| !l.contains("(representative"))
        .collect();
    let barrier = tree
        .iter()
        .position(|l| l.ends_with("[0-6] mpi4py.MPI.Comm.Barrier"))
        .unwrap_or_else(|| panic!("no Barrier in the tree: {context}"));
    assert!(
        tree[barrier + 1].trim_start().starts_with("[0-6] ")
            && tree[barrier + 1].contains("MPI_Barrier"),
        "{context}"
    );
}

/// tests/programs/py_threads.py under `python`: every view of `bt` shows the three
/// threads' Python frames, the spinning thread marked as the GIL's holder.
fn threads_in_every_view(python: &str) {
    let name = "py_threads.py";
    let run = Running::start(Command::new(python).arg(program(name)), 1);
    let dir = std::env::temp_dir().join(format!("sdm-python-{}", run.0.id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (dot, svg) = (dir.join("bt.dot"), dir.join("bt.svg"));
    let views = [
        "bt".to_owned(),
        "bt --classes".to_owned(),
        "bt --samples 2 --interval 10".to_owned(),
        format!("bt --dot {} --svg {}", dot.display(), svg.display()),
        "info threads".to_owned(),
    ];
    let commands: Vec<&str> = views.iter().map(String::as_str).collect();
    let (out, err) = attach(&[run.0.id()], &commands);
    let (json, _) = attach(&[run.0.id()], &["bt --json"]);
    let context = format!("{out}{err}{json}");
    let spin = format!("spin at {name}:{}", line_of(name, "# spin: holds the GIL"));
    let nap = format!("nap at {name}:{}", line_of(name, "# nap: asleep"));
    let main = format!("<module> at {name}:{}", line_of(name, "# main: waits"));
    // The tree (printed three times: the tree, the samples, the tree of --dot): each
    // thread's innermost Python frame, the spinner's with the GIL mark below it.
    let lines: Vec<&str> = out.lines().collect();
    let trees: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| !l.contains(", called from "))
        .collect();
    for frame in [&spin, &nap, &main] {
        let n = trees.iter().filter(|l| l.ends_with(frame.as_str())).count();
        assert_eq!(n, 3, "{frame}: {context}");
    }
    // Only the spinner holds the GIL: each mark's innermost Python frame above it is
    // `spin` (the spinner may be caught in a native call of the interpreter's).
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut marks = 0;
    for (i, l) in trees.iter().enumerate() {
        if !l.ends_with("<holding the GIL>") || l.contains("(representative") {
            continue;
        }
        marks += 1;
        let python = trees[..i]
            .iter()
            .rev()
            .filter(|p| indent(p) < indent(l))
            .find(|p| p.contains(".py:"))
            .unwrap_or_else(|| panic!("no Python frame above {l}: {context}"));
        assert!(python.ends_with(spin.as_str()), "{python}: {context}");
    }
    assert!(marks >= 3, "a GIL holder in each tree: {context}");
    let sampled = lines
        .iter()
        .filter(|l| l.ends_with(&format!("[0] x2 {spin}")));
    assert_eq!(sampled.count(), 1, "{context}");
    // The classes: the spinner's ends with the GIL mark.
    let classes = classes(&out);
    assert!(
        classes
            .iter()
            .any(|c| c.contains(spin.as_str()) && c.ends_with(" > <holding the GIL>")),
        "{context}"
    );
    for frame in [&nap, &main] {
        assert!(
            classes.iter().any(|c| c.contains(frame.as_str())),
            "{context}"
        );
    }
    // DOT and SVG.
    let dot = std::fs::read_to_string(&dot).unwrap();
    let svg = std::fs::read_to_string(&svg).unwrap();
    for frame in [&spin, &nap] {
        assert!(dot.contains(&format!("[label=\"{frame}\"]")), "{dot}");
        assert!(svg.contains(frame.as_str()), "{svg}");
    }
    assert!(dot.contains("<module> at py_threads.py:"), "{dot}");
    assert!(svg.contains("&lt;module&gt; at py_threads.py:"), "{svg}");
    // JSON: the Python frames as fields, no offset.
    let tree = json
        .lines()
        .find(|l| l.starts_with('{'))
        .expect("bt --json");
    let tree: serde_json::Value = serde_json::from_str(tree).unwrap();
    let mut found = Vec::new();
    find_frames(&tree["tree"], &mut found);
    let spin_line = line_of(name, "# spin: holds the GIL");
    assert!(
        found.iter().any(|f| f["function"] == "spin"
            && f["file"] == name
            && f["line"] == spin_line
            && f["module"] == "<python>"
            && f["offset"].is_null()),
        "{json}"
    );
    // `info threads`: the Python threads by name.
    for thread in ["MainThread", "spinner", "napper"] {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("[0] ") && l.contains(&format!("\"{thread}\""))),
            "{thread}: {context}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every node of a `bt --json` tree.
fn find_frames(nodes: &serde_json::Value, out: &mut Vec<serde_json::Value>) {
    for n in nodes.as_array().into_iter().flatten() {
        out.push(n.clone());
        find_frames(&n["children"], out);
    }
}

#[test]
fn debian_python_threads_show_in_every_view() {
    threads_in_every_view(DEBIAN_PYTHON);
}

#[test]
#[cfg_attr(
    not(sdm_have_pyenv),
    ignore = "needs pyenv's CPython 3.13.0 and 3.10.13 in /root/.pyenv (then touch tests/build.rs)"
)]
fn python_3_13_threads_show_in_every_view() {
    threads_in_every_view(PYENV_PYTHON);
}

#[test]
#[cfg_attr(
    not(sdm_have_pyenv),
    ignore = "needs pyenv's CPython 3.13.0 and 3.10.13 in /root/.pyenv (then touch tests/build.rs)"
)]
fn python_3_10_threads_show_in_every_view() {
    threads_in_every_view(PYENV_PYTHON_310);
}

/// A process mapping a `python*` file that is no interpreter (a copy of `sleep` named
/// `python3.99`): py-spy cannot read it; its stack is the native one with a note, and the
/// rank answers.
#[test]
fn a_python_that_cannot_be_read_keeps_its_native_stack_with_a_note() {
    let dir = std::env::temp_dir().join(format!("sdm-python-unread-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fake = dir.join("python3.99");
    std::fs::copy("/bin/sleep", &fake).unwrap();
    let script = format!("echo ready; exec {} 1000", fake.display());
    let run = Running::start(Command::new("sh").args(["-c", &script]), 1);
    // Until the shell is the fake interpreter.
    let exe = |pid: u32| std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    for _ in 0..500 {
        if exe(run.0.id()).as_deref() == Some(fake.as_path()) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let (out, err) = attach(&[run.0.id()], &["bt --classes"]);
    let classes = classes(&out);
    assert_eq!(classes.len(), 1, "{out}{err}");
    assert!(
        classes[0].starts_with("[0] (representative 0) <no Python frames: ")
            && classes[0].contains("nanosleep"),
        "{out}{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
