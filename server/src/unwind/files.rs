//! What a stack walk reads of each mapped ELF file (its unwind sections, symbols and DWARF),
//! how frames at an address in it are named, and [`Files`], the server's one cache of
//! them: each binary is read once, whichever rank's monitor maps it first.

use std::collections::HashMap;
use std::ops::Range;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use framehop::{ExplicitModuleSectionInfo, Module};

use super::Frame;

/// A function symbol of an ELF symbol table.
#[derive(Debug)]
struct Symbol {
    address: u64,
    size: u64,
    name: String,
}

/// Section bytes shared by every mapping of a file (cloning one is a reference count).
pub(super) type Bytes = Arc<[u8]>;

/// What a walk needs of one ELF file wherever it is mapped: its unwind sections, symbols
/// and DWARF. Shared ([`Files`]) by every process mapping the same file.
pub(super) struct FileImage {
    /// The file's name (no directory), or the area's (`[vdso]`).
    pub(super) name: String,
    /// Its call-frame sections, as framehop takes them (addresses as the file states).
    sections: ExplicitModuleSectionInfo<Bytes>,
    /// Its loadable segments (where a mapping of it is, its load bias follows).
    pub(super) segments: Vec<Segment>,
    /// Function symbols by address.
    symbols: Vec<Symbol>,
    /// DWARF for function names, inline chains and lines (files only; `None` when the
    /// file cannot be loaded). A loader fills its caches as it is asked (not `Sync`): the
    /// monitors sharing it take turns.
    dwarf: Option<Mutex<addr2line::Loader>>,
    /// The file (files only), for what native `print` reads of it.
    pub(super) path: Option<PathBuf>,
    /// What native `print` needs of the file (its DWARF, its names), read at the first
    /// `print` that needs it, then shared like the rest.
    debug: OnceLock<Option<Arc<crate::natprint::Debug>>>,
}

impl FileImage {
    /// Reads `data` (the ELF image of `name`); `path` is the file to load DWARF from.
    pub(super) fn new(name: &str, data: &[u8], path: Option<&Path>) -> Option<Self> {
        use object::{Object, ObjectSection, ObjectSymbol};
        let file = object::File::parse(data).ok()?;
        let section = |n: &str| {
            let s = file.section_by_name(n)?;
            let range = s.address()..s.address() + s.size();
            Some((range, Bytes::from(s.data().ok()?)))
        };
        let (text_svma, text) = section(".text").unzip();
        let (eh_frame_svma, eh_frame) = section(".eh_frame").unzip();
        let (eh_frame_hdr_svma, eh_frame_hdr) = section(".eh_frame_hdr").unzip();
        let sections = ExplicitModuleSectionInfo {
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
            sections,
            segments: segments(&file),
            symbols,
            dwarf: path.and_then(|p| addr2line::Loader::new(p).ok().map(Mutex::new)),
            path: path.map(Path::to_path_buf),
            debug: OnceLock::new(),
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
        let dwarf = self
            .dwarf
            .as_ref()
            .map(|d| d.lock().unwrap_or_else(|p| p.into_inner()));
        if let Some(mut chain) = dwarf.as_ref().and_then(|d| d.find_frames(svma).ok()) {
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

impl FileImage {
    /// What native `print` reads of the file, read once.
    fn debug(&self) -> Option<Arc<crate::natprint::Debug>> {
        self.debug
            .get_or_init(|| {
                let path = self.path.as_ref()?;
                crate::natprint::Debug::load(path).map(Arc::new)
            })
            .clone()
    }
}

/// Where native `print` gets a mapped file's [`crate::natprint::Debug`]: read at the first
/// call that needs it (most prints need only the executable's), then shared.
#[derive(Clone)]
pub(crate) struct DebugSource(pub(super) Arc<FileImage>);

impl DebugSource {
    /// The file's DWARF and names; `None` when they cannot be read.
    pub(crate) fn get(&self) -> Option<Arc<crate::natprint::Debug>> {
        self.0.debug()
    }
}

/// One file as one process maps it: the shared [`FileImage`] and where it is.
pub(super) struct Image {
    pub(super) file: Arc<FileImage>,
    /// Where it is mapped (all its mappings).
    pub(super) avma: Range<u64>,
    /// Actual address minus the address the file states.
    pub(super) bias: u64,
    /// The unwind module at this place (its section bytes shared with the file's).
    pub(super) module: Module<Bytes>,
}

impl Image {
    pub(super) fn new(file: Arc<FileImage>, avma: Range<u64>, bias: u64) -> Self {
        let module = Module::new(file.name.clone(), avma.clone(), bias, file.sections.clone());
        Self {
            file,
            avma,
            bias,
            module,
        }
    }

    pub(super) fn name(&self) -> &str {
        &self.file.name
    }

    pub(super) fn frames(&self, pc: u64, fp: u64, svma: u64) -> Vec<Frame> {
        self.file.frames(pc, fp, svma)
    }
}

/// A file's identity: a file replaced or rewritten (another inode, size or modification
/// time) is another file.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
}

/// A file being read, or read: the first monitor to want it reads it, the others wait.
type Slot = Arc<OnceLock<Option<Arc<FileImage>>>>;

/// What was read of each file mapped by the processes this server walks, shared by every
/// rank's monitor ([`Files::global`]): each binary's tables are read once per server,
/// however many local ranks map it.
#[derive(Default)]
pub(crate) struct Files {
    slots: Mutex<HashMap<FileId, Slot>>,
    /// How many files were read (for tests).
    reads: AtomicUsize,
}

impl Files {
    /// The server's (the process's) one cache.
    pub(crate) fn global() -> Arc<Files> {
        static GLOBAL: OnceLock<Arc<Files>> = OnceLock::new();
        GLOBAL.get_or_init(Arc::default).clone()
    }

    /// How many files this cache has read so far.
    #[cfg(test)]
    pub(super) fn reads(&self) -> usize {
        self.reads.load(Ordering::Relaxed)
    }

    /// The image of the file at `path` that a process maps as inode `inode`: read once,
    /// then shared. `None`: not an ELF file this can read. A file whose inode on disk is
    /// not the mapped one (replaced since) is read for this caller alone.
    pub(super) fn get(&self, path: &Path, inode: u64) -> Option<Arc<FileImage>> {
        let meta = std::fs::metadata(path).ok()?;
        if meta.ino() != inode {
            return self.read(path);
        }
        let id = FileId {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
        };
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            if !slots.contains_key(&id) {
                // Forget the files no process here maps any more (only this cache holds them).
                slots.retain(|_, s| match s.get() {
                    Some(Some(image)) => Arc::strong_count(image) > 1,
                    Some(None) => true,
                    None => true,
                });
            }
            slots.entry(id).or_default().clone()
        };
        slot.get_or_init(|| self.read(path)).clone()
    }

    fn read(&self, path: &Path) -> Option<Arc<FileImage>> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        let data = std::fs::read(path).ok()?;
        let name = path.display().to_string();
        FileImage::new(&name, &data, Some(path)).map(Arc::new)
    }
}

/// A loadable segment of an ELF file: its file offset and size, and the address it states.
#[derive(Debug, Clone, Copy)]
pub(super) struct Segment {
    offset: u64,
    size: u64,
    pub(super) address: u64,
    /// Its size in memory (with what is zero-filled past the file's bytes: `.bss`).
    pub(super) memsize: u64,
}

fn segments(file: &object::File<'_>) -> Vec<Segment> {
    use object::{Object, ObjectSegment};
    file.segments()
        .map(|s| {
            let (offset, size) = s.file_range();
            Segment {
                offset,
                size,
                address: s.address(),
                memsize: s.size(),
            }
        })
        .collect()
}

/// The load bias of an ELF file (its `segments`) whose bytes at file offset `offset` are
/// mapped at `start`: the segment holding that offset is at its stated address plus the
/// bias. (Where two segments share the mapping's first page, the mapping is the later
/// one's.)
pub(super) fn load_bias(segments: &[Segment], start: u64, offset: u64) -> Option<u64> {
    segments
        .iter()
        .filter(|s| s.offset & !0xfff <= offset && offset < s.offset + s.size.max(1))
        .max_by_key(|s| s.offset)
        .map(|s| {
            start
                .wrapping_add(s.offset)
                .wrapping_sub(offset)
                .wrapping_sub(s.address)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unwind::read_maps;

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
        let file = FileImage::new("self", &data, Some(&me)).unwrap();
        let bias = load_bias(&file.segments, text.start, text.offset).unwrap();
        let image = Image::new(Arc::new(file), text.start..text.end, bias);
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
        let mut image = FileImage::new(
            "none",
            &std::fs::read(std::fs::read_link("/proc/self/exe").unwrap()).unwrap(),
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
}
