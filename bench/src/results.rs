//! Reads the JSON lines that `bench/run-macro.sh` and `bench/hosts-bench.sh` write and
//! groups their start-up, round-trip and throughput figures by system and number of ranks,
//! for `sdm-plot`.
//!
//! A run-macro line names its `system` (`sdm`, `sdm-old` for `--old-bin`, `baseline` for the
//! relay with a process per rank); a hosts-bench line also names its `layout` (`local:S`,
//! `ssh:H`, `relay:S`). Lines of other benchmarks in the same file are skipped, and so are
//! runs over a transport other than tcp (the tables of BENCHMARKS.md compare tcp runs only).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// A figure plotted against the number of ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Figure {
    /// `rtt`'s `p50_us`: a broadcast `ping` until the merged reply is back, in ms.
    RoundTrip,
    /// `throughput`'s `waves_per_second`: waves of `sum` with a window in flight.
    Throughput,
    /// Launch to every server ready, in s: a `startup` run's `wall_seconds`, or, in a file
    /// without `startup` runs, the `startup_seconds` every other run records.
    Startup,
}

impl Figure {
    /// Every figure, in the order the plots are made.
    pub const ALL: [Figure; 3] = [Figure::RoundTrip, Figure::Throughput, Figure::Startup];

    /// A short name, for file names.
    pub fn name(self) -> &'static str {
        match self {
            Figure::RoundTrip => "rtt",
            Figure::Throughput => "throughput",
            Figure::Startup => "startup",
        }
    }

    /// The axis label, with its unit.
    pub fn axis(self) -> &'static str {
        match self {
            Figure::RoundTrip => "round trip, p50 (ms)",
            Figure::Throughput => "throughput (waves/s)",
            Figure::Startup => "start-up (s)",
        }
    }
}

/// Who ran: one line of a plot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Series {
    /// This build of sdm (run-macro's `sdm`).
    Sdm,
    /// The older build of a `--old-bin` sitting (`sdm-old`).
    SdmOld,
    /// The minimal relay tree with a process per rank (run-macro's `baseline`).
    Relay,
    /// sdm with the ranks on this many servers of this host (hosts-bench `local:S`).
    Servers(u32),
    /// sdm with one server on each of this many namespace hosts (hosts-bench `ssh:H`).
    Hosts(u32),
    /// The relay with this many relays plus its root, serving no ranks (hosts-bench
    /// `relay:S`): its figures do not depend on the ranks of the run it is compared with.
    RelayOf(u32),
}

impl Series {
    /// Whether the series' figures are the same for every number of ranks.
    pub fn is_flat(self) -> bool {
        matches!(self, Series::RelayOf(_))
    }
}

impl fmt::Display for Series {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Series::Sdm => f.write_str("sdm"),
            Series::SdmOld => f.write_str("sdm, old build"),
            Series::Relay => f.write_str("relay, a process per rank"),
            Series::Servers(1) => f.write_str("sdm, 1 server"),
            Series::Servers(s) => write!(f, "sdm, {s} servers"),
            Series::Hosts(h) => write!(f, "sdm, {h} namespace hosts"),
            Series::RelayOf(s) => write!(f, "relay, {} processes", s + 1),
        }
    }
}

/// Why a results file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read.
    #[error("cannot read {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line is not JSON.
    #[error("{}:{line}: not JSON", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// The line's number, from 1.
        line: usize,
        /// Why.
        source: serde_json::Error,
    },
    /// A line of a plotted benchmark lacks a field or holds one that is not understood.
    #[error("{}:{line}: {what}", path.display())]
    Field {
        /// The file.
        path: PathBuf,
        /// The line's number, from 1.
        line: usize,
        /// What is wrong.
        what: String,
    },
}

/// Every run's figures, grouped: (figure, series) -> ranks -> one value per run.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Results {
    /// The values, in the unit of [`Figure::axis`].
    pub runs: BTreeMap<(Figure, Series), BTreeMap<u32, Vec<f64>>>,
}

impl Results {
    /// Reads a results file.
    pub fn read(path: &Path) -> Result<Results, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.to_owned(),
            source,
        })?;
        Results::parse(path, &text)
    }

    /// Parses the text of a results file; `path` only names it in errors.
    pub fn parse(path: &Path, text: &str) -> Result<Results, Error> {
        let lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| {
                let v: Value = serde_json::from_str(l).map_err(|source| Error::Json {
                    path: path.to_owned(),
                    line: i + 1,
                    source,
                })?;
                if v.is_object() {
                    Ok((i + 1, v))
                } else {
                    Err(Error::Field {
                        path: path.to_owned(),
                        line: i + 1,
                        what: "not a JSON object".into(),
                    })
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        // Start-up from `startup` runs where the file has them (run-macro), else from the
        // start-up every run records (hosts-bench runs no `startup`).
        let startup_runs = lines.iter().any(|(_, v)| v["bench"] == "startup");
        let mut out = Results::default();
        for (line, v) in &lines {
            let bad = |what: String| Error::Field {
                path: path.to_owned(),
                line: *line,
                what,
            };
            let fields: &[(Figure, &str, f64)] = match v["bench"].as_str() {
                Some("startup") => &[(Figure::Startup, "wall_seconds", 1.0)],
                Some("rtt") if startup_runs => &[(Figure::RoundTrip, "p50_us", 1e-3)],
                Some("rtt") => &[
                    (Figure::RoundTrip, "p50_us", 1e-3),
                    (Figure::Startup, "startup_seconds", 1.0),
                ],
                Some("throughput") if startup_runs => {
                    &[(Figure::Throughput, "waves_per_second", 1.0)]
                }
                Some("throughput") => &[
                    (Figure::Throughput, "waves_per_second", 1.0),
                    (Figure::Startup, "startup_seconds", 1.0),
                ],
                _ => continue,
            };
            if v["transport"].as_str().is_some_and(|t| t != "tcp") {
                continue;
            }
            let series = series(v).map_err(bad)?;
            let n = v["n"]
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|&n| n > 0)
                .ok_or_else(|| bad("no number of ranks (`n`)".into()))?;
            for &(figure, field, scale) in fields {
                let x = v[field]
                    .as_f64()
                    .filter(|x| x.is_finite() && *x > 0.0)
                    .ok_or_else(|| bad(format!("no positive `{field}`")))?;
                out.runs
                    .entry((figure, series))
                    .or_default()
                    .entry(n)
                    .or_default()
                    .push(x * scale);
            }
        }
        Ok(out)
    }

    /// The series that have `figure`, each with the median of its runs per number of ranks.
    pub fn medians(&self, figure: Figure) -> Vec<(Series, Vec<(u32, f64)>)> {
        self.runs
            .iter()
            .filter(|((f, _), _)| *f == figure)
            .map(|((_, s), by_n)| {
                let points = by_n.iter().map(|(&n, v)| (n, median(v))).collect();
                (*s, points)
            })
            .collect()
    }
}

/// The series a line belongs to: its `layout` (hosts-bench) or else its `system`.
fn series(v: &Value) -> Result<Series, String> {
    if let Some(layout) = v.get("layout") {
        let layout = layout.as_str().ok_or("`layout` is not a string")?;
        let (kind, count) = layout
            .split_once(':')
            .ok_or_else(|| format!("layout {layout:?} is not KIND:COUNT"))?;
        let count: u32 = count
            .parse()
            .ok()
            .filter(|&c| c > 0)
            .ok_or_else(|| format!("layout {layout:?}: {count:?} is not a count"))?;
        return match kind {
            "local" => Ok(Series::Servers(count)),
            "ssh" => Ok(Series::Hosts(count)),
            "relay" => Ok(Series::RelayOf(count)),
            _ => Err(format!("layout {layout:?}: not local:S, ssh:H or relay:S")),
        };
    }
    match v["system"].as_str() {
        Some("sdm") => Ok(Series::Sdm),
        Some("sdm-old") => Ok(Series::SdmOld),
        Some("baseline") => Ok(Series::Relay),
        Some(other) => Err(format!("system {other:?}: not sdm, sdm-old or baseline")),
        None => Err("no `system`".into()),
    }
}

/// The median of a non-empty set of values.
fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let k = v.len();
    if k % 2 == 1 {
        v[k / 2]
    } else {
        (v[k / 2 - 1] + v[k / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Results, Error> {
        Results::parse(Path::new("r.jsonl"), text)
    }

    #[test]
    fn run_macro_lines_group_by_system_with_medians() {
        let r = parse(concat!(
            r#"{"bench":"startup","n":64,"system":"sdm","transport":"tcp","wall_seconds":0.5}"#,
            "\n",
            r#"{"bench":"startup","n":64,"system":"sdm","transport":"tcp","wall_seconds":0.1}"#,
            "\n\n",
            r#"{"bench":"startup","n":64,"system":"sdm","transport":"tcp","wall_seconds":0.3}"#,
            "\n",
            r#"{"bench":"rtt","n":64,"system":"sdm-old","p50_us":2000.0,"startup_seconds":9.0}"#,
            "\n",
            r#"{"bench":"throughput","n":256,"system":"baseline","waves_per_second":10.0,"startup_seconds":9.0}"#,
            "\n",
            r#"{"bench":"rtt","n":64,"system":"sdm","transport":"quic","p50_us":1.0}"#,
            "\n",
            r#"{"bench":"setup","kind":"plain-tcp"}"#,
            "\n",
            r#"{"build":"old","args":"-n 16"}"#,
        ))
        .unwrap();
        assert_eq!(
            r.medians(Figure::Startup),
            [(Series::Sdm, vec![(64, 0.3)])],
            "start-up from the startup runs only"
        );
        assert_eq!(
            r.medians(Figure::RoundTrip),
            [(Series::SdmOld, vec![(64, 2.0)])]
        );
        assert_eq!(
            r.medians(Figure::Throughput),
            [(Series::Relay, vec![(256, 10.0)])]
        );
    }

    #[test]
    fn hosts_lines_group_by_layout_and_record_their_start_up() {
        let r = parse(concat!(
            r#"{"layout":"local:4","bench":"rtt","n":64,"system":"sdm","p50_us":100.0,"startup_seconds":0.25}"#,
            "\n",
            r#"{"layout":"relay:4","bench":"throughput","n":4,"system":"baseline","waves_per_second":7.0,"startup_seconds":0.5}"#,
            "\n",
            r#"{"layout":"ssh:4","bench":"rtt","n":1024,"system":"sdm","p50_us":400.0,"startup_seconds":1.0}"#,
        ))
        .unwrap();
        assert_eq!(
            r.medians(Figure::RoundTrip),
            [
                (Series::Servers(4), vec![(64, 0.1)]),
                (Series::Hosts(4), vec![(1024, 0.4)])
            ]
        );
        assert_eq!(
            r.medians(Figure::Startup),
            [
                (Series::Servers(4), vec![(64, 0.25)]),
                (Series::Hosts(4), vec![(1024, 1.0)]),
                (Series::RelayOf(4), vec![(4, 0.5)]),
            ]
        );
        assert!(Series::RelayOf(4).is_flat());
        assert_eq!(Series::RelayOf(4).to_string(), "relay, 5 processes");
    }

    #[test]
    fn a_bad_line_is_named_by_file_and_line() {
        let cases = [
            ("{\"bench\":\"rtt\"\n{oops", "r.jsonl:1: not JSON"),
            ("\n[1, 2]", "r.jsonl:2: not a JSON object"),
            (
                r#"{"bench":"rtt","system":"sdm","p50_us":1.0}"#,
                "r.jsonl:1: no number of ranks (`n`)",
            ),
            (
                r#"{"bench":"rtt","n":4,"system":"sdm"}"#,
                "r.jsonl:1: no positive `p50_us`",
            ),
            (
                r#"{"bench":"rtt","n":4,"system":"lam","p50_us":1.0}"#,
                "r.jsonl:1: system \"lam\": not sdm, sdm-old or baseline",
            ),
            (
                r#"{"layout":"local:x","bench":"rtt","n":4,"p50_us":1.0}"#,
                "r.jsonl:1: layout \"local:x\": \"x\" is not a count",
            ),
        ];
        for (text, want) in cases {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.starts_with(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn a_missing_file_is_named() {
        let e = Results::read(Path::new("/nonexistent/r.jsonl")).unwrap_err();
        assert!(matches!(e, Error::Read { .. }));
        assert_eq!(e.to_string(), "cannot read /nonexistent/r.jsonl");
    }
}
