//! What a process has mapped where: the lines of `/proc/PID/maps`. One reader for the
//! unwinder (which images a process has mapped) and the MPIR attach (where an executable
//! is loaded).

use std::path::PathBuf;

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// `r` in the permissions.
    pub readable: bool,
    /// `w` in the permissions.
    pub writable: bool,
    /// `x` in the permissions.
    pub executable: bool,
    /// Offset in the mapped file.
    pub offset: u64,
    /// Device of the mapped file (`fe:01`; `00:00` for anonymous memory).
    pub dev: String,
    /// Inode of the mapped file (0 for anonymous memory).
    pub inode: u64,
    /// The mapped file (its first word), or a kernel name in brackets (`[vdso]`,
    /// `[stack]`); empty for anonymous memory.
    pub path: PathBuf,
}

/// Parses the text of `/proc/PID/maps` (the lines it cannot read are skipped).
pub fn parse(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.split_ascii_whitespace();
            let (range, perms, offset, dev, inode) =
                (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
            let (start, end) = range.split_once('-')?;
            let perm = |i: usize, c: u8| perms.as_bytes().get(i) == Some(&c);
            Some(Mapping {
                start: u64::from_str_radix(start, 16).ok()?,
                end: u64::from_str_radix(end, 16).ok()?,
                readable: perm(0, b'r'),
                writable: perm(1, b'w'),
                executable: perm(2, b'x'),
                offset: u64::from_str_radix(offset, 16).ok()?,
                dev: dev.to_owned(),
                inode: inode.parse().ok()?,
                path: f.next().map(PathBuf::from).unwrap_or_default(),
            })
        })
        .collect()
}

/// The mappings of process `pid` (`self` for this one).
pub fn read(pid: impl std::fmt::Display) -> std::io::Result<Vec<Mapping>> {
    Ok(parse(&std::fs::read_to_string(format!(
        "/proc/{pid}/maps"
    ))?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_are_read() {
        let maps = parse(
            "55d400000000-55d4001bc000 r--p 00000000 fe:01 42 /usr/bin/sdm
55d4001bc000-55d4008ff000 r-xp 001bb000 fe:01 42 /usr/bin/sdm
55d400929000-55d40092c000 rw-p 00926000 00:00 0
7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0                          [vdso]
",
        );
        assert_eq!(maps.len(), 4);
        let code = &maps[1];
        assert_eq!(
            (code.start, code.end, code.offset),
            (0x55d4001bc000, 0x55d4008ff000, 0x1bb000)
        );
        assert!(code.readable && code.executable && !code.writable);
        assert_eq!((code.dev.as_str(), code.inode), ("fe:01", 42));
        assert_eq!(code.path, PathBuf::from("/usr/bin/sdm"));
        assert!(maps[2].writable && !maps[2].executable);
        assert_eq!(maps[2].path, PathBuf::new());
        assert_eq!(maps[3].path, PathBuf::from("[vdso]"));
    }
}
