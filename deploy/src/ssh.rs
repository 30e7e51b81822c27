//! The ssh launcher: one `ssh` per copy, the environment sent on stdin.

use std::io;
use std::process::Stdio;

use tokio::process::Command;

use crate::{LaunchError, LaunchSpec, Launched, Launcher};

/// One `ssh` per copy, round-robin over `hosts`; the environment (secrets included) is
/// sent on stdin and read by the remote shell, so it never appears on a command line.
#[derive(Debug)]
pub struct Ssh {
    /// Hosts (ssh destinations, e.g. aliases from ~/.ssh/config).
    pub hosts: Vec<String>,
    /// Extra ssh options.
    pub options: Vec<String>,
}

/// `s` in single quotes for a POSIX shell (the remote one ssh runs a command with).
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// ssh's arguments running `script` on `host`: never prompting (`BatchMode`), with the
/// user's `options` (`--launcher-args`) before the host.
pub fn ssh_args(options: &[String], host: &str, script: String) -> Vec<String> {
    let mut args = vec!["-o".to_owned(), "BatchMode=yes".to_owned()];
    args.extend(options.iter().cloned());
    args.push(host.to_owned());
    args.push(script);
    args
}

impl Launcher for Ssh {
    fn name(&self) -> &str {
        "ssh"
    }
    fn launch(&self, spec: &LaunchSpec) -> Result<Launched, LaunchError> {
        if self.hosts.is_empty() {
            return Err(LaunchError::Invalid {
                launcher: "ssh",
                what: "no hosts given (--hosts)".into(),
                source: None,
            });
        }
        let (mut l, tx) = Launched::new("ssh");
        for (name, v) in &spec.env {
            if v.contains('\n') {
                return Err(LaunchError::Invalid {
                    launcher: "ssh",
                    what: format!("environment value of {name} spans lines; encode it on one line"),
                    source: None,
                });
            }
        }
        for id in 0..spec.n {
            let host = &self.hosts[id as usize % self.hosts.len()];
            let mut script = String::new();
            let mut stdin = String::new();
            for (name, v) in &spec.env {
                script.push_str(&format!("IFS= read -r {name}; export {name}; "));
                stdin.push_str(v);
                stdin.push('\n');
            }
            let argv: Vec<String> = std::iter::once(spec.program.display().to_string())
                .chain(spec.args.iter().cloned())
                .map(|a| shell_quote(&a))
                .collect();
            // A program missing on that host is named with the host, on the line stream
            // the front-end reads (`SDM-ERROR ID HOST: what`), instead of a bare 127.
            let prog = shell_quote(&spec.program.display().to_string());
            script.push_str(&format!(
                "[ -x {prog} ] || {{ echo \"SDM-ERROR {id} $(hostname): {} is not an \
                 executable there\"; exit 127; }}; SDM_ID={id} exec {}",
                spec.program
                    .display()
                    .to_string()
                    .replace(['"', '$', '`', '\\'], "?"),
                argv.join(" ")
            ));
            let mut cmd = Command::new("ssh");
            cmd.args(ssh_args(&self.options, host, script));
            l.spawn(cmd, Some(stdin), &tx)?;
        }
        Ok(l)
    }

    fn network_name(&self, host: &str) -> io::Result<String> {
        ssh_network_name(&self.options, host)
    }
}

/// `ssh -G` could not be run; the system's error is the source.
#[derive(Debug, thiserror::Error)]
#[error("cannot run ssh -G {host}: {source}")]
struct SshConfigError {
    host: String,
    source: io::Error,
}

/// The `HostName` ssh's configuration gives `host` (`ssh -G OPTIONS HOST`; `host` itself
/// when it names no alias).
pub(crate) fn ssh_network_name(options: &[String], host: &str) -> io::Result<String> {
    let out = std::process::Command::new("ssh")
        .arg("-G")
        .args(options)
        .arg(host)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| {
            let host = host.to_owned();
            io::Error::new(source.kind(), SshConfigError { host, source })
        })?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "ssh -G {host}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(ssh_config_hostname(&String::from_utf8_lossy(&out.stdout))
        .unwrap_or_else(|| host.to_owned()))
}

/// The `hostname` line of `ssh -G` output.
fn ssh_config_hostname(config: &str) -> Option<String> {
    config.lines().find_map(|l| {
        let (key, value) = l.split_once(' ')?;
        (key.eq_ignore_ascii_case("hostname") && !value.trim().is_empty())
            .then(|| value.trim().to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssh_config_names_the_host_an_alias_stands_for() {
        let g = "user root\nhostname 10.200.7.11\nport 22\n";
        assert_eq!(ssh_config_hostname(g).as_deref(), Some("10.200.7.11"));
        assert_eq!(ssh_config_hostname("port 22\n"), None);
    }

    #[test]
    fn quoting_survives_spaces_and_quotes() {
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
    }
}
