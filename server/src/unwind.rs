//! Stack walking of a ptrace-stopped process: unwinds it from DWARF call-frame information
//! (framehop over each mapped ELF's `.eh_frame`/`.debug_frame`) and names every frame.
//!
//! [`Stacks`] keeps what it read of each mapped file (unwind sections, symbols, DWARF) by
//! path, inode and load address (so, load bias), so later walks of the same process cost a
//! few stack reads. A pc that
//! no call-frame information covers is unwound through its frame pointer. A return into a
//! signal trampoline (`mov $15,%rax; syscall`: glibc's `__restore_rt`, or one in the vdso)
//! becomes a `<signal handler called>` frame, and the walk continues in the interrupted code
//! with the registers the kernel saved in the `ucontext_t` on the stack. Functions inlined at
//! a pc are frames of their own (innermost first, all at the same pc), as gdb shows them.
//!
//! What is read of a file (its unwind sections, symbols and DWARF) does not depend on where
//! a process maps it: [`Files`] keeps it once per file (by device, inode, size and
//! modification time) for the whole server, so the monitors of all its local ranks, each
//! on its own thread, share one copy of each binary's tables.

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{FrameAddress, Unwinder};
use nix::sys::ptrace;
use nix::unistd::Pid;

mod files;
use files::{Bytes, FileImage, Image, load_bias};
pub(crate) use files::{DebugSource, Files};

/// The name given to a signal trampoline's frame (gdb's).
pub const SIGNAL_FRAME: &str = "<signal handler called>";

/// At most this many frames are walked (a corrupt stack may loop).
const MAX_FRAMES: usize = 256;

/// x86-64 Linux's `rt_sigreturn` sequence, the whole body of a signal trampoline:
/// `mov $15,%rax; syscall`.
const SIGRETURN: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];

/// Offsets in the `ucontext_t` a trampoline's stack pointer points at (past `uc_flags`,
/// `uc_link` and `uc_stack`, `uc_mcontext.gregs` in the kernel's `struct sigcontext`
/// order: r8..r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip).
const UC_RBP: u64 = 40 + 10 * 8;
const UC_RSP: u64 = 40 + 15 * 8;
const UC_RIP: u64 = 40 + 16 * 8;

/// One symbolized stack frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Program counter (return address for outer frames; the same pc for a function and
    /// the ones inlined into it).
    pub pc: u64,
    /// Frame pointer register (rbp) as recovered for this frame.
    pub fp: u64,
    /// Function name, or the address in hex.
    pub function: String,
    /// `file:line` where debug info exists.
    pub location: Option<String>,
    /// Whether this function was inlined into the next (outer) frame's function.
    pub inlined: bool,
    /// The mapped file holding the pc (no directory: `libc.so.6`, `[vdso]`); empty where no
    /// file is mapped there.
    pub module: String,
    /// The pc as an address in that file (the same in every process mapping the file, what
    /// `module+offset` names); the pc itself where no file is mapped there.
    pub offset: u64,
}

/// The name of a frame whose pc is in no mapped file (gdb's): never the address, which
/// differs from process to process.
pub const UNKNOWN_FRAME: &str = "??";

/// Why a stack could not be walked.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UnwindError {
    /// The registers of the stopped process could not be read.
    #[error("reading the registers of process {pid}: {source}")]
    Registers {
        /// The process.
        pid: Pid,
        /// What ptrace said.
        source: nix::Error,
    },
    /// The process's memory could not be opened.
    #[error("opening /proc/{pid}/mem: {source}")]
    Memory {
        /// The process.
        pid: Pid,
        /// What the open said.
        source: std::io::Error,
    },
}

pub(crate) use sdm_deploy::maps::Mapping;

/// The named mappings of a process (files and `[vdso]`-style areas; anonymous ones left out).
pub(crate) fn read_maps(pid: Pid) -> Vec<Mapping> {
    let mut maps = sdm_deploy::maps::read(pid).unwrap_or_default();
    maps.retain(|m| !m.path.as_os_str().is_empty());
    maps
}

/// The registers a walk starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ThreadRegs {
    /// Instruction pointer.
    pub(crate) rip: u64,
    /// Stack pointer.
    pub(crate) rsp: u64,
    /// Frame pointer.
    pub(crate) rbp: u64,
}

/// A frame as the unwinder found it, before naming.
#[derive(Debug, Clone, Copy)]
struct RawFrame {
    pc: u64,
    fp: u64,
    /// `pc` is a return address (look up the call before it) rather than where the code
    /// stopped (the innermost frame, or code a signal interrupted).
    returns: bool,
    /// `pc` is a signal trampoline.
    trampoline: bool,
}

/// The memory of a stopped process, read through /proc/PID/mem.
struct Memory(std::fs::File);

impl Memory {
    fn open(pid: Pid) -> Result<Self, UnwindError> {
        std::fs::File::open(format!("/proc/{pid}/mem"))
            .map(Self)
            .map_err(|source| UnwindError::Memory { pid, source })
    }

    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        self.0.read_exact_at(buf, addr).is_ok()
    }

    fn word(&self, addr: u64) -> Option<u64> {
        let mut w = [0u8; 8];
        self.read(addr, &mut w).then(|| u64::from_le_bytes(w))
    }

    fn is_trampoline(&self, pc: u64) -> bool {
        let mut code = [0u8; SIGRETURN.len()];
        self.read(pc, &mut code) && code == SIGRETURN
    }
}

/// A mapped image: its path, inode and lowest mapped address (the same file mapped at the
/// same place has the same load bias).
type ImageKey = (PathBuf, u64, u64);

/// Walks and names the stacks of processes, keeping where each mapped image is (the
/// images themselves come from the shared [`Files`]).
pub(crate) struct Stacks {
    /// `None`: not an ELF image this can read.
    images: HashMap<ImageKey, Option<Image>>,
    files: Arc<Files>,
}

impl Default for Stacks {
    /// Walks sharing the server's one cache of files ([`Files::global`]).
    fn default() -> Self {
        Self::with_files(Files::global())
    }
}

impl Stacks {
    /// Walks reading files through `files`.
    pub(crate) fn with_files(files: Arc<Files>) -> Self {
        Self {
            images: HashMap::new(),
            files,
        }
    }

    /// The stack of the ptrace-stopped process `pid`, innermost frame first, each frame
    /// named (inlined functions as frames of their own).
    pub(crate) fn backtrace(&mut self, pid: Pid) -> Result<Vec<Frame>, UnwindError> {
        let _walking = crate::gate::walks().enter();
        let raw = self.unwind(pid)?;
        Ok(self.name_frames(&raw))
    }

    /// The stack of a stopped thread of `pid` whose registers are given (another tracer,
    /// gdb, holds it), named as [`Stacks::backtrace`] names them.
    pub(crate) fn backtrace_from(
        &mut self,
        pid: Pid,
        regs: ThreadRegs,
    ) -> Result<Vec<Frame>, UnwindError> {
        let _walking = crate::gate::walks().enter();
        let raw = self.unwind_from(pid, regs)?;
        Ok(self.name_frames(&raw))
    }

    /// Names raw frames (inlined functions as frames of their own).
    fn name_frames(&self, raw: &[RawFrame]) -> Vec<Frame> {
        raw.iter()
            .flat_map(|f| {
                if f.trampoline {
                    return vec![Frame {
                        function: SIGNAL_FRAME.into(),
                        ..self.unnamed(f)
                    }];
                }
                // Return addresses point after the call: look up the call itself.
                let probe = if f.returns { f.pc - 1 } else { f.pc };
                match self.image_at(probe) {
                    Some(image) => image.frames(f.pc, f.fp, probe.wrapping_sub(image.bias)),
                    None => vec![self.unnamed(f)],
                }
            })
            .collect()
    }

    /// A frame named [`UNKNOWN_FRAME`], in the module mapped at its pc if any.
    fn unnamed(&self, f: &RawFrame) -> Frame {
        let (module, offset) = match self.image_at(f.pc) {
            Some(i) => (i.name().to_owned(), f.pc.wrapping_sub(i.bias)),
            None => (String::new(), f.pc),
        };
        Frame {
            pc: f.pc,
            fp: f.fp,
            function: UNKNOWN_FRAME.into(),
            location: None,
            inlined: false,
            module,
            offset,
        }
    }

    /// The (pc, frame pointer) pairs of the stack of the ptrace-stopped process `pid`,
    /// innermost first, one per real frame (no inline frames).
    pub(crate) fn raw_backtrace(&mut self, pid: Pid) -> Result<Vec<(u64, u64)>, UnwindError> {
        Ok(self.unwind(pid)?.iter().map(|f| (f.pc, f.fp)).collect())
    }

    fn image_at(&self, pc: u64) -> Option<&Image> {
        self.images
            .values()
            .flatten()
            .find(|i| i.avma.contains(&pc))
    }

    /// Reads (or finds cached) the images mapped in `pid`; returns the keys of those mapped now.
    fn load_images(&mut self, pid: Pid, mem: &Memory) -> Vec<ImageKey> {
        let maps = read_maps(pid);
        let mut keys: Vec<ImageKey> = Vec::new();
        for m in maps.iter().filter(|m| m.executable) {
            let vdso = m.path.as_os_str() == "[vdso]";
            if !vdso && !m.path.starts_with("/") {
                continue;
            }
            let all = maps.iter().filter(|o| o.path == m.path);
            let avma = all.clone().map(|o| o.start).min().unwrap_or(m.start)
                ..all.map(|o| o.end).max().unwrap_or(m.end);
            let key = (m.path.clone(), m.inode, avma.start);
            if keys.contains(&key) {
                continue;
            }
            // The same file (inode) at the same place: the same image, read once.
            if !matches!(self.images.get(&key), Some(Some(i)) if i.avma == avma) {
                let file = if vdso {
                    // Read from the process (it is not a file); small, so not shared.
                    let mut buf = vec![0u8; (m.end - m.start) as usize];
                    mem.read(m.start, &mut buf)
                        .then(|| FileImage::new("[vdso]", &buf, None))
                        .flatten()
                        .map(Arc::new)
                } else {
                    self.files.get(&m.path, m.inode)
                };
                let offset = if vdso { 0 } else { m.offset };
                let image = file.and_then(|file| {
                    let bias = load_bias(&file.segments, m.start, offset)?;
                    Some(Image::new(file, avma, bias))
                });
                self.images.insert(key.clone(), image);
            }
            keys.push(key);
        }
        // Forget images no longer mapped here (unloaded libraries, a process gone).
        self.images.retain(|k, _| keys.contains(k));
        keys
    }

    /// The files mapped in the ptrace-stopped process `pid` (the vdso left out) with what
    /// native `print` reads of each, and the canonical frame address of the innermost frame
    /// whose registers are `regs` (the stack pointer after one step of unwinding).
    pub(crate) fn native_view(
        &mut self,
        pid: Pid,
        regs: ThreadRegs,
    ) -> Result<(Vec<crate::natprint::Mapped>, Option<u64>), UnwindError> {
        let mem = Memory::open(pid)?;
        let keys = self.load_images(pid, &mem);
        let mut unwinder = UnwinderX86_64::<Bytes>::new();
        let mut files = Vec::new();
        for k in &keys {
            if let Some(Some(image)) = self.images.get(k) {
                unwinder.add_module(image.module.clone());
                if image.file.path.is_some() {
                    let segments = image.file.segments.iter();
                    files.push(crate::natprint::Mapped {
                        path: k.0.clone(),
                        avma: segments
                            .map(|s| {
                                let start = s.address.wrapping_add(image.bias);
                                start..start.wrapping_add(s.memsize)
                            })
                            .chain([image.avma.clone()])
                            .collect(),
                        bias: image.bias,
                        debug: DebugSource(image.file.clone()),
                    });
                }
            }
        }
        let mut cache = CacheX86_64::<_>::new();
        let mut read_stack = |addr: u64| mem.word(addr).ok_or(());
        let mut r = UnwindRegsX86_64::new(regs.rip, regs.rsp, regs.rbp);
        let address = FrameAddress::from_instruction_pointer(regs.rip);
        let cfa = match unwinder.unwind_frame(address, &mut r, &mut cache, &mut read_stack) {
            Ok(Some(_)) => Some(r.sp()),
            _ => None,
        };
        Ok((files, cfa))
    }

    fn unwind(&mut self, pid: Pid) -> Result<Vec<RawFrame>, UnwindError> {
        let regs = ptrace::getregs(pid).map_err(|source| UnwindError::Registers { pid, source })?;
        self.unwind_from(
            pid,
            ThreadRegs {
                rip: regs.rip,
                rsp: regs.rsp,
                rbp: regs.rbp,
            },
        )
    }

    fn unwind_from(&mut self, pid: Pid, regs: ThreadRegs) -> Result<Vec<RawFrame>, UnwindError> {
        let mem = Memory::open(pid)?;
        let keys = self.load_images(pid, &mem);
        let mut unwinder = UnwinderX86_64::<Bytes>::new();
        for k in &keys {
            if let Some(Some(image)) = self.images.get(k) {
                unwinder.add_module(image.module.clone());
            }
        }
        Ok(walk(&unwinder, &mem, regs.rip, regs.rsp, regs.rbp))
    }
}

/// Walks the stack from the registers of the stopped code; stops at the outermost frame
/// (CFI marks it, or a null return address), on memory it cannot read, or at
/// [`MAX_FRAMES`].
fn walk(
    unwinder: &UnwinderX86_64<Bytes>,
    mem: &Memory,
    rip: u64,
    rsp: u64,
    rbp: u64,
) -> Vec<RawFrame> {
    let mut cache = CacheX86_64::<_>::new();
    let mut read_stack = |addr: u64| mem.word(addr).ok_or(());
    let mut regs = UnwindRegsX86_64::new(rip, rsp, rbp);
    let mut address = FrameAddress::from_instruction_pointer(rip);
    let mut frames = vec![RawFrame {
        pc: rip,
        fp: rbp,
        returns: false,
        trampoline: false,
    }];
    while frames.len() < MAX_FRAMES {
        if frames.last().is_some_and(|f| f.trampoline) {
            // The stack pointer is past the popped return address into the trampoline:
            // at the ucontext_t of the rt_sigframe the kernel pushed.
            let uc = regs.sp();
            let (Some(ip), Some(sp), Some(bp)) = (
                mem.word(uc + UC_RIP),
                mem.word(uc + UC_RSP),
                mem.word(uc + UC_RBP),
            ) else {
                break;
            };
            regs = UnwindRegsX86_64::new(ip, sp, bp);
            address = FrameAddress::from_instruction_pointer(ip);
            frames.push(RawFrame {
                pc: ip,
                fp: bp,
                returns: false,
                trampoline: false,
            });
            continue;
        }
        let ra = match unwinder.unwind_frame(address, &mut regs, &mut cache, &mut read_stack) {
            Ok(Some(ra)) => ra,
            Ok(None) | Err(_) => break,
        };
        let Some(next) = FrameAddress::from_return_address(ra) else {
            break;
        };
        address = next;
        frames.push(RawFrame {
            pc: ra,
            fp: regs.bp(),
            returns: true,
            trampoline: mem.is_trampoline(ra),
        });
    }
    frames
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Walks a `sleep` (with `stacks`) until it is past its start-up and in the sleep;
    /// returns its frames and the files it maps executable (what a walk reads), and ends it.
    fn walk_a_sleep(stacks: &mut Stacks) -> (Vec<Frame>, BTreeSet<PathBuf>) {
        let mut child = std::process::Command::new("sleep")
            .arg("100")
            .spawn()
            .unwrap();
        let pid = Pid::from_raw(child.id() as i32);
        ptrace::seize(pid, ptrace::Options::empty()).unwrap();
        let mut frames = Vec::new();
        for _ in 0..500 {
            ptrace::interrupt(pid).unwrap();
            nix::sys::wait::waitpid(pid, Some(nix::sys::wait::WaitPidFlag::__WALL)).unwrap();
            frames = stacks.backtrace(pid).unwrap();
            if frames[0].function == "clock_nanosleep" {
                break;
            }
            ptrace::cont(pid, None).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let files = read_maps(pid)
            .into_iter()
            .filter(|m| m.executable && m.path.starts_with("/"))
            .map(|m| m.path)
            .collect();
        let _ = child.kill();
        let _ = child.wait();
        (frames, files)
    }

    #[test]
    fn sleeping_process_is_unwound_through_libc() {
        // `sleep` waits in libc's nanosleep, which keeps no frame pointer: its caller is
        // found through libc's .eh_frame.
        let (frames, _) = walk_a_sleep(&mut Stacks::default());
        let names: Vec<&str> = frames.iter().map(|f| f.function.as_str()).collect();
        assert_eq!(names[..2], ["clock_nanosleep", "nanosleep"], "{frames:?}");
        // Below libc, the (stripped) program's frames and its start: more than the two.
        assert!(names.len() > 3, "{frames:?}");
    }

    /// Two processes of one binary, walked at once from two threads (two ranks' monitors),
    /// each with its own [`Stacks`]: each file they map (the program, libc, the loader) is
    /// read once, and both walks name the same frames. Every monitor's walks share the
    /// server's one cache.
    #[test]
    fn monitors_of_one_binary_share_each_file() {
        let files = Arc::new(Files::default());
        let walk = |files: Arc<Files>| {
            std::thread::spawn(move || {
                let mut stacks = Stacks::with_files(files);
                let walked = walk_a_sleep(&mut stacks);
                (walked, stacks)
            })
        };
        let (a, b) = (walk(files.clone()), walk(files.clone()));
        let (((a, mapped), _sa), ((b, _), _sb)) = (a.join().unwrap(), b.join().unwrap());
        let names = |f: &[Frame]| f.iter().map(|f| f.function.clone()).collect::<Vec<_>>();
        assert_eq!(names(&a)[..2], ["clock_nanosleep", "nanosleep"], "{a:?}");
        assert_eq!(names(&a), names(&b));
        assert!(mapped.len() >= 2, "{mapped:?}");
        assert_eq!(files.reads(), mapped.len(), "each of {mapped:?} read once");
        assert!(Arc::ptr_eq(
            &Stacks::default().files,
            &Stacks::default().files
        ));
    }
}
