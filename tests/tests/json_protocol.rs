//! Routing is independent of the payload: a protocol that is not OMIS (length-prefixed
//! JSON, with a NUL and binary bytes in it) rides the same overlay unchanged, and identical
//! answers still merge.

use sdm_e2e as support;

use bytes::{BufMut, Bytes, BytesMut};
use sdm_overlay::driver::Delivery;
use sdm_proto::{IdSet, Status, SyncMode};
use sdm_topology::Shape;

/// 4-byte big-endian length, then JSON.
fn frame(v: &serde_json::Value) -> Bytes {
    let body = serde_json::to_vec(v).unwrap();
    let mut b = BytesMut::new();
    b.put_u32(body.len() as u32);
    b.put_slice(&body);
    b.freeze()
}

fn unframe(b: &[u8]) -> serde_json::Value {
    let len = u32::from_be_bytes(b[..4].try_into().unwrap()) as usize;
    assert_eq!(len, b.len() - 4, "length prefix survived the trip");
    serde_json::from_slice(&b[4..]).unwrap()
}

fn json_server(id: u32, d: Delivery) {
    let req = unframe(&d.payload);
    let reply = match req["op"].as_str() {
        Some("echo") => serde_json::json!({"echo": req["data"]}),
        Some("parity") => serde_json::json!({"odd": id % 2 == 1}),
        _ => serde_json::json!({"error": "unknown op"}),
    };
    d.reply.send(frame(&reply));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn length_prefixed_json_rides_the_overlay_unchanged() {
    let mut t = support::tree_with("tcp", 12, Shape::KAry(3), json_server).await;
    let all = IdSet::all(12);
    let data = "nul:\u{0}, tab:\t, quote:\", utf8: ünïcødé";
    let g = t
        .frontend
        .request(
            &all,
            SyncMode::WaitAll,
            frame(&serde_json::json!({"op": "echo", "data": data})),
        )
        .await
        .unwrap();
    assert_eq!(g.len(), 1, "identical JSON answers merge: {g:?}");
    assert_eq!(g[0].status, Status::Replied);
    assert_eq!(g[0].sources, all);
    assert_eq!(unframe(&g[0].payload)["echo"], data);

    let g = t
        .frontend
        .request(
            &all,
            SyncMode::WaitAll,
            frame(&serde_json::json!({"op": "parity"})),
        )
        .await
        .unwrap();
    assert_eq!(g.len(), 2);
    for grp in g {
        let odd = unframe(&grp.payload)["odd"].as_bool().unwrap();
        let expect: IdSet = (0..12).filter(|i| (i % 2 == 1) == odd).collect();
        assert_eq!(grp.sources, expect);
    }
    t.master.abort();
}
