//! Source lines for the report's stacks, read on the front-end's host. Servers name a
//! frame's file without its directory (`prog.c:28`); the full path comes from the debug
//! information of the module holding the frame, found among the files the ranks on this
//! host map (`/proc/PID/maps`), else the file is looked for in the ranks' working
//! directories (a Python rank's `main.py`) and in the front-end's. A
//! file that cannot be found or read (a rank on another host, sources not installed) is
//! said so, never guessed.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::stacks::FrameFields;

/// Lines shown before and after a frame's line.
pub const CONTEXT: u32 = 3;

/// A frame's source lines, or why there are none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Excerpt {
    /// Lines `first..` of the file at `path`, `marked` the frame's.
    Lines {
        /// The file's full path.
        path: PathBuf,
        /// The number of the first line shown (from 1).
        first: u32,
        /// The lines shown.
        lines: Vec<String>,
        /// The frame's line.
        marked: u32,
    },
    /// The frame's file could not be read here.
    NotReadable {
        /// The file as the servers name it.
        file: String,
        /// Why not.
        why: String,
    },
}

/// Where source files are on this host: the modules the ranks map, by name, and their
/// debug information once read.
#[derive(Default)]
pub struct Sources {
    /// Mapped files by their name (`prog` to `/home/u/prog`).
    modules: HashMap<String, PathBuf>,
    /// The ranks' working directories.
    dirs: Vec<PathBuf>,
    /// Debug information per module path (`None`: none could be read).
    loaders: RefCell<HashMap<PathBuf, Option<addr2line::Loader>>>,
}

impl Sources {
    /// Sources of the modules at `paths` (full paths of mapped files).
    pub fn new(paths: impl IntoIterator<Item = PathBuf>) -> Self {
        let modules = paths
            .into_iter()
            .filter_map(|p| Some((p.file_name()?.to_str()?.to_owned(), p)))
            .collect();
        Self {
            modules,
            dirs: Vec::new(),
            loaders: RefCell::default(),
        }
    }

    /// Sources of the files the processes `pids` of this host map (the first readable
    /// process per distinct executable is enough: ranks of one program map the same).
    pub fn of_processes(pids: impl IntoIterator<Item = u32>) -> Self {
        let mut paths = std::collections::BTreeSet::new();
        let mut seen_exe = std::collections::BTreeSet::new();
        let mut dirs = std::collections::BTreeSet::new();
        for pid in pids {
            dirs.extend(std::fs::read_link(format!("/proc/{pid}/cwd")));
            let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) else {
                continue;
            };
            if !seen_exe.insert(exe) {
                continue;
            }
            let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
                continue;
            };
            paths.extend(mapped_files(&maps));
        }
        Self {
            dirs: dirs.into_iter().collect(),
            ..Self::new(paths)
        }
    }

    /// The lines around frame `f`'s line; `None` for a frame without a file and line.
    pub fn excerpt(&self, f: &FrameFields) -> Option<Excerpt> {
        let (file, line) = (f.file.as_deref()?, f.line?);
        let not_readable = |why: String| Excerpt::NotReadable {
            file: file.to_owned(),
            why,
        };
        let Some(path) = self.locate(f, file) else {
            return Some(not_readable("not found on this host".into()));
        };
        Some(match read_around(&path, line) {
            Ok(Some((first, lines))) => Excerpt::Lines {
                path,
                first,
                lines,
                marked: line,
            },
            Ok(None) => not_readable(format!("{} has no line {line}", path.display())),
            Err(e) => not_readable(format!("{}: {e}", path.display())),
        })
    }

    /// The full path of `file` (a frame's file name): from the debug information of the
    /// frame's module at its offset, else in the ranks' working directories, else in the
    /// current one.
    fn locate(&self, f: &FrameFields, file: &str) -> Option<PathBuf> {
        let from_debug_info = || {
            let module = self.modules.get(&f.module)?;
            let offset = f.offset?;
            let mut loaders = self.loaders.borrow_mut();
            let loader = loaders
                .entry(module.clone())
                .or_insert_with(|| addr2line::Loader::new(module).ok())
                .as_ref()?;
            // An outer frame's offset is a return address: its call is just before.
            [offset, offset.saturating_sub(1)]
                .into_iter()
                .find_map(|probe| named_in(loader, probe, file))
        };
        from_debug_info().or_else(|| {
            self.dirs
                .iter()
                .map(|d| d.join(file))
                .chain([PathBuf::from(file)])
                .find(|p| p.is_file())
        })
    }
}

/// The path of the file named `file` (no directory) in the frames debug information
/// gives at `probe`, the inline chain included.
fn named_in(loader: &addr2line::Loader, probe: u64, file: &str) -> Option<PathBuf> {
    let mut frames = loader.find_frames(probe).ok()?;
    while let Ok(Some(fr)) = frames.next() {
        let Some(path) = fr.location.and_then(|l| l.file) else {
            continue;
        };
        let path = Path::new(path);
        if path.file_name().and_then(|n| n.to_str()) == Some(file) {
            return Some(path.to_path_buf());
        }
    }
    None
}

/// The files a `/proc/PID/maps` text maps (absolute paths, no pseudo-files).
fn mapped_files(maps: &str) -> impl Iterator<Item = PathBuf> + '_ {
    maps.lines().filter_map(|l| {
        // address perms offset dev inode path: the path is the rest after five fields.
        let path = l.splitn(6, char::is_whitespace).nth(5)?.trim();
        (path.starts_with('/') && !path.ends_with(" (deleted)")).then(|| PathBuf::from(path))
    })
}

/// Lines `line - CONTEXT ..= line + CONTEXT` of `path` (those that exist) and the number
/// of the first; `None` when the file is shorter than `line`.
fn read_around(path: &Path, line: u32) -> std::io::Result<Option<(u32, Vec<String>)>> {
    let bytes = std::fs::read(path)?;
    let text = String::from_utf8_lossy(&bytes);
    let first = line.saturating_sub(CONTEXT).max(1);
    let lines: Vec<String> = text
        .lines()
        .skip(first as usize - 1)
        .take((line.saturating_add(CONTEXT + 1) - first) as usize)
        .map(str::to_owned)
        .collect();
    if (first as usize + lines.len()) <= line as usize {
        return Ok(None);
    }
    Ok(Some((first, lines)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_around_a_line_and_the_edges_of_the_file() {
        let dir = std::env::temp_dir().join(format!("sdm-report-src-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("a.c");
        let text: String = (1..=10).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&p, text).unwrap();
        let (first, lines) = read_around(&p, 5).unwrap().unwrap();
        assert_eq!((first, lines.len()), (2, 7));
        assert_eq!(lines[3], "line 5");
        let (first, lines) = read_around(&p, 1).unwrap().unwrap();
        assert_eq!(
            (first, lines.first().map(String::as_str)),
            (1, Some("line 1"))
        );
        let (_, lines) = read_around(&p, 10).unwrap().unwrap();
        assert_eq!(lines.last().map(String::as_str), Some("line 10"));
        assert_eq!(read_around(&p, 11).unwrap(), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn maps_give_absolute_paths_only() {
        let maps = "5555-5556 r--p 00000000 08:01 123 /usr/bin/prog\n\
                    7f00-7f01 r-xp 00000000 08:01 456     /lib/x86_64-linux-gnu/libc.so.6\n\
                    7ffd-7ffe rw-p 00000000 00:00 0       [stack]\n\
                    7ffe-7fff rw-p 00000000 00:00 0\n";
        let files: Vec<PathBuf> = mapped_files(maps).collect();
        assert_eq!(
            files,
            [
                PathBuf::from("/usr/bin/prog"),
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6")
            ]
        );
    }

    #[test]
    fn a_frame_whose_file_is_nowhere_is_not_readable() {
        let f = FrameFields {
            function: "f".into(),
            file: Some("no-such-file-here.c".into()),
            line: Some(3),
            module: "prog".into(),
            offset: Some(0x10),
        };
        match Sources::default().excerpt(&f) {
            Some(Excerpt::NotReadable { file, .. }) => assert_eq!(file, "no-such-file-here.c"),
            other => panic!("{other:?}"),
        }
        let none = FrameFields { file: None, ..f };
        assert_eq!(Sources::default().excerpt(&none), None);
    }

    #[test]
    fn a_file_without_debug_information_is_found_in_a_ranks_directory() {
        let dir = std::env::temp_dir().join(format!("sdm-report-cwd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("main.py"),
            "import sys\n\ndef step():\n    wait()\n",
        )
        .unwrap();
        let f = FrameFields {
            function: "step".into(),
            file: Some("main.py".into()),
            line: Some(4),
            module: "<python>".into(),
            offset: None,
        };
        let s = Sources {
            dirs: vec![dir.clone()],
            ..Sources::default()
        };
        match s.excerpt(&f) {
            Some(Excerpt::Lines {
                path,
                first,
                lines,
                marked,
            }) => {
                assert_eq!(path, dir.join("main.py"));
                assert_eq!((first, marked), (1, 4));
                assert_eq!(lines[3], "    wait()");
            }
            other => panic!("{other:?}"),
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
