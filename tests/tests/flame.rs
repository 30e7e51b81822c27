//! Flame graphs through real daemons (issue 40, item 2).
//!
//! `bt --samples K --flame FILE.svg --folded FILE` on tests/programs/threads.c (four ranks,
//! each with a helper thread asleep in `helper_wait`, the main threads waiting in `wait_here`
//! called from two call sites: two classes of main threads and one of helpers): every folded
//! line is well-formed, the counts add up to samples x ranks x threads exactly, the functions
//! sit on their paths, each class has its own files holding its ranks' counts, and every SVG
//! is well-formed XML naming the functions in its frames.
//!
//! `sdm top --flame --folded` on tests/programs/cpu_threads.c (each rank's main thread burns
//! CPU in `burn`, its helper sleeps in `idle_wait`): the busy function is counted, the
//! sleeping threads never, whether top ends after `--count` samples or by SIGTERM; Python
//! ranks' graphs are of their Python functions (tests/programs/ranked.py). Paths
//! that cannot be written are refused, naming them, before the job starts.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use sdm::console::Console;
use sdm_e2e::console_command as run;

/// A fresh directory for one test's files.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sdm-flame-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The lines of a folded file as (frames outermost first, count); asserts each line is
/// `frame;frame;... COUNT` with no empty frame and a count of at least one.
fn folded(path: &Path) -> Vec<(Vec<String>, u64)> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(text.ends_with('\n'), "{}: {text:?}", path.display());
    text.lines()
        .map(|l| {
            let (stack, n) = l
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("no count in {l:?}"));
            let n: u64 = n.parse().unwrap_or_else(|_| panic!("count of {l:?}"));
            assert!(n > 0, "{l:?}");
            let frames: Vec<String> = stack.split(';').map(str::to_owned).collect();
            assert!(
                frames.iter().all(|f| !f.is_empty() && f.trim() == f),
                "an empty or padded frame in {l:?}"
            );
            (frames, n)
        })
        .collect()
}

/// The total count of `lines`.
fn total(lines: &[(Vec<String>, u64)]) -> u64 {
    lines.iter().map(|(_, n)| n).sum()
}

/// The count of the lines whose frames hold `path` as consecutive frames.
fn through(lines: &[(Vec<String>, u64)], path: &[&str]) -> u64 {
    lines
        .iter()
        .filter(|(f, _)| f.windows(path.len()).any(|w| w == path))
        .map(|(_, n)| n)
        .sum()
}

/// Parses `path` as XML to its end (start and end tags balanced, one `svg` root) and
/// returns the text of its `<title>` elements, where inferno names each frame.
fn svg_titles(path: &Path) -> Vec<String> {
    use quick_xml::events::Event;
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut r = quick_xml::Reader::from_str(&text);
    let mut open: Vec<String> = Vec::new();
    let (mut roots, mut titles) = (Vec::new(), Vec::new());
    loop {
        match r.read_event() {
            Ok(Event::Start(e)) => {
                let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
                if open.is_empty() {
                    roots.push(name.clone());
                }
                open.push(name);
            }
            Ok(Event::End(e)) => {
                let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
                assert_eq!(
                    open.pop().as_deref(),
                    Some(name.as_str()),
                    "{}",
                    path.display()
                );
            }
            Ok(Event::Text(t)) if open.last().is_some_and(|n| n == "title") => {
                titles.push(t.decode().unwrap().into_owned());
            }
            Ok(Event::Eof) => break,
            Ok(_) => {}
            Err(e) => panic!("{} is not well-formed XML: {e}", path.display()),
        }
    }
    assert!(open.is_empty(), "{}: unclosed {open:?}", path.display());
    assert_eq!(roots, ["svg"], "{}", path.display());
    titles
}

/// Whether some frame's title in `titles` names `function` (`name (N samples, P%)`).
fn has_frame(titles: &[String], function: &str) -> bool {
    titles
        .iter()
        .any(|t| t.starts_with(&format!("{function} (")))
}

/// Four ranks of tests/programs/threads.c, started (running) under a console.
async fn threads_job() -> Console {
    let program = sdm_e2e::c_program("threads", &["-O0", "-g", "-pthread"]);
    sdm_e2e::running_console(4, &program).await.0
}

/// Waits until every rank's two threads wait where threads.c leaves them: three classes.
async fn settled(c: &mut Console) {
    let mut out = String::new();
    for _ in 0..600 {
        out = run(c, "bt --classes").await;
        let classes: Vec<&str> = out
            .lines()
            .filter(|l| l.contains("(representative"))
            .collect();
        let ends = |ranks: &str, leaf: &str| {
            classes
                .iter()
                .any(|l| l.starts_with(&format!("{ranks} ")) && l.contains(leaf))
        };
        if classes.len() == 3
            && ends("[0,2]", "wait_here at")
            && ends("[1,3]", "wait_here at")
            && ends("[0-3]", "helper_wait at")
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the ranks never settled:\n{out}");
}

/// `bt --samples` of [`threads_job`]: this many samples, of these ranks, each with
/// these threads.
const SAMPLES: u64 = 3;
const RANKS: u64 = 4;
const THREADS: u64 = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bt_writes_flame_graphs_of_the_job_and_of_each_class() {
    let dir = scratch("bt");
    let mut c = threads_job().await;
    settled(&mut c).await;
    let svg = dir.join("job.svg");
    let fold = dir.join("job.folded");
    let out = run(
        &mut c,
        &format!(
            "bt --samples {SAMPLES} --interval 20 --flame {} --folded {}",
            svg.display(),
            fold.display()
        ),
    )
    .await;
    let named: Vec<&str> = out.lines().filter(|l| l.starts_with("flame: ")).collect();
    let all = whole_job_graph(&svg, &fold, &named, &out);
    class_graphs(&dir, &named, &out, total(&all));
    json_names_the_graphs(&mut c, &dir).await;
    an_unwritable_graph_is_an_error_naming_it(&mut c, &dir).await;
    c.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The whole job's graph (`svg`, `fold`) of `bt`'s output `out` (`named` its `flame:`
/// lines): every trace counted once, samples x ranks x threads. Returns its folded lines.
fn whole_job_graph(svg: &Path, fold: &Path, named: &[&str], out: &str) -> Vec<(Vec<String>, u64)> {
    let all = folded(fold);
    assert_eq!(total(&all), SAMPLES * RANKS * THREADS, "{all:?}");
    assert_eq!(
        through(&all, &["main", "wait_here", "pause"]),
        SAMPLES * RANKS,
        "{all:?}"
    );
    assert_eq!(
        through(&all, &["helper_wait", "sleep"]),
        SAMPLES * RANKS,
        "{all:?}"
    );
    assert!(
        all.iter()
            .all(|(f, _)| f.iter().any(|x| x == "main" || x == "helper_wait")),
        "a stack through neither thread's function: {all:?}"
    );
    assert_eq!(
        named[0],
        format!(
            "flame: whole job [0-3], {} samples: {} {}",
            SAMPLES * RANKS * THREADS,
            svg.display(),
            fold.display()
        ),
        "{out}"
    );

    // The SVG: well-formed, a frame per function of both threads.
    let titles = svg_titles(svg);
    for f in ["main", "wait_here", "pause", "helper_wait", "sleep"] {
        assert!(has_frame(&titles, f), "no frame {f} in {titles:?}");
    }
    all
}

/// The classes' graphs in `dir` (`named`, `out` as for [`whole_job_graph`]); their counts
/// add up to the whole job's, `job_total`.
fn class_graphs(dir: &Path, named: &[&str], out: &str, job_total: u64) {
    // One graph per class, numbered as `bt --classes` orders them (by lowest rank, then
    // path): the helpers [0-3], the main threads of the even ranks [0,2], of the odd [1,3].
    // Each holds the traces ending at it, one thread of each of its ranks in every sample,
    // with their frames: the classes split the job.
    assert_eq!(named.len(), 4, "{out}");
    let mut numbers = Vec::new();
    let mut split = 0;
    for (ranks, rank_count, leaf, path) in [
        ("[0-3]", 4, "helper_wait at", &["helper_wait", "sleep"][..]),
        ("[0,2]", 2, "wait_here at", &["main", "wait_here", "pause"]),
        ("[1,3]", 2, "wait_here at", &["main", "wait_here", "pause"]),
    ] {
        let n: usize = named[1..]
            .iter()
            .find_map(|l| {
                let (n, rest) = l.strip_prefix("flame: class ")?.split_once(' ')?;
                rest.starts_with(&format!("{ranks},"))
                    .then(|| n.parse().ok())?
            })
            .unwrap_or_else(|| panic!("no class {ranks} in\n{out}"));
        numbers.push(n);
        let class_svg = dir.join(format!("job.class-{n}.svg"));
        let class_fold = dir.join(format!("job.class-{n}.folded"));
        let line = named[n];
        let head = format!(
            "flame: class {n} {ranks}, {} samples: {} {} (",
            SAMPLES * rank_count,
            class_svg.display(),
            class_fold.display()
        );
        assert!(
            line.starts_with(&head) && line.contains(leaf),
            "{line}\n{out}"
        );
        let lines = folded(&class_fold);
        assert_eq!(total(&lines), SAMPLES * rank_count, "{line}: {lines:?}");
        assert_eq!(
            through(&lines, path),
            SAMPLES * rank_count,
            "{line}: {lines:?}"
        );
        split += total(&lines);
        let titles = svg_titles(&class_svg);
        for f in path {
            assert!(has_frame(&titles, f), "{line}: no {f} in {titles:?}");
        }
    }
    numbers.sort();
    assert_eq!(numbers, [1, 2, 3], "{out}");
    assert_eq!(split, job_total, "the classes split the job");
    assert!(!dir.join("job.class-4.svg").exists());
    assert!(!dir.join("job.class-4.folded").exists());
}

/// `bt --json --folded`: the graphs written as an object of their own after the tree's.
async fn json_names_the_graphs(c: &mut Console, dir: &Path) {
    let j = dir.join("j.folded");
    let json = run(c, &format!("bt --json --folded {}", j.display())).await;
    let last: serde_json::Value = serde_json::from_str(json.lines().last().unwrap()).unwrap();
    assert_eq!(last["command"], "bt", "{json}");
    assert_eq!(last["classes"], 3, "{json}");
    let graphs = last["flame"].as_array().unwrap();
    assert_eq!(graphs.len(), 4, "{json}");
    assert_eq!(graphs[0]["class"], serde_json::Value::Null, "{json}");
    assert_eq!(graphs[0]["count"], RANKS * THREADS, "{json}");
    assert_eq!(graphs[0]["files"][0], j.display().to_string(), "{json}");
    assert_eq!(total(&folded(&j)), RANKS * THREADS);
}

/// A path that cannot be written: an error naming it, nothing else written.
async fn an_unwritable_graph_is_an_error_naming_it(c: &mut Console, dir: &Path) {
    let bad = dir.join("no/such/dir/job.svg");
    let mut sink = Vec::new();
    let e = c
        .command(&format!("bt --flame {}", bad.display()), &mut sink)
        .await
        .expect_err("an unwritable --flame file is an error");
    assert!(
        format!("{e:#}").contains(&bad.display().to_string()),
        "{e:#}"
    );
}

/// Runs `sdm ARGS` to its end; its exit status, stdout and stderr.
fn sdm(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(sdm_e2e::sdm())
        .args(args)
        .output()
        .expect("running sdm");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What a `sdm top` run left: exit status, stdout, stderr, its JSON waves.
struct TopRun {
    ok: bool,
    stdout: String,
    stderr: String,
    /// Every metrics wave printed (each printed before its CPU samples are taken).
    waves: u64,
}

/// Runs `sdm top ARGS` (no `--count`, `--json`) on `ranks` ranks of a program that creates
/// `SDM_TEST_READY_DIR/RANK` once busy; once every rank's file exists and `waves` more
/// metrics waves were printed, ends it with SIGTERM (it writes its graphs then). Start-up
/// on a loaded machine may take any number of waves: only waves of busy ranks are counted.
fn top_once_busy(args: &[&str], ranks: usize, waves: usize, dir: &Path) -> TopRun {
    use std::io::BufRead;
    let ready = dir.join("ready");
    std::fs::create_dir_all(&ready).unwrap();
    let mut top = Command::new(sdm_e2e::sdm())
        .arg("top")
        .args(args)
        .env("SDM_TEST_READY_DIR", &ready)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running sdm top");
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = top.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line.contains("\"metrics\""));
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let busy = || std::fs::read_dir(&ready).unwrap().count() == ranks;
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    let mut after = 0;
    while after < waves {
        assert!(
            std::time::Instant::now() < deadline,
            "hang guard: ranks never all busy"
        );
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(wave) if wave && busy() => after += 1,
            Ok(_) | Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(e) => panic!("sdm top ended early ({e})"),
        }
    }
    let pid = nix::unistd::Pid::from_raw(top.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let out = top.wait_with_output().unwrap();
    let stdout = reader.join().unwrap();
    TopRun {
        ok: out.status.success(),
        waves: stdout.lines().filter(|l| l.contains("\"metrics\"")).count() as u64,
        stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn top_flame_counts_the_threads_running_on_a_cpu() {
    const RANKS: u64 = 4;
    let program = sdm_e2e::c_program("cpu_threads", &["-O0", "-g", "-pthread"]);
    let dir = scratch("top");
    let svg = dir.join("cpu.svg");
    let fold = dir.join("cpu.folded");
    let ranks = RANKS.to_string();
    let run = top_once_busy(
        &[
            "-n",
            &ranks,
            "--period",
            "0.5",
            "--json",
            "--flame",
            svg.to_str().unwrap(),
            "--folded",
            fold.to_str().unwrap(),
            "--",
            program.to_str().unwrap(),
        ],
        RANKS as usize,
        4,
        &dir,
    );
    let (stdout, stderr) = (&run.stdout, &run.stderr);
    assert!(run.ok, "{stdout}\n{stderr}");
    let lines = folded(&fold);
    // The main threads burn: counted. Each rank's helper sleeps in `pause` from the moment
    // its main thread burns (the program waits for it): never counted asleep.
    assert!(
        through(&lines, &["main", "busy_work", "burn"]) > 0,
        "{lines:?}"
    );
    assert_eq!(
        through(&lines, &["idle_wait", "pause"]),
        0,
        "a sleeping thread counted: {lines:?}"
    );
    // At most two running threads per rank in each sample (the helpers only before
    // sleeping); no more samples than waves.
    assert!(total(&lines) <= run.waves * RANKS * 2, "{lines:?}");
    let titles = svg_titles(&svg);
    assert!(has_frame(&titles, "burn"), "{titles:?}");
    assert!(!has_frame(&titles, "pause"), "{titles:?}");
    // The files are named on stderr, the whole job's first, the classes' beside it.
    assert!(
        stderr.lines().any(|l| l.starts_with("flame: whole job ")
            && l.ends_with(&format!("{} {}", svg.display(), fold.display()))),
        "{stderr}"
    );
    let burning = stderr
        .lines()
        .find(|l| l.starts_with("flame: class ") && l.ends_with("main > busy_work > burn)"))
        .unwrap_or_else(|| panic!("no class of the busy ranks in {stderr}"));
    assert!(burning.starts_with("flame: class "), "{burning}");
    let n: usize = burning["flame: class ".len()..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{burning}"));
    let class = folded(&dir.join(format!("cpu.class-{n}.folded")));
    assert!(through(&class, &["busy_work", "burn"]) > 0, "{class:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn top_writes_its_flame_graph_when_terminated() {
    let program = sdm_e2e::c_program("cpu_threads", &["-O0", "-g", "-pthread"]);
    let dir = scratch("term");
    let fold = dir.join("cpu.folded");
    // Three waves printed once both ranks burn, then SIGTERM: each wave's JSON line is
    // printed before its CPU samples are taken, so at least two sampled busy ranks.
    let run = top_once_busy(
        &[
            "-n",
            "2",
            "--period",
            "0.3",
            "--json",
            "--folded",
            fold.to_str().unwrap(),
            "--",
            program.to_str().unwrap(),
        ],
        2,
        3,
        &dir,
    );
    let stderr = &run.stderr;
    assert!(run.ok, "{stderr}");
    let lines = folded(&fold);
    assert!(through(&lines, &["busy_work", "burn"]) > 0, "{lines:?}");
    assert_eq!(through(&lines, &["idle_wait", "pause"]), 0, "{lines:?}");
    assert!(stderr.contains("flame: whole job [0-1], "), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Python ranks (tests/programs/ranked.py under Debian's python3): rank 0 computes in
/// `compute` called from `step`, rank 1 sleeps in `wait`: the Python frames are the graph's,
/// the sleeping rank's never counted.
#[test]
fn top_flame_names_python_frames() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("programs/ranked.py");
    let dir = scratch("python");
    let fold = dir.join("py.folded");
    let run = top_once_busy(
        &[
            "-n",
            "2",
            "--period",
            "0.3",
            "--json",
            "--folded",
            fold.to_str().unwrap(),
            "--",
            "/usr/bin/python3",
            script.to_str().unwrap(),
            "SDM_RANK",
            "0",
        ],
        2,
        4,
        &dir,
    );
    assert!(run.ok, "{}\n{}", run.stdout, run.stderr);
    let lines = folded(&fold);
    assert!(
        through(&lines, &["<module>", "step", "compute"]) > 0,
        "{lines:?}"
    );
    assert_eq!(through(&lines, &["step", "wait"]), 0, "{lines:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn top_refuses_an_unwritable_flame_path_before_starting() {
    let bad = "/nonexistent-sdm-dir/cpu.svg";
    let (ok, stdout, stderr) = sdm(&[
        "top", "-n", "2", "--count", "1", "--json", "--flame", bad, "--", "sleep", "100",
    ]);
    assert!(!ok, "{stdout}\n{stderr}");
    assert!(stderr.contains(bad), "{stderr}");
    assert_eq!(stdout, "", "sampled before refusing: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
