//! Criterion micro-benchmarks of the overlay's hot paths: id-set encoding, routing a
//! broadcast at the root, merging replies at one node, and framing an envelope.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use bytes::BytesMut;
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use sdm_overlay::Node;
use sdm_proto::{FrameCodec, IdSet, Message, Status, SyncMode};
use sdm_topology::{NodeId, Shape, Topology};
use tokio_util::codec::{Decoder, Encoder};

fn idset(c: &mut Criterion) {
    let all = IdSet::all(1_000_000);
    let sparse: IdSet = (0..1_000_000).step_by(3).collect();
    c.bench_function("idset/serialize_1M_range", |b| {
        b.iter(|| black_box(&all).to_bytes())
    });
    c.bench_function("idset/serialize_333k_sparse", |b| {
        b.iter(|| black_box(&sparse).to_bytes())
    });
    let bytes = all.to_bytes();
    c.bench_function("idset/deserialize_1M_range", |b| {
        b.iter(|| IdSet::from_bytes(black_box(&bytes)).unwrap())
    });
}

fn route(c: &mut Criterion) {
    let t = Shape::Binomial.build(1_000_000);
    let all = IdSet::all(1_000_000);
    c.bench_function("route/binomial_1M_root", |b| {
        b.iter(|| t.route(NodeId::Master, black_box(&all)))
    });
    let k = Shape::KAry(8).build(1_000_000);
    c.bench_function("route/kary8_1M_root", |b| {
        b.iter(|| k.route(NodeId::Master, black_box(&all)))
    });
}

/// The master of a flat 64-server tree: a command with `filter`, then one reply per server
/// (`payload(s)`), until the merged groups go up.
fn merge_at_master(c: &mut Criterion, name: &str, filter: &str, payload: fn(u32) -> Bytes) {
    let topo: Arc<dyn Topology> = Arc::from(Shape::Flat.build(64));
    let replies: Vec<Message> = (0..64)
        .map(|s| Message::reply(1, IdSet::single(s), Status::Replied, payload(s)))
        .collect();
    let mut cmd = Message::command(1, IdSet::all(64), SyncMode::WaitAll, "q");
    cmd.aggregate.filter = filter.into();
    c.bench_function(name, |b| {
        b.iter(|| {
            let now = Instant::now();
            let mut n = Node::new(NodeId::Master, topo.clone());
            n.handle_from_parent(now, cmd.clone());
            while n.poll_output().is_some() {}
            for (s, r) in replies.iter().enumerate() {
                n.handle_from_child(now, NodeId::Server(s as u32), r.clone());
            }
            let mut groups = 0;
            while n.poll_output().is_some() {
                groups += 1;
            }
            groups
        })
    });
}

fn merge(c: &mut Criterion) {
    merge_at_master(c, "node/merge_64_identical", "", |_| {
        Bytes::from_static(b"same reply")
    });
    // 64 groups: the identical merge must not go quadratic or copy much.
    merge_at_master(c, "node/merge_64_distinct", "", |s| {
        Bytes::from(format!("{s:>64}"))
    });
    merge_at_master(c, "node/merge_64_sum", "sum", |s| {
        Bytes::from(s.to_string())
    });
}

/// One frame through [`FrameCodec`] each way: a broadcast command to a million servers
/// with a small payload and with a 1 KiB one, and a merged reply.
fn frame(c: &mut Criterion) {
    let cases = [
        (
            "small",
            Message::command(7, IdSet::all(1_000_000), SyncMode::WaitAll, "ping"),
        ),
        (
            "1k",
            Message::command(
                7,
                IdSet::all(1_000_000),
                SyncMode::WaitAll,
                vec![b'x'; 1024],
            ),
        ),
        (
            "reply",
            Message::reply(
                7,
                IdSet::range(0..=4095),
                Status::Replied,
                Bytes::from_static(b"ok"),
            ),
        ),
    ];
    for (name, msg) in cases {
        let mut codec = FrameCodec::default();
        let mut buf = BytesMut::with_capacity(4096);
        c.bench_function(&format!("frame/encode_{name}"), |b| {
            b.iter(|| {
                buf.clear();
                codec.encode(black_box(&msg), &mut buf).unwrap();
                buf.len()
            })
        });
        buf.clear();
        codec.encode(&msg, &mut buf).unwrap();
        let wire = buf.clone();
        // The frame's copy is made, and the message dropped, outside the timing: what is
        // timed is the decode alone.
        c.bench_function(&format!("frame/decode_{name}"), |b| {
            b.iter_batched(
                || wire.clone(),
                |mut src| codec.decode(black_box(&mut src)).unwrap().unwrap(),
                BatchSize::SmallInput,
            )
        });
    }
}

criterion_group!(benches, idset, route, merge, frame);
criterion_main!(benches);
