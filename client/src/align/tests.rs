//! Unit tests of the [`Aligner`](super::Aligner): k-th lines merged across ranks, idle
//! markers, ends, events and templated lines.

use super::*;

/// The k-th templated lines of two subtrees (one of them a group already) fold into one
/// line holding every rank's value; a plain line of the same index stays apart.
#[test]
fn templated_lines_of_subtrees_fold_into_one() {
    let t = Instant::now();
    let mut a = Aligner::new("[0-3]".parse().unwrap(), Duration::from_secs(60));
    let templated = |ids: &str, value: u32| {
        let ids: IdSet = ids.parse().unwrap();
        let text = format!("\u{1}took {value} ms");
        StdioLine {
            kind: Kind::Stdio,
            payload: template::templated(Bytes::from(text.into_bytes()), &ids),
            sources: ids,
            index: 0,
        }
    };
    assert!(a.push(t, templated("[0]", 5)).is_empty());
    assert!(a.push(t, templated("[1]", 9)).is_empty());
    let plain = StdioLine {
        kind: Kind::Stdio,
        sources: "[2-3]".parse().unwrap(),
        index: 0,
        payload: Bytes::from_static(b"\x01took no time"),
    };
    let out = a.push(t, plain.clone());
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!(
        template::lines(&out[0].payload, &out[0].sources),
        [(
            "[0-1]".parse().unwrap(),
            "took {5..9} ms (mean 7, max at [1])".into()
        )]
    );
    assert_eq!(out[1], plain);
}

/// A templated line that does not decode joins no group and no line joins it: its
/// ranks print as malformed, never as the template's values.
#[test]
fn a_malformed_templated_line_joins_no_group() {
    let t = Instant::now();
    let mut a = Aligner::new("[0-3]".parse().unwrap(), Duration::from_secs(60));
    let l = |r: u32, cut: bool| {
        let ids = IdSet::single(r);
        let text = format!("\u{1}took {} ms", r + 5);
        let mut payload = template::templated(Bytes::from(text.into_bytes()), &ids);
        if cut {
            payload.truncate(payload.len() - 1);
        }
        StdioLine {
            kind: Kind::Stdio,
            sources: ids,
            index: 0,
            payload,
        }
    };
    let mut out = Vec::new();
    for (r, cut) in [(0, true), (1, false), (2, false), (3, true)] {
        out.extend(a.push(t, l(r, cut)));
    }
    let out: Vec<_> = (out.iter())
        .flat_map(|l| template::lines(&l.payload, &l.sources))
        .collect();
    let bad = template::MALFORMED.to_owned();
    assert_eq!(
        out,
        [
            ("[0]".parse().unwrap(), bad.clone()),
            (
                "[1-2]".parse().unwrap(),
                "took {6..7} ms (mean 6.5, max at [2])".into()
            ),
            ("[3]".parse().unwrap(), bad),
        ]
    );
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn line(ids: &str, index: u64, text: &str) -> StdioLine {
    let mut payload = vec![1u8];
    payload.extend_from_slice(text.as_bytes());
    StdioLine {
        kind: Kind::Stdio,
        sources: ids.parse().unwrap(),
        index,
        payload: Bytes::from(payload),
    }
}

fn event(ids: &str, text: &str) -> StdioLine {
    StdioLine {
        kind: Kind::Event,
        sources: ids.parse().unwrap(),
        index: 0,
        payload: Bytes::copy_from_slice(text.as_bytes()),
    }
}

fn shown(lines: &[StdioLine]) -> Vec<String> {
    lines
        .iter()
        .map(|l| {
            let text = match l.kind {
                Kind::Stdio => String::from_utf8_lossy(&l.payload[1..]).into_owned(),
                _ => format!("event {}", String::from_utf8_lossy(&l.payload)),
            };
            format!("{} {text}", l.sources)
        })
        .collect()
}

fn aligner(n: u32) -> Aligner {
    Aligner::with_limits(IdSet::all(n), ms(5000), ms(100), 1 << 20)
}

#[test]
fn kth_lines_wait_for_every_running_rank_however_late() {
    let t = Instant::now();
    let mut a = aligner(3);
    let mut out = Vec::new();
    // Ranks 0 and 1 print everything; rank 2 is late (by any amount below the lag).
    for k in 0..100 {
        out.extend(a.push(t, line("[0]", k, &k.to_string())));
        out.extend(a.push(t, line("[1]", k, &k.to_string())));
    }
    assert!(out.is_empty());
    for k in 0..100 {
        out.extend(a.push(t + ms(4000), line("[2]", k, &k.to_string())));
    }
    assert_eq!(out.len(), 100);
    assert!(out.iter().all(|l| l.sources == IdSet::all(3)));
    assert_eq!(
        out.iter().map(|l| l.index).collect::<Vec<_>>(),
        (0..100).collect::<Vec<_>>()
    );
    assert!(a.is_empty());
}

#[test]
fn merged_partial_groups_from_the_tree_become_one() {
    let t = Instant::now();
    let mut a = aligner(16);
    assert!(a.push(t, line("[0-3,7-9,11-12,15]", 0, "x")).is_empty());
    let out = a.push(t, line("[4-6,10,13-14]", 0, "x"));
    assert_eq!(shown(&out), ["[0-15] x"]);
}

#[test]
fn different_texts_of_one_index_leave_together_in_rank_order() {
    let t = Instant::now();
    let mut a = aligner(3);
    assert!(a.push(t, line("[2]", 0, "rank 2")).is_empty());
    assert!(a.push(t, line("[0]", 0, "rank 0")).is_empty());
    let out = a.push(t, line("[1]", 0, "rank 0"));
    assert_eq!(shown(&out), ["[0-1] rank 0", "[2] rank 2"]);
}

#[test]
fn past_the_lag_stragglers_print_on_their_own_in_order() {
    let t = Instant::now();
    let mut a = aligner(2);
    for k in 0..3 {
        assert!(a.push(t, line("[0]", k, "a")).is_empty());
    }
    assert_eq!(a.deadline(), Some(t + ms(5000)));
    assert!(a.expire(t + ms(4999)).is_empty());
    let out = a.expire(t + ms(5000));
    assert_eq!(shown(&out), ["[0] a", "[0] a", "[0] a"]);
    // Rank 1's lines come after their groups left: each prints at once, in order.
    let out: Vec<_> = (0..3)
        .flat_map(|k| a.push(t + ms(6000), line("[1]", k, "a")))
        .collect();
    assert_eq!(out.iter().map(|l| l.index).collect::<Vec<_>>(), [0, 1, 2]);
    assert!(a.is_empty());
}

#[test]
fn ended_ranks_are_not_awaited_and_ends_merge() {
    let t = Instant::now();
    let mut a = aligner(3);
    let mut out = Vec::new();
    out.extend(a.push(t, line("[0-1]", 0, "one")));
    out.extend(a.push_end(t, event("[0]", "exited 0")));
    // Rank 2 prints "one" and "two" much later; rank 1 "two" too.
    out.extend(a.push(t + ms(1000), line("[1]", 1, "two")));
    assert!(out.is_empty(), "{:?}", shown(&out));
    out.extend(a.push(t + ms(2000), line("[2]", 0, "one")));
    out.extend(a.push(t + ms(2000), line("[2]", 1, "two")));
    assert_eq!(shown(&out), ["[0-2] one", "[1-2] two"]);
    out.clear();
    out.extend(a.push_end(t + ms(2100), event("[1]", "exited 0")));
    assert!(out.is_empty(), "ends wait for every rank");
    out.extend(a.push_end(t + ms(3000), event("[2]", "exited 0")));
    assert_eq!(shown(&out), ["[0-2] event exited 0"]);
}

#[test]
fn an_event_never_passes_its_ranks_lines() {
    let t = Instant::now();
    let mut a = aligner(2);
    assert!(a.push(t, line("[0]", 0, "before")).is_empty());
    assert!(a.push(t, event("[0]", "breakpoint")).is_empty());
    assert!(
        a.expire(t + ms(200)).is_empty(),
        "the line still waits for rank 1"
    );
    let out = a.push(t + ms(300), line("[1]", 0, "before"));
    assert_eq!(shown(&out), ["[0-1] before", "[0] event breakpoint"]);
}

#[test]
fn identical_events_within_the_window_merge() {
    let t = Instant::now();
    let mut a = aligner(4);
    assert!(a.push(t, event("[0]", "stopped")).is_empty());
    assert!(a.push(t + ms(50), event("[1-3]", "stopped")).is_empty());
    assert_eq!(shown(&a.expire(t + ms(100))), ["[0-3] event stopped"]);
}

#[test]
fn lost_ranks_stop_being_awaited() {
    let t = Instant::now();
    let mut a = aligner(3);
    assert!(a.push(t, line("[0-1]", 0, "x")).is_empty());
    assert_eq!(shown(&a.end(t, &IdSet::single(2))), ["[0-1] x"]);
}

#[test]
fn the_held_lines_are_bounded() {
    let t = Instant::now();
    let mut a = Aligner::with_limits(IdSet::all(2), ms(5000), ms(100), 10);
    let out: Vec<_> = (0..20)
        .flat_map(|k| a.push(t, line("[0]", k, &k.to_string())))
        .collect();
    assert_eq!(out.len(), 10);
    assert_eq!(out[0].index, 0);
}

fn idle(ids: &str, lines: u64) -> StdioLine {
    StdioLine {
        kind: Kind::Stdio,
        sources: ids.parse().unwrap(),
        index: lines,
        payload: Bytes::from_static(&[sdm_overlay::stdio::IDLE, 1]),
    }
}

#[test]
fn a_line_waits_only_the_grace_when_the_other_ranks_are_idle_before_it() {
    let t = Instant::now();
    let g = IDLE_GRACE;
    let mut a = aligner(4);
    // Ranks 1-3 print nothing and say so; rank 0's progress lines leave after the
    // grace, not the lag.
    assert!(a.push(t, idle("[1-2]", 0)).is_empty());
    assert!(a.push(t, line("[0]", 0, "progress 0")).is_empty());
    assert!(a.push(t, idle("[3]", 0)).is_empty());
    assert_eq!(a.deadline(), Some(t + g));
    assert_eq!(shown(&a.expire(t + g)), ["[0] progress 0"]);
    assert!(a.push(t + g, line("[0]", 1, "progress 1")).is_empty());
    assert_eq!(shown(&a.expire(t + 2 * g)), ["[0] progress 1"]);
    // A rank idle after 2 lines is still awaited for its first two.
    let mut b = aligner(2);
    assert!(b.push(t, idle("[1]", 2)).is_empty());
    assert!(b.push(t, line("[0]", 1, "x")).is_empty());
    assert!(b.push(t, line("[0]", 0, "w")).is_empty());
    assert!(b.expire(t + g).is_empty());
    assert_eq!(shown(&b.push(t + g, line("[1]", 0, "w"))), ["[0-1] w"]);
    assert_eq!(shown(&b.push(t + g, line("[1]", 1, "x"))), ["[0-1] x"]);
    assert!(b.push(t + g, line("[0]", 2, "y")).is_empty());
    assert_eq!(shown(&b.expire(t + 2 * g)), ["[0] y"]);
    assert!(b.is_empty());
}

#[test]
fn a_rank_idle_but_printing_within_the_grace_still_merges() {
    let t = Instant::now();
    let mut a = aligner(2);
    assert!(a.push(t, idle("[1]", 0)).is_empty());
    assert!(a.push(t, line("[0]", 0, "ok")).is_empty());
    let out = a.push(t + IDLE_GRACE / 2, line("[1]", 0, "ok"));
    assert_eq!(shown(&out), ["[0-1] ok"]);
}

#[test]
fn a_rank_that_prints_again_is_awaited_again() {
    let t = Instant::now();
    let g = IDLE_GRACE;
    let mut a = aligner(2);
    assert!(a.push(t, idle("[1]", 0)).is_empty());
    assert!(a.push(t, line("[0]", 0, "a")).is_empty());
    assert_eq!(shown(&a.expire(t + g)), ["[0] a"]);
    // Rank 1 wakes up: it prints its line 0, and is awaited for line 1 again.
    assert_eq!(shown(&a.push(t + g, line("[1]", 0, "a"))), ["[1] a"]);
    assert!(a.push(t + g, line("[0]", 1, "b")).is_empty());
    assert!(a.expire(t + ms(4999)).is_empty());
    assert_eq!(
        shown(&a.push(t + ms(4999), line("[1]", 1, "b"))),
        ["[0-1] b"]
    );
}

#[test]
fn without_markers_the_merge_waits_as_before() {
    let t = Instant::now();
    let mut a = aligner(3);
    // A marker on stderr says nothing of stdout.
    let mut err = idle("[1-2]", 0);
    err.payload = Bytes::from_static(&[sdm_overlay::stdio::IDLE, 2]);
    assert!(a.push(t, err).is_empty());
    assert!(a.push(t, line("[0]", 0, "a")).is_empty());
    assert!(a.push(t + ms(3000), line("[1]", 0, "a")).is_empty());
    assert_eq!(
        shown(&a.push(t + ms(4000), line("[2]", 0, "a"))),
        ["[0-2] a"]
    );
}

#[test]
fn ends_do_not_wait_for_idle_ranks_past_the_window() {
    let t = Instant::now();
    let mut a = aligner(3);
    assert!(a.push(t, line("[0]", 0, "done")).is_empty());
    assert!(a.push_end(t, event("[0]", "exited 0")).is_empty());
    let mut out = a.push(t, idle("[1-2]", 0));
    out.extend(a.push(t, {
        let mut e = idle("[1-2]", 0);
        e.payload = Bytes::from_static(&[sdm_overlay::stdio::IDLE, 2]);
        e
    }));
    assert!(out.is_empty());
    assert_eq!(
        shown(&a.expire(t + IDLE_GRACE)),
        ["[0] done", "[0] event exited 0"]
    );
    // Markers are never printed, and pass no line when merging is off.
    let mut z = Aligner::new(IdSet::all(2), Duration::ZERO);
    assert!(z.push(t, idle("[1]", 0)).is_empty());
}

#[test]
fn zero_lag_passes_through() {
    let mut a = Aligner::new(IdSet::all(2), Duration::ZERO);
    assert_eq!(a.push(Instant::now(), line("[0]", 0, "x")).len(), 1);
}

#[test]
fn drain_keeps_each_ranks_order() {
    let t = Instant::now();
    let mut a = aligner(2);
    assert!(a.push(t, line("[0]", 0, "a")).is_empty());
    assert!(a.push(t, event("[0]", "e")).is_empty());
    assert!(a.push(t, line("[0]", 1, "b")).is_empty());
    assert_eq!(shown(&a.drain()), ["[0] a", "[0] event e", "[0] b"]);
}
