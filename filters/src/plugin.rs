//! Filter plugins: shared libraries implementing the C ABI of `include/sdm_filter.h`, loaded
//! with libloading and wrapped as a [`Filter`]. A failing plugin fails its op, not the node.
//!
//! The ABI (version [`ABI_VERSION`]): the library exports `sdm_filter_entry`, which returns a
//! static [`VTable`] (`abi_version` first, then `name`, `init`, `fold`, `flush`, `finish`,
//! `destroy`). Payloads are pointer + length; id-sets are sorted inclusive ranges
//! (`runs[2i] ..= runs[2i+1]`). Calls return 0 or fail with a message given through
//! [`Host::error`]. The host refuses a library built for another ABI version, checks that every
//! flush accounts for exactly the ids folded since the last one, and calls `destroy` once
//! when the filter is dropped. Rust plugins catch their panics at the boundary (see
//! `examples/rust/sum_plugin.rs`); a plugin that crashes outright (a segfault) cannot be
//! contained in-process.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sdm_proto::IdSet;

use crate::error::{ErrorKind, FilterError};
use crate::{Filter, Group, sort_groups};

/// The ABI version this build speaks (`SDM_FILTER_ABI_VERSION` in the header).
pub const ABI_VERSION: u32 = 1;

/// The symbol every plugin exports.
pub const ENTRY_SYMBOL: &str = "sdm_filter_entry";

/// `sdm_filter_host`: what the host offers during a call.
#[repr(C)]
#[derive(Debug)]
pub struct Host {
    /// Opaque to the plugin.
    pub ctx: *mut c_void,
    /// Sends one group upward (during flush and finish).
    pub emit: unsafe extern "C" fn(
        ctx: *mut c_void,
        payload: *const u8,
        len: usize,
        runs: *const u32,
        nruns: usize,
    ) -> c_int,
    /// Records why the current call fails.
    pub error: unsafe extern "C" fn(ctx: *mut c_void, msg: *const c_char, len: usize),
}

/// `init`: makes the state from the parameters.
pub type InitFn = unsafe extern "C" fn(
    host: *const Host,
    params: *const u8,
    params_len: usize,
    state: *mut *mut c_void,
) -> c_int;
/// `fold`: folds one payload from an id-set.
pub type FoldFn = unsafe extern "C" fn(
    state: *mut c_void,
    host: *const Host,
    payload: *const u8,
    len: usize,
    runs: *const u32,
    nruns: usize,
) -> c_int;
/// `flush` and `finish`: emit groups, reset.
pub type FlushFn = unsafe extern "C" fn(state: *mut c_void, host: *const Host) -> c_int;
/// `destroy`: frees the state.
pub type DestroyFn = unsafe extern "C" fn(state: *mut c_void);

/// `sdm_filter_vtable`.
#[repr(C)]
#[derive(Debug)]
pub struct VTable {
    /// Must equal [`ABI_VERSION`].
    pub abi_version: u32,
    /// Zero.
    pub reserved: u32,
    /// NUL-terminated registry name.
    pub name: *const c_char,
    /// Required.
    pub init: Option<InitFn>,
    /// Required.
    pub fold: Option<FoldFn>,
    /// Required.
    pub flush: Option<FlushFn>,
    /// Optional (`None`: flush).
    pub finish: Option<FlushFn>,
    /// Required.
    pub destroy: Option<DestroyFn>,
}

/// `sdm_filter_entry`.
pub type EntryFn = unsafe extern "C" fn() -> *const VTable;

/// A loaded plugin library; makes [`Filter`]s.
#[derive(Debug)]
pub struct Plugin {
    name: String,
    path: PathBuf,
    init: InitFn,
    fold: FoldFn,
    flush: FlushFn,
    finish: Option<FlushFn>,
    destroy: DestroyFn,
    // Last, so it unloads after everything else; instances hold an Arc<Plugin>.
    _lib: VersionedLibrary,
}

// SAFETY: the vtable is static data in the library, which stays loaded while this value
// lives; the ABI requires its functions to be callable from any thread.
unsafe impl Send for Plugin {}
// SAFETY: as above; `Plugin` itself is never mutated after loading.
unsafe impl Sync for Plugin {}

impl Plugin {
    /// Loads the plugin at `path` and checks its ABI version and vtable.
    pub fn load(path: &Path) -> Result<Self, FilterError> {
        let shown = path.display().to_string();
        let err = |what: String| FilterError::new(&shown, ErrorKind::PluginLoad, what);
        let lib = VersionedLibrary::open(path, "filter", ENTRY_SYMBOL, ABI_VERSION, "sdm_filter.h")
            .map_err(|e| err(e.to_string()).caused_by(e))?;
        let vt = lib.table().cast::<VTable>();
        // SAFETY: the version matches, so the layout is `VTable`.
        let v = unsafe { &*vt };
        let name = if v.name.is_null() {
            return Err(err(format!("plugin {shown} has no name")));
        } else {
            // SAFETY: the ABI says `name` is NUL-terminated static data.
            unsafe { CStr::from_ptr(v.name) }
                .to_str()
                .map_err(|_| err(format!("plugin {shown} has a name that is not UTF-8")))?
                .to_owned()
        };
        if name.is_empty() || name.contains(':') {
            return Err(err(format!(
                "plugin {shown} has name {name:?}; a name must be non-empty and hold no ':'"
            )));
        }
        let missing = |f: &str| err(format!("plugin {name} ({shown}) has no {f} function"));
        Ok(Self {
            init: v.init.ok_or_else(|| missing("init"))?,
            fold: v.fold.ok_or_else(|| missing("fold"))?,
            flush: v.flush.ok_or_else(|| missing("flush"))?,
            destroy: v.destroy.ok_or_else(|| missing("destroy"))?,
            finish: v.finish,
            name,
            path: path.to_owned(),
            _lib: lib,
        })
    }

    /// The name the plugin declares.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A fresh filter instance with `params` (the part after `name:`).
    pub fn create(self: &Arc<Self>, params: &str) -> Result<Box<dyn Filter>, FilterError> {
        let spec = if params.is_empty() {
            self.name.clone()
        } else {
            format!("{}:{params}", self.name)
        };
        let mut call = Call::default();
        let host = call.host();
        let mut state: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid host and params for the duration of the call, per the ABI.
        let rc = unsafe { (self.init)(&host, params.as_ptr(), params.len(), &mut state) };
        let f = PluginFilter {
            plugin: Arc::clone(self),
            spec,
            state,
            folded: IdSet::new(),
        };
        call.check(&f, "init", rc)?;
        Ok(Box::new(f))
    }
}

/// What a host callback collected during one plugin call.
#[derive(Debug, Default)]
struct Call {
    out: Vec<Group>,
    error: Option<String>,
    bad_emit: Option<String>,
}

impl Call {
    fn host(&mut self) -> Host {
        Host {
            ctx: (self as *mut Call).cast(),
            emit: host_emit,
            error: host_error,
        }
    }

    fn check(&mut self, f: &PluginFilter, what: &str, rc: c_int) -> Result<(), FilterError> {
        if let Some(e) = self.bad_emit.take() {
            return Err(f.error(format!("{what} emitted a bad group: {e}")));
        }
        if rc != 0 {
            let why = self.error.take().unwrap_or_else(|| "no message".into());
            return Err(f.error(format!("{what} failed (code {rc}): {why}")));
        }
        Ok(())
    }
}

/// Reads `nruns` inclusive ranges.
///
/// # Safety
/// `runs` points to `2 * nruns` readable `u32`s (or `nruns` is 0).
unsafe fn read_runs(runs: *const u32, nruns: usize) -> Result<IdSet, String> {
    let mut ids = IdSet::new();
    if nruns == 0 {
        return Ok(ids);
    }
    if runs.is_null() {
        return Err("runs is NULL".into());
    }
    // SAFETY: by the caller's contract.
    let r = unsafe { std::slice::from_raw_parts(runs, 2 * nruns) };
    for pair in r.chunks_exact(2) {
        if pair[0] > pair[1] {
            return Err(format!("run {}..={} is reversed", pair[0], pair[1]));
        }
        ids.insert_range(pair[0]..=pair[1]);
    }
    Ok(ids)
}

unsafe extern "C" fn host_emit(
    ctx: *mut c_void,
    payload: *const u8,
    len: usize,
    runs: *const u32,
    nruns: usize,
) -> c_int {
    let r = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `ctx` is the `Call` the host passed for this call.
        let call = unsafe { &mut *ctx.cast::<Call>() };
        if payload.is_null() && len > 0 {
            call.bad_emit = Some("payload is NULL".into());
            return 1;
        }
        // SAFETY: the plugin passes `nruns` valid runs, per the ABI.
        let ids = match unsafe { read_runs(runs, nruns) } {
            Ok(ids) => ids,
            Err(e) => {
                call.bad_emit = Some(e);
                return 1;
            }
        };
        let bytes = if len == 0 {
            Vec::new()
        } else {
            // SAFETY: `payload` has `len` readable bytes, per the ABI.
            unsafe { std::slice::from_raw_parts(payload, len) }.to_vec()
        };
        call.out.push(Group::new(bytes, ids));
        0
    }));
    r.unwrap_or(1)
}

unsafe extern "C" fn host_error(ctx: *mut c_void, msg: *const c_char, len: usize) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `ctx` is the `Call` the host passed for this call.
        let call = unsafe { &mut *ctx.cast::<Call>() };
        // SAFETY: `msg` has `len` readable bytes, per the ABI.
        if let Some(text) = unsafe { c_message(msg, len) } {
            call.error = Some(text);
        }
    }));
}

/// The message a plugin passed to an `error` callback of a C ABI (UTF-8, not
/// NUL-terminated), as text; `None` if `msg` is NULL.
///
/// # Safety
/// `msg` is NULL or points to `len` readable bytes.
pub unsafe fn c_message(msg: *const c_char, len: usize) -> Option<String> {
    if msg.is_null() {
        return None;
    }
    // SAFETY: by the caller's contract.
    let b = unsafe { std::slice::from_raw_parts(msg.cast::<u8>(), len) };
    Some(String::from_utf8_lossy(b).into_owned())
}

/// One plugin filter instance.
struct PluginFilter {
    plugin: Arc<Plugin>,
    spec: String,
    state: *mut c_void,
    /// Ids folded since the last flush, to check the plugin's accounting.
    folded: IdSet,
}

// SAFETY: the ABI allows an instance to be called from any thread, one call at a time;
// `&mut self` on every call ensures that.
unsafe impl Send for PluginFilter {}

impl PluginFilter {
    fn error(&self, what: String) -> FilterError {
        FilterError::new(
            &self.spec,
            ErrorKind::Plugin,
            format!(
                "plugin {} ({}): {what}",
                self.plugin.name,
                self.plugin.path.display()
            ),
        )
    }

    fn emit_all(&mut self, f: FlushFn, what: &str) -> Result<Vec<Group>, FilterError> {
        let mut call = Call::default();
        let host = call.host();
        // SAFETY: `state` came from `init`; `host` is valid for the call.
        let rc = unsafe { f(self.state, &host) };
        let folded = std::mem::take(&mut self.folded);
        call.check(self, what, rc)?;
        let mut out = std::mem::take(&mut call.out);
        let mut seen = IdSet::new();
        for g in &out {
            if !seen.is_disjoint(&g.sources) {
                return Err(self.error(format!(
                    "{what} emitted groups whose ids overlap at {}",
                    &seen & &g.sources
                )));
            }
            seen.union_with(&g.sources);
        }
        if seen != folded {
            return Err(self.error(format!(
                "{what} emitted groups for {seen}, but {folded} were folded (every folded id \
                 must be in exactly one group)"
            )));
        }
        sort_groups(&mut out);
        Ok(out)
    }
}

impl Filter for PluginFilter {
    fn name(&self) -> &str {
        &self.spec
    }

    fn fold(&mut self, payload: &[u8], sources: &IdSet) -> Result<(), FilterError> {
        let runs: Vec<u32> = sources
            .runs()
            .flat_map(|r| [*r.start(), *r.end()])
            .collect();
        let mut call = Call::default();
        let host = call.host();
        // SAFETY: `state` came from `init`; buffers are valid for the call.
        let rc = unsafe {
            (self.plugin.fold)(
                self.state,
                &host,
                payload.as_ptr(),
                payload.len(),
                runs.as_ptr(),
                runs.len() / 2,
            )
        };
        call.check(self, "fold", rc)
            .map_err(|e| e.with_sources(sources))?;
        self.folded.union_with(sources);
        Ok(())
    }

    fn flush(&mut self) -> Result<Vec<Group>, FilterError> {
        self.emit_all(self.plugin.flush, "flush")
    }

    fn finish(&mut self) -> Result<Vec<Group>, FilterError> {
        match self.plugin.finish {
            Some(f) => self.emit_all(f, "finish"),
            None => self.flush(),
        }
    }
}

impl Drop for PluginFilter {
    fn drop(&mut self) {
        // SAFETY: `state` came from `init` and is destroyed once; `destroy` accepts NULL
        // only if init failed before setting it, so skip that case.
        if !self.state.is_null() {
            unsafe { (self.plugin.destroy)(self.state) };
        }
    }
}

impl std::fmt::Debug for PluginFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginFilter")
            .field("spec", &self.spec)
            .finish()
    }
}

/// Why a plugin library could not be opened as a plugin of some C ABI.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The library itself did not load (missing file, missing dependency, not a library).
    #[error("cannot load plugin {path}: {source}")]
    Open {
        /// The library.
        path: PathBuf,
        /// The loader's reason.
        source: libloading::Error,
    },
    /// The library does not export the ABI's entry function.
    #[error("{path} is not an sdm {what} plugin: no symbol {symbol} ({source})")]
    NoEntry {
        /// The library.
        path: PathBuf,
        /// Which ABI (`filter`, `service`).
        what: &'static str,
        /// The entry symbol looked for.
        symbol: &'static str,
        /// The loader's reason.
        source: libloading::Error,
    },
    /// The entry function returned NULL.
    #[error("{symbol} of {path} returned NULL")]
    NullTable {
        /// The library.
        path: PathBuf,
        /// The entry symbol.
        symbol: &'static str,
    },
    /// The library was built for another version of the ABI.
    #[error(
        "plugin {path} was built for {what} ABI version {found}, but this sdm speaks version \
         {expected}: rebuild it against this sdm's {header}"
    )]
    Version {
        /// The library.
        path: PathBuf,
        /// Which ABI (`filter`, `service`).
        what: &'static str,
        /// The version the plugin declares.
        found: u32,
        /// The version this build speaks.
        expected: u32,
        /// The header that defines the ABI.
        header: &'static str,
    },
}

/// A loaded shared library whose entry function returned a table that starts with the
/// expected ABI version: the loading and checking every C plugin ABI of sdm shares
/// (filters here, services in sdm-server). The table stays valid while this value lives.
#[derive(Debug)]
pub struct VersionedLibrary {
    table: *const std::ffi::c_void,
    _lib: libloading::Library,
}

// SAFETY: the table is static data of the library, which stays loaded while this value
// lives; the plugin ABIs require their functions to be callable from any thread.
unsafe impl Send for VersionedLibrary {}
// SAFETY: as above; nothing here is mutated after loading.
unsafe impl Sync for VersionedLibrary {}

impl VersionedLibrary {
    /// Loads `path`, calls its entry function `symbol` (`extern "C" fn() -> *const T`,
    /// where `T` starts with a `u32` ABI version) and checks that version is `abi`. `what`
    /// and `header` name the ABI in errors (`"filter"`, `"sdm_filter.h"`).
    pub fn open(
        path: &Path,
        what: &'static str,
        symbol: &'static str,
        abi: u32,
        header: &'static str,
    ) -> Result<Self, LoadError> {
        type Entry = unsafe extern "C" fn() -> *const std::ffi::c_void;
        // SAFETY: loading a library runs its initializers; loading a plugin means trusting
        // it, as with any MRNet filter.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|source| LoadError::Open {
            path: path.to_owned(),
            source,
        })?;
        // SAFETY: by the ABI, the symbol is an entry function taking nothing and returning
        // a pointer to a static table.
        let entry: Entry = unsafe {
            *lib.get::<Entry>(symbol.as_bytes())
                .map_err(|source| LoadError::NoEntry {
                    path: path.to_owned(),
                    what,
                    symbol,
                    source,
                })?
        };
        // SAFETY: as above.
        let table = unsafe { entry() };
        if table.is_null() {
            return Err(LoadError::NullTable {
                path: path.to_owned(),
                symbol,
            });
        }
        // SAFETY: the ABI version is the first field in every version of every table:
        // readable before we know the rest of the layout.
        let found = unsafe { table.cast::<u32>().read() };
        if found != abi {
            return Err(LoadError::Version {
                path: path.to_owned(),
                what,
                found,
                expected: abi,
                header,
            });
        }
        Ok(Self { table, _lib: lib })
    }

    /// The entry function's table, of the checked ABI version.
    pub fn table(&self) -> *const std::ffi::c_void {
        self.table
    }
}
