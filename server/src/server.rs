//! [`Server`]: the `sdm server` daemon with services of a tool's own, built with
//! [`Server::builder`]; [`Server::main`] makes it a whole daemon binary (`master` and `server`).
//!
//! ```no_run
//! use sdm_server::{Reply, Request, Server};
//!
//! fn main() -> std::process::ExitCode {
//!     Server::builder()
//!         .service("echo", |req: Request, reply: Reply| reply.send(req.payload().clone()))
//!         .main()
//! }
//! ```
//!
//! Launch it with `SessionOptions::program` set to the binary: the front-end starts it as
//! the master and as every server, and commands tagged `echo` come back unchanged.

use std::process::ExitCode;
use std::time::Duration;

use sdm_overlay::setup::SessionKey;
use sdm_overlay::transport::{Address, PortRange};

use crate::daemon::ServerOptions;
use crate::error::{Error, ErrorKind};
use crate::service::{Handler, Services};

/// A server daemon: the stock services plus those a tool added.
#[derive(Debug, Clone)]
pub struct Server {
    services: Services,
}

/// Builds a [`Server`]: [`Server::builder`], then [`ServerBuilder::service`] per service.
#[derive(Debug)]
pub struct ServerBuilder {
    services: Services,
    error: Option<Error>,
}

impl Server {
    /// A builder starting from the stock services (`sdm`, `omis`, `counters`, `procstat`,
    /// `sdm.init`).
    pub fn builder() -> ServerBuilder {
        ServerBuilder {
            services: Services::stock(),
            error: None,
        }
    }

    /// The services this server answers.
    pub fn services(&self) -> &Services {
        &self.services
    }

    /// Runs server `id` (its local rank on this host picks the first port it tries): binds,
    /// prints `SDM-LISTEN`, waits for its parent and serves until the tree ends.
    pub async fn run(
        self,
        id: u32,
        local_rank: Option<u32>,
        key: SessionKey,
        opt: ServerOptions,
    ) -> Result<(), Error> {
        crate::daemon::run_server_with(self.services, id, local_rank, key, opt).await
    }

    /// The whole daemon binary from the process's arguments and environment, as the
    /// front-end launches it: `master --frontend ADDR [--attempts N]`, or `server --port P
    /// [--transport T] [--host H] [--advertise H] [--frontend-host H] [--port-span N]
    /// [--parent-timeout S]`
    /// (the `sdm master` and `sdm server` options; the id and the session key come from
    /// the environment). Errors are printed; the exit code says whether it failed.
    pub fn main(self) -> ExitCode {
        crate::logging::init("warn");
        let args: Vec<String> = std::env::args().skip(1).collect();
        let parsed = DaemonArgs::parse(&args);
        // Local servers asked for as copies of this process are forked here, before any
        // thread (see `sdm_deploy::fork_copies`).
        if let Ok(DaemonArgs::Server(_)) = parsed {
            match sdm_deploy::fork_copies() {
                Ok(sdm_deploy::Copies::Serve) => {}
                Ok(sdm_deploy::Copies::Done { failed: 0, .. }) => return ExitCode::SUCCESS,
                Ok(sdm_deploy::Copies::Done { copies, failed }) => {
                    eprintln!(
                        "{}: {failed} of {copies} local servers failed",
                        program_name()
                    );
                    return ExitCode::FAILURE;
                }
                Err(e) => {
                    eprintln!("{}: {e}", program_name());
                    return ExitCode::FAILURE;
                }
            }
        }
        let run = async {
            match parsed? {
                DaemonArgs::Master {
                    frontend,
                    attempts,
                    ports,
                } => {
                    let key = SessionKey::from_env().map_err(|e| bad_env("the session key", e))?;
                    crate::daemon::run_master(frontend, key, attempts, ports).await
                }
                DaemonArgs::Server(opt) => {
                    let id = sdm_deploy::rank_from_env().map_err(|e| bad_env("the rank", e))?;
                    let key = SessionKey::from_env().map_err(|e| bad_env("the session key", e))?;
                    self.run(id, sdm_deploy::local_rank_from_env(), key, opt)
                        .await
                }
            }
        };
        // One thread, as `sdm server` runs: a frame never crosses threads in a node.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build();
        let result = match rt {
            Ok(rt) => rt.block_on(run),
            Err(e) => Err(Error::with_source(
                ErrorKind::Startup,
                "cannot start the runtime",
                e,
            )),
        };
        match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{}: {}", program_name(), e.chain());
                ExitCode::FAILURE
            }
        }
    }
}

impl ServerBuilder {
    /// Adds the service `name` answered by `handler` (replacing a service of that name,
    /// stock ones included). An empty name makes [`ServerBuilder::build`] fail.
    pub fn service(mut self, name: &str, handler: impl Handler) -> Self {
        if let Err(e) = self.services.add(name, handler) {
            self.error.get_or_insert(e);
        }
        self
    }

    /// The server, or the first error a [`ServerBuilder::service`] call made.
    pub fn build(self) -> Result<Server, Error> {
        match self.error {
            Some(e) => Err(e),
            None => Ok(Server {
                services: self.services,
            }),
        }
    }

    /// [`ServerBuilder::build`], then [`Server::run`].
    pub async fn run(
        self,
        id: u32,
        local_rank: Option<u32>,
        key: SessionKey,
        opt: ServerOptions,
    ) -> Result<(), Error> {
        self.build()?.run(id, local_rank, key, opt).await
    }

    /// [`ServerBuilder::build`], then [`Server::main`].
    pub fn main(self) -> ExitCode {
        match self.build() {
            Ok(s) => s.main(),
            Err(e) => {
                eprintln!("{}: {}", program_name(), e.chain());
                ExitCode::FAILURE
            }
        }
    }
}

fn program_name() -> String {
    std::env::args()
        .next()
        .and_then(|a| a.rsplit('/').next().map(str::to_owned))
        .unwrap_or_else(|| "sdm-server".into())
}

/// `what` could not be read from the environment, because of `e`.
fn bad_env(what: &str, e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Error {
    Error::with_source(
        ErrorKind::Startup,
        format!("{what} from the environment"),
        e,
    )
}

/// What the front-end asks a daemon binary to be.
#[derive(Debug, Clone)]
enum DaemonArgs {
    Master {
        frontend: Address,
        attempts: u32,
        ports: Option<PortRange>,
    },
    Server(ServerOptions),
}

impl DaemonArgs {
    fn parse(args: &[String]) -> Result<Self, Error> {
        let usage = "expected `master --frontend ADDR` or `server --port PORT [options]`";
        let (role, rest) = args
            .split_first()
            .ok_or_else(|| Error::new(ErrorKind::BadInput, usage))?;
        let mut flags = std::collections::BTreeMap::new();
        let mut it = rest.iter();
        while let Some(flag) = it.next() {
            let (name, value) = match flag.split_once('=') {
                Some((n, v)) => (n.to_owned(), v.to_owned()),
                None => {
                    let v = it.next().ok_or_else(|| {
                        Error::new(ErrorKind::BadInput, format!("{flag} needs a value"))
                    })?;
                    (flag.clone(), v.clone())
                }
            };
            flags.insert(name, value);
        }
        let take =
            |flags: &mut std::collections::BTreeMap<String, String>, name: &str| flags.remove(name);
        fn num<T: std::str::FromStr>(
            flag: &str,
            v: Option<String>,
            default: T,
        ) -> Result<T, Error> {
            match v {
                None => Ok(default),
                Some(v) => v.parse().map_err(|_| {
                    Error::new(
                        ErrorKind::BadInput,
                        format!("{flag}: {v:?} is not a number"),
                    )
                }),
            }
        }
        let parsed = match role.as_str() {
            "master" => {
                let frontend = take(&mut flags, "--frontend")
                    .ok_or_else(|| Error::new(ErrorKind::BadInput, "master needs --frontend ADDR"))?
                    .parse()
                    .map_err(|e| Error::with_source(ErrorKind::BadInput, "--frontend", e))?;
                let attempts = num("--attempts", take(&mut flags, "--attempts"), 50)?;
                let ports = take(&mut flags, "--port-range")
                    .map(|r| r.parse::<PortRange>())
                    .transpose()
                    .map_err(|e| Error::with_source(ErrorKind::BadInput, "--port-range", e))?;
                Self::Master {
                    frontend,
                    attempts,
                    ports,
                }
            }
            "server" => {
                let port = take(&mut flags, "--port")
                    .ok_or_else(|| Error::new(ErrorKind::BadInput, "server needs --port PORT"))?;
                Self::Server(ServerOptions {
                    base_port: num("--port", Some(port), 0)?,
                    scheme: take(&mut flags, "--transport").unwrap_or_else(|| "tcp".into()),
                    bind_host: take(&mut flags, "--host").or_else(|| take(&mut flags, "--bind")),
                    advertise: take(&mut flags, "--advertise"),
                    frontend_host: take(&mut flags, "--frontend-host"),
                    port_span: num("--port-span", take(&mut flags, "--port-span"), 2048)?,
                    parent_timeout: Duration::from_secs(num(
                        "--parent-timeout",
                        take(&mut flags, "--parent-timeout"),
                        120,
                    )?),
                })
            }
            other => {
                return Err(Error::new(
                    ErrorKind::BadInput,
                    format!("unknown role {other:?}: {usage}"),
                ));
            }
        };
        match flags.keys().next() {
            Some(unknown) => Err(Error::new(
                ErrorKind::BadInput,
                format!("unknown option {unknown} for {role}"),
            )),
            None => Ok(parsed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn daemon_arguments_are_those_the_front_end_passes() {
        match DaemonArgs::parse(&args(
            "server --port 3000 --transport quic --host 0.0.0.0 --frontend-host [fd00::1]",
        )) {
            Ok(DaemonArgs::Server(o)) => {
                assert_eq!((o.base_port, o.scheme.as_str()), (3000, "quic"));
                assert_eq!(
                    (o.bind_host.as_deref(), o.port_span),
                    (Some("0.0.0.0"), 2048)
                );
                assert_eq!(o.frontend_host.as_deref(), Some("[fd00::1]"));
            }
            other => panic!("{other:?}"),
        }
        match DaemonArgs::parse(&args("master --frontend tcp://127.0.0.1:9")) {
            Ok(DaemonArgs::Master { attempts, .. }) => assert_eq!(attempts, 50),
            other => panic!("{other:?}"),
        }
        for bad in [
            "",
            "server",
            "server --port x",
            "master",
            "server --port 1 --bogus 2",
            "root",
        ] {
            let e = DaemonArgs::parse(&args(bad)).unwrap_err();
            assert!(e.is_bad_input(), "{bad}: {e}");
        }
    }

    #[test]
    fn a_service_without_a_name_fails_the_build() {
        let e = Server::builder()
            .service("", |_: crate::Request, _: crate::Reply| {})
            .build()
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadInput);
        let s = Server::builder()
            .service("checksum", |_: crate::Request, _: crate::Reply| {})
            .build()
            .unwrap();
        assert!(s.services().names().contains(&"checksum".to_owned()));
    }
}
