//! sdm-hosts: keeps N network-namespace hosts with their own sshd (the multi-host tests'
//! [`SshHosts`]) for a benchmark script: prints each host's ssh name on a line, then holds
//! them until its standard input closes, and removes them. Needs root.
//!
//! Usage: `sdm-hosts N` (bench/hosts-bench.sh runs it as a coprocess).

use std::io::{Read, Write};
use std::process::ExitCode;

use sdm_e2e::sshhosts::SshHosts;

fn main() -> ExitCode {
    let n = match std::env::args().nth(1).map(|a| a.parse::<u32>()) {
        Some(Ok(n)) if (1..=16).contains(&n) => n,
        _ => {
            eprintln!("usage: sdm-hosts N (1 to 16 hosts)");
            return ExitCode::from(2);
        }
    };
    let hosts = SshHosts::create(n);
    let mut out = std::io::stdout().lock();
    for name in hosts.names() {
        let _ = writeln!(out, "{name}");
    }
    let _ = out.flush();
    drop(out);
    // Hold the hosts until whoever started this closes our input.
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    drop(hosts);
    ExitCode::SUCCESS
}
