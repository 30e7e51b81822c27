//! The harness every end-to-end test shares: the programs under test, trees of real nodes
//! (in-process over any transport, or as real OS processes killed with SIGKILL), filters
//! folded through tree shapes, and checks of reply groups. See the crate docs.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use sdm_client::{Frontend, ReplyGroup};
use sdm_filters::{Group, Registry};
use sdm_overlay::Node;
use sdm_overlay::driver::{self, Delivery};
use sdm_overlay::setup::{self, ConnectPolicy};
use sdm_overlay::setup::{SESSION_KEY_ENV, SessionKey};
use sdm_overlay::transport::{
    Address, Listener, SessionTls, Transport, TransportConfig, transport_for,
};
use sdm_proto::{IdSet, Status};
use sdm_topology::{NodeId, Shape, Topology};
use tokio::task::JoinHandle;

/// Answers like `sdm-testnode`: `sleep MS` after MS ms, `id` with the id, else `ok`.
pub fn answer(id: u32, d: Delivery) {
    let text = String::from_utf8_lossy(&d.payload).into_owned();
    if let Some(ms) = text
        .strip_prefix("sleep ")
        .and_then(|v| v.trim().parse().ok())
    {
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            d.reply.send("ok");
        });
    } else if text == "id" {
        d.reply.send(id.to_string());
    } else {
        d.reply.send("ok");
    }
}

/// An in-process tree: every node is a tokio task with its own real links.
pub struct Tree {
    /// The front-end, accepted by the master.
    pub frontend: Frontend,
    /// The servers' tasks (index: server id).
    pub servers: Vec<JoinHandle<()>>,
    /// The master's task.
    pub master: JoinHandle<()>,
    /// The tree's shape.
    pub topo: Arc<dyn Topology>,
}

/// The address to bind on for `scheme`: `mem://auto`, else an ephemeral loopback port.
pub fn listen_addr(scheme: &str) -> Address {
    match scheme {
        "mem" => "mem://auto".parse().unwrap(),
        s => format!("{s}://127.0.0.1:0").parse().unwrap(),
    }
}

/// A transport for `scheme` (`tcp`, `quic` or `mem`) under `cfg`, and the address to bind
/// its listeners on.
pub fn transport(scheme: &str, cfg: &TransportConfig) -> (Arc<dyn Transport>, Address) {
    let addr = listen_addr(scheme);
    (Arc::from(transport_for(&addr, cfg).unwrap()), addr)
}

/// Binds `n` listeners on `addr`: server `i` listens on the `i`th; the table holds their
/// addresses, as the master and every server need it.
pub async fn bind_servers(
    transport: &dyn Transport,
    addr: &Address,
    n: u32,
) -> (Vec<Box<dyn Listener>>, Arc<Vec<Option<Address>>>) {
    let mut listeners = Vec::new();
    for _ in 0..n {
        listeners.push(transport.bind(addr).await.unwrap());
    }
    let table = Arc::new(listeners.iter().map(|l| Some(l.local_addr())).collect());
    (listeners, table)
}

/// How [`Net::start_master`] dials the master's children.
#[derive(Clone, Debug)]
pub enum Dial {
    /// With the tree's policy; a child that does not connect is the tree's to report lost.
    Lenient,
    /// With this policy, and every child must connect (asserted in the master's task).
    Strict(ConnectPolicy),
}

/// What every node of a tree shares: the transport, the topology, the routing table (index:
/// server id) and the session's policy.
#[derive(Clone)]
pub struct Net {
    /// The transport every link uses.
    pub transport: Arc<dyn Transport>,
    /// The tree's shape.
    pub topo: Arc<dyn Topology>,
    /// Where each server listens (index: server id).
    pub table: Arc<Vec<Option<Address>>>,
    /// The connection policy (and session key) of every node.
    pub policy: ConnectPolicy,
}

impl Net {
    /// Spawns server `id` on `listener`: it connects to its children, accepts its parent,
    /// then routes and answers through `handler(id, delivery)` until its parent leaves.
    pub fn spawn_server(
        &self,
        id: u32,
        mut listener: Box<dyn Listener>,
        handler: fn(u32, Delivery),
    ) -> JoinHandle<()> {
        let net = self.clone();
        tokio::spawn(async move {
            let me = NodeId::Server(id);
            let (children, parent) = tokio::join!(
                setup::connect_children(&*net.transport, &*net.topo, me, &net.table, &net.policy),
                setup::accept_parent(&mut *listener, me, &net.policy),
            );
            let parent = parent.unwrap();
            let handler = Box::new(move |d| handler(id, d));
            let options = driver::Options::default();
            driver::run_node(Node::new(me, net.topo), parent, children, handler, options).await;
        })
    }

    /// Binds a front-end on `addr`, spawns the master (its children dialed as `dial` says,
    /// then its link up to the front-end) and accepts it: the front-end and the master's
    /// task, which ends when the front-end goes.
    pub async fn start_master(&self, addr: &Address, dial: Dial) -> (Frontend, JoinHandle<()>) {
        let mut fe_listener = self.transport.bind(addr).await.unwrap();
        let fe_addr = fe_listener.local_addr();
        let net = self.clone();
        let master = tokio::spawn(async move {
            let (t, topo) = (&*net.transport, &*net.topo);
            let children = match &dial {
                Dial::Lenient => {
                    setup::connect_children(t, topo, NodeId::Master, &net.table, &net.policy).await
                }
                Dial::Strict(policy) => {
                    let children =
                        setup::connect_children(t, topo, NodeId::Master, &net.table, policy).await;
                    for (c, r) in &children {
                        assert!(r.is_ok(), "connecting to {c}: {r:?}");
                    }
                    children
                }
            };
            let up = setup::connect_frontend(t, &fe_addr, &net.policy)
                .await
                .unwrap();
            let handler = Box::new(|_d: Delivery| unreachable!("the master delivers nothing"));
            // The master in this process hears its children's keepalives (whatever
            // interval they were given) and calls one dead only after a minute of silence:
            // a loaded test machine must not make it give up on a live child.
            let options = driver::Options {
                liveness: Some(driver::Liveness {
                    interval: Duration::from_secs(1),
                    dead_after: Duration::from_secs(60),
                }),
                ..driver::Options::default()
            };
            let node = Node::new(NodeId::Master, net.topo);
            driver::run_node(node, up, children, handler, options).await;
        });
        let frontend = Frontend::accept_master(&mut *fe_listener, &self.policy)
            .await
            .unwrap();
        (frontend, master)
    }
}

/// Builds a tree of `n` servers over `scheme` (`tcp`, `quic` or `mem`).
pub async fn tree(scheme: &str, n: u32, shape: Shape) -> Tree {
    tree_with(scheme, n, shape, answer).await
}

/// [`tree`] with servers answering through `handler(id, delivery)`.
pub async fn tree_with(scheme: &str, n: u32, shape: Shape, handler: fn(u32, Delivery)) -> Tree {
    let cfg = TransportConfig {
        tls: Some(SessionTls::generate()),
        ..TransportConfig::default()
    };
    let (transport, addr) = transport(scheme, &cfg);
    tree_over(transport, &addr, n, shape, handler).await
}

/// A tree of `n` servers of `shape` whose every link (front-end included) runs over
/// `transport`, listening on `addr`; servers answer through `handler(id, delivery)`.
pub async fn tree_over(
    transport: Arc<dyn Transport>,
    addr: &Address,
    n: u32,
    shape: Shape,
    handler: fn(u32, Delivery),
) -> Tree {
    let topo: Arc<dyn Topology> = Arc::from(shape.build(n));
    let (listeners, table) = bind_servers(&*transport, addr, n).await;
    let net = Net {
        transport,
        topo,
        table,
        policy: ConnectPolicy::new(SessionKey::generate()),
    };
    let servers = (0..n)
        .zip(listeners)
        .map(|(id, listener)| net.spawn_server(id, listener, handler))
        .collect();
    let (frontend, master) = net.start_master(addr, Dial::Lenient).await;
    Tree {
        frontend,
        servers,
        master,
        topo: net.topo,
    }
}

/// Real `sdm-testnode` processes (index: server id); every one is killed and reaped when
/// this is dropped, so a failing test leaves no orphans.
pub struct Procs(pub Vec<Child>);

impl Procs {
    /// Spawns `n` testnodes holding `policy`'s key; returns them with the address each one
    /// listens on (it prints `LISTEN <address>` first). They wait for [`Procs::send_table`].
    pub fn spawn(n: u32, policy: &ConnectPolicy) -> (Procs, Vec<Address>) {
        Self::spawn_with_env(n, policy, &[])
    }

    /// [`Procs::spawn`] with extra environment variables for every process.
    pub fn spawn_with_env(
        n: u32,
        policy: &ConnectPolicy,
        env: &[(&str, &str)],
    ) -> (Procs, Vec<Address>) {
        Self::spawn_each(n, policy, env, |_| Command::new(testnode()))
    }

    /// Sends every process the routing table `table` (one line of addresses, server 0
    /// first), on which each connects to its children and accepts its parent.
    pub fn send_table(&mut self, table: &[Address]) {
        let line = table
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(" ")
            + "\n";
        for c in &mut self.0 {
            c.stdin
                .as_mut()
                .unwrap()
                .write_all(line.as_bytes())
                .unwrap();
        }
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A front-end and master in this process over tcp for the servers at `table` (testnode
/// processes): the master dials them with `dial`, both ends use `policy`'s key. Returns the
/// front-end, the master's task and the topology.
pub async fn master_for_processes(
    table: &[Address],
    shape: Shape,
    policy: &ConnectPolicy,
    dial: ConnectPolicy,
) -> (Frontend, JoinHandle<()>, Arc<dyn Topology>) {
    let (transport, addr) = transport("tcp", &TransportConfig::default());
    let net = Net {
        transport,
        topo: Arc::from(shape.build(table.len() as u32)),
        table: Arc::new(table.iter().cloned().map(Some).collect()),
        policy: policy.clone(),
    };
    let (fe, master) = net.start_master(&addr, Dial::Strict(dial)).await;
    (fe, master, net.topo)
}

/// Ids of `groups` with `status`.
pub fn ids_with(groups: &[ReplyGroup], status: Status) -> IdSet {
    let mut s = IdSet::new();
    for g in groups.iter().filter(|g| g.status == status) {
        s.union_with(&g.sources);
    }
    s
}

/// Asserts the groups partition `dest`: every id once, none twice, none missing.
pub fn assert_partition(groups: &[ReplyGroup], dest: &IdSet) {
    let mut seen = IdSet::new();
    for g in groups {
        assert!(g.sources.is_disjoint(&seen), "id reported twice: {g:?}");
        seen.union_with(&g.sources);
    }
    assert_eq!(
        &seen, dest,
        "groups do not cover the destination: {groups:?}"
    );
}

impl Procs {
    /// [`Procs::spawn_with_env`], each process started by `command(id)`: a command that
    /// ends up running [`testnode`] (e.g. `ip netns exec NS <testnode> --listen ADDR`), to
    /// which the id, the server count, `env` and `policy`'s key are added.
    pub fn spawn_each(
        n: u32,
        policy: &ConnectPolicy,
        env: &[(&str, &str)],
        mut command: impl FnMut(u32) -> Command,
    ) -> (Procs, Vec<Address>) {
        let mut procs = Procs(Vec::new());
        let mut table = Vec::new();
        for id in 0..n {
            let mut cmd = command(id);
            let mut child = cmd
                .args(["--id", &id.to_string(), "--servers", &n.to_string()])
                .envs(env.iter().copied())
                .env(SESSION_KEY_ENV, policy.key.to_hex())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
            let mut line = String::new();
            BufReader::new(child.stdout.as_mut().unwrap())
                .read_line(&mut line)
                .unwrap();
            procs.0.push(child);
            let addr: Address = line
                .trim()
                .strip_prefix("LISTEN ")
                .unwrap_or_else(|| panic!("server {id}: no LISTEN line from {cmd:?}: {line:?}"))
                .parse()
                .unwrap();
            table.push(addr);
        }
        (procs, table)
    }
}

/// [`master_for_processes`] with the front-end listening on `addr` (e.g. `tcp://IP:0`, an
/// address of this network namespace the servers can reach) instead of loopback.
pub async fn master_for_processes_on(
    addr: &Address,
    table: &[Address],
    shape: Shape,
    policy: &ConnectPolicy,
    dial: ConnectPolicy,
) -> (Frontend, JoinHandle<()>, Arc<dyn Topology>) {
    let transport: Arc<dyn Transport> =
        Arc::from(transport_for(addr, &TransportConfig::default()).unwrap());
    let net = Net {
        transport,
        topo: Arc::from(shape.build(table.len() as u32)),
        table: Arc::new(table.iter().cloned().map(Some).collect()),
        policy: policy.clone(),
    };
    let (fe, master) = net.start_master(addr, Dial::Strict(dial)).await;
    (fe, master, net.topo)
}

/// The binary `name` of this package, in `target/<profile>/` above the running test.
///
/// # Panics
///
/// If it is not there (a test run without cargo building this package's binaries first).
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test knows its own path");
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("tests run from target/<profile>/deps")
        .join(name);
    assert!(
        path.is_file(),
        "{} is missing: run the tests through `cargo test -p sdm-e2e`",
        path.display()
    );
    path
}

/// [`binary`] as text, found once per process.
fn binary_str(cell: &'static OnceLock<String>, name: &str) -> &'static str {
    cell.get_or_init(|| binary(name).to_string_lossy().into_owned())
}

/// The `sdm` command under test (the daemons too: `sdm master`, `sdm server`).
pub fn sdm() -> &'static str {
    static P: OnceLock<String> = OnceLock::new();
    binary_str(&P, "sdm-e2e-cli")
}

/// The bare overlay node the overlay's tests run (see src/bin/sdm-testnode.rs).
pub fn testnode() -> &'static str {
    static P: OnceLock<String> = OnceLock::new();
    binary_str(&P, "sdm-testnode")
}

/// The program that feeds its counters through `sdm_client::counters::Client`.
pub fn counters_demo() -> &'static str {
    static P: OnceLock<String> = OnceLock::new();
    binary_str(&P, "sdm-counters-demo")
}

/// The server daemon of sdm-server's example `checksum_server` (stock services plus
/// `checksum`, built with `Server::builder`).
pub fn checksum_server() -> &'static str {
    static P: OnceLock<String> = OnceLock::new();
    binary_str(&P, "sdm-checksum-server")
}

/// Runs `sdm ARGS…`, asserts it succeeded (showing its output if not), and returns what
/// it printed on stdout.
pub fn sdm_ok<S: AsRef<OsStr>>(args: impl IntoIterator<Item = S>) -> String {
    sdm_ok_env(args, std::iter::empty::<(&str, &str)>())
}

/// [`sdm_ok`] with `envs` added to sdm's environment.
pub fn sdm_ok_env<S: AsRef<OsStr>, K: AsRef<OsStr>, V: AsRef<OsStr>>(
    args: impl IntoIterator<Item = S>,
    envs: impl IntoIterator<Item = (K, V)>,
) -> String {
    let out = Command::new(sdm())
        .args(args)
        .envs(envs)
        .output()
        .expect("running sdm");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// STAT's answer for tests/programs/mpi_hang.c stopped with `n` ranks, checked in the
/// lines `bt --classes` printed: two classes, the waiting ranks `[0-(n-2)]` through the
/// barrier called from `step`, and the last rank computing in `step`. `context` is shown on
/// failure.
pub fn assert_hung_job_classes(lines: &[&str], n: u32, context: &str) {
    assert!(hung_job_classes(lines, n), "{context}");
}

/// Whether `lines` show the hung job's two classes (see [`assert_hung_job_classes`]).
pub fn hung_job_classes(lines: &[&str], n: u32) -> bool {
    let last = n - 1;
    // The main threads' classes (MPI's own threads are classes of their own), frames by
    // function (`bt` names each `function at file:line`).
    let classes: Vec<String> = lines
        .iter()
        .filter(|l| l.contains("(representative"))
        .map(|l| functions_only(l))
        .filter(|l| l.split(" > ").any(|f| f == "main"))
        .collect();
    classes.len() == 2
        && classes[0].starts_with(&format!("[0-{}] (representative 0) ", last - 1))
        && classes[0].contains(" > main > step > ")
        && classes[0].contains("Barrier")
        && classes[1].starts_with(&format!("[{last}] (representative {last}) "))
        && classes[1].ends_with(" > main > step > compute")
}

/// A line of `bt --classes` with the frames by function only: `main at f.c:9 > step at
/// f.c:3` is `main > step`.
pub fn functions_only(line: &str) -> String {
    line.split(" > ")
        .map(|f| f.split(" at ").next().unwrap_or(f))
        .collect::<Vec<_>>()
        .join(" > ")
}

/// The processes whose parent is `parent` (from /proc).
pub fn children_of(parent: u32) -> Vec<u32> {
    sdm_server::mpir::children(parent)
}

/// Every process below `root` (its children, theirs, and so on), parents before children:
/// local servers are the children of one supervisor process the front-end started (see
/// `sdm_deploy::fork_copies`), not of the front-end itself.
pub fn descendants_of(root: u32) -> Vec<u32> {
    let mut out = children_of(root);
    let mut k = 0;
    while k < out.len() {
        let more = children_of(out[k]);
        out.extend(more);
        k += 1;
    }
    out
}

/// The pid of the server of rank `id` below `root` (a front-end): the parent of the
/// program it started, whose environment names the rank. (A local server's own
/// /proc/PID/environ does not: it is the supervisor's, from before it forked the server.)
pub fn server_of_rank(root: u32, id: u32) -> Option<u32> {
    let want = format!("SDM_ID={id}");
    descendants_of(root).into_iter().find_map(|pid| {
        let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let comm = stat.split_once(" (")?.1.rsplit_once(") ")?.0;
        if comm == "sdm" || !env.split(|&b| b == 0).any(|v| v == want.as_bytes()) {
            return None;
        }
        crate::procs::parent_of(pid)
    })
}

/// tests/programs/NAME.c built with `mpicc -O2 -g` once per test process (the MPI tests'
/// programs), in a directory of this process.
pub fn mpi_program(name: &str) -> PathBuf {
    mpi_program_with("mpicc", name)
}

/// tests/programs/NAME.c built with MPICH's `mpicc.mpich` (run under `mpiexec.hydra`).
pub fn mpich_program(name: &str) -> PathBuf {
    mpi_program_with("mpicc.mpich", name)
}

/// tests/programs/NAME.c built with the MPI compiler wrapper `compiler` (a name on PATH,
/// or a path: Open MPI 5's), once per test process and wrapper.
pub fn mpi_program_with(compiler: &str, name: &str) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let dir = DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("sdm-mpi-tests-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("a directory for the MPI programs");
        d
    });
    let out = match compiler {
        "mpicc" => dir.join(name),
        _ => dir.join(format!("{name}-{}", compiler.replace('/', "_"))),
    };
    let _one = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if !out.exists() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("programs")
            .join(format!("{name}.c"));
        run_ok(
            Command::new(compiler)
                .args(["-O2", "-g", "-Wall", "-o"])
                .arg(&out)
                .arg(&src),
        );
    }
    out
}

/// tests/programs/NAME.c built with `cc FLAGS` once per test process and set of flags, in a
/// directory of this process (the console and debugger tests' programs).
pub fn c_program(name: &str, flags: &[&str]) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let dir = DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("sdm-c-tests-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("a directory for the test programs");
        d
    });
    let tag: String = flags
        .concat()
        .chars()
        .filter(|c| c.is_alphanumeric())
        .collect();
    let out = dir.join(format!("{name}-{tag}"));
    let _one = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if !out.exists() {
        run_ok(
            Command::new("cc")
                .args(flags)
                .arg("-o")
                .arg(&out)
                .arg(program_source(name)),
        );
    }
    out
}

/// tests/programs/spinner.c with frame pointers and debug info: ranks that spin, or stop
/// at functions chosen by rank (the console and error tests' program).
pub fn spinner() -> PathBuf {
    c_program("spinner", &["-O0", "-g", "-fno-omit-frame-pointer"])
}

/// tests/programs/NAME.c.
pub fn program_source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("programs")
        .join(format!("{name}.c"))
}

/// The line number of tests/programs/NAME.c holding `marker`.
pub fn source_line(name: &str, marker: &str) -> u32 {
    let src = program_source(name);
    let text = std::fs::read_to_string(&src).expect("the test program's source");
    text.lines()
        .position(|l| l.contains(marker))
        .map(|i| i as u32 + 1)
        .unwrap_or_else(|| panic!("no {marker} in {}", src.display()))
}

/// A tree of sixteen servers, one per rank, every one ready.
pub async fn sixteen_servers() -> sdm_client::session::Session {
    use sdm_client::session::{Session, SessionOptions};
    let opts = SessionOptions {
        n: 16,
        ranks_per_server: Some(1),
        program: Some(sdm().into()),
        ..SessionOptions::default()
    };
    let s = Session::launch(&opts, |_| {}).await.unwrap();
    assert_eq!(s.report().ready, IdSet::all(16));
    s
}

/// Kills server `id` of `s` outright (SIGKILL), as a crash would.
pub fn kill9(s: &sdm_client::session::Session, id: u32) {
    let pid = s
        .report()
        .processes
        .iter()
        .find(|(i, _, _)| *i == id)
        .map(|(_, _, pid)| *pid)
        .expect("in the process table");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
}

/// `n` ranks of `program` (no arguments, on pipes) started and running under a console,
/// one server per host; every rank ready and started. Returns the console and the ranks'
/// pids, in rank order.
pub async fn running_console(n: u32, program: &Path) -> (sdm::console::Console, Vec<u32>) {
    use sdm_client::session::{Session, SessionOptions};
    let opts = SessionOptions {
        n,
        program: Some(sdm().into()),
        ..SessionOptions::default()
    };
    let s = Session::launch(&opts, |_| {}).await.unwrap();
    assert_eq!(s.report().ready, IdSet::all(n));
    let mut c = sdm::console::Console::new(s, false);
    let started = c
        .start_program(program.to_str().unwrap(), &[], "pipes")
        .await
        .unwrap();
    assert!(
        started
            .iter()
            .all(|l| l.status == Status::Replied && l.started()),
        "{started:?}"
    );
    let pids = started
        .iter()
        .map(|l| match l.reply.as_ref().and_then(|r| r.results.first()) {
            Some(sdm_omis::Value::Int(pid)) => *pid as u32,
            other => panic!("no pid from {}: {other:?}", l.ids),
        })
        .collect();
    (c, pids)
}

/// Runs the console command `cmd` (asserting the console goes on) and returns what it printed.
pub async fn console_command(c: &mut sdm::console::Console, cmd: &str) -> String {
    let mut out = Vec::new();
    let flow = c.command(cmd, &mut out).await.expect("console command");
    assert!(
        matches!(flow, sdm::console::Flow::Continue { .. }),
        "{cmd}: {flow:?}"
    );
    String::from_utf8(out).expect("console output is UTF-8")
}

/// What `n` sends upward: its own leaf and its children's groups, folded and flushed once.
fn fold_node(
    reg: &Registry,
    spec: &str,
    t: &dyn Topology,
    n: NodeId,
    leaves: &[Vec<u8>],
) -> Vec<Group> {
    let mut f = reg.create(spec).unwrap();
    if let Some(s) = n.server() {
        f.fold(&leaves[s as usize], &IdSet::single(s)).unwrap();
    }
    for c in t.children(n) {
        for g in fold_node(reg, spec, t, c, leaves) {
            f.fold(&g.payload, &g.sources).unwrap();
        }
    }
    f.flush().unwrap()
}

/// Folds `leaves` (server `i` replied `leaves[i]`) through `shape` with filter `spec`, one
/// fresh filter per node; `finish` at the front-end when `finish` is set, else `flush`.
pub fn through_tree(
    reg: &Registry,
    spec: &str,
    shape: Shape,
    leaves: &[Vec<u8>],
    finish: bool,
) -> Vec<Group> {
    let topo = shape.build(leaves.len() as u32);
    let mut fe = reg.create(spec).unwrap();
    for g in fold_node(reg, spec, &*topo, NodeId::Master, leaves) {
        fe.fold(&g.payload, &g.sources).unwrap();
    }
    if finish {
        fe.finish().unwrap()
    } else {
        fe.flush().unwrap()
    }
}

/// The filters crate's folder: its include/ holds `sdm_filter.h`, its examples/ the example
/// plugins the tests build.
pub fn filters_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../filters")
}

/// The sdm-server crate's directory (its `include/sdm_service.h`, its examples).
pub fn server_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../server")
}

/// Runs `cmd`; panics with its standard error if it cannot run or fails.
pub fn run_ok(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds the C filter plugin `src` (with extra compiler `flags`) into the shared library
/// `out`, with `cc` (or `$CC`) against the filters crate's `sdm_filter.h`.
pub fn build_c_plugin(src: &Path, flags: &[&str], out: &Path) {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    run_ok(
        Command::new(cc)
            .args(["-shared", "-fPIC", "-Wall", "-Werror", "-std=c11", "-I"])
            .arg(filters_dir().join("include"))
            .args(flags)
            .arg(src)
            .arg("-o")
            .arg(out),
    );
}
