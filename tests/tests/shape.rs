//! Tree-shape independence of every built-in filter: the same leaf payloads folded bottom-up
//! through binomial, k-ary, k-nomial and flat trees (with random partial waves and child
//! orders) give bit-identical results at the front-end, equal to one filter over all leaves.

use proptest::prelude::*;
use sdm_filters::{Filter, Group, IdSet, Registry};
use sdm_topology::{NodeId, Shape, Topology};

/// A small deterministic generator for child orders and flush points.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = (self.next() % (i as u64 + 1)) as usize;
            v.swap(i, j);
        }
    }
}

/// Checks the accounting contract: disjoint sources whose union is `want`.
fn check_accounting(spec: &str, groups: &[Group], want: &IdSet) {
    let mut seen = IdSet::new();
    for g in groups {
        assert!(seen.is_disjoint(&g.sources), "{spec}: overlapping groups");
        seen.union_with(&g.sources);
    }
    assert_eq!(&seen, want, "{spec}: groups do not account for every id");
}

/// What `node` sends upward: its own reply and its children's groups, folded, flushed in
/// one wave or (with `partial`) at random points.
fn node_output(
    reg: &Registry,
    spec: &str,
    topo: &dyn Topology,
    node: NodeId,
    leaves: &[Vec<u8>],
    rng: &mut Rng,
    partial: bool,
) -> Vec<Group> {
    let mut f = reg.create(spec).unwrap();
    let mut inputs: Vec<Group> = Vec::new();
    if let Some(s) = node.server() {
        inputs.push(Group::new(leaves[s as usize].clone(), IdSet::single(s)));
    }
    let mut children = topo.children(node);
    rng.shuffle(&mut children);
    for c in children {
        inputs.extend(node_output(reg, spec, topo, c, leaves, rng, partial));
    }
    rng.shuffle(&mut inputs);
    let mut out = Vec::new();
    let mut pending = IdSet::new();
    for g in &inputs {
        f.fold(&g.payload, &g.sources)
            .unwrap_or_else(|e| panic!("{spec} on {}: {e}", topo.name()));
        pending.union_with(&g.sources);
        if partial && rng.next().is_multiple_of(3) {
            let flushed = f.flush().unwrap();
            check_accounting(spec, &flushed, &pending);
            pending = IdSet::new();
            out.extend(flushed);
        }
    }
    let flushed = f.flush().unwrap();
    check_accounting(spec, &flushed, &pending);
    out.extend(flushed);
    out
}

/// The front-end: folds what the master sends and finishes.
fn through_tree(
    spec: &str,
    shape: &Shape,
    leaves: &[Vec<u8>],
    seed: u64,
    partial: bool,
) -> Vec<Group> {
    let reg = Registry::new();
    let topo = shape.build(leaves.len() as u32);
    let mut rng = Rng(seed | 1);
    let up = node_output(
        &reg,
        spec,
        &*topo,
        NodeId::Master,
        leaves,
        &mut rng,
        partial,
    );
    let mut fe = reg.create(spec).unwrap();
    for g in &up {
        fe.fold(&g.payload, &g.sources).unwrap();
    }
    let out = fe.finish().unwrap();
    check_accounting(spec, &out, &IdSet::all(leaves.len() as u32));
    out
}

/// One filter over every leaf, in id order.
fn direct(spec: &str, leaves: &[Vec<u8>]) -> Vec<Group> {
    let mut f: Box<dyn Filter> = Registry::new().create(spec).unwrap();
    for (i, p) in leaves.iter().enumerate() {
        f.fold(p, &IdSet::single(i as u32)).unwrap();
    }
    f.finish().unwrap()
}

fn shapes() -> [Shape; 5] {
    [
        Shape::Binomial,
        Shape::KAry(2),
        Shape::Flat,
        Shape::KAry(3),
        Shape::KNomial(4),
    ]
}

fn assert_shape_independent(spec: &str, leaves: &[Vec<u8>], seed: u64) {
    let want = direct(spec, leaves);
    for shape in shapes() {
        for partial in [false, true] {
            let got = through_tree(spec, &shape, leaves, seed, partial);
            assert_eq!(
                got, want,
                "{spec} through {shape} (partial waves: {partial})"
            );
        }
    }
}

// Leaf payload strategies.

fn decimal_text() -> impl Strategy<Value = Vec<u8>> {
    (any::<i64>(), 0u32..=6, 0u8..4).prop_map(|(m, s, form)| {
        let m = i128::from(m >> 8);
        let d = sdm_filters::Decimal::new(m, s).unwrap();
        match form {
            0 => d.to_string(),
            1 => format!(" {d}\n"),
            2 => format!("{m}e-{s}"),
            _ => format!(
                "{d}{}",
                if s > 0 && !d.to_string().contains('.') {
                    ".0"
                } else {
                    ""
                }
            ),
        }
        .into_bytes()
    })
}

fn small_decimal() -> impl Strategy<Value = String> {
    (-5i64..5, 0u32..=2)
        .prop_map(|(m, s)| sdm_filters::Decimal::new(m.into(), s).unwrap().to_string())
}

fn key_map() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::btree_map(
            prop::sample::select(vec!["cpu", "rss", "io"]),
            small_decimal(),
            0..3,
        ),
        any::<bool>(),
    )
        .prop_map(|(m, json)| {
            if json {
                serde_json::to_vec(&m).unwrap()
            } else {
                m.iter()
                    .map(|(k, v)| format!("{k} {v}\n"))
                    .collect::<String>()
                    .into_bytes()
            }
        })
}

fn text_lines(
    alphabet: Vec<&'static str>,
    sep: &'static str,
    max: usize,
) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(alphabet), 0..max)
        .prop_map(move |v| v.join(sep).into_bytes())
}

fn stack_traces() -> impl Strategy<Value = Vec<u8>> {
    let trace = prop::collection::vec(
        prop::sample::select(vec!["main", "solve", "MPI_Wait", "io", "poll"]),
        1..5,
    )
    .prop_map(|v| v.join(";"));
    prop::collection::vec(trace, 0..3).prop_map(|v| v.join("\n").into_bytes())
}

fn any_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::sample::select(vec![&b"a"[..], b"b", b"", b"\xff\x00"]).prop_map(<[u8]>::to_vec),
        prop::collection::vec(any::<u8>(), 0..6),
    ]
}

fn statement_records() -> impl Strategy<Value = Vec<u8>> {
    let rec = (0u8..3, 1u32..4, 0u32..3, 0u64..4, 0u64..1000, 0u64..50).prop_map(
        |(ev, line, extra, count, t, sync)| {
            let (event, caller, dest) = match ev {
                0 => ("proc", Some(extra), None),
                1 => ("loop", None, None),
                _ => ("comm", None, Some(extra)),
            };
            serde_json::json!({"event": event, "line": line, "caller": caller, "dest": dest,
                               "count": count, "time_ns": t, "sync_delay_ns": sync})
        },
    );
    prop::collection::vec(rec, 0..4).prop_map(|v| {
        // One record per key per process, as a monitor would keep them.
        let mut seen = std::collections::BTreeSet::new();
        let v: Vec<_> = v
            .into_iter()
            .filter(|r| {
                seen.insert((
                    r["event"].to_string(),
                    r["line"].to_string(),
                    r["caller"].to_string(),
                    r["dest"].to_string(),
                ))
            })
            .collect();
        serde_json::to_vec(&v).unwrap()
    })
}

fn counter_rows() -> impl Strategy<Value = Vec<u8>> {
    (
        0u64..3,
        0u64..3,
        prop::sample::select(vec![100u64, 2_000_000_000_000]),
    )
        .prop_map(|(a, b, c)| {
            sdm_filters::builtin::MtfRankStats {
                init: 1,
                fin: 1,
                isend: a,
                irecv: b,
                bytes_sent: c * a,
                ..Default::default()
            }
            .to_payload()
            .to_vec()
        })
}

fn leaves<S: Strategy<Value = Vec<u8>>>(s: S) -> impl Strategy<Value = (Vec<Vec<u8>>, u64)> {
    (prop::collection::vec(s, 1..300), any::<u64>())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn identical((l, seed) in leaves(any_bytes())) { assert_shape_independent("identical", &l, seed); }

    #[test]
    fn sum((l, seed) in leaves(decimal_text())) { assert_shape_independent("sum", &l, seed); }

    #[test]
    fn min((l, seed) in leaves(decimal_text())) { assert_shape_independent("min", &l, seed); }

    #[test]
    fn max((l, seed) in leaves(decimal_text())) { assert_shape_independent("max", &l, seed); }

    #[test]
    fn mean((l, seed) in leaves(decimal_text())) { assert_shape_independent("mean", &l, seed); }

    #[test]
    fn count((l, seed) in leaves(any_bytes())) { assert_shape_independent("count", &l, seed); }

    #[test]
    fn histogram((l, seed) in leaves(decimal_text())) {
        assert_shape_independent("histogram:-1000000000:1000000000:7", &l, seed);
    }

    #[test]
    fn concat((l, seed) in leaves(any_bytes())) { assert_shape_independent("concat", &l, seed); }

    #[test]
    fn stats((l, seed) in leaves(key_map())) { assert_shape_independent("stats", &l, seed); }

    #[test]
    fn stacktrace((l, seed) in leaves(stack_traces())) { assert_shape_independent("stacktrace", &l, seed); }

    #[test]
    fn lines((l, seed) in leaves(text_lines(vec!["start", "step 1", "warning", ""], "\n", 5))) {
        assert_shape_independent("lines", &l, seed);
    }

    #[test]
    fn counters((l, seed) in leaves(counter_rows())) { assert_shape_independent("counters", &l, seed); }

    #[test]
    fn statements((l, seed) in leaves(statement_records())) { assert_shape_independent("statements", &l, seed); }
}

/// The flushed (not finished) records are shape independent too, byte for byte.
#[test]
fn flushed_records_are_canonical() {
    let leaves: Vec<Vec<u8>> = (0..97u32)
        .map(|i| {
            format!(
                "main;solve;{}\n",
                if i % 7 == 0 { "io" } else { "MPI_Wait" }
            )
            .into_bytes()
        })
        .collect();
    let reg = Registry::new();
    let mut want: Option<Vec<Group>> = None;
    for shape in shapes() {
        let topo = shape.build(leaves.len() as u32);
        let up = node_output(
            &reg,
            "stacktrace",
            &*topo,
            NodeId::Master,
            &leaves,
            &mut Rng(7),
            true,
        );
        let mut fe = reg.create("stacktrace").unwrap();
        for g in &up {
            fe.fold(&g.payload, &g.sources).unwrap();
        }
        let got = fe.flush().unwrap();
        match &want {
            None => want = Some(got),
            Some(w) => assert_eq!(&got, w, "{shape}"),
        }
    }
}
