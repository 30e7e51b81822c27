//! The command line that starts an application job through its own launcher, for launch
//! mode: the launcher wires the job (MPI, PMI) as it would without a tool, and the tool
//! holds it (MPIR) and attaches one server per host to its tasks. The launcher labels each
//! line of output with its rank (srun `--label`, Open MPI `--tag-output`, MPICH
//! `-prepend-rank`), so the tool can merge the ranks' lines; [`Labels::parse`] reads them.

use crate::{
    LaunchError, LauncherKind, MpirunFlavor, hostlist, mpirun_flavor, mpirun_hosts, mpirun_program,
};

/// How a launcher labels its ranks' output lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Labels {
    /// srun `--label`: `RANK: text` (the rank right-aligned).
    Srun,
    /// Open MPI `--tag-output`: `[JOB,RANK]<stdout>:text`.
    OpenMpi,
    /// Open MPI 5's `--tag-output`: `[JOB,RANK]<stdout>: text`.
    OpenMpi5,
    /// MPICH `-prepend-rank`: `[RANK] text`.
    Mpich,
}

impl Labels {
    /// The rank and text of a labelled line, and its stream when the label names one
    /// (Open MPI's: 1 stdout, 2 stderr); `None` for a line of the launcher's own.
    pub fn parse(self, line: &str) -> Option<(u32, Option<u8>, &str)> {
        match self {
            Labels::Srun => {
                let (rank, text) = line.split_once(": ")?;
                Some((rank.trim_start().parse().ok()?, None, text))
            }
            Labels::OpenMpi | Labels::OpenMpi5 => {
                let (ids, rest) = line.strip_prefix('[')?.split_once(']')?;
                let rank = ids.split_once(',')?.1.parse().ok()?;
                let (stream, text) = match rest.strip_prefix("<stdout>:") {
                    Some(text) => (1, text),
                    None => (2, rest.strip_prefix("<stderr>:")?),
                };
                // Open MPI 5 puts a space after the tag.
                let text = match self {
                    Labels::OpenMpi5 => text.strip_prefix(' ').unwrap_or(text),
                    _ => text,
                };
                Some((rank, Some(stream), text))
            }
            Labels::Mpich => {
                let (rank, text) = line.strip_prefix('[')?.split_once("] ")?;
                Some((rank.parse().ok()?, None, text))
            }
        }
    }
}

/// A job's command line, and how its launcher labels the output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// The launcher and its arguments, the program last.
    pub argv: Vec<String>,
    /// How its output lines name their rank.
    pub labels: Labels,
}

/// `launcher -n N ... program args...` for `kind` (srun, mpirun or hydra), with `hosts` (a
/// node list; empty: the launcher's own placement) and the site's `extra` arguments.
pub fn job_command(
    kind: LauncherKind,
    hosts: &[String],
    extra: &[String],
    n: u32,
    program: &[String],
) -> Result<Job, LaunchError> {
    let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let count = n.to_string();
    let mpirun = mpirun_program();
    let flavor = match kind {
        LauncherKind::Mpirun => Some(mpirun_flavor()?),
        _ => None,
    };
    let (mut argv, labels) = match kind {
        LauncherKind::Srun => {
            let mut a = words(&["srun", "-n", &count, "--label"]);
            if !hosts.is_empty() {
                a.push(format!("--nodelist={}", hostlist::compress(hosts)));
            }
            (a, Labels::Srun)
        }
        LauncherKind::Mpirun if matches!(flavor, Some(MpirunFlavor::OpenMpi(_))) => {
            let mut a = words(&[&mpirun, "--allow-run-as-root", "--oversubscribe"]);
            a.extend(words(&["--tag-output", "-n", &count]));
            if !hosts.is_empty() {
                a.extend(["--host".into(), mpirun_hosts(hosts, n)]);
            }
            match flavor {
                // PRRTE has no MPIR: its ranks wait in PMIx_Init for the tool's release.
                Some(MpirunFlavor::OpenMpi(v)) if v >= 5 => {
                    a.push("--stop-in-init".into());
                    if !hosts.is_empty() {
                        // Each host's slots in turn, as Open MPI 4 places them (PRRTE's
                        // default put every rank on the first host).
                        a.extend(words(&["--map-by", "slot"]));
                    }
                    (a, Labels::OpenMpi5)
                }
                _ => (a, Labels::OpenMpi),
            }
        }
        LauncherKind::Mpirun | LauncherKind::Hydra => {
            let program = match kind {
                LauncherKind::Hydra => crate::HYDRA,
                _ => &mpirun,
            };
            let mut a = words(&[program, "-prepend-rank", "-n", &count]);
            if !hosts.is_empty() {
                a.extend(["-hosts".into(), mpirun_hosts(hosts, n)]);
            }
            (a, Labels::Mpich)
        }
        LauncherKind::Local | LauncherKind::Ssh => {
            return Err(LaunchError::Invalid {
                launcher: "job",
                what: format!("{kind} does not start parallel jobs: use srun, mpirun or hydra"),
                source: None,
            });
        }
    };
    argv.extend(extra.iter().cloned());
    argv.extend(program.iter().cloned());
    Ok(Job { argv, labels })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn srun_gets_the_count_labels_the_nodes_and_the_program() {
        let hosts = ["n1".to_string(), "n2".to_string()];
        let extra = ["-p".to_string(), "debug".to_string()];
        let job = job_command(LauncherKind::Srun, &hosts, &extra, 8, &["./app".into()]).unwrap();
        assert_eq!(job.labels, Labels::Srun);
        assert_eq!(
            job.argv,
            [
                "srun",
                "-n",
                "8",
                "--label",
                "--nodelist=n[1-2]",
                "-p",
                "debug",
                "./app"
            ]
        );
        assert!(job_command(LauncherKind::Ssh, &[], &[], 2, &["a".into()]).is_err());
    }

    #[test]
    fn labelled_lines_give_their_rank_stream_and_text() {
        assert_eq!(Labels::Srun.parse(" 3: a: b"), Some((3, None, "a: b")));
        assert_eq!(Labels::Srun.parse("srun: error"), None);
        assert_eq!(
            Labels::OpenMpi.parse("[1,12]<stderr>:oops"),
            Some((12, Some(2), "oops"))
        );
        assert_eq!(
            Labels::OpenMpi.parse("[1,0]<stdout>:"),
            Some((0, Some(1), ""))
        );
        assert_eq!(Labels::OpenMpi.parse("mpirun noticed"), None);
        assert_eq!(Labels::Mpich.parse("[7] x"), Some((7, None, "x")));
        assert_eq!(
            Labels::OpenMpi5.parse("[1,3]<stdout>:  two"),
            Some((3, Some(1), " two"))
        );
    }
}
