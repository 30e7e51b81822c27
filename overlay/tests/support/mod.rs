//! Shared harness for the overlay's end-to-end tests: builds trees of real nodes, in-process
//! over any transport or as real OS processes, and checks reply groups.

#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::time::Duration;

use sdm_overlay::Node;
use sdm_overlay::auth::SessionKey;
use sdm_overlay::driver::{self, Delivery};
use sdm_overlay::frontend::{Frontend, ReplyGroup};
use sdm_overlay::setup::{self, ConnectPolicy};
use sdm_overlay::transport::{Address, SessionTls, Transport, TransportConfig, transport_for};
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
    pub frontend: Frontend,
    pub servers: Vec<JoinHandle<()>>,
    pub master: JoinHandle<()>,
    pub topo: Arc<dyn Topology>,
}

fn listen_addr(scheme: &str) -> Address {
    match scheme {
        "mem" => "mem://auto".parse().unwrap(),
        s => format!("{s}://127.0.0.1:0").parse().unwrap(),
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
    let addr = listen_addr(scheme);
    let transport: Arc<dyn Transport> = Arc::from(transport_for(&addr, &cfg).unwrap());
    let topo: Arc<dyn Topology> = Arc::from(shape.build(n));
    let mut listeners = Vec::new();
    for _ in 0..n {
        listeners.push(transport.bind(&addr).await.unwrap());
    }
    let table: Arc<Vec<Option<Address>>> =
        Arc::new(listeners.iter().map(|l| Some(l.local_addr())).collect());
    let policy = ConnectPolicy::new(SessionKey::generate());
    let mut servers = Vec::new();
    for (id, mut listener) in listeners.into_iter().enumerate() {
        let (transport, topo, table, policy) = (
            transport.clone(),
            topo.clone(),
            table.clone(),
            policy.clone(),
        );
        servers.push(tokio::spawn(async move {
            let me = NodeId::Server(id as u32);
            let (children, parent) = tokio::join!(
                setup::connect_children(&*transport, &*topo, me, &table, &policy),
                setup::accept_parent(&mut *listener, me, &policy),
            );
            let parent = parent.unwrap();
            let handler = Box::new(move |d| handler(id as u32, d));
            driver::run_node(Node::new(me, topo), parent, children, handler)
                .await
                .unwrap();
        }));
    }
    let mut fe_listener = transport.bind(&addr).await.unwrap();
    let fe_addr = fe_listener.local_addr();
    let master = {
        let (transport, topo, table, policy) = (
            transport.clone(),
            topo.clone(),
            table.clone(),
            policy.clone(),
        );
        tokio::spawn(async move {
            let children =
                setup::connect_children(&*transport, &*topo, NodeId::Master, &table, &policy).await;
            let up = setup::connect_frontend(&*transport, &fe_addr, &policy)
                .await
                .unwrap();
            let handler = Box::new(|_d: Delivery| unreachable!("the master delivers nothing"));
            driver::run_node(Node::new(NodeId::Master, topo), up, children, handler)
                .await
                .unwrap();
        })
    };
    let frontend = Frontend::accept_master(&mut *fe_listener, &policy)
        .await
        .unwrap();
    Tree {
        frontend,
        servers,
        master,
        topo,
    }
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
