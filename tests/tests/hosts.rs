//! Hosts and launcher arguments on the command line: Slurm hostlists (`h[1-4]`) read
//! wherever hosts are given and printed back in that form, a bad hostlist named, the
//! launchers' own arguments (`--launcher-args`) and host placement (mpirun `--host`, srun
//! `--nodelist`), and `--remote-sdm` naming the host where the binary is missing.

use std::process::Command;

use sdm_e2e::sdm;

/// Runs `sdm ARGS`; (exit success, stdout, stderr).
fn sdm_out(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(sdm()).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// This machine's name, as the launchers and the servers report it.
fn here() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned()
}

#[test]
fn a_bad_hostlist_or_hosts_without_a_launcher_is_named() {
    let (ok, _, err) = sdm_out(&[
        "launch",
        "--ranks-per-server",
        "1",
        "-n",
        "2",
        "--launcher",
        "ssh",
        "--hosts",
        "h[1-4",
    ]);
    assert!(!ok);
    assert!(
        err.contains(r#"--hosts: hostlist "h[1-4": a '[' is never closed"#),
        "{err}"
    );
    let (ok, _, err) = sdm_out(&[
        "launch",
        "--ranks-per-server",
        "1",
        "-n",
        "2",
        "--hosts",
        "node[01-02,07]",
    ]);
    assert!(!ok);
    assert!(
        err.contains("--hosts node[01-02,07] needs a launcher that reaches them"),
        "{err}"
    );
}

#[test]
fn the_hosts_line_is_in_hostlist_form() {
    let (ok, out, err) = sdm_out(&[
        "launch",
        "--ranks-per-server",
        "1",
        "-n",
        "6",
        "--send",
        "ping",
    ]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[1], format!("hosts  {}: [0-5]", here()), "{out}");
    assert_eq!(lines[2], "[0-5] pong", "{out}");
}

#[test]
#[cfg_attr(
    not(sdm_have_ssh),
    ignore = "needs sshd on loopback (deploy/ci-setup.sh, then touch tests/build.rs)"
)]
fn a_missing_remote_sdm_is_named_with_its_host() {
    let (ok, out, _) = sdm_out(&[
        "launch",
        "--ranks-per-server",
        "1",
        "-n",
        "3",
        "--launcher",
        "ssh",
        "--hosts",
        "sdmci-localhost",
        "--remote-sdm",
        "/nonexistent/bin/sdm",
    ]);
    assert!(!ok);
    assert!(out.starts_with("ready  [] (0 of 3)"), "{out}");
    assert!(
        out.lines().any(|l| l
            == format!(
                "failed [0-2]: {}: /nonexistent/bin/sdm is not an executable there",
                here()
            )),
        "{out}"
    );
}

#[test]
#[cfg_attr(
    not(sdm_have_ssh),
    ignore = "needs sshd on loopback (deploy/ci-setup.sh, then touch tests/build.rs)"
)]
fn ssh_takes_a_hostlist_and_launcher_args() {
    // The alias resolves through ~/.ssh/config; the same sshd is reached by port and key
    // given as ssh options, for a host written in hostlist form.
    let (ok, out, err) = sdm_out(&[
        "launch",
        "--ranks-per-server",
        "1",
        "-n",
        "4",
        "--launcher",
        "ssh",
        "--hosts",
        "sdmci-localhost,127.0.0.[1]",
        "--launcher-args",
        "-p 2222 -i /root/.ssh/sdmci_ed25519 -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
        "--send",
        "ping",
    ]);
    assert!(ok, "{out}{err}");
    assert!(out.starts_with("ready  [0-3] (4 of 4)"), "{out}");
    assert!(out.lines().any(|l| l == "[0-3] pong"), "{out}");
}

/// `sdm launch -n 4 --launcher L --hosts HOST ARGS... --send ping`: all ready, on HOST
/// (the hosts line), one merged pong.
fn launch_on_this_host(launcher: &str, args: &[&str]) {
    let h = here();
    let mut all = vec![
        "launch",
        "--ranks-per-server",
        "1",
        "-n",
        "4",
        "--launcher",
        launcher,
        "--hosts",
        &h,
    ];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--send", "ping"]);
    let (ok, out, err) = sdm_out(&all);
    assert!(ok, "{out}{err}");
    assert!(out.starts_with("ready  [0-3] (4 of 4)"), "{out}");
    assert!(out.contains(&format!("hosts  {h}: [0-3]")), "{out}");
    assert!(out.lines().any(|l| l == "[0-3] pong"), "{out}");
}

#[test]
#[cfg_attr(
    not(sdm_have_mpirun),
    ignore = "needs mpirun (deploy/ci-setup.sh, then touch tests/build.rs)"
)]
fn mpirun_places_servers_on_the_hosts_given() {
    launch_on_this_host("mpirun", &[]);
}

#[test]
#[cfg_attr(
    not(sdm_have_slurm),
    ignore = "needs srun, a running Slurm (deploy/ci-setup.sh, then touch tests/build.rs)"
)]
fn srun_takes_a_nodelist_and_site_arguments() {
    // A job name and --overlap: harmless site arguments.
    launch_on_this_host("srun", &["--launcher-args", "-J sdm-hosts-test --overlap"]);
    // A node that is not in the cluster is Slurm's error, reported as a failed launch.
    let (ok, out, err) = sdm_out(&[
        "launch",
        "--ranks-per-server",
        "1",
        "-n",
        "2",
        "--launcher",
        "srun",
        "--hosts",
        "nosuchnode[1-2]",
        "--timeout",
        "20",
    ]);
    assert!(!ok, "{out}{err}");
}
