//! The binary's code moved onto transparent huge pages before a process forks its local
//! server copies ([`crate::fork_copies`]), so the copies share 2 MiB pages of code instead
//! of 4 KiB ones.
//!
//! With hundreds of servers on a core, each wake-up of a server finds its translations
//! evicted from the TLB: the code it runs lies on some thirty 4 KiB pages, and each costs a
//! page walk (in a virtual machine a two-dimensional one, up to 24 memory reads with four
//! levels of tables on both sides). On 2 MiB pages the same code takes a few TLB entries.
//! The kernel cannot put a file's pages there itself unless built with
//! `CONFIG_READ_ONLY_THP_FOR_FS` (and the code's addresses and file offsets agree modulo
//! 2 MiB), so each 2 MiB part is copied to anonymous memory advised for huge pages
//! (`MADV_HUGEPAGE`, then `MADV_COLLAPSE` to make the page at once), kept only if the
//! kernel made it a huge page, and moved over the file's mapping with one `mremap`. When
//! that call succeeds the code was never absent, even for the instructions making it; the
//! kernel's own failures after it has unmapped the target (out of memory, or strict
//! overcommit accounting, which is why `vm.overcommit_memory=2` skips the move) would end
//! the process. Copies forked afterwards share those pages (copy-on-write, and code is
//! never written), so a thousand copies keep one copy of the code in the caches, as they
//! did with the file's pages.
//!
//! What moves: each 2 MiB-aligned page that holds the binary's code and in which every
//! mapping is one of the binary's, readable and not writable; addresses of it that nothing
//! maps (below the binary, or between its read-only data and its code) become zeros in
//! it. A binary is loaded 4 KiB-aligned and its hot functions are laid out at the start of
//! its code, so the page holding that start is the one that matters most. Read-only data
//! in a moved page becomes executable. Only a process about to fork two or more copies
//! moves its code: a process that runs as a single server keeps its file pages, since a
//! private copy of the code would be shared with no other server.
//!
//! Tools that name code by its file mapping (`perf`, callgrind) see the moved part as
//! anonymous memory; uprobes (`perf probe -x`, bpftrace) placed before the move would trap
//! in the copy, and those placed after it never fire there. Core dumps leave the moved
//! part out (`MADV_DONTDUMP`); a debugger reads that code from the executable.
//! `SDM_HUGE_TEXT=0` keeps the file's pages.

use std::io;
use std::ptr::NonNull;

use crate::HUGE_TEXT_ENV;
use crate::maps::Mapping;

/// Size of a transparent huge page on x86_64 with 4 KiB pages (a PMD entry); the move is
/// skipped where the kernel's PMD size differs.
const HUGE: u64 = 2 << 20;

/// What [`text_on_huge_pages`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HugeText {
    /// Nothing moved, and why (turned off, or the kernel would give no huge pages).
    Off(String),
    /// `bytes` of the binary moved onto huge pages (whole 2 MiB pages); `error` says why
    /// the rest of its code stayed, if a move failed.
    Moved {
        /// Bytes moved, a multiple of 2 MiB.
        bytes: u64,
        /// Why a part was not moved (the parts before it stay moved).
        error: Option<String>,
    },
}

/// One 2 MiB page to make: the page at `at`, holding the binary's bytes in `spans`
/// (start, length) at their own addresses, and zeros where nothing was mapped.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Part {
    at: u64,
    spans: Vec<(u64, u64)>,
}

/// The 2 MiB pages to make: each aligned page that holds code of the file mapped
/// executable at `anchor`, and in which every mapping is one of that file's, readable and
/// not writable. Addresses of such a page that nothing maps become zeros in it. (A binary
/// is loaded 4 KiB-aligned, and its hot functions are laid out at the start of its code,
/// so the page holding that start often also holds the read-only data before it, a gap
/// between the two, or unmapped addresses below the binary.)
fn parts(maps: &[Mapping], anchor: u64) -> Vec<Part> {
    let Some(code) = maps.iter().find(|m| {
        m.start <= anchor && anchor < m.end && m.executable && m.readable && m.inode != 0
    }) else {
        return Vec::new();
    };
    let ours =
        |m: &Mapping| (&m.dev, m.inode) == (&code.dev, code.inode) && m.readable && !m.writable;
    let mut pages: Vec<u64> = maps
        .iter()
        .filter(|m| m.executable && ours(m))
        .flat_map(|m| (m.start / HUGE..m.end.div_ceil(HUGE)).map(|i| i * HUGE))
        .collect();
    pages.dedup();
    pages
        .into_iter()
        .filter_map(|at| {
            let inside: Vec<&Mapping> = maps
                .iter()
                .filter(|m| m.start < at + HUGE && at < m.end)
                .collect();
            inside.iter().all(|m| ours(m)).then(|| Part {
                at,
                spans: inside
                    .iter()
                    .map(|m| {
                        let (a, b) = (m.start.max(at), m.end.min(at + HUGE));
                        (a, b - a)
                    })
                    .collect(),
            })
        })
        .collect()
}

/// Why the kernel would give no 2 MiB pages here, if it would not.
fn no_huge_pages() -> Option<String> {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let pmd = read("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size");
    if pmd.trim() != HUGE.to_string() {
        return Some(format!(
            "no {HUGE}-byte transparent huge pages (PMD size {:?})",
            pmd.trim()
        ));
    }
    let thp = read("/sys/kernel/mm/transparent_hugepage/enabled");
    if !thp.contains("[always]") && !thp.contains("[madvise]") {
        return Some(format!("transparent huge pages are off ({:?})", thp.trim()));
    }
    let size = read("/sys/kernel/mm/transparent_hugepage/hugepages-2048kB/enabled");
    if size.contains("[never]") {
        return Some("2 MiB transparent huge pages are off".into());
    }
    // With strict overcommit accounting, an mremap that has already unmapped its target
    // can still fail to account the memory, and the code would be gone.
    if read("/proc/sys/vm/overcommit_memory").trim() == "2" {
        return Some("vm.overcommit_memory is 2".into());
    }
    None
}

/// Moves the binary's code onto transparent huge pages (see the module doc), unless
/// `SDM_HUGE_TEXT=0` or the kernel would give none.
///
/// # Safety
/// The process has one thread, and nothing (a debugger, a uprobe) writes its code while
/// this runs: the code is copied, then the copy moved over it.
pub(crate) unsafe fn text_on_huge_pages() -> HugeText {
    if std::env::var(HUGE_TEXT_ENV).is_ok_and(|v| v.trim() == "0") {
        return HugeText::Off(format!("{HUGE_TEXT_ENV}=0"));
    }
    if let Some(why) = no_huge_pages() {
        return HugeText::Off(why);
    }
    let maps = match crate::maps::read("self") {
        Ok(m) => m,
        Err(e) => return HugeText::Off(format!("cannot read /proc/self/maps: {e}")),
    };
    let anchor = text_on_huge_pages as *const () as u64;
    let mut bytes = 0u64;
    for part in parts(&maps, anchor) {
        // SAFETY: `part` is a 2 MiB page holding only this binary's read-only mappings and
        // unmapped addresses; this function's precondition holds.
        if let Err(e) = unsafe { move_part(&part) } {
            return HugeText::Moved {
                bytes,
                error: Some(format!("at {:#x}: {e}", part.at)),
            };
        }
        bytes += HUGE;
    }
    HugeText::Moved { bytes, error: None }
}

/// Whether the 2 MiB at `at` are on a huge page (`AnonHugePages` in `/proc/self/smaps`).
fn is_huge(at: usize) -> bool {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    crate::maps::smaps_fields(&smaps, at as u64)
        .any(|(f, v)| f == "AnonHugePages" && v == "2048 kB")
}

/// Makes `part` on anonymous memory advised for huge pages (a huge page, or nothing is
/// moved), read-only and executable, and moves it to `part.at`.
///
/// # Safety
/// The spans of `part` are readable, never written, and lie inside the 2 MiB at
/// `part.at`, whose other addresses are unmapped; no other thread runs.
unsafe fn move_part(part: &Part) -> io::Result<()> {
    use nix::sys::mman::{MRemapFlags, MapFlags, MmapAdvise, ProtFlags};
    // `MADV_COLLAPSE` (Linux 6.1): make the huge page now, not when khugepaged comes by
    // (after the fork it would not: the copies share the pages). Older kernels refuse it.
    const MADV_COLLAPSE: libc::c_int = 25;
    const HUGE: usize = self::HUGE as usize; // for the calls below
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
        // SAFETY: `new` is the 2 MiB anonymous mapping above; the spans are readable (the
        // precondition) and do not overlap it.
        unsafe {
            nix::sys::mman::madvise(new, HUGE, MmapAdvise::MADV_HUGEPAGE)?;
            // A core dump takes the code from the executable, as before.
            let _ = nix::sys::mman::madvise(new, HUGE, MmapAdvise::MADV_DONTDUMP);
            for &(from, len) in &part.spans {
                std::ptr::copy_nonoverlapping(
                    from as *const u8,
                    (aligned + (from - part.at) as usize) as *mut u8,
                    len as usize,
                );
            }
        }
        // SAFETY: advice on the mapping above. Its success means the range is huge pages;
        // only where it fails (a kernel before 6.1) is the page looked up.
        let collapsed = unsafe { libc::madvise(new.as_ptr(), HUGE, MADV_COLLAPSE) } == 0;
        if !collapsed && !is_huge(aligned) {
            return Err(io::Error::other("the kernel gave no huge page"));
        }
        // SAFETY: as above; the mapping is whole and ours.
        unsafe {
            nix::sys::mman::mprotect(new, HUGE, ProtFlags::PROT_READ | ProtFlags::PROT_EXEC)?;
            let to = NonNull::new(part.at as *mut std::ffi::c_void).expect("a mapped address");
            nix::sys::mman::mremap(
                new,
                HUGE,
                HUGE,
                MRemapFlags::MREMAP_MAYMOVE | MRemapFlags::MREMAP_FIXED,
                Some(to),
            )?;
        }
        Ok(())
    })();
    result.inspect_err(|_| unmap(aligned, HUGE))
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

    /// Where the parts start.
    fn starts(parts: &[Part]) -> Vec<u64> {
        parts.iter().map(|p| p.at).collect()
    }

    #[test]
    fn the_page_with_the_start_of_the_code_moves_with_what_else_of_the_binary_it_holds() {
        // Loaded at 0x...210000, a page between the read-only data and the code, as lld
        // lays them out: the code starts at 0x...3cd000, before the first 2 MiB boundary
        // inside the binary, and there are the hot functions.
        let text = "55d400210000-55d4003cc000 r--p 00000000 fe:01 42 /usr/bin/sdm
55d4003cd000-55d400b0f000 r-xp 001bc000 fe:01 42 /usr/bin/sdm
55d400b0f000-55d400b39000 r--p 008fe000 fe:01 42 /usr/bin/sdm
55d400b39000-55d400b3c000 rw-p 00928000 fe:01 42 /usr/bin/sdm
";
        let p = parts(&crate::maps::parse(text), 0x55d4003ce000);
        assert_eq!(
            p[0],
            Part {
                at: 0x55d400200000,
                spans: vec![(0x55d400210000, 0x1bc000), (0x55d4003cd000, 0x33000)],
            }
        );
        // The page at 0x...a00000 holds the end of the code and a writable mapping.
        assert_eq!(
            starts(&p[1..]),
            [0x55d400400000, 0x55d400600000, 0x55d400800000]
        );
        for w in &p[1..] {
            assert_eq!(w.spans, [(w.at, HUGE)]);
        }
        // Something else mapped in the first page: it stays as it is.
        let taken = format!("55d4001ff000-55d400201000 rw-p 00000000 00:00 0\n{text}");
        let p = parts(&crate::maps::parse(&taken), 0x55d4003ce000);
        assert_eq!(starts(&p), [0x55d400400000, 0x55d400600000, 0x55d400800000]);
    }

    #[test]
    fn aligned_pages_of_the_code_and_the_read_only_data_around_it_move() {
        let maps = crate::maps::parse(MAPS);
        // Loaded 2 MiB-aligned: four pages hold code and only the binary's read-only
        // mappings; the fifth also holds its writable data.
        let c = starts(&parts(&maps, 0x55d400300000));
        let want: Vec<u64> = (0..4).map(|i| 0x55d400000000 + i * HUGE).collect();
        assert_eq!(c, want);
        // Without the writable mapping, the fifth moves too, read-only data and all.
        let ro: String = MAPS
            .lines()
            .filter(|l| !l.contains("rw-p"))
            .map(|l| format!("{l}\n"))
            .collect();
        let p = parts(&crate::maps::parse(&ro), 0x55d400300000);
        assert_eq!(
            p.last(),
            Some(&Part {
                at: 0x55d400800000,
                spans: vec![(0x55d400800000, 0xff000), (0x55d4008ff000, 0x2a000)],
            })
        );
    }

    #[test]
    fn an_address_outside_any_code_moves_nothing() {
        let maps = crate::maps::parse(MAPS);
        assert!(parts(&maps, 0x1000).is_empty());
        // Anonymous executable memory (a JIT) is not a file's code.
        let anon = crate::maps::parse("7f0000000000-7f0000400000 r-xp 00000000 00:00 0\n");
        assert!(parts(&anon, 0x7f0000100000).is_empty());
    }

    #[test]
    fn a_page_with_an_unreadable_or_writable_mapping_stays() {
        for perms in ["---p", "rw-p"] {
            let maps = crate::maps::parse(&format!(
                "55d400000000-55d400200000 r--p 00000000 fe:01 42 /usr/bin/sdm
55d400200000-55d400201000 {perms} 00200000 fe:01 42 /usr/bin/sdm
55d400201000-55d400a00000 r-xp 00201000 fe:01 42 /usr/bin/sdm
"
            ));
            // The first part would take in the mapping that cannot be read (or is
            // written); the others are whole code.
            let c = starts(&parts(&maps, 0x55d400300000));
            assert_eq!(
                c,
                [0x55d400400000, 0x55d400600000, 0x55d400800000],
                "{perms}"
            );
        }
    }
}
