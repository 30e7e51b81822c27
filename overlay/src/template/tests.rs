//! Property tests of the templated merge: whatever the values, the tree's shape and the
//! order lines are folded in, the template's ranges cover (exactly) every value merged
//! into it, every rank is accounted for once (in the template or one outlier line), and
//! the fold's result is the same.

use std::cmp::Ordering;

use proptest::prelude::*;
use sdm_proto::IdSet;

use super::lines as rendered;
use super::number::cmp;
use super::*;

/// A decimal value's text: an integer, a decimal or an exponent, sometimes far out.
fn decimal() -> impl Strategy<Value = String> {
    prop_oneof![
        (0i64..20).prop_map(|v| v.to_string()),
        (-5000i64..5000).prop_map(|v| format!("{}.{:02}", v / 100, (v % 100).abs())),
        (1u32..9, 1u32..5).prop_map(|(m, e)| format!("{m}.5e-{e}")),
        (100_000i64..1_000_000).prop_map(|v| v.to_string()),
    ]
}

fn hex() -> impl Strategy<Value = String> {
    (0u64..64).prop_map(|v| format!("7f{v:06x}"))
}

/// Words between slots.
const SEP: [&str; 4] = ["at", "took", "s", "of"];

/// A template of 1 to 3 slots and, per rank, its values.
fn lines() -> impl Strategy<Value = (Key, Vec<Vec<String>>)> {
    prop::collection::vec(prop::bool::weighted(0.2), 1..4).prop_flat_map(|hexes| {
        let n = hexes.len();
        let kinds: Vec<SlotKind> = hexes
            .iter()
            .map(|&h| if h { SlotKind::Hex } else { SlotKind::Dec })
            .collect();
        let value = hexes
            .iter()
            .map(|&h| if h { hex().boxed() } else { decimal().boxed() })
            .collect::<Vec<_>>();
        let key = Key {
            segs: (0..=n)
                .map(|i| match (i, kinds.get(i)) {
                    (_, Some(SlotKind::Hex)) => format!(" {} 0x", SEP[i]).into(),
                    (0, _) => "".into(),
                    _ => format!(" {} ", SEP[i]).into(),
                })
                .collect(),
            kinds,
        };
        (Just(key), prop::collection::vec(value, 1..48))
    })
}

/// Folds the single lines in the order and tree shape `cuts` picks, through the wire at
/// every step (as interior nodes do).
fn fold_tree(mut items: Vec<Group>, cuts: &[u16]) -> Group {
    fn go(items: &mut Vec<Group>, cuts: &[u16], depth: usize) -> Group {
        if items.len() == 1 {
            return items.pop().unwrap();
        }
        let c = usize::from(cuts[depth % cuts.len()]);
        let at = 1 + c % (items.len() - 1);
        let mut right = items.split_off(at);
        let (a, b) = (go(items, cuts, depth + 1), go(&mut right, cuts, depth + 7));
        let (mut a, b) = if c % 2 == 0 { (a, b) } else { (b, a) };
        let wire = |g: &Group| decode(&encode(1, g), &g.ranks).unwrap().1;
        a = wire(&a);
        a.merge(wire(&b));
        a
    }
    go(&mut items, cuts, 0)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn ranges_cover_every_rank_once_whatever_the_fold(
        (key, values) in lines(),
        perm in prop::collection::vec(any::<u32>(), 48),
        cuts in prop::collection::vec(any::<u16>(), 1..16),
    ) {
        let n = values.len();
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&r| perm[r]);
        let single = |r: usize| {
            let v = values[r].iter().map(|s| s.as_str().into()).collect();
            Group::single(key.clone(), v, IdSet::single(r as u32))
        };
        let shuffled = fold_tree(order.iter().map(|&r| single(r)).collect(), &cuts);
        let mut in_order = single(0);
        for r in 1..n {
            in_order.merge(single(r));
        }
        // The same group whatever the order and shape of the folds.
        prop_assert_eq!(shuffled.clone().canonical(), in_order.canonical());

        let x = expand(&shuffled);
        // Every rank once: in the template or in exactly one outlier line.
        let mut seen = x.main.ranks.clone();
        let mut count = x.main.ranks.len();
        for (ids, text) in &x.outliers {
            prop_assert!(seen.is_disjoint(ids));
            seen.union_with(ids);
            count += ids.len();
            for r in ids.iter() {
                // An outlier's line is its exact text.
                prop_assert_eq!(text, &key.fill(|s| values[r as usize][s].clone()));
            }
        }
        prop_assert_eq!(count, n as u64);
        prop_assert_eq!(seen, IdSet::all(n as u32));
        // The template's ranges are exactly those of its ranks' values.
        for (s, view) in x.main.slots.iter().enumerate() {
            let k = key.kinds[s];
            let vals: Vec<(u32, &str)> =
                x.main.ranks.iter().map(|r| (r, values[r as usize][s].as_str())).collect();
            let lo = vals.iter().map(|v| v.1).min_by(|a, b| cmp(k, a, b)).unwrap();
            let hi = vals.iter().map(|v| v.1).max_by(|a, b| cmp(k, a, b)).unwrap();
            prop_assert_eq!(view.min.as_str(), lo);
            prop_assert_eq!(view.max.as_str(), hi);
            for &(_, v) in &vals {
                prop_assert!(cmp(k, v, lo) != Ordering::Less && cmp(k, v, hi) != Ordering::Greater);
            }
            let at = |x: &str| vals.iter().filter(|v| v.1 == x).map(|v| v.0).collect::<IdSet>();
            if let Some(m) = &view.min_at {
                prop_assert_eq!(m, &at(lo));
            }
            if let Some(m) = &view.max_at {
                prop_assert_eq!(m, &at(hi));
            }
            if let (SlotKind::Dec, Some(mean)) = (k, &view.mean) {
                let exact: f64 = vals.iter().map(|v| number::decimal(v.1)).sum::<f64>()
                    / vals.len() as f64;
                let shown: f64 = mean.parse().unwrap();
                let step = 10f64.powi(-i32::from(shuffled.slots[s].frac.max(1)));
                // (With an exponent the mean shows as many significant digits.)
                let scale = if shuffled.slots[s].exp { exact.abs() * 10.0 } else { 1.0 };
                prop_assert!((shown - exact).abs() <= step * scale + exact.abs() * 1e-9,
                    "{mean} vs {exact}");
            }
        }
    }

    /// Bytes from a faulty child never panic a node or the console: they fail to decode,
    /// or decode to a group that renders.
    #[test]
    fn any_payload_decodes_or_fails_without_panicking(
        (key, values) in lines(),
        cut in any::<prop::sample::Index>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
    ) {
        let mut g = Group::single(key.clone(), values[0].iter().map(|s| s.as_str().into()).collect(), IdSet::single(0));
        for (r, v) in values.iter().enumerate().skip(1) {
            g.merge(Group::single(key.clone(), v.iter().map(|s| s.as_str().into()).collect(), IdSet::single(r as u32)));
        }
        let mut bytes = encode(1, &g).to_vec();
        for (at, b) in flips {
            let i = at.index(bytes.len());
            bytes[i] ^= b;
        }
        bytes.truncate(cut.index(bytes.len() + 1).max(1));
        let _ = rendered(&bytes, &g.ranks);
        if let Ok((_, d)) = decode(&bytes, &g.ranks) {
            let _ = expand(&d);
        }
    }

    #[test]
    fn a_line_scans_back_to_its_template(
        (key, values) in lines(),
    ) {
        let text = key.fill(|s| values[0][s].clone());
        let (k, v) = scan(text.as_bytes()).unwrap();
        prop_assert_eq!(k, key);
        let v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
        prop_assert_eq!(&v, &values[0]);
    }
}

#[test]
fn renders_ranges_means_and_outliers() {
    let mut g: Option<Group> = None;
    for r in 0..16u32 {
        let t = if r == 7 {
            "9.50".to_owned()
        } else {
            format!("1.{:02}", 10 + r)
        };
        let line = format!("step 5 took {t} s");
        let (key, values) = scan(line.as_bytes()).unwrap();
        let one = Group::single(key, values, IdSet::single(r));
        match &mut g {
            Some(g) => g.merge(one),
            None => g = Some(one),
        }
    }
    let x = expand(&g.unwrap());
    assert_eq!(
        x.main.text,
        "step 5 took {1.10..1.25} s (mean 1.18, max at [15])"
    );
    assert_eq!(x.main.ranks, "[0-6,8-15]".parse().unwrap());
    assert_eq!(
        x.outliers,
        [("[7]".parse().unwrap(), "step 5 took 9.50 s".to_owned())]
    );
}
