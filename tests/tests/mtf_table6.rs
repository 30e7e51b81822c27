//! Seed 001 (MTF), Table 6 "MPI Trace Statistics": the 16 per-rank rows, fed as per-rank
//! `counters` records through real tree shapes, reduce to the Total row and to the groups of
//! identical ranks.
//!
//! Where the printed table disagrees with its own rows: the Scatterv column. Every rank
//! shows 60 Scatterv calls, so the rows add up to 16 × 60 = 960, but the Total row prints 60
//! (as if the collective were counted once, though Bcast and Gather are summed over ranks:
//! 16 × 640 = 10240, 16 × 120 = 1920). Every other column of the Total row equals the sum of
//! its rows, including both byte columns (3591519680 sent = 3591519680 received).

use sdm_filters::builtin::{Counters, MtfRankStats};
use sdm_filters::{IdSet, Registry};
use sdm_topology::Shape;

use sdm_e2e as support;

/// Table 6 as printed (tab-separated in the seed): rank, Init, Fin, Wait, Bcast, Gather,
/// Scatterv, Isend, Irecv, Sent (bytes), Received (bytes).
const TABLE6: &str = "\
P1	1	1	2140	640	120	60	1070	1070	159205808	565756448
P2	1	1	3210	640	120	60	1605	1605	213522608	186419232
P3	1	1	3210	640	120	60	1605	1605	213522608	186419232
P4	1	1	2140	640	120	60	1070	1070	158508560	131405184
P5	1	1	3210	640	120	60	1605	1605	236278352	209174976
P6	1	1	4280	640	120	60	2140	2140	289913264	262809888
P7	1	1	4280	640	120	60	2140	2140	289913264	262809888
P8	1	1	3210	640	120	60	1605	1605	234899216	207795840
P9	1	1	3210	640	120	60	1605	1605	236278352	209174976
P10	1	1	4280	640	120	60	2140	2140	289913264	262809888
P11	1	1	4280	640	120	60	2140	2140	289913264	262809888
P12	1	1	3210	640	120	60	1605	1605	234899216	207795840
P13	1	1	2140	640	120	60	1070	1070	159198128	132094752
P14	1	1	3210	640	120	60	1605	1605	213522608	186419232
P15	1	1	3210	640	120	60	1605	1605	213522608	186419232
P16	1	1	2140	640	120	60	1070	1070	158508560	131405184
Total	16	16	51360	10240	1920	60	25680	25680	3591519680	3591519680
";

fn parse(line: &str) -> (String, MtfRankStats) {
    let f: Vec<&str> = line.split('\t').collect();
    assert_eq!(f.len(), 11, "{line}");
    let v: Vec<u64> = f[1..].iter().map(|x| x.parse().unwrap()).collect();
    let s = MtfRankStats {
        init: v[0],
        fin: v[1],
        wait: v[2],
        bcast: v[3],
        gather: v[4],
        scatterv: v[5],
        isend: v[6],
        irecv: v[7],
        bytes_sent: v[8],
        bytes_received: v[9],
    };
    (f[0].to_owned(), s)
}

/// The 16 rows (rank `Pk` is server `k - 1`) and the printed Total row.
fn table() -> (Vec<MtfRankStats>, MtfRankStats) {
    let mut rows = Vec::new();
    let mut total = None;
    for line in TABLE6.lines() {
        let (name, s) = parse(line);
        if name == "Total" {
            total = Some(s);
        } else {
            assert_eq!(name, format!("P{}", rows.len() + 1));
            rows.push(s);
        }
    }
    (rows, total.unwrap())
}

/// The seed's Table 6, copied verbatim from seed 001 (its title, header and 17 rows).
const SEED_TABLE: &str = include_str!("../fixtures/mtf_table6.tsv");

/// The column names `parse` reads, in its order, as the seed's header prints them.
const COLUMNS: &str =
    "\tInit\tFin\tWait\tBcast\tGather\tScatterv\tIsend\tIrecv\tSent (bytes)\tReceived (bytes)";

/// The copy above is the seed's table: the same rows, under the columns `parse` assumes.
#[test]
fn copy_matches_the_seed() {
    let mut lines = SEED_TABLE.lines();
    assert_eq!(lines.next(), Some("Table 6. MPI Trace Statistics"));
    assert_eq!(lines.next(), Some(""));
    assert_eq!(lines.next(), Some(COLUMNS), "the seed's columns");
    let rows: Vec<&str> = lines.collect();
    let copy: Vec<&str> = TABLE6.lines().collect();
    assert_eq!(
        copy, rows,
        "Table 6 in tests/fixtures/mtf_table6.tsv differs from the copy"
    );
}

#[test]
fn rows_reduce_to_the_total_row_and_rank_groups() {
    let (rows, printed) = table();
    let leaves: Vec<Vec<u8>> = rows.iter().map(|r| r.to_payload().to_vec()).collect();
    let reg = Registry::new();
    let mut results = Vec::new();
    for shape in [
        Shape::Binomial,
        Shape::KAry(2),
        Shape::KAry(3),
        Shape::KNomial(4),
        Shape::Flat,
    ] {
        let g = support::through_tree(&reg, "counters", shape, &leaves, true);
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].sources, IdSet::all(16));
        results.push(g[0].payload.clone());
    }
    assert!(
        results.windows(2).all(|w| w[0] == w[1]),
        "tree shape changed the bytes"
    );

    let rec = Counters::decode(&results[0]).unwrap();
    let total = MtfRankStats::from_row(&rec.total).unwrap();
    // Every column but Scatterv matches the printed Total row …
    assert_eq!(
        MtfRankStats {
            scatterv: printed.scatterv,
            ..total
        },
        printed
    );
    assert_eq!(
        MtfRankStats {
            scatterv: 960,
            ..printed
        },
        total
    );
    // … and Scatterv is 16 × 60 = 960, where the table prints 60.
    assert_eq!((total.scatterv, printed.scatterv), (960, 60));
    assert_eq!(total.bytes_sent, 3_591_519_680);
    assert_eq!(total.bytes_received, 3_591_519_680);

    // Ranks with identical rows (P1 → id 0, …, P16 → id 15), ordered by smallest rank.
    let groups: Vec<(String, MtfRankStats)> = rec
        .rows
        .iter()
        .map(|r| (r.ids.to_string(), MtfRankStats::from_row(&r.row).unwrap()))
        .collect();
    let ids: Vec<&str> = groups.iter().map(|(i, _)| i.as_str()).collect();
    assert_eq!(
        ids,
        [
            "[0]",         // P1
            "[1-2,13-14]", // P2, P3, P14, P15
            "[3,15]",      // P4, P16
            "[4,8]",       // P5, P9
            "[5-6,9-10]",  // P6, P7, P10, P11
            "[7,11]",      // P8, P12
            "[12]",        // P13
        ]
    );
    for (i, r) in &groups {
        let first: IdSet = i.parse().unwrap();
        assert_eq!(*r, rows[first.first().unwrap() as usize], "{i}");
    }
}
