//! The link handshake over real tcp: a stranger without the session key, a parent looking
//! for another id, and a peer that sends garbage are refused; each costs only its own
//! connection and the rightful parent still gets in.

use std::time::Duration;

use futures::SinkExt;
use sdm_overlay::LinkErrorKind;
use sdm_overlay::setup::SessionKey;
use sdm_overlay::setup::{self, ConnectPolicy};
use sdm_overlay::transport::{Address, TransportConfig, transport_for};
use sdm_proto::{IdSet, Message, SyncMode};
use sdm_topology::NodeId;

fn quick(key: SessionKey) -> ConnectPolicy {
    ConnectPolicy {
        attempts: 1,
        handshake_timeout: Duration::from_secs(2),
        ..ConnectPolicy::new(key)
    }
}

#[tokio::test]
async fn strangers_and_wrong_ids_are_refused() {
    let addr: Address = "tcp://127.0.0.1:0".parse().unwrap();
    let t = transport_for(&addr, &TransportConfig::default()).unwrap();
    let mut listener = t.bind(&addr).await.unwrap();
    let at = listener.local_addr();
    let key = SessionKey::generate();
    let good = quick(key.clone());
    let accept = {
        let good = good.clone();
        tokio::spawn(async move {
            let link = setup::accept_parent(&mut *listener, NodeId::Server(5), &good).await;
            link.map(|l| l.peer)
        })
    };

    // Garbage first frame.
    let mut raw = t.connect(&at).await.unwrap();
    raw.writer
        .send(&Message::command(
            1,
            IdSet::all(3),
            SyncMode::WaitAll,
            "not a hello",
        ))
        .await
        .unwrap();

    // A stranger with another key cannot prove it, and learns nothing that helps.
    let stranger = quick(SessionKey::generate());
    let e = setup::connect_child(&*t, &at, NodeId::Master, NodeId::Server(5), &stranger)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), LinkErrorKind::AuthFailed, "{e}");
    assert_eq!(e.peer(), at.to_string(), "the error names the address");

    // The right key but the wrong id: refused by name.
    let e = setup::connect_child(&*t, &at, NodeId::Master, NodeId::Server(6), &good)
        .await
        .unwrap_err();
    assert!(e.is_wrong_peer(), "{e}");

    // The rightful parent gets in.
    setup::connect_child(&*t, &at, NodeId::Master, NodeId::Server(5), &good)
        .await
        .unwrap();
    assert!(accept.await.unwrap().is_ok());
}

#[tokio::test]
async fn probing_finds_the_child_on_a_later_port() {
    let key = SessionKey::generate();
    let policy = ConnectPolicy {
        probe_span: 8,
        ..quick(key)
    };
    let t = transport_for(
        &"tcp://127.0.0.1:0".parse().unwrap(),
        &TransportConfig::default(),
    )
    .unwrap();
    // Three servers on consecutive ports of one host; we look for the third from the first.
    let mut ls = Vec::new();
    let mut base = 0u16;
    'find: for start in (20000u16..60000).step_by(97) {
        ls.clear();
        for k in 0..3 {
            let a: Address = format!("tcp://127.0.0.1:{}", start + k).parse().unwrap();
            match t.bind(&a).await {
                Ok(l) => ls.push(l),
                Err(_) => continue 'find,
            }
        }
        base = start;
        break;
    }
    assert_eq!(ls.len(), 3, "no three free consecutive ports");
    let mut tasks = Vec::new();
    for (id, mut l) in ls.into_iter().enumerate() {
        let p = policy.clone();
        tasks.push(tokio::spawn(async move {
            setup::accept_parent(&mut *l, NodeId::Server(id as u32 + 10), &p)
                .await
                .is_ok()
        }));
    }
    let first: Address = format!("tcp://127.0.0.1:{base}").parse().unwrap();
    setup::connect_child(&*t, &first, NodeId::Master, NodeId::Server(12), &policy)
        .await
        .unwrap();
    assert!(tasks.pop().unwrap().await.unwrap());
    for t in tasks {
        t.abort();
    }
}
