//! sdm-testnode: one bare overlay server (no monitor, no OMIS) as a real OS process, for the
//! overlay's end-to-end tests. Prints `LISTEN <address>`, reads the routing table from stdin.
//!
//! Protocol with the test harness: the process binds `--listen`, prints `LISTEN <addr>` on
//! stdout, then reads one line from stdin holding every server's address separated by
//! spaces (server 0 first). It connects to its children, accepts its parent, and runs until
//! the parent link ends (with `--recover`, re-attaching to a live ancestor if the parent dies, and adopting
//! orphans below it, see `sdm_overlay::setup::recovery`; not to the master, whose address it
//! does not know). Commands: `sleep MS` answers `ok` after MS ms, `id` answers the
//! server's id, anything else answers `ok`.

use std::io::{BufRead, Write};
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use sdm_overlay::Node;
use sdm_overlay::driver;
use sdm_overlay::setup::SessionKey;
use sdm_overlay::setup::{self, ConnectPolicy};
use sdm_overlay::transport::{Address, SessionTls, TransportConfig, transport_for};
use sdm_topology::{NodeId, Shape, Topology};

#[derive(Parser, Debug)]
#[command(about = "one sdm overlay server for tests")]
struct Args {
    /// This server's id.
    #[arg(long)]
    id: u32,
    /// Number of servers in the tree.
    #[arg(long)]
    servers: u32,
    /// Tree shape.
    #[arg(long, default_value = "binomial")]
    topology: Shape,
    /// Where to listen (port 0 picks one).
    #[arg(long, default_value = "tcp://127.0.0.1:0")]
    listen: Address,
    /// Recover like the sdm daemons: adopt orphans, re-attach to a live ancestor when the
    /// parent dies (off by default, so a test sees a dead node's whole subtree lost).
    #[arg(long)]
    recover: bool,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    sdm_server::logging::init("error");
    let args = Args::parse();
    anyhow::ensure!(
        args.id < args.servers,
        "--id {} is not below --servers {}",
        args.id,
        args.servers
    );
    let mut cfg = TransportConfig::default();
    if let Ok(pem) = std::env::var("SDM_SESSION_TLS") {
        cfg.tls = Some(SessionTls::from_pem(&pem).context("SDM_SESSION_TLS")?);
    }
    let transport = transport_for(&args.listen, &cfg)?;
    let mut listener = transport.bind(&args.listen).await?;
    println!("LISTEN {}", listener.local_addr());
    std::io::stdout().flush()?;
    let line = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line).map(|_| line)
    })
    .await??;
    let table: Vec<Option<Address>> = line
        .split_whitespace()
        .map(|a| a.parse().map(Some))
        .collect::<Result<_, _>>()
        .context("routing table on stdin")?;
    anyhow::ensure!(
        table.len() == args.servers as usize,
        "routing table has {} entries, expected {}",
        table.len(),
        args.servers
    );
    let topo: Arc<dyn Topology> = Arc::from(args.topology.build(args.servers));
    let me = NodeId::Server(args.id);
    let policy = ConnectPolicy::new(SessionKey::from_env()?);
    let (children, parent) = tokio::join!(
        setup::connect_children(&*transport, &*topo, me, &table, &policy),
        setup::accept_parent(&mut *listener, me, &policy),
    );
    let parent = parent.context("accepting the parent")?;
    let id = args.id;
    // With --recover, like the sdm daemons: the listener takes orphans re-attaching, and
    // a dead parent is replaced by the nearest live ancestor.
    let recovery = if args.recover {
        setup::recovery(
            me,
            &*topo,
            &table,
            None,
            Arc::from(transport),
            &policy,
            Some(listener),
        )
    } else {
        driver::Recovery::default()
    };
    let options = driver::Options {
        recovery,
        ..driver::Options::default()
    };
    driver::run_node(
        Node::new(me, topo),
        parent,
        children,
        Box::new(move |d| sdm_e2e::answer(id, d)),
        options,
    )
    .await;
    Ok(())
}
