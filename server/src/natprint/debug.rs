//! One file's DWARF as the native evaluator reads it: its compilation units, an index of
//! its global and file-static variables, every name it holds (DIEs and ELF symbols), and
//! the lookup of a name at a pc as gdb orders it: the innermost lexical block out to the
//! function, the unit's file statics, the globals, then other units' file statics.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gimli::{AttributeValue, DwAt, DwTag, UnitOffset, constants as dw};

use super::locate::Frame;
use super::types::Value;
use super::{NotNative, Process};

/// Section bytes shared by the whole server.
pub(super) type R = gimli::EndianArcSlice<gimli::RunTimeEndian>;

/// A DIE: its unit (an index in [`Debug::units`]) and its offset there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct DieRef {
    pub(super) unit: usize,
    pub(super) offset: UnitOffset,
}

/// One compilation unit.
pub(super) struct Cu {
    pub(super) unit: gimli::Unit<R>,
    ranges: Vec<Range<u64>>,
    /// Whether it is C (only C values are printed natively).
    pub(super) c: bool,
}

/// What the native evaluator knows of one ELF file (see the module doc).
pub(crate) struct Debug {
    pub(super) dwarf: gimli::Dwarf<R>,
    pub(super) units: Vec<Cu>,
    /// Every DIE name and ELF symbol name of the file.
    names: HashSet<Box<str>>,
    /// Defined external variables by name.
    globals: HashMap<Box<str>, DieRef>,
    /// Defined file-static variables by name.
    statics: HashMap<Box<str>, Vec<DieRef>>,
    /// Whether gdb may find more in a separate debug file than this file holds.
    separate: bool,
}

/// A scope holding the pc: its tag, its DIE, and the variables declared in it.
type Scope = (DwTag, UnitOffset, Vec<(String, UnitOffset)>);

/// A variable found for a name, and where it lives.
pub(super) struct Found {
    pub(super) var: DieRef,
    /// The function whose frame holds it (locals and parameters).
    pub(super) function: Option<DieRef>,
}

fn dw_err(_: gimli::Error) -> NotNative {
    NotNative::Symbols
}

impl Debug {
    /// Reads the file at `path` (and the separate debug file gdb would read for it, when
    /// it has no DWARF of its own); `None` when it is not an ELF file.
    pub(crate) fn load(path: &Path) -> Option<Debug> {
        Self::read(path, true)
    }

    fn read(path: &Path, follow: bool) -> Option<Debug> {
        use object::{Object, ObjectSymbol};
        let data = std::fs::read(path).ok()?;
        let file = object::File::parse(&*data).ok()?;
        let mut names: HashSet<Box<str>> = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter_map(|s| {
                s.name()
                    .ok()
                    .map(|n| n.split('@').next().unwrap_or(n).into())
            })
            .collect();
        let has_dwarf = file.section_by_name(".debug_info").is_some();
        if !has_dwarf
            && follow
            && let Some(other) = separate_file(path, &file)
        {
            // gdb reads that file's DWARF: so does this, or it is not sure of any name.
            let mut d = Self::read(&other, false).unwrap_or_else(|| Self::empty(&file, true));
            d.names.extend(names);
            return Some(d);
        }
        let mut d = Self::empty(&file, file.section_by_name(".gnu_debugaltlink").is_some());
        d.index(&mut names);
        d.names = names;
        Some(d)
    }

    /// The DWARF sections of `file`, not indexed yet; `separate`: gdb may know more.
    fn empty(file: &object::File<'_>, separate: bool) -> Debug {
        use object::{Object, ObjectSection};
        let endian = if file.is_little_endian() {
            gimli::RunTimeEndian::Little
        } else {
            gimli::RunTimeEndian::Big
        };
        let section = |id: gimli::SectionId| -> Result<R, std::convert::Infallible> {
            let bytes: Arc<[u8]> = file
                .section_by_name(id.name())
                .and_then(|s| s.uncompressed_data().ok())
                .map(|d| Arc::from(&*d))
                .unwrap_or_else(|| Arc::from(&[][..]));
            Ok(gimli::EndianArcSlice::new(bytes, endian))
        };
        let Ok(dwarf) = gimli::Dwarf::load(section);
        Debug {
            dwarf,
            units: Vec::new(),
            names: HashSet::new(),
            globals: HashMap::new(),
            statics: HashMap::new(),
            separate,
        }
    }

    /// Reads every unit: its ranges, language, and the names and file-scope variables it
    /// defines.
    fn index(&mut self, names: &mut HashSet<Box<str>>) {
        let mut headers = self.dwarf.units();
        while let Ok(Some(h)) = headers.next() {
            let Ok(unit) = self.dwarf.unit(h) else {
                continue;
            };
            let index = self.units.len();
            let mut ranges = Vec::new();
            if let Ok(mut it) = self.dwarf.unit_ranges(&unit) {
                while let Ok(Some(r)) = it.next() {
                    ranges.push(r.begin..r.end);
                }
            }
            let mut c = false;
            let mut entries = unit.entries();
            let mut depth = 0isize;
            while let Ok(Some((delta, e))) = entries.next_dfs() {
                depth += delta;
                if depth == 0 {
                    c = matches!(
                        e.attr_value(dw::DW_AT_language),
                        Ok(Some(AttributeValue::Language(l))) if is_c(l)
                    );
                }
                let Some(name) = self.name_of(&unit, e) else {
                    continue;
                };
                if depth == 1 && e.tag() == dw::DW_TAG_variable && has(e, dw::DW_AT_location) {
                    let r = DieRef {
                        unit: index,
                        offset: e.offset(),
                    };
                    if has(e, dw::DW_AT_external) {
                        self.globals.entry(name.as_str().into()).or_insert(r);
                    } else {
                        self.statics
                            .entry(name.as_str().into())
                            .or_default()
                            .push(r);
                    }
                }
                names.insert(name.into());
            }
            self.units.push(Cu { unit, ranges, c });
        }
    }

    /// The name of a DIE (`DW_AT_name`).
    pub(super) fn name_of(
        &self,
        unit: &gimli::Unit<R>,
        e: &gimli::DebuggingInformationEntry<'_, '_, R>,
    ) -> Option<String> {
        let v = e.attr_value(dw::DW_AT_name).ok()??;
        let s = self.dwarf.attr_string(unit, v).ok()?;
        Some(gimli::Reader::to_string_lossy(&s).ok()?.into_owned())
    }

    /// Whether this file certainly has nothing named `name` (for gdb's "No symbol").
    pub(crate) fn certainly_lacks(&self, name: &str) -> bool {
        !self.separate && !self.names.contains(name)
    }

    /// The unit whose code holds `svma`.
    fn unit_at(&self, svma: u64) -> Option<usize> {
        self.units
            .iter()
            .position(|u| u.ranges.iter().any(|r| r.contains(&svma)))
    }

    /// The variable `name` as gdb finds it from the innermost frame of `p` (see the module
    /// doc); `None` when this file defines no variable of that name.
    pub(super) fn find_var(&self, name: &str, p: &Process) -> Result<Option<Found>, NotNative> {
        let bias = p.files[p.exe].bias;
        let pc = p.regs[16];
        let at_pc = p.file_at(pc);
        if let Some(other) = at_pc.filter(|f| *f != p.exe) {
            // Frame 0 in a library: gdb looks in its DWARF first (its locals, its statics).
            let lib = &p.files[other];
            let d = lib.debug.get().ok_or(NotNative::Symbols)?;
            if d.separate || d.shadows(name, pc.wrapping_sub(lib.bias))? {
                return Err(NotNative::Symbols);
            }
        }
        let here = (at_pc == Some(p.exe))
            .then(|| self.unit_at(pc.wrapping_sub(bias)))
            .flatten();
        if let Some(u) = here {
            if !self.units[u].c {
                return Err(NotNative::Language);
            }
            if let Some(f) = self.local(u, pc.wrapping_sub(bias), name)? {
                return Ok(Some(f));
            }
            if let Some(v) = self
                .statics
                .get(name)
                .and_then(|v| v.iter().find(|r| r.unit == u))
            {
                return Ok(Some(Found {
                    var: *v,
                    function: None,
                }));
            }
        }
        let var = self
            .globals
            .get(name)
            .or_else(|| self.statics.get(name).and_then(|v| v.first()));
        Ok(var.map(|v| Found {
            var: *v,
            function: None,
        }))
    }

    /// Whether gdb, stopped at `svma` in this file (a library), finds `name` here before
    /// it looks in the executable: a local there, a static of its unit, a global of the
    /// file. Not C there: gdb's language changes.
    fn shadows(&self, name: &str, svma: u64) -> Result<bool, NotNative> {
        if self.globals.contains_key(name) {
            return Ok(true);
        }
        let Some(u) = self.unit_at(svma) else {
            return Ok(false);
        };
        if !self.units[u].c {
            return Err(NotNative::Language);
        }
        let statics = self.statics.get(name);
        Ok(statics.is_some_and(|v| v.iter().any(|r| r.unit == u))
            || self.local(u, svma, name)?.is_some())
    }

    /// A local or parameter `name` visible at `svma` in unit `u`: the innermost scope first.
    fn local(&self, u: usize, svma: u64, name: &str) -> Result<Option<Found>, NotNative> {
        let unit = &self.units[u].unit;
        let mut tree = unit.entries_tree(None).map_err(dw_err)?;
        let root = tree.root().map_err(dw_err)?;
        // Scopes holding svma, outermost first, each with the variables declared in it.
        let mut scopes: Vec<Scope> = Vec::new();
        self.scopes(unit, root, svma, &mut scopes)?;
        let Some(function) = scopes
            .iter()
            .find(|s| s.0 == dw::DW_TAG_subprogram)
            .map(|s| s.1)
        else {
            return Ok(None);
        };
        if scopes.iter().any(|s| s.0 == dw::DW_TAG_inlined_subroutine) {
            // gdb's frame 0 is then the inlined function: its own frames, not done here.
            return Err(NotNative::Location);
        }
        for (_, _, vars) in scopes.iter().rev() {
            if let Some((_, off)) = vars.iter().find(|(n, _)| n == name) {
                return Ok(Some(Found {
                    var: DieRef {
                        unit: u,
                        offset: *off,
                    },
                    function: Some(DieRef {
                        unit: u,
                        offset: function,
                    }),
                }));
            }
        }
        Ok(None)
    }

    /// Descends from `node` into the scope (function, block) among its children that holds
    /// `svma`, and on into the ones inside it.
    fn scopes(
        &self,
        unit: &gimli::Unit<R>,
        node: gimli::EntriesTreeNode<'_, '_, '_, R>,
        svma: u64,
        out: &mut Vec<Scope>,
    ) -> Result<(), NotNative> {
        let mut children = node.children();
        let mine = out.len().checked_sub(1);
        let mut entered = false;
        while let Some(child) = children.next().map_err(dw_err)? {
            let e = child.entry();
            let tag = e.tag();
            if matches!(tag, dw::DW_TAG_variable | dw::DW_TAG_formal_parameter) {
                if let (Some(i), Some(n)) = (mine, self.name_of(unit, e)) {
                    out[i].2.push((n, e.offset()));
                }
                continue;
            }
            let scope = matches!(
                tag,
                dw::DW_TAG_subprogram | dw::DW_TAG_lexical_block | dw::DW_TAG_inlined_subroutine
            );
            if !entered && scope && self.covers(unit, e, svma)? {
                entered = true;
                out.push((tag, e.offset(), Vec::new()));
                self.scopes(unit, child, svma, out)?;
            }
        }
        Ok(())
    }

    /// Whether the DIE's code ranges hold `svma`.
    fn covers(
        &self,
        unit: &gimli::Unit<R>,
        e: &gimli::DebuggingInformationEntry<'_, '_, R>,
        svma: u64,
    ) -> Result<bool, NotNative> {
        let mut it = self.dwarf.die_ranges(unit, e).map_err(dw_err)?;
        while let Some(r) = it.next().map_err(dw_err)? {
            if (r.begin..r.end).contains(&svma) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The DIE `r` of this file.
    pub(super) fn entry(
        &self,
        r: DieRef,
    ) -> Result<gimli::DebuggingInformationEntry<'_, '_, R>, NotNative> {
        self.units[r.unit].unit.entry(r.offset).map_err(dw_err)
    }

    /// The variable `name` at the innermost frame of `p` and where it is; `None`: no
    /// variable of that name.
    pub(super) fn find(&self, name: &str, p: &Process) -> Result<Option<Value>, NotNative> {
        let Some(found) = self.find_var(name, p)? else {
            return Ok(None);
        };
        if !self.units[found.var.unit].c {
            return Err(NotNative::Language);
        }
        let e = self.entry(found.var)?;
        let ty = attr_ref(&e, dw::DW_AT_type)
            .map(|offset| DieRef {
                unit: found.var.unit,
                offset,
            })
            .ok_or(NotNative::Type)?;
        let frame = Frame {
            debug: self,
            process: p,
            function: found.function,
        };
        let addr = frame.address_of(found.var)?;
        Ok(Some(Value {
            addr,
            ty: self.resolve(ty)?,
        }))
    }
}

/// Whether a DIE has attribute `at`.
pub(super) fn has(e: &gimli::DebuggingInformationEntry<'_, '_, R>, at: DwAt) -> bool {
    matches!(e.attr_value(at), Ok(Some(_)))
}

/// A reference attribute within the DIE's unit.
pub(super) fn attr_ref(
    e: &gimli::DebuggingInformationEntry<'_, '_, R>,
    at: DwAt,
) -> Option<UnitOffset> {
    match e.attr_value(at).ok()?? {
        AttributeValue::UnitRef(o) => Some(o),
        _ => None,
    }
}

/// Whether a DWARF language code is C.
fn is_c(l: gimli::DwLang) -> bool {
    matches!(
        l,
        dw::DW_LANG_C89 | dw::DW_LANG_C | dw::DW_LANG_C99 | dw::DW_LANG_C11 | dw::DW_LANG_C17
    )
}

/// The separate debug file gdb reads for `file` (at `path`), if one is installed: by
/// build id under /usr/lib/debug/.build-id, or by its `.gnu_debuglink` name beside it, in
/// its `.debug` directory, or under /usr/lib/debug.
fn separate_file(path: &Path, file: &object::File<'_>) -> Option<PathBuf> {
    use object::Object;
    if let Some(id) = file.build_id().ok().flatten() {
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let p = PathBuf::from(format!(
            "/usr/lib/debug/.build-id/{}/{}.debug",
            hex.get(..2)?,
            hex.get(2..)?
        ));
        if p.exists() {
            return Some(p);
        }
    }
    let (name, _) = file.gnu_debuglink().ok().flatten()?;
    let name = String::from_utf8_lossy(name).into_owned();
    let dir = path.parent()?;
    let global = Path::new("/usr/lib/debug").join(dir.strip_prefix("/").unwrap_or(dir));
    [
        dir.join(&name),
        dir.join(".debug").join(&name),
        global.join(&name),
    ]
    .into_iter()
    .find(|p| p.exists() && p != path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The C library this test runs on (with its separate debug file when one is installed,
    /// as with libc6-dbg): a made-up name is certainly not there, its functions are.
    #[test]
    fn the_c_library_lacks_a_made_up_name() {
        let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
        let libc = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| p.contains("/libc.so"))
            .expect("the test process maps a C library");
        let d = Debug::load(Path::new(libc)).expect("libc is an ELF file");
        assert!(
            d.certainly_lacks("nosuch_name_here"),
            "separate {}",
            d.separate
        );
        assert!(!d.certainly_lacks("malloc"));
    }
}
