//! End-to-end tests of the templated output merge (`sdm run --merge template`) with real
//! servers: lines differing only in their numbers print as one template with exact ranges,
//! mean and max-at ranks, an outlier on a line of its own, exact lines unchanged, every
//! rank accounted for; interior servers fold the lines, so the front-end receives fewer
//! lines than ranks; `--merge exact` prints every value as before.
//!
//! The tests run one at a time (each starts 16 servers).

use std::process::{Command, Output, Stdio};
use std::sync::Mutex;

use sdm_e2e::{labelled_lines, sdm};
use sdm_proto::IdSet;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Each rank prints a template line (rank 7 an outlier), an exact line, a line of its own
/// rank, and a line whose number all share.
const PROGRAM: &str = r#"r=$SDM_RANK
if [ "$r" = 7 ]; then echo "step 5 took 9.50 s"; else echo "step 5 took 1.$((10 + r)) s"; fi
echo "hello from every rank"
echo "rank $r of 16"
echo "version 2.0"
"#;

fn run(args: &[&str]) -> Output {
    let out = Command::new(sdm())
        .arg("run")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("starting sdm run");
    assert!(
        out.status.success(),
        "sdm run {args:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `sdm run -n 16 OPTIONS --merge-lag 120000 -- sh -c PROGRAM` (a lag long enough that
/// every rank's k-th line is merged however loaded the machine).
fn run_program(options: &[&str]) -> Output {
    let mut args = vec!["-n", "16"];
    args.extend_from_slice(options);
    args.extend(["--merge-lag", "120000", "--", "sh", "-c", PROGRAM]);
    run(&args)
}

#[test]
fn lines_differing_in_numbers_print_as_one_template() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let out = run_program(&["--merge", "template"]);
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "[0-6,8-15] step 5 took {1.10..1.25} s (mean 1.18, max at [15])",
            "[7] step 5 took 9.50 s",
            "[0-15] hello from every rank",
            "[0-15] rank {0..15} of 16 (mean 7.5, max at [15])",
            "[0-15] version 2.0",
            "[0-15] exited with status 0",
        ],
        "{text}"
    );
}

#[test]
fn exact_merge_prints_every_value() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let out = run_program(&["--merge", "exact"]);
    let text = String::from_utf8(out.stdout).unwrap();
    let lines = labelled_lines(&text);
    for r in 0..16u32 {
        let took = if r == 7 {
            "9.50".to_owned()
        } else {
            format!("1.{}", 10 + r)
        };
        for want in [format!("step 5 took {took} s"), format!("rank {r} of 16")] {
            assert!(
                lines.contains(&(IdSet::single(r), want.clone())),
                "no `[{r}] {want}`: {text}"
            );
        }
    }
    let all = IdSet::all(16);
    assert!(
        lines.contains(&(all.clone(), "hello from every rank".into())),
        "{text}"
    );
    assert!(lines.contains(&(all, "version 2.0".into())), "{text}");
    assert_eq!(lines.len(), 16 + 16 + 1 + 1 + 1, "{text}");
}

/// With the console's aligner off (`--merge-lag 0`: it prints each line as it arrives)
/// the printed lines are the lines the front-end received. The ranks print together (each
/// waits for all to have started) and interior servers hold lines 5 s: one rank's line
/// per template would mean the tree folded nothing.
#[test]
fn interior_servers_fold_templates_before_the_front_end() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = std::env::temp_dir().join(format!("sdm-template-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let program = format!(
        "touch {d}/$SDM_RANK; while [ $(ls {d} | wc -l) -lt 16 ]; do sleep 0.1; done; \
         echo \"value $SDM_RANK\"",
        d = dir.display()
    );
    let received = |mode: &str| {
        for f in std::fs::read_dir(&dir).unwrap() {
            std::fs::remove_file(f.unwrap().path()).unwrap();
        }
        let out = run(&[
            "-n",
            "16",
            "--merge",
            mode,
            "--coalesce-ms",
            "5000",
            "--merge-lag",
            "0",
            "--",
            "sh",
            "-c",
            &program,
        ]);
        let text = String::from_utf8(out.stdout).unwrap();
        let values: Vec<(IdSet, String)> = labelled_lines(&text)
            .into_iter()
            .filter(|(_, t)| t.starts_with("value "))
            .collect();
        // Every rank once, whatever the grouping.
        let mut seen = IdSet::new();
        let mut count = 0;
        for (ids, _) in &values {
            assert!(seen.is_disjoint(ids), "{text}");
            seen.union_with(ids);
            count += ids.len();
        }
        assert_eq!((seen, count), (IdSet::all(16), 16), "{text}");
        (values.len(), text)
    };
    let (exact, text) = received("exact");
    assert_eq!(exact, 16, "sixteen different lines: {text}");
    let (templated, text) = received("template");
    // (A rank later than the servers' hold prints on its own: no line need be a range.)
    assert!(templated < 16, "the tree folded no template: {text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_unknown_merge_mode_is_an_error_naming_the_modes() {
    let out = Command::new(sdm())
        .args(["run", "-n", "2", "--merge", "fuzzy", "--", "true"])
        .stdin(Stdio::null())
        .output()
        .expect("starting sdm run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("fuzzy") && err.contains("exact or template"),
        "{err}"
    );
}

/// `--label` prints each rank's own line: a template's ranges under a rank's label would
/// read as that rank's value, so asking for both is an error naming them.
#[test]
fn merge_template_with_label_is_an_error_naming_both() {
    let out = Command::new(sdm())
        .args([
            "run", "-n", "2", "--merge", "template", "--label", "--", "true",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("starting sdm run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("--merge template") && err.contains("--label"),
        "{err}"
    );
}

/// `--json` prints a template's line with the template and each slot's statistics.
#[test]
fn json_lines_carry_the_template_and_its_slots() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let out = run_program(&["--json", "--merge", "template"]);
    let text = String::from_utf8(out.stdout).unwrap();
    let step = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["template"] == "step {} took {} s")
        .unwrap_or_else(|| panic!("no template line: {text}"));
    assert_eq!(step["ids"], "[0-6,8-15]", "{step}");
    assert_eq!(step["count"], 15, "{step}");
    let slots = step["slots"].as_array().unwrap();
    assert_eq!(slots[0]["min"], "5");
    assert_eq!(slots[0]["max"], "5");
    assert_eq!(slots[1]["min"], "1.10");
    assert_eq!(slots[1]["max"], "1.25");
    assert_eq!(slots[1]["max_at"], "[15]");
    assert_eq!(slots[1]["min_at"], "[0]");
    assert_eq!(slots[1]["mean"], "1.18");
    let steps: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["line"].as_str().is_some_and(|l| l.starts_with("step ")))
        .collect();
    let outlier = (steps.iter())
        .find(|v| v["line"] == "step 5 took 9.50 s")
        .unwrap_or_else(|| panic!("no outlier line: {text}"));
    assert_eq!(outlier["ids"], "[7]", "{outlier}");
    // Every rank in one step line: the template's or the outlier's.
    let mut seen = IdSet::new();
    let mut count = 0;
    for v in &steps {
        let ids: IdSet = v["ids"].as_str().unwrap().parse().unwrap();
        assert!(seen.is_disjoint(&ids), "{text}");
        seen.union_with(&ids);
        count += ids.len();
    }
    assert_eq!((seen, count), (IdSet::all(16), 16), "{text}");
}
