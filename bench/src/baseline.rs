//! The front-end of the minimal-relay baseline: start `N + 1` `sdm-relay` processes in the
//! same binomial tree as sdm (position 0 stands for the master), wire them up, drive frames.
//!
//! Start-up mirrors `Session::launch`: spawn every relay (each binds 127.0.0.1:0 and prints
//! `RELAY-LISTEN POS PORT`), read the ports, hand each relay its own value and its children's
//! ports on stdin, connect to position 0, and wait for the acknowledgement that climbs the
//! tree once every node has connected to all of its children. Blocking std I/O throughout.

use std::io::{self, BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sdm_topology::Shape;

use crate::wire::{ACK_OP, FRAME, Frame, read_frame};

/// Finds the `sdm-relay` binary: `$SDM_RELAY_BIN`, else next to the running program.
pub fn find_relay_binary() -> io::Result<PathBuf> {
    if let Some(p) = std::env::var_os("SDM_RELAY_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    let cand = exe.with_file_name("sdm-relay");
    if cand.is_file() {
        Ok(cand)
    } else {
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "no sdm-relay next to {}; build it (cargo build --release -p sdm-bench) or set SDM_RELAY_BIN",
                exe.display()
            ),
        ))
    }
}

/// The relay processes; killed and reaped on drop if still running.
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            if matches!(c.try_wait(), Ok(None)) {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
    }
}

fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// When each start-up phase ended, counted from the first spawn.
#[derive(Debug, Clone, Copy, Default)]
pub struct Phases {
    /// Every relay process spawned.
    pub spawned: Duration,
    /// Every relay printed its port.
    pub listening: Duration,
    /// Every relay got its line (value and children's ports) on stdin.
    pub tables_sent: Duration,
    /// The root acknowledged the whole tree.
    pub acked: Duration,
}

/// A running relay tree, driven from this process.
pub struct RelayTree {
    procs: Procs,
    root: TcpStream,
    reader: BufReader<TcpStream>,
    n: u32,
    next_op: u64,
    phases: Phases,
    connected: u64,
}

impl RelayTree {
    /// Starts `n + 1` relays from `relay` and connects the binomial tree over them; returns
    /// once the root acknowledged the whole tree (or with the first error).
    pub fn launch(relay: &Path, n: u32) -> io::Result<Self> {
        let started = Instant::now();
        let topo = Shape::Binomial.build(n);
        let mut procs = Procs(Vec::with_capacity(n as usize + 1));
        for pos in 0..=n {
            let child = Command::new(relay)
                .arg(pos.to_string())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("spawning relay {pos} ({}): {e}", relay.display()),
                    )
                })?;
            procs.0.push(child);
        }
        let mut phases = Phases {
            spawned: started.elapsed(),
            ..Phases::default()
        };
        let mut ports = Vec::with_capacity(procs.0.len());
        for (pos, c) in procs.0.iter_mut().enumerate() {
            let out = c.stdout.take().expect("stdout is piped");
            let mut line = String::new();
            BufReader::new(out).read_line(&mut line)?;
            let mut f = line.split_whitespace();
            let port = match (f.next(), f.next(), f.next()) {
                (Some("RELAY-LISTEN"), Some(p), Some(port)) if p == pos.to_string() => {
                    port.parse::<u16>().ok()
                }
                _ => None,
            };
            ports.push(port.ok_or_else(|| bad(format!("relay {pos} said {line:?}")))?);
        }
        phases.listening = started.elapsed();
        for (pos, c) in procs.0.iter_mut().enumerate() {
            let value = (pos as u64).saturating_sub(1);
            let mut line = value.to_string();
            for k in topo.child_positions(pos as u64) {
                line.push(' ');
                line.push_str(&ports[k as usize].to_string());
            }
            line.push('\n');
            let mut stdin = c.stdin.take().expect("stdin is piped");
            stdin.write_all(line.as_bytes())?;
        }
        phases.tables_sent = started.elapsed();
        let root = TcpStream::connect(("127.0.0.1", ports[0]))?;
        root.set_nodelay(true)?;
        let mut reader = BufReader::with_capacity(64 * FRAME, root.try_clone()?);
        let ack = read_frame(&mut reader)?
            .ok_or_else(|| bad("the root relay closed before acknowledging".into()))?;
        if ack.op != ACK_OP {
            return Err(bad(format!("expected the start-up ack, got op {}", ack.op)));
        }
        phases.acked = started.elapsed();
        Ok(Self {
            procs,
            root,
            reader,
            n,
            next_op: 1,
            phases,
            connected: ack.value,
        })
    }

    /// Wall time from the first spawn to the root's acknowledgement.
    pub fn startup(&self) -> Duration {
        self.phases.acked
    }

    /// When each start-up phase ended.
    pub fn phases(&self) -> Phases {
        self.phases
    }

    /// Nodes the acknowledgement counted (positions `0..=n`, so `n + 1` when all connected).
    pub fn connected(&self) -> u64 {
        self.connected
    }

    /// Number of server positions (`n`).
    pub fn size(&self) -> u32 {
        self.n
    }

    /// The sum every reply must carry: servers `0..n` contribute their ids.
    pub fn expected_sum(&self) -> u64 {
        let n = u64::from(self.n);
        n * n.saturating_sub(1) / 2
    }

    /// Sends one frame down the tree; returns its op id.
    pub fn send(&mut self) -> io::Result<u64> {
        let op = self.next_op;
        self.next_op += 1;
        self.root.write_all(&Frame { op, value: 0 }.encode())?;
        Ok(op)
    }

    /// Reads the next reply (replies come back in the order the ops went down).
    pub fn recv(&mut self) -> io::Result<Frame> {
        read_frame(&mut self.reader)?
            .ok_or_else(|| bad("the root relay closed the connection".into()))
    }

    /// Sends one frame and waits for its reply; checks the op id.
    pub fn request(&mut self) -> io::Result<Frame> {
        let op = self.send()?;
        let r = self.recv()?;
        if r.op != op {
            return Err(bad(format!("reply for op {} while waiting for {op}", r.op)));
        }
        Ok(r)
    }

    /// Closes the root link (each relay closes its children's links in turn and exits),
    /// waits up to `grace` for every process, then kills the rest.
    pub fn shutdown(self, grace: Duration) {
        let RelayTree {
            mut procs,
            root,
            reader,
            ..
        } = self;
        let _ = root.shutdown(std::net::Shutdown::Both);
        drop(reader);
        drop(root);
        let deadline = Instant::now() + grace;
        for c in &mut procs.0 {
            while matches!(c.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        // Drop kills and reaps whatever is left.
    }
}
