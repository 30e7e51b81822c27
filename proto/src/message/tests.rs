//! Tests of the envelope: round trips, refusals, and agreement with prost.

use super::*;
use proptest::prelude::*;
use prost::Message as _;

/// The empty filter name holds nothing, however it is made; named, it reads back and
/// compares by its text.
#[test]
fn a_filter_name_is_empty_or_shared_text() {
    for empty in [
        FilterName::default(),
        FilterName::from(""),
        FilterName::from(String::new()),
        FilterName::shared(Arc::from("")),
        Message::reply(1, IdSet::single(0), Status::Replied, Bytes::new())
            .aggregate
            .filter,
    ] {
        assert!(empty.0.is_none());
        assert_eq!(&*empty, "");
    }
    let sum = FilterName::from("sum");
    assert_eq!(sum, FilterName::from(String::from("sum")));
    assert_eq!(
        (&*sum, format!("{sum}"), format!("{sum:?}")),
        ("sum", "sum".into(), "\"sum\"".into())
    );
    assert_ne!(sum, FilterName::from("max"));
}

#[test]
fn round_trip_and_version() {
    let m = Message::command(7, IdSet::all(1000), SyncMode::Timeout(250), "1 [] stop([])");
    assert_eq!(Message::decode(m.encode()).unwrap(), m);
    let mut env = m.to_pb();
    env.version = 9;
    let e = Message::from_pb(env).unwrap_err();
    assert!(matches!(e, WireError::Version { got: 9 }), "{e}");
    let s = Message::command(
        8,
        IdSet::range(0..=7),
        SyncMode::WaitAll,
        &b"\0\xff\xfe raw"[..],
    )
    .for_service("checksum");
    assert_eq!(Message::decode(s.encode()).unwrap(), s);
    let r = Message::reply(7, IdSet::range(0..=999), Status::Lost, Bytes::from("gone"));
    assert_eq!(Message::decode(r.encode()).unwrap(), r);
}

#[test]
fn unknown_kind_is_refused() {
    let mut env = Message::command(1, IdSet::single(0), SyncMode::WaitAll, "x").to_pb();
    env.kind = 42;
    assert!(matches!(
        Message::from_pb(env),
        Err(WireError::UnknownEnum {
            field: "kind",
            value: 42
        })
    ));
}

/// A string field given twice, invalid UTF-8 first and valid after: refused, as prost
/// refuses it (each occurrence is checked, not only the last, which wins).
#[test]
fn every_occurrence_of_a_string_field_must_be_utf8() {
    let m = Message::command(1, IdSet::single(0), SyncMode::WaitAll, "x").for_service("ok");
    for (tag, nested) in [(0x42u8, false), (0x0a, true)] {
        let mut b = m.encode().to_vec();
        let bad = [tag, 2, 0xc3, 0x28];
        let good = [tag, 2, b'o', b'k'];
        if nested {
            // Two `aggregate`s, each with a filter.
            b.extend_from_slice(&[0x32, 4]);
            b.extend_from_slice(&bad);
            b.extend_from_slice(&[0x32, 4]);
            b.extend_from_slice(&good);
        } else {
            b.extend_from_slice(&bad);
            b.extend_from_slice(&good);
        }
        let prost = pb::Envelope::decode(&b[..]);
        assert!(prost.is_err(), "prost refuses it");
        let e = Message::decode(Bytes::from(b)).unwrap_err();
        assert!(matches!(e, WireError::NotUtf8(_)), "{e}");
    }
}

/// A filter or service name is checked as UTF-8 unless it is the previous frame's: one
/// that is not text is refused whatever the previous name was, and `last` keeps that
/// name; an equal name is shared, not made again (one allocation per link, not per
/// frame).
#[test]
fn names_that_are_not_text_are_refused_after_shared_ones() {
    let mut m = Message::command(1, IdSet::single(0), SyncMode::WaitAll, "x").for_service("omis");
    m.aggregate.filter = "sum".into();
    let mut last = LastNames::default();
    let first = Message::decode_sharing(m.encode(), &mut last).unwrap();
    assert_eq!(&*first.aggregate.filter, "sum");
    assert_eq!(first.service, "omis");
    let second = Message::decode_sharing(m.encode(), &mut last).unwrap();
    let same = |a: &Name, b: &Name| Arc::ptr_eq(a.0.as_ref().unwrap(), b.0.as_ref().unwrap());
    assert!(same(&first.aggregate.filter, &second.aggregate.filter));
    assert!(same(&first.service, &second.service));
    // The same frame with two bytes of a name replaced by two that are not UTF-8.
    let good = m.encode().to_vec();
    for (field, name) in [("filter", &b"sum"[..]), ("service", &b"omis"[..])] {
        let at = good.windows(name.len()).position(|w| w == name).unwrap();
        for bad in [[0xc3, 0x28], [0xff, b'm']] {
            let mut b = good.clone();
            b[at..at + 2].copy_from_slice(&bad);
            let e = Message::decode_sharing(Bytes::from(b), &mut last).unwrap_err();
            assert!(matches!(e, WireError::NotUtf8(f) if f == field), "{e}");
            assert_eq!(last.filter.as_deref(), Some("sum"));
            assert_eq!(last.service.as_deref(), Some("omis"));
        }
    }
    let again = Message::decode_sharing(Bytes::from(good), &mut last).unwrap();
    assert_eq!(again, first);
}

fn any_message() -> impl Strategy<Value = Message> {
    let set = prop::collection::vec((0u32..5000, 0u32..300), 0..6).prop_map(|runs| {
        let mut s = IdSet::new();
        for (a, len) in runs {
            s.insert_range(a..=a + len);
        }
        s
    });
    let sparse = prop::collection::vec(0u32..100_000, 0..300)
        .prop_map(|ids| ids.into_iter().collect::<IdSet>());
    (
        (
            0usize..5,
            any::<u64>(),
            prop_oneof![set.clone(), sparse],
            set,
        ),
        (
            "[a-z:]{0,8}",
            0usize..3,
            any::<u32>(),
            any::<u64>(),
            0usize..5,
        ),
        (
            prop::collection::vec(any::<u8>(), 0..64),
            "[a-z.]{0,8}",
            prop::option::of(0usize..6),
        ),
    )
        .prop_map(
            |(
                (kind, op, dest, source),
                (filter, sync, ms, hash, status),
                (payload, service, end),
            )| {
                Message {
                    kind: [
                        Kind::Command,
                        Kind::Reply,
                        Kind::Event,
                        Kind::Stdio,
                        Kind::Control,
                    ][kind],
                    op,
                    dest,
                    source,
                    aggregate: Aggregate {
                        filter: filter.into(),
                        sync: [SyncMode::WaitAll, SyncMode::DontWait, SyncMode::Timeout(ms)][sync],
                        payload_hash: hash,
                        status: [
                            None,
                            Some(Status::Replied),
                            Some(Status::Lost),
                            Some(Status::TimedOut),
                            Some(Status::Error),
                        ][status],
                        link_end: end.map(|e| {
                            [
                                LinkEndKind::Goodbye,
                                LinkEndKind::Closed,
                                LinkEndKind::Io,
                                LinkEndKind::Protocol,
                                LinkEndKind::Silent,
                                LinkEndKind::Unreachable,
                            ][e]
                        }),
                    },
                    payload: Bytes::from(payload),
                    service: service.into(),
                }
            },
        )
}

proptest! {
    #[test]
    fn the_direct_encoder_writes_what_prost_writes(m in any_message()) {
        let direct = m.encode();
        prop_assert_eq!(&direct[..], &m.to_pb().encode_to_vec()[..]);
        prop_assert_eq!(direct.len(), m.encoded_len());
        prop_assert_eq!(Message::decode(direct).unwrap(), m);
    }

    /// The direct decoder and prost's envelope (with [`Message::from_pb`]) accept the
    /// same frames and read the same message from them: valid frames with unknown
    /// fields, repeated fields and a second `aggregate` appended, then one byte
    /// changed or the frame cut short.
    #[test]
    fn the_direct_decoder_agrees_with_prost(
        m in any_message(),
        extra in prop::collection::vec(any::<u8>(), 0..24),
        again in any_message(),
        idx in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        how in 0usize..4,
    ) {
        let mut b = m.encode().to_vec();
        match how {
            // An unknown field of each wire type, then the raw bytes.
            1 => {
                b.extend_from_slice(&[0x48, 0x05, 0x51, 1, 2, 3, 4, 5, 6, 7, 8, 0x5d, 1, 2, 3, 4]);
                b.extend_from_slice(&[0x62, extra.len() as u8]);
                b.extend_from_slice(&extra);
            }
            // Another message's fields after this one's: each field's last value wins,
            // the two aggregates merge.
            2 => b.extend_from_slice(&again.encode()),
            3 => b.extend_from_slice(&extra),
            _ => {}
        }
        let agree = |b: &[u8]| {
            let direct = Message::decode(Bytes::copy_from_slice(b));
            let prost = pb::Envelope::decode(b)
                .map_err(WireError::from)
                .and_then(Message::from_pb);
            match (direct, prost) {
                (Ok(d), Ok(p)) => assert_eq!(d, p),
                (Err(_), Err(_)) => {}
                (d, p) => panic!("direct {d:?}, prost {p:?} for {b:02x?}"),
            }
        };
        agree(&b);
        let i = idx.index(b.len());
        agree(&b[..i]);
        b[i] = byte;
        agree(&b);
    }

    #[test]
    fn random_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = Message::decode(Bytes::from(b));
    }

    #[test]
    fn mutated_frames_never_panic(idx in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let m = Message::reply(3, IdSet::range(5..=900), Status::Replied, Bytes::from("payload"));
        let mut b = m.encode().to_vec();
        let i = idx.index(b.len());
        b[i] = byte;
        let _ = Message::decode(Bytes::from(b));
    }
}
