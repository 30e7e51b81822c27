//! The service registry: every command a server answers goes to the service its envelope's
//! tag names (`sdm_proto::Message::service`), with its payload bytes unchanged.
//!
//! [`Services`] maps names to [`Handler`]s. The stock services are registered like any
//! tool's: [`SDM`] (`ping`, `info`, `value`, `sleep MS`; also the empty tag), [`OMIS`] (OMIS
//! requests, run on the monitor thread in arrival order), [`COUNTERS`] (the program's own
//! counters, see [`crate::counters`]), [`PROCSTAT`] (the program's metrics for `sdm top`) and
//! [`INIT`] (the init command: loads the service plugins it names, then answers `ready`).
//! A tag no service has gets an error reply naming it and listing the services there are;
//! a handler that panics or drops its [`Reply`] gets one naming the service.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use sdm_overlay::driver::{Delivery, Replier};

use crate::error::{Error, ErrorKind};
use crate::monitor::{MonitorHandle, ProcState, hostname};
use crate::plugin::ServicePlugin;
pub use crate::ranks::{Ranks, ServerContext};

pub use sdm_proto::service::{COUNTERS, EVALUATE, OMIS, PROCSTAT, SDM};

/// The init command (the tag the front-end gives it).
pub const INIT: &str = sdm_overlay::setup::INIT_SERVICE;

/// One line describing rank `rank` of this server: host, the server's pid, the rank, the
/// server's resident memory and the load average (`host=` first: scripts look for it).
pub fn info_line(rank: u32) -> String {
    let rss_kb = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned))
        })
        .unwrap_or_else(|| "?".into());
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into());
    format!(
        "host={} pid={} rank={rank} rss_kb={rss_kb} load={load}",
        hostname(),
        std::process::id()
    )
}

/// One command for a service: which operation, for which rank, its payload bytes exactly
/// as sent, and a way to reach the rank's monitored program.
#[derive(Debug)]
pub struct Request {
    op: u64,
    service: Arc<str>,
    payload: Bytes,
    ctx: Arc<ServerContext>,
}

impl Request {
    /// The operation id (the same at every server the command reached).
    pub fn op(&self) -> u64 {
        self.op
    }

    /// The rank this request is for (a command to k local ranks is one request each).
    pub fn rank(&self) -> u32 {
        self.ctx.rank()
    }

    /// The rank this request is for: [`Request::rank`] (the name from when a server served
    /// one rank, whose id it was).
    pub fn server(&self) -> u32 {
        self.rank()
    }

    /// The service the command was tagged for (as registered; never empty).
    pub fn service(&self) -> &str {
        &self.service
    }

    /// The payload, byte for byte as the front-end sent it.
    pub fn payload(&self) -> &Bytes {
        &self.payload
    }

    /// The rank's node-local monitor (jobs on it run in submission order on its own thread).
    pub fn monitor(&self) -> &MonitorHandle {
        &self.ctx.monitor
    }

    /// What the server's stock services share (the OMIS registry, the counters).
    pub fn context(&self) -> &ServerContext {
        &self.ctx
    }

    /// The rank's monitored program's pid, if this server started or attached one.
    pub async fn pid(&self) -> Option<u32> {
        self.ctx.monitor.call(|m| m.pid()).await
    }
}

/// Answers one [`Request`], once; may be moved to another task and used later. Dropped
/// unanswered (a handler that forgot, or panicked), it answers with an error naming the
/// service.
#[derive(Debug)]
pub struct Reply {
    replier: Option<Replier>,
    service: Arc<str>,
    rank: u32,
}

impl Reply {
    fn new(replier: Replier, service: Arc<str>, rank: u32) -> Self {
        Self {
            replier: Some(replier),
            service,
            rank,
        }
    }

    /// Sends `payload` as this rank's reply.
    pub fn send(mut self, payload: impl Into<Bytes>) {
        if let Some(r) = self.replier.take() {
            r.send(payload);
        }
    }

    /// Refuses the request: `service "NAME": WHAT` goes up as an error group
    /// (without the rank, so identical errors of many ranks merge into one group, which
    /// names them).
    pub fn error(self, what: impl fmt::Display) {
        let text = self.error_text(what);
        self.fail(text);
    }

    /// Refuses the request with `text` as it is, as an error group.
    pub fn fail(mut self, text: impl Into<Bytes>) {
        if let Some(r) = self.replier.take() {
            r.fail(text);
        }
    }

    fn error_text(&self, what: impl fmt::Display) -> String {
        format!("service {:?}: {what}", self.service)
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        if self.replier.is_some() {
            let why = if std::thread::panicking() {
                "the handler panicked"
            } else {
                "the handler dropped the request without replying"
            };
            tracing::warn!("rank {}: service {:?}: {why}", self.rank, self.service);
            let text = self.error_text(why);
            if let Some(r) = self.replier.take() {
                r.fail(text);
            }
        }
    }
}

/// Answers the commands of one service. Called on the node's task: it must not block; it
/// may move the [`Reply`] to a task (or `spawn_blocking`) and answer later.
pub trait Handler: Send + Sync + 'static {
    /// Answers `req` through `reply`.
    fn call(&self, req: Request, reply: Reply);
}

impl<F: Fn(Request, Reply) + Send + Sync + 'static> Handler for F {
    fn call(&self, req: Request, reply: Reply) {
        self(req, reply)
    }
}

/// The service plugins the init command named: those loaded, by service name, and those
/// that did not load, with why.
#[derive(Debug, Default)]
pub(crate) struct Plugins {
    loaded: BTreeMap<String, Arc<ServicePlugin>>,
    failed: Vec<(String, Error)>,
}

impl Plugins {
    /// Loads every plugin of `paths` not loaded yet; failures are logged and kept.
    fn load_all(&mut self, server: u32, paths: &[String]) {
        for path in paths {
            if self
                .loaded
                .values()
                .any(|p| p.path() == std::path::Path::new(path))
                || self.failed.iter().any(|(p, _)| p == path)
            {
                continue;
            }
            match ServicePlugin::load(std::path::Path::new(path), server) {
                Ok(p) => {
                    self.loaded.insert(p.name().to_owned(), Arc::new(p));
                }
                Err(e) => {
                    tracing::warn!("server {server}: {}", e.chain());
                    self.failed.push((path.clone(), e));
                }
            }
        }
    }
}

/// The name -> handler table of one server, with the service plugins its init command
/// loads.
#[derive(Clone)]
pub struct Services {
    /// Hashed with Fx: looked up for every command (see `sdm_filters::Registry`).
    table: HashMap<Arc<str>, Arc<dyn Handler>, rustc_hash::FxBuildHasher>,
    plugins: Arc<Mutex<Plugins>>,
}

impl fmt::Debug for Services {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Services")
            .field("names", &self.names())
            .finish()
    }
}

impl Default for Services {
    fn default() -> Self {
        Self::stock()
    }
}

impl Services {
    /// A table with no services at all (not even [`INIT`]: such a server never answers
    /// `ready`); see [`Services::stock`].
    pub fn empty() -> Self {
        Self {
            table: HashMap::default(),
            plugins: Arc::default(),
        }
    }

    /// The stock services every `sdm server` has: [`SDM`], [`OMIS`], [`COUNTERS`],
    /// [`PROCSTAT`], [`EVALUATE`] and [`INIT`].
    pub fn stock() -> Self {
        let mut s = Self::empty();
        let plugins = Arc::clone(&s.plugins);
        let stock: [(&str, Arc<dyn Handler>); 6] = [
            (SDM, Arc::new(sdm_service)),
            (OMIS, Arc::new(omis_service)),
            (COUNTERS, Arc::new(counters_service)),
            (PROCSTAT, Arc::new(procstat_service)),
            (EVALUATE, Arc::new(evaluate_service)),
            (
                INIT,
                Arc::new(move |req: Request, reply: Reply| init(&plugins, req, reply)),
            ),
        ];
        for (name, h) in stock {
            s.table.insert(name.into(), h);
        }
        s
    }

    /// Registers `handler` as the service `name`, replacing a service of that name.
    /// Names are non-empty; the empty tag is [`SDM`].
    pub fn add(&mut self, name: &str, handler: impl Handler) -> Result<(), Error> {
        if name.is_empty() {
            return Err(Error::new(
                ErrorKind::BadInput,
                "a service needs a name (the empty tag is the sdm service)",
            ));
        }
        self.table.insert(name.into(), Arc::new(handler));
        Ok(())
    }

    /// The names of the registered services and of the loaded plugins' services, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.table.keys().map(|k| k.to_string()).collect();
        let plugins = self.plugins.lock().expect("not poisoned");
        v.extend(plugins.loaded.keys().cloned());
        v.sort();
        v.dedup();
        v
    }

    /// Loads the service plugins at `paths` for server `server` (as the init command does);
    /// those that do not load are logged, and commands for an unknown service name them.
    pub fn load_plugins(&self, server: u32, paths: &[String]) {
        self.plugins
            .lock()
            .expect("not poisoned")
            .load_all(server, paths);
    }

    /// Hands one delivered command to its service, once for each local rank it is for
    /// (each with its own reply, which the node merges through the command's filter with
    /// the others). A handler's panic is contained: that rank's reply is an error naming
    /// the service, and the server carries on.
    pub fn dispatch(&self, ranks: &Ranks, d: Delivery) {
        let name = if d.service.is_empty() {
            SDM
        } else {
            &d.service
        };
        let per_rank = d.reply.split();
        // The table's own name is shared with the request and the reply: a command for a
        // registered service allocates nothing here.
        let (service, handler): (Arc<str>, Arc<dyn Handler>) = match self.table.get_key_value(name)
        {
            Some((k, h)) => (Arc::clone(k), Arc::clone(h)),
            None => {
                let service: Arc<str> = name.into();
                let plugin = self
                    .plugins
                    .lock()
                    .expect("not poisoned")
                    .loaded
                    .get(name)
                    .cloned();
                match plugin {
                    Some(p) => (service, Arc::new(crate::plugin::PluginService(p))),
                    None => {
                        let text = self.unknown();
                        for (rank, replier) in per_rank {
                            Reply::new(replier, Arc::clone(&service), rank).error(&text);
                        }
                        return;
                    }
                }
            }
        };
        for (rank, replier) in per_rank {
            let ctx = ranks.get(rank);
            let reply = Reply::new(replier, Arc::clone(&service), rank);
            let req = Request {
                op: d.op,
                service: Arc::clone(&service),
                payload: d.payload.clone(),
                ctx,
            };
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| handler.call(req, reply))) {
                let what = sdm_overlay::panic_text(&*panic);
                tracing::error!("rank {rank}: service {name:?} panicked: {what}");
            }
        }
    }

    /// Why a command cannot be answered: no such service, the services there are, and the
    /// plugins that did not load.
    fn unknown(&self) -> String {
        let mut text = format!(
            "no such service (this server has {})",
            self.names().join(", ")
        );
        for (path, e) in &self.plugins.lock().expect("not poisoned").failed {
            text.push_str(&format!(
                "; service plugin {path} did not load: {}",
                e.chain()
            ));
        }
        text
    }
}

/// [`INIT`]: takes the tree's size, loads the service plugins, answers `ready`.
fn init(plugins: &Mutex<Plugins>, req: Request, reply: Reply) {
    match sdm_overlay::setup::InitSpec::from_payload(&req.payload) {
        Ok(spec) => {
            let ctx = req.context();
            let own = spec.placement.ranks_of(ctx.job.server());
            let size = match spec.servers {
                0 => None,
                n => Some(spec.placement.ranks_of_servers(0, n - 1).len() as u32),
            };
            ctx.job.set(spec.servers, size, own);
            ctx.job.prepare(ctx.rank(), &ctx.monitor);
            plugins
                .lock()
                .expect("not poisoned")
                .load_all(req.server(), &spec.service_plugins);
        }
        Err(e) => tracing::warn!("server {}: init command: {e}", req.server()),
    }
    reply.send("ready");
}

/// [`SDM`]: `ping`, `info`, `value` (the rank), `sleep MS`.
fn sdm_service(req: Request, reply: Reply) {
    // A request is a short ASCII line: its verb is matched as bytes, without a copy or a
    // Unicode check (text is made, lossily, only of an argument or for an error).
    let line = req.payload.trim_ascii();
    let (verb, arg) = match line.iter().position(|&b| b == b' ') {
        Some(i) => (&line[..i], &line[i + 1..]),
        None => (line, &[][..]),
    };
    let arg = || String::from_utf8_lossy(arg);
    match verb {
        b"ping" => reply.send("pong"),
        b"info" => reply.send(info_line(req.rank())),
        // The same bytes every time (a reference count, no formatting), which a `sum` of
        // this one value sends on as they are.
        b"value" => reply.send(req.ctx.rank_text.clone()),
        b"sleep" => match arg().trim().parse::<u64>() {
            Ok(ms) => {
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    reply.send("ok");
                });
            }
            Err(_) => reply.fail(format!("sleep needs milliseconds, got {:?}", arg())),
        },
        _ => reply.fail(format!(
            "unknown request {:?} (expected ping, info, value or sleep MS)",
            String::from_utf8_lossy(verb)
        )),
    }
}

/// [`OMIS`]: the request runs on the monitor thread, queued now, in delivery order (a stop
/// and a cont sent back to back run in order), which answers it.
fn omis_service(req: Request, reply: Reply) {
    let text = String::from_utf8_lossy(&req.payload).into_owned();
    let reg = Arc::clone(&req.ctx.omis);
    req.monitor().submit_then(
        move |m| crate::services::execute(&reg, m, &text),
        move |answer| reply.send(answer),
    );
}

/// [`COUNTERS`]: the program's own counters as a JSON object.
fn counters_service(req: Request, reply: Reply) {
    reply.send(req.ctx.counters.json());
}

/// [`PROCSTAT`]: the program's metrics as a JSON object (the `stats` filter's leaf input).
fn procstat_service(req: Request, reply: Reply) {
    req.monitor().submit_then(
        |m| m.procstat(),
        move |got| match got {
            Ok(pairs) => {
                let map: serde_json::Map<String, serde_json::Value> = pairs
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), serde_json::json!(v)))
                    .collect();
                reply.send(serde_json::Value::Object(map).to_string());
            }
            Err(e) => reply.fail(format!("procstat: {e}")),
        },
    );
}

/// [`EVALUATE`]: the payload is an expression, evaluated by the symbolic debugger in the
/// process's selected frame; the reply is `{"EXPR": "VALUE"}` when the value is a number
/// (the `stats` filter's leaf input), otherwise a `stats` record holding the error (see
/// `Stats::error_record`), which the filter carries up with this server's id.
fn evaluate_service(req: Request, reply: Reply) {
    use sdm_overlay::filters::builtin::Stats;
    let expr = String::from_utf8_lossy(req.payload()).into_owned();
    let asked = expr.clone();
    let me = sdm_proto::IdSet::single(req.server());
    req.monitor().submit_then(
        move |m| match m.state() {
            // Said alike by every rank that ended alike (no pid), so they merge.
            Some(ProcState::Exited(c)) => Err(format!("exited with status {c}")),
            Some(ProcState::Signaled(s)) => Err(format!("killed by signal {s}")),
            _ => m.evaluate(&asked).map_err(|e| e.to_string()),
        },
        move |got| match got {
            Ok(v) if v.parse::<sdm_overlay::filters::Decimal>().is_ok() => {
                reply.send(serde_json::json!({ expr: v }).to_string())
            }
            Ok(v) => reply.send(Stats::error_record(
                &format!("{expr} = {v} is not a number"),
                &me,
            )),
            Err(e) => reply.send(Stats::error_record(&e, &me)),
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use sdm_proto::{IdSet, Kind};

    /// The ranks of server 3 (one, rank 3, until it has a placement).
    fn ranks() -> Ranks {
        let (tx, _rx) = tokio::sync::mpsc::channel(16);
        Ranks::new(3, tx)
    }

    /// Dispatches `payload` tagged `service` to the local ranks `to` of `ranks`; returns
    /// the replies (in rank order: the handlers here answer at once).
    fn ask_ranks(
        ranks: &Ranks,
        to: IdSet,
        s: &Services,
        service: &str,
        payload: &'static [u8],
    ) -> Vec<Bytes> {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let d = Delivery {
            op: 7,
            ranks: to.clone(),
            kind: Kind::Command,
            filter: Default::default(),
            service: service.into(),
            payload: Bytes::from_static(payload),
            reply: Replier::new(7, tx).for_ranks(to),
        };
        s.dispatch(ranks, d);
        let mut out = Vec::new();
        while let Ok((op, bytes)) = rx.try_recv() {
            assert_eq!(op, 7);
            out.push(bytes);
        }
        out
    }

    /// Dispatches `payload` tagged `service` to rank 3 and returns the reply.
    async fn ask(s: &Services, service: &str, payload: &'static [u8]) -> Bytes {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let d = Delivery {
            op: 7,
            ranks: IdSet::single(3),
            kind: Kind::Command,
            filter: Default::default(),
            service: service.into(),
            payload: Bytes::from_static(payload),
            reply: Replier::new(7, tx).for_ranks(IdSet::single(3)),
        };
        s.dispatch(&ranks(), d);
        let (op, bytes) = rx.recv().await.expect("a reply");
        assert_eq!(op, 7);
        bytes
    }

    /// A command to several local ranks runs once per rank, each with its own reply
    /// (merged by the node); each rank has its own context, made once.
    #[tokio::test]
    async fn a_command_runs_once_for_each_local_rank_it_is_for() {
        let s = Services::stock();
        let ranks = ranks();
        let to: IdSet = "[2,5-7]".parse().unwrap();
        let values = ask_ranks(&ranks, to.clone(), &s, SDM, b"value");
        assert_eq!(values, ["2", "5", "6", "7"]);
        assert_eq!(ranks.ranks(), [2, 5, 6, 7]);
        for (rank, line) in to
            .iter()
            .zip(ask_ranks(&ranks, to.clone(), &s, SDM, b"info"))
        {
            let line = String::from_utf8(line.to_vec()).unwrap();
            let want = format!(
                "host={} pid={} rank={rank} ",
                hostname(),
                std::process::id()
            );
            assert!(line.starts_with(&want), "{line}");
        }
        assert_eq!(ranks.ranks(), [2, 5, 6, 7], "contexts made once");
        // An unknown service: an error for each rank.
        let errors = ask_ranks(&ranks, to, &s, "nope", b"");
        assert_eq!(errors.len(), 4);
        assert!(errors.iter().all(|e| e.starts_with(b"service \"nope\"")));
    }

    #[tokio::test]
    async fn the_tag_selects_the_service_and_the_payload_arrives_unchanged() {
        let mut s = Services::stock();
        s.add("echo", |req: Request, reply: Reply| {
            assert_eq!(req.service(), "echo");
            assert_eq!(req.server(), 3);
            reply.send(req.payload().clone());
        })
        .unwrap();
        let raw = b"\x00\xff\xfe raw";
        assert_eq!(&ask(&s, "echo", raw).await[..], raw);
        // The same bytes to the sdm service are a request it does not know.
        assert!(ask(&s, SDM, raw).await.starts_with(b"unknown request"));
        // The empty tag is the sdm service.
        assert_eq!(&ask(&s, "", b"ping").await[..], b"pong");
        assert_eq!(&ask(&s, SDM, b"value").await[..], b"3");
        // "ping" tagged for OMIS is OMIS, not the built-in ping.
        let not_omis = ask(&s, OMIS, b"ping").await;
        let not_omis = sdm_omis::parse_reply(std::str::from_utf8(&not_omis).unwrap()).unwrap();
        assert_eq!(not_omis.0[0].failure, Some(sdm_omis::ErrorKind::BadRequest));
        assert_eq!(&ask(&s, COUNTERS, b"").await[..], b"{}");
    }

    /// An id prints as `to_string` prints it, at both ends of the range, and `value`
    /// answers it; a request is trimmed, split at its first space, and one that is not
    /// UTF-8 is named in its error.
    #[tokio::test]
    async fn the_sdm_service_reads_a_request_line() {
        for id in [0, 7, 10, 99, 4_000_000_000, u32::MAX] {
            let (tx, _rx) = tokio::sync::mpsc::channel(1);
            let (monitor, _) = MonitorHandle::new(id, 1, tx);
            let ctx =
                ServerContext::new(id, monitor, crate::services::registry(), Default::default());
            assert_eq!(&ctx.rank_text[..], id.to_string().as_bytes());
        }
        let s = Services::stock();
        let (a, b) = (
            ask(&s, SDM, b"  value \n").await,
            ask(&s, SDM, b"value").await,
        );
        assert_eq!((&a[..], &b[..]), (&b"3"[..], &b"3"[..]));
        assert_eq!(&ask(&s, SDM, b"sleep 0").await[..], b"ok");
        let text = ask(&s, SDM, b"sleep  x y").await;
        assert_eq!(&text[..], b"sleep needs milliseconds, got \" x y\"");
        let text = ask(&s, SDM, b"pi\xffng").await;
        assert_eq!(
            &text[..],
            "unknown request \"pi\u{fffd}ng\" (expected ping, info, value or sleep MS)".as_bytes()
        );
    }

    #[tokio::test]
    async fn an_unknown_tag_gets_an_error_naming_it_and_the_services() {
        let s = Services::stock();
        let text = String::from_utf8(ask(&s, "nope", b"ping").await.to_vec()).unwrap();
        assert!(text.starts_with("service \"nope\": no such service"));
        for name in [SDM, OMIS, COUNTERS, PROCSTAT, EVALUATE, INIT] {
            assert!(text.contains(name), "{text}");
        }
    }

    #[tokio::test]
    async fn a_panicking_handler_gets_an_error_reply_and_the_server_lives_on() {
        let mut s = Services::stock();
        s.add("boom", |_: Request, _: Reply| panic!("deliberate"))
            .unwrap();
        s.add("forgetful", |_: Request, _: Reply| {}).unwrap();
        let text = ask(&s, "boom", b"").await;
        assert_eq!(&text[..], b"service \"boom\": the handler panicked");
        let text = ask(&s, "forgetful", b"").await;
        assert!(text.ends_with(b"dropped the request without replying"));
        assert_eq!(&ask(&s, SDM, b"ping").await[..], b"pong");
    }

    #[test]
    fn names_are_sorted_and_a_service_needs_one() {
        let mut s = Services::stock();
        assert_eq!(
            s.add("", |_: Request, _: Reply| {}).unwrap_err().kind(),
            ErrorKind::BadInput
        );
        s.add("checksum", |_: Request, _: Reply| {}).unwrap();
        assert_eq!(
            s.names(),
            [
                "checksum", "counters", "evaluate", "omis", "procstat", "sdm", "sdm.init"
            ]
        );
        assert!(Services::empty().names().is_empty());
    }
}
