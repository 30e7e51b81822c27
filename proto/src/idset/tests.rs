//! Tests of [`IdSet`]: its operations, text form and binary forms.

use super::wire::{TAG_ROARING, TAG_RUNS};
use super::*;
use proptest::prelude::*;
use std::collections::BTreeSet;

fn model(s: &IdSet) -> BTreeSet<Id> {
    s.iter().collect()
}

fn arb_ids() -> impl Strategy<Value = Vec<Id>> {
    prop_oneof![
        proptest::collection::vec(0u32..200, 0..60),
        proptest::collection::vec(any::<u32>(), 0..20),
        (0u32..2_000_000, 0u32..300_000)
            .prop_map(|(s, l)| (s..s.saturating_add(l)).step_by(1).collect()),
        (0u32..100_000, 1u32..5).prop_map(|(n, k)| (0..n).step_by(k as usize).collect()),
    ]
}

/// The set of `ids`: collected into a bitmap, or (`inline`) made from its runs, which
/// keeps a set of one run inline.
fn set_of(ids: &[Id], inline: bool) -> IdSet {
    if !inline {
        return ids.iter().copied().collect();
    }
    let sorted: BTreeSet<Id> = ids.iter().copied().collect();
    let mut s = IdSet::new();
    for id in sorted {
        s.insert_range(id..=id);
    }
    s
}

#[test]
fn one_range_is_inline_and_ops_keep_it_so() {
    let mut s = IdSet::range(10..=19);
    assert!(s.as_range().is_some());
    s.insert(20);
    s.insert_range(0..=9);
    assert_eq!(s.as_range(), Some((0, 20)));
    s.remove(0);
    s.difference_with(&IdSet::range(15..=30));
    assert_eq!(s.as_range(), Some((1, 14)));
    s.intersect_with(&IdSet::range(5..=100));
    assert_eq!(s.as_range(), Some((5, 14)));
    let bytes = s.to_bytes();
    assert_eq!(IdSet::from_bytes(&bytes).unwrap().as_range(), Some((5, 14)));
    s.remove(9);
    assert!(s.as_range().is_none());
    assert_eq!(s.to_string(), "[5-8,10-14]");
    assert_eq!(IdSet::range(0..=u32::MAX).len(), 1 << 32);
    let mut full = IdSet::range(0..=u32::MAX);
    full.insert(7);
    assert_eq!(full.as_range(), Some((0, u32::MAX)));
}

#[test]
fn text_examples() {
    let s: IdSet = "[0-3,7,100-199]".parse().unwrap();
    assert_eq!(s.len(), 4 + 1 + 100);
    assert_eq!(s.to_string(), "[0-3,7,100-199]");
    assert_eq!("[]".parse::<IdSet>().unwrap(), IdSet::new());
    assert_eq!(IdSet::new().to_string(), "[]");
    assert_eq!(
        " [ 5 , 1 - 2 ] ".parse::<IdSet>().unwrap().to_string(),
        "[1-2,5]"
    );
    assert_eq!(
        "[4294967295]".parse::<IdSet>().unwrap().to_string(),
        "[4294967295]"
    );
}

#[test]
fn text_errors_name_the_column() {
    for (bad, col) in [
        ("", 1),
        ("0-3", 1),
        ("[0-", 4),
        ("[3-1]", 2),
        ("[1,,2]", 4),
        ("[1 2]", 4),
        ("[1]x", 4),
        ("[4294967296]", 2),
        ("[1", 3),
    ] {
        match bad.parse::<IdSet>() {
            Err(IdSetError::Text { column, .. }) => assert_eq!(column, col, "{bad:?}"),
            other => panic!("{bad:?} gave {other:?}"),
        }
    }
}

#[test]
fn empty_means_empty() {
    let e = IdSet::new();
    assert!(e.is_empty());
    assert!(!e.contains(0));
    assert_eq!(IdSet::all(0), e);
    assert_eq!(IdSet::from_bytes(&e.to_bytes()).unwrap(), e);
}

#[test]
fn million_broadcast_is_tiny() {
    let s = IdSet::all(1_000_000);
    assert!(s.to_bytes().len() <= 8, "{}", s.to_bytes().len());
    assert_eq!(s.to_string(), "[0-999999]");
}

#[test]
fn sparse_sets_use_roaring() {
    let s: IdSet = (0..200_000).step_by(2).collect();
    let b = s.to_bytes();
    assert_eq!(b[0], TAG_ROARING);
    assert!(b.len() < 60_000, "{}", b.len());
    assert_eq!(IdSet::from_bytes(&b).unwrap(), s);
}

#[test]
fn whole_id_space_is_cheap_to_walk_print_and_encode() {
    // A 7-byte frame field can name every id: walking it must cost its runs, not its ids.
    let all = IdSet::range(0..=Id::MAX);
    let b = all.to_bytes();
    assert_eq!(b, [TAG_RUNS, 1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f]);
    let back = IdSet::from_bytes(&b).unwrap();
    assert_eq!(back.len(), 1 << 32);
    assert_eq!(back.runs().collect::<Vec<_>>(), vec![0..=Id::MAX]);
    assert_eq!(back.to_string(), "[0-4294967295]");
    let mut holes = back.clone();
    for id in [5, 65_535, 65_536, 1 << 31, Id::MAX] {
        holes.remove(id);
    }
    assert_eq!(
        holes.to_string(),
        "[0-4,6-65534,65537-2147483647,2147483649-4294967294]"
    );
    assert_eq!(IdSet::from_bytes(&holes.to_bytes()).unwrap(), holes);
}

#[test]
fn runs_join_across_container_boundaries() {
    let s: IdSet = (65_530..65_545)
        .chain([70_000])
        .chain(131_000..140_000)
        .collect();
    let runs: Vec<_> = s.runs().collect();
    assert_eq!(
        runs,
        vec![65_530..=65_544, 70_000..=70_000, 131_000..=139_999]
    );
}

#[test]
fn hostile_roaring_header_is_refused() {
    let mut b = vec![TAG_ROARING];
    b.extend_from_slice(&12346u32.to_le_bytes());
    b.extend_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        IdSet::from_bytes(&b),
        Err(IdSetError::Roaring { .. })
    ));
}

/// Roaring data its decoder refuses (a container promising more values than follow) keeps
/// the decoder's error as the source.
#[test]
fn roaring_decoder_error_is_the_source() {
    let mut b = vec![TAG_ROARING];
    b.extend_from_slice(&12346u32.to_le_bytes()); // no-run cookie
    b.extend_from_slice(&1u32.to_le_bytes()); // one container
    b.extend_from_slice(&[0, 0, 9, 0]); // key 0, 10 values
    b.extend_from_slice(&16u32.to_le_bytes()); // its offset
    b.extend_from_slice(&[1, 0]); // one value of the ten
    let e = IdSet::from_bytes(&b).unwrap_err();
    assert!(matches!(e, IdSetError::Roaring { .. }), "{e:?}");
    let io = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<Arc<std::io::Error>>());
    assert_eq!(
        io.map(|e| e.kind()),
        Some(std::io::ErrorKind::UnexpectedEof),
        "{e:?}"
    );
}

proptest! {
    #[test]
    fn ops_match_btreeset(
        a in arb_ids(),
        b in arb_ids(),
        probe in any::<u32>(),
        inline in (any::<bool>(), any::<bool>()),
    ) {
        let (sa, sb) = (set_of(&a, inline.0), set_of(&b, inline.1));
        prop_assert_eq!(&sa, &set_of(&a, !inline.0));
        let (ma, mb): (BTreeSet<Id>, BTreeSet<Id>) = (a.into_iter().collect(), b.into_iter().collect());
        prop_assert_eq!(sa.len(), ma.len() as u64);
        prop_assert_eq!(sa.is_empty(), ma.is_empty());
        prop_assert_eq!(model(&(&sa | &sb)), &ma | &mb);
        prop_assert_eq!(model(&(&sa & &sb)), &ma & &mb);
        prop_assert_eq!(model(&(&sa - &sb)), &ma - &mb);
        prop_assert_eq!(sa.is_subset(&sb), ma.is_subset(&mb));
        prop_assert_eq!(sa.is_disjoint(&sb), ma.is_disjoint(&mb));
        prop_assert_eq!(sa.contains(probe), ma.contains(&probe));
        prop_assert_eq!(sa == sb, ma == mb);
        prop_assert_eq!(sa.first(), ma.first().copied());
        prop_assert_eq!(sa.last(), ma.last().copied());
        let mut u = sa.clone(); u.union_with(&sb);
        prop_assert_eq!(model(&u), &ma | &mb);
        let mut i = sa.clone(); i.intersect_with(&sb);
        prop_assert_eq!(model(&i), &ma & &mb);
        let mut d = sa.clone(); d.difference_with(&sb);
        prop_assert_eq!(model(&d), &ma - &mb);
        let mut r = sa.clone();
        prop_assert_eq!(r.insert(probe), !ma.contains(&probe));
        prop_assert!(r.remove(probe));
        let mut m2 = ma.clone(); m2.remove(&probe);
        prop_assert_eq!(model(&r), m2);
        let mut c = sa.clone(); c.clear();
        prop_assert!(c.is_empty());
        let lo = probe % 3_000_000; let hi = lo.saturating_add(probe % 70_000);
        let ir = sa.intersect_range(lo..=hi);
        prop_assert_eq!(model(&ir), ma.range(lo..=hi).copied().collect::<BTreeSet<_>>());
        prop_assert_eq!(sa.range_len(lo..=hi), ma.range(lo..=hi).count() as u64);
    }

    #[test]
    fn runs_match_a_walk_over_the_ids(a in arb_ids()) {
        let s: IdSet = a.into_iter().collect();
        let mut want: Vec<RangeInclusive<Id>> = Vec::new();
        for id in s.iter() {
            match want.last_mut() {
                Some(r) if r.end().checked_add(1) == Some(id) => *r = *r.start()..=id,
                _ => want.push(id..=id),
            }
        }
        prop_assert_eq!(s.runs().collect::<Vec<_>>(), want);
    }

    #[test]
    fn add_all_is_prefix(n in 0u32..100_000) {
        let mut s = IdSet::new();
        s.add_all(n);
        prop_assert_eq!(s.len(), u64::from(n) + 1);
        prop_assert_eq!(s, IdSet::range(0..=n));
    }

    #[test]
    fn text_round_trips(a in arb_ids()) {
        let s: IdSet = a.into_iter().collect();
        let t = s.to_string();
        let back: IdSet = t.parse().unwrap();
        prop_assert_eq!(&back, &s);
        prop_assert_eq!(back.to_string(), t);
    }

    #[test]
    fn bytes_round_trip(a in arb_ids()) {
        let s: IdSet = a.into_iter().collect();
        let b = s.to_bytes();
        prop_assert!(b.len() <= s.serialized_len());
        prop_assert_eq!(IdSet::from_bytes(&b).unwrap(), s);
    }

    #[test]
    fn random_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = IdSet::from_bytes(&b);
    }

    #[test]
    fn random_text_never_panics(t in "[\\[\\]0-9, -]{0,24}") {
        if let Ok(s) = t.parse::<IdSet>() {
            prop_assert_eq!(s.to_string().parse::<IdSet>().unwrap(), s);
        }
    }
}
