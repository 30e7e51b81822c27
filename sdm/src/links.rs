//! The tree's own figures per link ([`sdm_client::telemetry`]) as a table (`sdm status -v`,
//! `health -v`, `sdm top --tree`) or as JSON objects, one per link.

use std::fmt::Write as _;
use std::time::Duration;

use sdm_client::telemetry::Link;
use sdm_overlay::telemetry::{NodeReport, ns};

/// The order of the table's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// By child server (the tree's order).
    Tree,
    /// The worst first: the deepest output queue, then the slowest round trip (links
    /// without an answer first of all).
    Worst,
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

/// Bytes with a binary unit (`812`, `14.2K`, `3.0M`).
fn bytes(n: u64) -> String {
    match n {
        0..1024 => n.to_string(),
        1024..1_048_576 => format!("{:.1}K", n as f64 / 1024.0),
        _ => format!("{:.1}M", n as f64 / 1_048_576.0),
    }
}

/// The link's name: `master -> 3`, `1 -> 3`.
pub fn name(l: &Link) -> String {
    match l.parent {
        None => format!("master -> {}", l.child),
        Some(p) => format!("{p} -> {}", l.child),
    }
}

/// A node's filter time: `identical 12x 0.31 ms (max 0.05)`, one per filter.
fn filters(r: &NodeReport) -> String {
    r.filters
        .iter()
        .map(|(f, t)| format!("{f} {}x {} ms (max {})", t.calls, ms(t.total), ms(t.max)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How bad a link looks, for [`Order::Worst`]: no answer, then queue, then round trip.
fn badness(l: &Link) -> (bool, u64, Duration) {
    match l.figures() {
        None => (true, 0, Duration::ZERO),
        Some(f) => (false, f.queue.bytes, f.figures.rtt.smoothed),
    }
}

/// The links as a table, one a line, in `order`; the slowest round trip and the deepest
/// queue are marked.
pub fn table(links: &[Link], order: Order) -> String {
    let mut rows: Vec<&Link> = links.iter().collect();
    if order == Order::Worst {
        rows.sort_by_key(|l| std::cmp::Reverse(badness(l)));
    }
    let worst_rtt = links
        .iter()
        .filter_map(|l| Some((l.figures()?.figures.rtt.smoothed, l.child)))
        .max()
        .filter(|(d, _)| !d.is_zero())
        .map(|(_, c)| c);
    let worst_queue = links
        .iter()
        .filter_map(|l| Some((l.figures()?.queue.bytes, l.child)))
        .max()
        .filter(|(q, _)| *q > 0)
        .map(|(_, c)| c);
    let mut t = format!(
        "{:<14} {:<12} {:>24} {:>18} {:>18} {:>12} {:>8} {:>5} {:>5}  {}\n",
        "link",
        "host",
        "rtt ms last/min/max/avg",
        "up frames/bytes",
        "down frames/bytes",
        "queue B/fr",
        "credit",
        "reatt",
        "adopt",
        "filter time (child)"
    );
    for l in rows {
        let host = l.host.as_deref().unwrap_or("-");
        let (Ok(r), Some(f)) = (&l.answer, l.figures()) else {
            let why = l
                .answer
                .as_ref()
                .err()
                .map_or_else(|| "no parent link".to_owned(), ToString::to_string);
            let _ = writeln!(t, "{:<14} {host:<12} {why}", name(l));
            continue;
        };
        let rtt = &f.figures.rtt;
        let rtt = if rtt.samples == 0 {
            "-".to_owned()
        } else {
            let (a, b, c, d) = (ms(rtt.last), ms(rtt.min), ms(rtt.max), ms(rtt.smoothed));
            format!("{a}/{b}/{c}/{d}")
        };
        let up = format!("{}/{}", f.figures.frames_out, bytes(f.figures.bytes_out));
        let down = format!("{}/{}", f.figures.frames_in, bytes(f.figures.bytes_in));
        let queue = format!("{}/{}", bytes(f.queue.bytes), f.queue.frames);
        let mut marks = String::new();
        if worst_rtt == Some(l.child) {
            marks += "  <- slowest";
        }
        if worst_queue == Some(l.child) {
            marks += "  <- most queued";
        }
        let _ = writeln!(
            t,
            "{:<14} {host:<12} {rtt:>24} {up:>18} {down:>18} {queue:>12} {:>8} {:>5} {:>5}  {}{marks}",
            name(l),
            bytes(f.queue.credit_in_use),
            r.reattached,
            r.adopted,
            filters(r),
        );
    }
    t
}

/// One link as a JSON object: `parent` (null: the master), `child`, `host`, and the
/// child's figures (`rtt_ns`, `up` and `down` frames and bytes, `queue`, `filters`,
/// `adopted`, `reattached`), or `error` saying why there are none; `state` is `answered`
/// or why not (`lost`, `timed_out`, `refused`, `bad_record`, `no_rank`).
pub fn json(l: &Link) -> serde_json::Value {
    let mut v = serde_json::json!({
        "link": name(l), "parent": l.parent, "child": l.child, "host": l.host,
        "state": l.state(),
    });
    let r = match &l.answer {
        Ok(r) => r,
        Err(why) => {
            v["error"] = why.to_string().into();
            return v;
        }
    };
    if let Some(f) = r.parent_link() {
        let (c, rtt) = (&f.figures, &f.figures.rtt);
        v["rtt_ns"] = serde_json::json!({
            "samples": rtt.samples, "last": ns(rtt.last), "min": ns(rtt.min),
            "max": ns(rtt.max), "smoothed": ns(rtt.smoothed),
        });
        v["up"] = serde_json::json!({"frames": c.frames_out, "bytes": c.bytes_out});
        v["down"] = serde_json::json!({"frames": c.frames_in, "bytes": c.bytes_in});
        v["queue"] = serde_json::json!({
            "bytes": f.queue.bytes, "frames": f.queue.frames,
            "credit_in_use": f.queue.credit_in_use,
        });
    }
    v["filters"] = r
        .filters
        .iter()
        .map(|(f, t)| {
            serde_json::json!({
                "filter": f,
                "calls": t.calls, "total_ns": ns(t.total), "max_ns": ns(t.max),
            })
        })
        .collect();
    v["adopted"] = r.adopted.into();
    v["reattached"] = r.reattached.into();
    v["adopted_now"] = r.adopted_now.clone().into();
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use sdm_client::telemetry::NoAnswer;
    use sdm_overlay::telemetry::{LinkFigures, LinkReport, Queue};

    fn link(child: u32, queue: u64, rtt_ms: u64) -> Link {
        let mut figures = LinkFigures::default();
        figures.rtt.samples = 1;
        figures.rtt.smoothed = Duration::from_millis(rtt_ms);
        let report = NodeReport {
            server: Some(child),
            links: vec![LinkReport {
                peer: None,
                figures,
                queue: Queue {
                    bytes: queue,
                    ..Queue::default()
                },
            }],
            ..NodeReport::default()
        };
        Link {
            parent: None,
            child,
            host: None,
            answer: Ok(report),
        }
    }

    #[test]
    fn the_worst_come_first_and_are_marked() {
        let mut lost = link(3, 0, 0);
        lost.answer = Err(NoAnswer::Lost {
            link_end: "server 3 died".into(),
        });
        let links = [link(0, 0, 9), link(1, 500, 1), link(2, 0, 2), lost];
        let t = table(&links, Order::Worst);
        let order: Vec<&str> = t.lines().skip(1).map(|l| &l[..12]).collect();
        assert_eq!(
            order,
            [
                "master -> 3 ",
                "master -> 1 ",
                "master -> 0 ",
                "master -> 2 "
            ]
        );
        assert!(t.contains("lost: server 3 died"), "{t}");
        let line = |c: &str| t.lines().find(|l| l.starts_with(c)).unwrap().to_owned();
        assert!(line("master -> 0").ends_with("<- slowest"), "{t}");
        assert!(line("master -> 1").ends_with("<- most queued"), "{t}");
        let j = json(&links[1]);
        assert_eq!(j["queue"]["bytes"], 500);
        assert_eq!(j["parent"], serde_json::Value::Null);
        assert_eq!(json(&links[3])["error"], "lost: server 3 died");
        assert_eq!(json(&links[3])["state"], "lost");
        assert_eq!(j["state"], "answered");
    }
}
