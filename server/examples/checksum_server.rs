//! checksum_server: a whole tool's server daemon in a few lines: the stock `sdm server`
//! services plus a `checksum` service with a binary protocol of its own.
//!
//! The protocol (the same as the C plugin `examples/c/checksum_service.c`): the first byte
//! is the opcode. `0x00` echo: the reply is the request, byte for byte. `0x01` checksum,
//! then a u64 address and a u32 length, little-endian: the reply is the 8-byte
//! little-endian FNV-1a 64 of that region of the monitored program's memory
//! (/proc/PID/mem); address 0 means the start of the first mapping of the program's
//! executable. Ranks running the same binary reply identical bytes, so the tree merges
//! them into one group.
//!
//! Run a tree of it with `SessionOptions::program` naming this binary (the front-end starts
//! it as the master and as every server); tag commands `checksum`.

use std::os::unix::fs::FileExt;

use sdm_server::{Reply, Request, Server};

/// The whole daemon: the stock services and `checksum`.
fn main() -> std::process::ExitCode {
    Server::builder().service("checksum", checksum).main()
}

/// Answers one `checksum` request: echo at once, checksums off the event loop.
fn checksum(req: Request, reply: Reply) {
    match req.payload().first() {
        Some(0x00) => reply.send(req.payload().clone()),
        Some(0x01) => {
            tokio::spawn(async move {
                let pid = req.pid().await;
                let payload = req.payload().clone();
                let answer =
                    tokio::task::spawn_blocking(move || region_checksum(pid, &payload)).await;
                match answer {
                    Ok(Ok(sum)) => reply.send(sum.to_le_bytes().to_vec()),
                    Ok(Err(why)) => reply.error(why),
                    Err(e) => reply.error(e),
                }
            });
        }
        Some(op) => reply.error(format!("unknown opcode {op:#04x} (0 echo, 1 checksum)")),
        None => reply.error("empty request: the first byte is the opcode (0 echo, 1 checksum)"),
    }
}

/// FNV-1a 64 of the region a `0x01` request names, in the memory of process `pid`.
fn region_checksum(pid: Option<u32>, req: &[u8]) -> Result<u64, String> {
    let [_, a0, a1, a2, a3, a4, a5, a6, a7, l0, l1, l2, l3] = req else {
        return Err(format!(
            "checksum needs 13 bytes (opcode, u64 address, u32 length), got {}",
            req.len()
        ));
    };
    // Not naming the server: identical errors of many servers merge into one group.
    let pid = pid.ok_or("this server controls no program: start one first")?;
    let mut addr = u64::from_le_bytes([*a0, *a1, *a2, *a3, *a4, *a5, *a6, *a7]);
    let len = u32::from_le_bytes([*l0, *l1, *l2, *l3]);
    if addr == 0 {
        addr =
            exe_start(pid).ok_or_else(|| format!("process {pid}: its executable is not mapped"))?;
    }
    let mem = std::fs::File::open(format!("/proc/{pid}/mem"))
        .map_err(|e| format!("process {pid}: /proc/{pid}/mem: {e}"))?;
    let mut hash = 0xcbf2_9ce4_8422_2325_u64;
    let mut buf = vec![0u8; 1 << 16];
    let mut done = 0u64;
    while done < u64::from(len) {
        let want = (u64::from(len) - done).min(buf.len() as u64) as usize;
        mem.read_exact_at(&mut buf[..want], addr + done)
            .map_err(|e| {
                format!(
                    "process {pid}: reading {len} bytes at {:#x}: {e}",
                    addr + done
                )
            })?;
        for b in &buf[..want] {
            hash = (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
        done += want as u64;
    }
    Ok(hash)
}

/// The start of the first mapping of process `pid`'s executable.
fn exe_start(pid: u32) -> Option<u64> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    maps.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let range = f.next()?;
        let path = f.nth(4)?;
        (std::path::Path::new(path) == exe)
            .then(|| u64::from_str_radix(range.split_once('-')?.0, 16).ok())?
    })
}
