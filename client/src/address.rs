//! Where the front-end listens: an address the hosts of the tree reach, by default this
//! host's address on the route to the first remote host (see [`sdm_overlay::setup::source_for`]).

use sdm_deploy::{Launcher, LauncherKind};
use sdm_overlay::setup;

use crate::Error;

/// The host the front-end listens on when `--listen` is not given: loopback for the local
/// launcher or no hosts; otherwise this host's address on the route to the first of `hosts`
/// (none given: of the launcher's [`Launcher::implied_hosts`], for srun the allocation's
/// nodes) as `launcher` reaches it (ssh: the `HostName` of an alias; srun: the node's
/// `NodeAddr`). IPv6 comes back in brackets. The error names the host and says to pass
/// `--listen`.
pub fn default_listen(
    kind: LauncherKind,
    launcher: &dyn Launcher,
    hosts: &[String],
) -> Result<String, Error> {
    let implied;
    let (hosts, which) = if hosts.is_empty() && kind != LauncherKind::Local {
        implied = launcher.implied_hosts();
        (&implied[..], "of the job's nodes")
    } else {
        (hosts, "of --hosts")
    };
    let Some(first) = hosts.first().filter(|_| kind != LauncherKind::Local) else {
        return Ok("127.0.0.1".to_owned());
    };
    let why = |e: Box<dyn std::error::Error + Send + Sync>| {
        let what = format!(
            "choosing the front-end's address: {e} (host {first}, the first {which}); \
             pass --listen ADDR"
        );
        Error::invalid_because(what, e)
    };
    let name = launcher.network_name(first).map_err(|e| why(e.into()))?;
    let ip = setup::source_for(&name).map_err(|e| why(e.into()))?;
    Ok(setup::host_text(ip))
}

/// Where the front-end listens (`listen`, `--listen`, or [`default_listen`]) and the host
/// the servers find their route to (passed as `sdm server --frontend-host`): the same,
/// except that a front-end listening on every interface (`0.0.0.0`, `::`) sends the servers
/// its address on the route to the first host.
pub fn frontend_addresses(
    kind: LauncherKind,
    launcher: &dyn Launcher,
    hosts: &[String],
    listen: Option<&str>,
) -> Result<(String, String), Error> {
    let Some(listen) = listen else {
        let here = default_listen(kind, launcher, hosts)?;
        return Ok((here.clone(), here));
    };
    let listen = setup::bracketed(listen);
    if setup::resolve(&listen).is_ok_and(|ip| ip.is_unspecified()) {
        let here = default_listen(kind, launcher, hosts)?;
        return Ok((listen, here));
    }
    Ok((listen.clone(), listen))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_trees_listen_on_loopback() {
        let l = LauncherKind::Local.build(vec!["far".into()]);
        assert_eq!(
            default_listen(LauncherKind::Local, &*l, &["far".into()]).unwrap(),
            "127.0.0.1"
        );
        let l = LauncherKind::Srun.build(Vec::new());
        assert_eq!(
            default_listen(LauncherKind::Srun, &*l, &[]).unwrap(),
            "127.0.0.1"
        );
    }

    #[test]
    fn listening_everywhere_sends_servers_the_route() {
        let l = LauncherKind::Local.build(Vec::new());
        let got = frontend_addresses(LauncherKind::Local, &*l, &[], Some("0.0.0.0")).unwrap();
        assert_eq!(got, ("0.0.0.0".to_owned(), "127.0.0.1".to_owned()));
        let got = frontend_addresses(LauncherKind::Local, &*l, &[], Some("::1")).unwrap();
        assert_eq!(got, ("[::1]".to_owned(), "[::1]".to_owned()));
        let got = frontend_addresses(LauncherKind::Local, &*l, &[], None).unwrap();
        assert_eq!(got, ("127.0.0.1".to_owned(), "127.0.0.1".to_owned()));
    }

    #[test]
    fn remote_trees_listen_on_the_route_to_the_first_host() {
        let l = LauncherKind::Mpirun.build(Vec::new());
        let hosts = ["::1".to_owned(), "192.0.2.1".to_owned()];
        if std::net::UdpSocket::bind("[::1]:0").is_ok() {
            assert_eq!(
                default_listen(LauncherKind::Mpirun, &*l, &hosts).unwrap(),
                "[::1]"
            );
        }
        let e = default_listen(LauncherKind::Mpirun, &*l, &["no-such-host.invalid".into()])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no-such-host.invalid") && e.contains("--listen"),
            "{e}"
        );
    }
}
