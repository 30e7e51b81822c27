//! sdm-fuzz: a coverage-less mutation driver for the targets of `sdm_fuzz`, plain stable Rust
//! with no tool to install, for CI and for machines where libFuzzer cannot be built.
//!
//! ```text
//! sdm-fuzz list                              target names, one a line
//! sdm-fuzz seeds TARGET DIR                  write TARGET's seed inputs into DIR
//! sdm-fuzz run TARGET SECONDS [DIR] [--seed N]   mutate for SECONDS (DIR: extra inputs)
//! sdm-fuzz replay TARGET FILE...             run saved inputs (reproduce a crash)
//! ```
//!
//! `run` starts from the target's seeds (and every file in DIR), applies stacked random
//! mutations, and keeps inputs the decoder accepted as new starting points. A panic saves
//! the input as `crash-TARGET-HASH` in the current directory; an input running longer than
//! `SDM_FUZZ_TIMEOUT` seconds (default 10) is saved as `slow-TARGET-HASH` and the driver
//! exits with status 70. The last line is `TARGET: N executions in S s (R/s), ...`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sdm_fuzz::{TARGETS, Target, target};

/// Largest input the driver builds (libFuzzer's runs use the same `-max_len`).
const MAX_LEN: usize = 4096;
/// Most inputs kept as starting points besides the seeds.
const POOL: usize = 512;

/// xorshift64*: small, fast, reproducible from `--seed`.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Bytes that often sit on a decoder's edges, and tokens of the text grammars.
const INTERESTING: &[u8] = &[0, 1, 2, 0x7f, 0x80, 0xfe, 0xff, b'0', b'9', b' '];
const TOKENS: &[&[u8]] = &[
    b"[",
    b"]",
    b"(",
    b")",
    b",",
    b";",
    b":",
    b"$",
    b"$0",
    b"-",
    b"\"",
    b"\\x",
    b"\\",
    b"0x",
    b"e",
    b"e-",
    b".",
    b"inf",
    b"nan",
    b"4294967295",
    b"4294967296",
    b"9223372036854775807",
    b"18446744073709551616",
    b"\n",
    b"[0-4294967295]",
    b"[[[[",
    b"\xff\xff\xff\xff\x0f",
    b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",
    b"\x00\x00\x00\x10",
    b"\xff\xff\xff\xff",
    b"\x3a\x30",
    b"\x3b\x30",
    b"\x08\x01",
    b"\x22\x00",
];

/// One random edit of `buf`; `other` is another corpus input for splicing.
fn mutate_once(rng: &mut Rng, buf: &mut Vec<u8>, other: &[u8]) {
    let len = buf.len();
    match rng.below(12) {
        0 if len > 0 => {
            let i = rng.below(len);
            buf[i] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let i = rng.below(len);
            buf[i] = rng.next() as u8;
        }
        2 if len > 0 => {
            let i = rng.below(len);
            buf[i] = INTERESTING[rng.below(INTERESTING.len())];
        }
        3 => {
            let n = 1 + rng.below(8);
            let at = rng.below(len + 1);
            let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            buf.splice(at..at, bytes);
        }
        4 if len > 0 => {
            let at = rng.below(len);
            let n = 1 + rng.below((len - at).min(16));
            buf.drain(at..at + n);
        }
        5 if len > 0 => {
            let from = rng.below(len);
            let n = 1 + rng.below((len - from).min(32));
            let chunk = buf[from..from + n].to_vec();
            let at = rng.below(len + 1);
            buf.splice(at..at, chunk);
        }
        6 if !other.is_empty() => {
            let cut = rng.below(len + 1);
            let from = rng.below(other.len());
            buf.truncate(cut);
            buf.extend_from_slice(&other[from..]);
        }
        7 if len >= 4 => {
            let v: u32 = match rng.below(6) {
                0 => 0,
                1 => u32::MAX,
                2 => 0x7fff_ffff,
                3 => rng.below(64) as u32,
                4 => len as u32,
                _ => rng.next() as u32,
            };
            let at = rng.below(len - 3);
            let bytes = if rng.below(2) == 0 {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            };
            buf[at..at + 4].copy_from_slice(&bytes);
        }
        8 => {
            let t = TOKENS[rng.below(TOKENS.len())];
            let at = rng.below(len + 1);
            if rng.below(2) == 0 || len == 0 {
                buf.splice(at..at, t.iter().copied());
            } else {
                let end = (at + t.len()).min(len);
                buf.splice(at..end, t.iter().copied());
            }
        }
        9 if len > 0 => buf.truncate(rng.below(len)),
        10 if len > 0 => {
            let i = rng.below(len);
            buf[i] = if rng.below(2) == 0 {
                buf[i].wrapping_add(1)
            } else {
                buf[i].wrapping_sub(1)
            };
        }
        _ => {
            // Repeat a chunk many times: long runs, deep nesting, big counts.
            if len > 0 {
                let from = rng.below(len);
                let n = 1 + rng.below((len - from).min(8));
                let chunk = buf[from..from + n].to_vec();
                let times = 1 + rng.below(64);
                let at = rng.below(len + 1);
                let rep: Vec<u8> = chunk.iter().copied().cycle().take(n * times).collect();
                buf.splice(at..at, rep);
            }
        }
    }
    buf.truncate(MAX_LEN);
}

/// FNV-1a, to name saved inputs.
fn hash(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3)
    })
}

/// Saves `input` as `PREFIX-TARGET-HASH` in the current directory and says where.
fn save(prefix: &str, name: &str, input: &[u8]) -> PathBuf {
    let path = PathBuf::from(format!("{prefix}-{name}-{:016x}", hash(input)));
    match std::fs::write(&path, input) {
        Ok(()) => eprintln!("sdm-fuzz: {name}: input saved as {}", path.display()),
        Err(e) => eprintln!("sdm-fuzz: {name}: cannot save {}: {e}", path.display()),
    }
    path
}

/// The input being run, shared with the panic hook and the watchdog.
struct Current {
    input: Mutex<Vec<u8>>,
    /// Milliseconds since `epoch` at which the current input started; `u64::MAX` when idle.
    started: AtomicU64,
    epoch: Instant,
}

fn read_dir_inputs(dir: &Path) -> Vec<Vec<u8>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    files.sort();
    files
        .iter()
        .filter(|p| p.is_file())
        .filter_map(|p| std::fs::read(p).ok())
        .filter(|b| b.len() <= MAX_LEN)
        .collect()
}

fn run(t: &'static Target, seconds: u64, dir: Option<&Path>, seed: u64) -> Result<(), String> {
    let current = Arc::new(Current {
        input: Mutex::new(Vec::new()),
        started: AtomicU64::new(u64::MAX),
        epoch: Instant::now(),
    });
    {
        let current = current.clone();
        let name = t.name;
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            default(info);
            let input = current
                .input
                .lock()
                .map(|g| g.clone())
                .unwrap_or_else(|p| p.into_inner().clone());
            eprintln!(
                "sdm-fuzz: {name}: CRASH on {} bytes: {:02x?}",
                input.len(),
                input
            );
            save("crash", name, &input);
        }));
    }
    let limit: u64 = std::env::var("SDM_FUZZ_TIMEOUT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    {
        let current = current.clone();
        let name = t.name;
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(Duration::from_millis(200));
                let s = current.started.load(Ordering::Relaxed);
                let now = current.epoch.elapsed().as_millis() as u64;
                if s != u64::MAX && now.saturating_sub(s) > limit * 1000 {
                    let input = current.input.lock().map(|g| g.clone()).unwrap_or_default();
                    eprintln!(
                        "sdm-fuzz: {name}: SLOW: one input ran over {limit} s ({} bytes)",
                        input.len()
                    );
                    save("slow", name, &input);
                    std::process::exit(70);
                }
            }
        });
    }

    let seeds = (t.seeds)();
    let mut corpus: Vec<Vec<u8>> = seeds.clone();
    if let Some(d) = dir {
        corpus.extend(read_dir_inputs(d));
    }
    let base = corpus.len();
    let mut rng = Rng(seed | 1);
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    let (mut execs, mut accepted) = (0u64, 0u64);
    let exec = |input: &[u8], execs: &mut u64| -> bool {
        {
            let mut g = current.input.lock().unwrap_or_else(|p| p.into_inner());
            g.clear();
            g.extend_from_slice(input);
        }
        current.started.store(
            current.epoch.elapsed().as_millis() as u64,
            Ordering::Relaxed,
        );
        let ok = (t.run)(input);
        current.started.store(u64::MAX, Ordering::Relaxed);
        *execs += 1;
        ok
    };
    for input in corpus.clone() {
        exec(&input, &mut execs);
    }
    let mut buf = Vec::with_capacity(MAX_LEN);
    while Instant::now() < deadline {
        for _ in 0..256 {
            let from = &corpus[rng.below(corpus.len())];
            buf.clear();
            buf.extend_from_slice(from);
            let other = corpus[rng.below(corpus.len())].clone();
            for _ in 0..1 + rng.below(6) {
                mutate_once(&mut rng, &mut buf, &other);
            }
            if exec(&buf, &mut execs) {
                accepted += 1;
                if corpus.len() < base + POOL {
                    corpus.push(buf.clone());
                } else {
                    let i = base + rng.below(POOL);
                    corpus[i] = buf.clone();
                }
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{}: {execs} executions in {secs:.1} s ({:.0}/s), {accepted} accepted, 0 crashes (sdm-fuzz, seed {seed})",
        t.name,
        execs as f64 / secs
    );
    Ok(())
}

fn usage() -> String {
    let names: Vec<&str> = TARGETS.iter().map(|t| t.name).collect();
    format!(
        "usage: sdm-fuzz list | seeds TARGET DIR | run TARGET SECONDS [DIR] [--seed N] | replay TARGET FILE...\n\
         targets: {}",
        names.join(" ")
    )
}

fn find(name: Option<&String>) -> Result<&'static Target, String> {
    let name = name.ok_or_else(usage)?;
    target(name).ok_or_else(|| format!("unknown target '{name}'\n{}", usage()))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("list") => {
            for t in TARGETS {
                println!("{}", t.name);
            }
            Ok(())
        }
        Some("seeds") => find(args.get(1)).and_then(|t| {
            let dir = PathBuf::from(args.get(2).ok_or_else(usage)?);
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            for s in (t.seeds)() {
                let p = dir.join(format!("seed-{:016x}", hash(&s)));
                std::fs::write(&p, &s).map_err(|e| format!("{}: {e}", p.display()))?;
            }
            Ok(())
        }),
        Some("run") => find(args.get(1)).and_then(|t| {
            let secs: u64 = args
                .get(2)
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| format!("SECONDS must be a whole number\n{}", usage()))?;
            let mut dir = None;
            let mut seed = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1);
            let mut rest = args[3..].iter();
            while let Some(a) = rest.next() {
                if a == "--seed" {
                    seed = rest
                        .next()
                        .and_then(|s| s.parse().ok())
                        .ok_or_else(|| format!("--seed needs a number\n{}", usage()))?;
                } else {
                    dir = Some(PathBuf::from(a));
                }
            }
            run(t, secs, dir.as_deref(), seed)
        }),
        Some("replay") => find(args.get(1)).and_then(|t| {
            for f in &args[2..] {
                let b = std::fs::read(f).map_err(|e| format!("{f}: {e}"))?;
                let start = Instant::now();
                let ok = (t.run)(&b);
                println!(
                    "{f}: {} bytes, {} in {:?}",
                    b.len(),
                    if ok { "accepted" } else { "refused" },
                    start.elapsed()
                );
            }
            Ok(())
        }),
        _ => Err(usage()),
    };
    if let Err(e) = result {
        let _ = writeln!(std::io::stderr(), "sdm-fuzz: {e}");
        std::process::exit(2);
    }
}
