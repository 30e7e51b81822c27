//! The binary's code moved onto transparent huge pages before a process forks its local
//! server copies ([`crate::fork_copies`]), so the copies share 2 MiB pages of code instead
//! of 4 KiB ones.
//!
//! With hundreds of servers on a core, each wake-up of a server finds its translations
//! evicted from the TLB: the code it runs lies on some thirty 4 KiB pages, and each costs a
//! page walk (two-dimensional, so up to 24 memory reads, in a virtual machine). On 2 MiB
//! pages the same code takes one or two TLB entries. The kernel cannot put a file's pages
//! there itself unless built with `CONFIG_READ_ONLY_THP_FOR_FS`, so the code is copied to
//! anonymous memory advised for huge pages (`MADV_HUGEPAGE`) and moved over its own
//! mapping with one `mremap`: the code is never absent, even for the instructions doing the
//! move. Copies forked afterwards share those pages (copy-on-write, and code is never
//! written), so a thousand copies still keep one copy of the code in the caches, as they
//! did with the file's pages.
//!
//! Only the 2 MiB-aligned parts of the binary's read-only and executable mappings that hold
//! code move (the read-only data before the code moves with it and becomes executable). A
//! process that runs as a single server keeps its file pages: a private copy of the code
//! per process would be shared with no other server. Performance tools that name code by
//! its file mapping (`perf`) see the moved part as anonymous memory; `SDM_HUGE_TEXT=0`
//! keeps the file pages.

use std::io;
use std::ptr::NonNull;

/// The environment variable that, set to `0`, keeps the code on the file's pages.
pub const HUGE_TEXT_ENV: &str = "SDM_HUGE_TEXT";

/// Size of a transparent huge page on x86_64 (a PMD entry).
const HUGE: usize = 2 << 20;

/// What [`text_on_huge_pages`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HugeText {
    /// Nothing moved: `SDM_HUGE_TEXT=0`, or the kernel gives no transparent huge pages.
    Off,
    /// `bytes` of code (whole 2 MiB pages) moved onto anonymous memory.
    Moved {
        /// Bytes moved, a multiple of 2 MiB (0 if the code has no aligned 2 MiB part).
        bytes: usize,
    },
}

/// One line of `/proc/self/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mapping {
    start: usize,
    end: usize,
    readable: bool,
    writable: bool,
    executable: bool,
    /// Device and inode: which file is mapped (inode 0 for anonymous memory).
    file: (String, u64),
}

/// Parses `/proc/self/maps` (the lines it cannot read are skipped).
fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.split_ascii_whitespace();
            let (range, perms, _offset, dev, inode) =
                (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
            let (start, end) = range.split_once('-')?;
            Some(Mapping {
                start: usize::from_str_radix(start, 16).ok()?,
                end: usize::from_str_radix(end, 16).ok()?,
                readable: perms.as_bytes().first() == Some(&b'r'),
                writable: perms.as_bytes().get(1) == Some(&b'w'),
                executable: perms.as_bytes().get(2) == Some(&b'x'),
                file: (dev.to_owned(), inode.parse().ok()?),
            })
        })
        .collect()
}

/// The 2 MiB-aligned ranges to move: those inside the run of read-only mappings of the
/// file that holds `anchor`, ending with the executable mapping that holds it.
fn chunks(maps: &[Mapping], anchor: usize) -> Vec<usize> {
    let Some(at) = maps.iter().position(|m| {
        m.start <= anchor && anchor < m.end && m.executable && m.readable && m.file.1 != 0
    }) else {
        return Vec::new();
    };
    let end = maps[at].end;
    let mut start = maps[at].start;
    for m in maps[..at].iter().rev() {
        if m.end != start || m.writable || !m.readable || m.file != maps[at].file {
            break;
        }
        start = m.start;
    }
    let first = start.next_multiple_of(HUGE);
    (0..)
        .map(|i| first + i * HUGE)
        .take_while(|c| c + HUGE <= end)
        .filter(|&c| {
            // Only parts that hold code.
            maps.iter()
                .any(|m| m.executable && m.start < c + HUGE && c < m.end)
        })
        .collect()
}

/// Moves the binary's code onto transparent huge pages (see the module doc). Call it
/// before the process starts a thread: another thread could be running code of a part
/// being moved while the kernel swaps its pages (the move itself is one system call, so
/// the calling thread is safe).
pub fn text_on_huge_pages() -> io::Result<HugeText> {
    if std::env::var(HUGE_TEXT_ENV).is_ok_and(|v| v.trim() == "0") {
        return Ok(HugeText::Off);
    }
    let thp =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    if !thp.contains("[always]") && !thp.contains("[madvise]") {
        return Ok(HugeText::Off);
    }
    let maps = parse_maps(&std::fs::read_to_string("/proc/self/maps")?);
    let anchor = text_on_huge_pages as *const () as usize;
    let mut bytes = 0;
    for c in chunks(&maps, anchor) {
        // SAFETY: `c` is a 2 MiB part of this binary's read-only (and executable) mappings,
        // and the process has one thread (this function's precondition).
        unsafe { move_chunk(c)? };
        bytes += HUGE;
    }
    Ok(HugeText::Moved { bytes })
}

/// Copies the 2 MiB at `chunk` to anonymous memory advised for huge pages, makes it
/// read-only and executable, and moves it over `chunk`.
///
/// # Safety
/// `chunk` is 2 MiB-aligned, readable, never written, and no other thread runs.
unsafe fn move_chunk(chunk: usize) -> io::Result<()> {
    use nix::sys::mman::{MRemapFlags, MapFlags, MmapAdvise, ProtFlags};
    let len = std::num::NonZeroUsize::new(2 * HUGE).expect("not zero");
    // Twice the size, then trimmed to the aligned 2 MiB inside: an aligned mapping.
    // SAFETY: a new anonymous mapping, chosen by the kernel.
    let raw = unsafe {
        nix::sys::mman::mmap_anonymous(
            None,
            len,
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_PRIVATE | MapFlags::MAP_NORESERVE,
        )?
    };
    let base = raw.as_ptr() as usize;
    let aligned = base.next_multiple_of(HUGE);
    let unmap = |from: usize, len: usize| {
        if let Some(p) = NonNull::new(from as *mut std::ffi::c_void).filter(|_| len > 0) {
            // SAFETY: a part of the mapping made above, not in use.
            let _ = unsafe { nix::sys::mman::munmap(p, len) };
        }
    };
    unmap(base, aligned - base);
    unmap(aligned + HUGE, base + 2 * HUGE - aligned - HUGE);
    let new = NonNull::new(aligned as *mut std::ffi::c_void).expect("mapped, so not null");
    let result = (|| {
        // SAFETY: `new` is the 2 MiB anonymous mapping above; `chunk` is readable
        // (the precondition) and the two do not overlap.
        unsafe {
            nix::sys::mman::madvise(new, HUGE, MmapAdvise::MADV_HUGEPAGE)?;
            std::ptr::copy_nonoverlapping(chunk as *const u8, aligned as *mut u8, HUGE);
            nix::sys::mman::mprotect(new, HUGE, ProtFlags::PROT_READ | ProtFlags::PROT_EXEC)?;
            let to = NonNull::new(chunk as *mut std::ffi::c_void).expect("a mapped address");
            nix::sys::mman::mremap(
                new,
                HUGE,
                HUGE,
                MRemapFlags::MREMAP_MAYMOVE | MRemapFlags::MREMAP_FIXED,
                Some(to),
            )?;
        }
        Ok::<_, nix::Error>(())
    })();
    result.map_err(|e| {
        unmap(aligned, HUGE);
        io::Error::from(e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d400000000-55d4001bc000 r--p 00000000 fe:01 42 /usr/bin/sdm
55d4001bc000-55d4008ff000 r-xp 001bb000 fe:01 42 /usr/bin/sdm
55d4008ff000-55d400929000 r--p 008fe000 fe:01 42 /usr/bin/sdm
55d400929000-55d40092c000 rw-p 00926000 fe:01 42 /usr/bin/sdm
7f0000000000-7f0000200000 r-xp 00000000 fe:01 7 /usr/lib/libc.so.6
";

    #[test]
    fn maps_lines_are_read() {
        let maps = parse_maps(MAPS);
        assert_eq!(maps.len(), 5);
        assert_eq!(maps[1].start, 0x55d4001bc000);
        assert!(maps[1].executable && !maps[1].writable);
        assert!(maps[3].writable && !maps[3].executable);
        assert_eq!(maps[4].file, ("fe:01".to_owned(), 7));
    }

    #[test]
    fn aligned_parts_of_the_code_and_the_data_before_it_move() {
        let maps = parse_maps(MAPS);
        // From the first mapping (2 MiB-aligned here) to the end of the code: 0x8ff000
        // bytes hold four whole 2 MiB parts, each with code in it.
        let c = chunks(&maps, 0x55d400300000);
        let want: Vec<usize> = (0..4).map(|i| 0x55d400000000 + i * HUGE).collect();
        assert_eq!(c, want);
    }

    #[test]
    fn a_part_reaching_past_the_code_or_before_the_file_stays() {
        // The same binary loaded 1 MiB past an aligned address: the first aligned part
        // starts inside its read-only data, and the part at 0x800000 would reach past the
        // code (into the read-only data after it, which does not move).
        let maps = parse_maps(
            "55d400100000-55d4002bc000 r--p 00000000 fe:01 42 /usr/bin/sdm
55d4002bc000-55d4009ff000 r-xp 001bb000 fe:01 42 /usr/bin/sdm
55d4009ff000-55d400c29000 r--p 008fe000 fe:01 42 /usr/bin/sdm
",
        );
        let c = chunks(&maps, 0x55d4002bc000);
        assert_eq!(c, [0x55d400200000, 0x55d400400000, 0x55d400600000]);
    }

    #[test]
    fn an_address_outside_any_code_moves_nothing() {
        let maps = parse_maps(MAPS);
        assert!(chunks(&maps, 0x1000).is_empty());
        // Anonymous executable memory (a JIT) is not a file's code.
        let anon = parse_maps("7f0000000000-7f0000400000 r-xp 00000000 00:00 0\n");
        assert!(chunks(&anon, 0x7f0000100000).is_empty());
    }

    #[test]
    fn an_unreadable_or_writable_mapping_ends_the_run() {
        for perms in ["---p", "rw-p"] {
            let maps = parse_maps(&format!(
                "55d400000000-55d400200000 r--p 00000000 fe:01 42 /usr/bin/sdm
55d400200000-55d400201000 {perms} 00200000 fe:01 42 /usr/bin/sdm
55d400201000-55d400a00000 r-xp 00201000 fe:01 42 /usr/bin/sdm
"
            ));
            // The first part would take in the mapping that cannot be read (or is
            // written); the others are whole code.
            let c = chunks(&maps, 0x55d400300000);
            assert_eq!(
                c,
                [0x55d400400000, 0x55d400600000, 0x55d400800000],
                "{perms}"
            );
        }
    }
}
