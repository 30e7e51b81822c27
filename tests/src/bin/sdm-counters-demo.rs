//! sdm-counters-demo: a program that feeds its own counters to the sdm server that started
//! it, with the Rust client (`sdm_client::counters::Client`): `ops` is its rank, `bytes_received` 1.5 kB; then it
//! waits to be killed. Run it under `sdm run -n 8 -c 'sleep 1' -c counters -c kill -- …`.

fn main() -> std::io::Result<()> {
    let rank: u32 = std::env::var("SDM_RANK")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    let mut c = sdm_client::counters::Client::from_env()?;
    c.set("ops", rank)?;
    c.set("bytes_received", 1.5e3)?;
    drop(c);
    loop {
        std::thread::park();
    }
}
