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

use std::collections::HashMap;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder};
use nix::sys::ptrace;
use nix::unistd::Pid;

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

/// A function symbol of an ELF symbol table.
#[derive(Debug)]
struct Symbol {
    address: u64,
    size: u64,
    name: String,
}

/// What a walk needs of one mapped ELF image: its unwind module, symbols and DWARF.
struct Image {
    /// The file's name (no directory), or the area's (`[vdso]`).
    name: String,
    /// Where it is mapped (all its mappings).
    avma: Range<u64>,
    /// Actual address minus the address the file states.
    bias: u64,
    module: Module<Vec<u8>>,
    /// Function symbols by address.
    symbols: Vec<Symbol>,
    /// DWARF for function names, inline chains and lines (files only; `None` when the
    /// file cannot be loaded).
    dwarf: Option<addr2line::Loader>,
}

impl Image {
    /// Reads `data` (the ELF image of `name`, mapped at `avma` with `bias`); `path` is the
    /// file to load DWARF from.
    fn new(
        name: &str,
        data: &[u8],
        avma: Range<u64>,
        bias: u64,
        path: Option<&Path>,
    ) -> Option<Self> {
        use object::{Object, ObjectSection, ObjectSymbol};
        let file = object::File::parse(data).ok()?;
        let section = |n: &str| {
            let s = file.section_by_name(n)?;
            let range = s.address()..s.address() + s.size();
            Some((range, s.data().ok()?.to_vec()))
        };
        let (text_svma, text) = section(".text").unzip();
        let (eh_frame_svma, eh_frame) = section(".eh_frame").unzip();
        let (eh_frame_hdr_svma, eh_frame_hdr) = section(".eh_frame_hdr").unzip();
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma,
            text,
            got_svma: file
                .section_by_name(".got")
                .map(|s| s.address()..s.address() + s.size()),
            eh_frame_svma,
            eh_frame,
            eh_frame_hdr_svma,
            eh_frame_hdr,
            debug_frame: section(".debug_frame").map(|(_, d)| d),
            ..ExplicitModuleSectionInfo::default()
        };
        let module = Module::new(name.to_owned(), avma.clone(), bias, info);
        let mut symbols: Vec<Symbol> = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter(|s| s.kind() == object::SymbolKind::Text && s.is_definition())
            .filter_map(|s| {
                Some(Symbol {
                    address: s.address(),
                    size: s.size(),
                    name: s.name().ok()?.to_owned(),
                })
            })
            .collect();
        symbols.sort_by_key(|s| s.address);
        Some(Self {
            name: name.rsplit('/').next().unwrap_or(name).to_owned(),
            avma,
            bias,
            module,
            symbols,
            dwarf: path.and_then(|p| addr2line::Loader::new(p).ok()),
        })
    }

    /// The function symbol covering `svma`, named as gdb names it: of the symbols at the
    /// closest address at or below it, the last name in byte order (`nanosleep` over
    /// `__nanosleep`); none when they end before `svma`.
    fn symbol(&self, svma: u64) -> Option<&str> {
        let end = self.symbols.partition_point(|s| s.address <= svma);
        let address = self.symbols[..end].last()?.address;
        self.symbols[..end]
            .iter()
            .rev()
            .take_while(|s| s.address == address)
            .filter(|s| s.size == 0 || svma < s.address + s.size)
            .map(|s| s.name.as_str())
            .max()
    }

    /// The frames at `svma`: the inline chain DWARF gives (innermost first), or one frame
    /// named from the symbol table, or (no symbol covers it) by the image's name and the
    /// offset, `libc.so.6+0x2724a`: the same in every process that maps the same file.
    fn frames(&self, pc: u64, fp: u64, svma: u64) -> Vec<Frame> {
        let mut out = Vec::new();
        if let Some(mut chain) = self.dwarf.as_ref().and_then(|d| d.find_frames(svma).ok()) {
            while let Ok(Some(f)) = chain.next() {
                let Some(name) = f
                    .function
                    .and_then(|n| n.demangle().ok().map(|s| s.into_owned()))
                else {
                    continue;
                };
                let location = f
                    .location
                    .and_then(|l| Some(format!("{}:{}", l.file?.rsplit('/').next()?, l.line?)));
                out.push(Frame {
                    pc,
                    fp,
                    function: name,
                    location,
                    inlined: true,
                    module: self.name.clone(),
                    offset: svma,
                });
            }
        }
        if let Some(last) = out.last_mut() {
            last.inlined = false;
            return out;
        }
        let function = match self.symbol(svma) {
            Some(name) => addr2line::demangle_auto(name.into(), None).into_owned(),
            None => format!("{}+{svma:#x}", self.name),
        };
        vec![Frame {
            pc,
            fp,
            function,
            location: None,
            inlined: false,
            module: self.name.clone(),
            offset: svma,
        }]
    }
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

/// Walks and names the stacks of processes, keeping what it read of each mapped image.
#[derive(Default)]
pub(crate) struct Stacks {
    /// `None`: not an ELF image this can read.
    images: HashMap<ImageKey, Option<Image>>,
}

impl Stacks {
    /// The stack of the ptrace-stopped process `pid`, innermost frame first, each frame
    /// named (inlined functions as frames of their own).
    pub(crate) fn backtrace(&mut self, pid: Pid) -> Result<Vec<Frame>, UnwindError> {
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
            Some(i) => (i.name.clone(), f.pc.wrapping_sub(i.bias)),
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
                let data = if vdso {
                    let mut buf = vec![0u8; (m.end - m.start) as usize];
                    mem.read(m.start, &mut buf).then_some(buf)
                } else {
                    std::fs::read(&m.path).ok()
                };
                let offset = if vdso { 0 } else { m.offset };
                let image = data.and_then(|data| {
                    let bias = load_bias(&data, m.start, offset)?;
                    let name = m.path.display().to_string();
                    let path = (!vdso).then_some(m.path.as_path());
                    Image::new(&name, &data, avma, bias, path)
                });
                self.images.insert(key.clone(), image);
            }
            keys.push(key);
        }
        // Forget images no longer mapped here (unloaded libraries, a process gone).
        self.images.retain(|k, _| keys.contains(k));
        keys
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
        let mut unwinder = UnwinderX86_64::<Vec<u8>>::new();
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
    unwinder: &UnwinderX86_64<Vec<u8>>,
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

/// The load bias of an ELF image (`data`) whose bytes at file offset `offset` are mapped at
/// `start`: the segment holding that offset is at its stated address plus the bias. (Where
/// two segments share the mapping's first page, the mapping is the later one's.)
fn load_bias(data: &[u8], start: u64, offset: u64) -> Option<u64> {
    use object::{Object, ObjectSegment};
    let file = object::File::parse(data).ok()?;
    file.segments()
        .filter(|s| {
            let (seg_offset, size) = s.file_range();
            seg_offset & !0xfff <= offset && offset < seg_offset + size.max(1)
        })
        .max_by_key(|s| s.file_range().0)
        .map(|s| {
            start
                .wrapping_add(s.file_range().0)
                .wrapping_sub(offset)
                .wrapping_sub(s.address())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bias_of_a_mapped_segment() {
        // This test binary: its text mapping's bias is what its own symbols say.
        let me = std::fs::read_link("/proc/self/exe").unwrap();
        let data = std::fs::read(&me).unwrap();
        let pid = nix::unistd::getpid();
        let text = read_maps(pid)
            .into_iter()
            .find(|m| m.path == me && m.executable)
            .unwrap();
        let bias = load_bias(&data, text.start, text.offset).unwrap();
        let image = Image::new("self", &data, text.start..text.end, bias, Some(&me)).unwrap();
        let here = bias_of_a_mapped_segment as fn() as usize as u64;
        let frames = image.frames(here, 0, here - bias);
        assert!(
            frames
                .last()
                .unwrap()
                .function
                .ends_with("bias_of_a_mapped_segment"),
            "{frames:?}"
        );
    }

    #[test]
    fn symbol_names_follow_gdb() {
        let sym = |address, size, name: &str| Symbol {
            address,
            size,
            name: name.into(),
        };
        let mut image = Image::new(
            "none",
            &std::fs::read(std::fs::read_link("/proc/self/exe").unwrap()).unwrap(),
            0..1,
            0,
            None,
        )
        .unwrap();
        image.symbols = vec![
            sym(0x100, 0x10, "__nanosleep"),
            sym(0x100, 0x10, "nanosleep"),
            sym(0x200, 0x8, "short"),
        ];
        assert_eq!(image.symbol(0x105), Some("nanosleep"));
        assert_eq!(image.symbol(0x204), Some("short"));
        assert_eq!(image.symbol(0x20a), None, "past the symbol's end");
        assert_eq!(image.symbol(0x50), None);
    }

    #[test]
    fn sleeping_process_is_unwound_through_libc() {
        // `sleep` waits in libc's nanosleep, which keeps no frame pointer: its caller is
        // found through libc's .eh_frame.
        let mut child = std::process::Command::new("sleep")
            .arg("100")
            .spawn()
            .unwrap();
        let pid = Pid::from_raw(child.id() as i32);
        ptrace::seize(pid, ptrace::Options::empty()).unwrap();
        let mut stacks = Stacks::default();
        let mut frames = Vec::new();
        // Until it is past its start-up and in the sleep.
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
        let _ = child.kill();
        let _ = child.wait();
        let names: Vec<&str> = frames.iter().map(|f| f.function.as_str()).collect();
        assert_eq!(names[..2], ["clock_nanosleep", "nanosleep"], "{frames:?}");
        // Below libc, the (stripped) program's frames and its start: more than the two.
        assert!(names.len() > 3, "{frames:?}");
    }
}
