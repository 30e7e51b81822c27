//! The requests every sdm server answers by itself, before any payload protocol (OMIS)
//! is layered on: `sdm-init`, `ping`, `info`, `value`, `sleep MS`. Anything else gets an
//! error reply naming the request.

use std::time::Duration;

use sdm_overlay::driver::Delivery;

use crate::init::INIT_PREFIX;

/// This host's name (from /proc; `unknown` if unreadable).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into())
}

/// One line describing this server: host, pid, resident memory and load average.
pub fn info_line() -> String {
    let rss_kb = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned))
        })
        .unwrap_or_else(|| "?".into());
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into());
    format!(
        "host={} pid={} rss_kb={rss_kb} load={load}",
        hostname(),
        std::process::id()
    )
}

/// Answers one delivered request for server `id`.
pub fn handle(id: u32, d: Delivery) {
    let text = String::from_utf8_lossy(&d.payload);
    if text.starts_with(INIT_PREFIX) {
        d.reply.send("ready");
        return;
    }
    let text = text.trim().to_owned();
    let (verb, arg) = text.split_once(' ').unwrap_or((&text, ""));
    match verb {
        "ping" => d.reply.send("pong"),
        "info" => d.reply.send(info_line()),
        "value" => d.reply.send(id.to_string()),
        "sleep" => match arg.trim().parse::<u64>() {
            Ok(ms) => {
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    d.reply.send("ok");
                });
            }
            Err(_) => d
                .reply
                .send(format!("error: sleep needs milliseconds, got {arg:?}")),
        },
        _ => d.reply.send(format!(
            "error: unknown request {verb:?} (expected ping, info, value or sleep MS)"
        )),
    }
}
