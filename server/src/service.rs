//! The requests every sdm server answers by itself, before any payload protocol (OMIS)
//! is layered on: `sdm-init`, `ping`, `info`, `value`, `sleep MS`, `procstat` (the
//! monitored program's metrics as a JSON object, for `sdm top`) and `counters` (the
//! program's own counters, see [`crate::counters`]). Anything else gets an
//! error reply naming the request.

use std::time::Duration;

use sdm_overlay::driver::Delivery;

use std::sync::Arc;

use crate::monitor::{Monitor, MonitorHandle, hostname};
use sdm_omis::Registry;
use sdm_overlay::init::INIT_SERVICE;

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

/// What a server needs to answer requests: its id, its monitor and the OMIS services.
#[derive(Clone)]
pub struct ServerContext {
    /// This server's id.
    pub id: u32,
    /// The node-local monitor.
    pub monitor: MonitorHandle,
    /// The OMIS services.
    pub registry: Arc<Registry<Monitor>>,
    /// The program's own counters (see [`crate::counters`]).
    pub counters: crate::counters::Store,
}

/// Answers one delivered request: OMIS requests (they start with a request id) go to the
/// monitor thread in arrival order; the rest are the built-in requests.
pub fn handle(ctx: &ServerContext, d: Delivery) {
    let text = String::from_utf8_lossy(&d.payload).into_owned();
    if d.service == INIT_SERVICE {
        if let Ok(spec) = sdm_overlay::init::InitSpec::from_payload(&d.payload) {
            drop(ctx.monitor.submit(move |m| m.servers = spec.servers));
        }
        d.reply.send("ready");
        return;
    }
    if text.trim_start().starts_with(|c: char| c.is_ascii_digit()) {
        let reg = ctx.registry.clone();
        // Queued now, in delivery order: a stop and a cont sent back to back run in order.
        let rx = ctx
            .monitor
            .submit(move |m| crate::services::execute(&reg, m, &text));
        tokio::spawn(async move {
            let reply = rx
                .await
                .unwrap_or_else(|_| "0 [] error(\"monitor gone\")".into());
            d.reply.send(reply);
        });
        return;
    }
    if text.trim() == "counters" {
        d.reply.send(ctx.counters.json());
        return;
    }
    if text.trim() == "procstat" {
        // The program's metrics as a JSON object (the `stats` filter's leaf input).
        let rx = ctx.monitor.submit(|m| m.procstat());
        tokio::spawn(async move {
            let reply = match rx.await {
                Ok(Ok(pairs)) => {
                    let map: serde_json::Map<String, serde_json::Value> = pairs
                        .into_iter()
                        .map(|(k, v)| (k.to_owned(), serde_json::json!(v)))
                        .collect();
                    serde_json::Value::Object(map).to_string()
                }
                Ok(Err(e)) => format!("error: procstat: {e}"),
                Err(_) => "error: procstat: monitor gone".to_owned(),
            };
            d.reply.send(reply);
        });
        return;
    }
    handle_builtin(ctx.id, d);
}

/// Answers the built-in (non-OMIS) requests for server `id`.
pub fn handle_builtin(id: u32, d: Delivery) {
    let text = String::from_utf8_lossy(&d.payload);
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
