//! A PMIx tool connection to a launcher's PMIx server (`PMIx_tool_init` with
//! `PMIX_SERVER_PIDINFO`, as PRRTE's debugger examples connect): the namespaces it serves,
//! a namespace's process table (`PMIX_QUERY_PROC_TABLE`), and the debugger-release event
//! for a job held in `PMIx_Init`.
//!
//! PMIx allows one tool connection per process at a time: a second [`Tool`] while one is
//! open is refused ([`PmixError::Busy`]). Dropping a tool finalizes it.

use std::ffi::{CString, c_char, c_void};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use super::PmixError;
use super::ffi::{self, Api, DataArray, Infos, Proc, ProcInfo, Query};

/// `PMIX_ERR_TIMEOUT`: the release was not confirmed in time.
const PMIX_ERR_TIMEOUT: ffi::Status = -24;

/// Whether a tool connection is open in this process.
static OPEN: AtomicBool = AtomicBool::new(false);

/// The loaded PMIx libraries, by path, each kept for the life of the process.
static LOADED: OnceLock<Mutex<Vec<&'static Api>>> = OnceLock::new();

/// `path` loaded once per process.
fn api(path: &Path) -> Result<&'static Api, PmixError> {
    let mut loaded = LOADED
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(a) = loaded.iter().find(|a| a.path == path) {
        return Ok(a);
    }
    let a: &'static Api = Box::leak(Box::new(
        Api::load(path).map_err(|e| PmixError::Load(Box::new(e)))?,
    ));
    loaded.push(a);
    Ok(a)
}

/// One process of a PMIx proc table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) rank: u32,
    pub(crate) host: String,
    pub(crate) executable: String,
    pub(crate) pid: u32,
    /// `pmix_proc_state_t`.
    pub(crate) state: u8,
}

/// An open tool connection to one launcher's PMIx server.
pub(crate) struct Tool {
    api: &'static Api,
    me: Proc,
    launcher: u32,
}

impl std::fmt::Debug for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tool")
            .field("library", &self.api.path)
            .field("nspace", &self.me.nspace())
            .field("launcher", &self.launcher)
            .finish()
    }
}

impl Tool {
    /// Connects to the PMIx server of `launcher` with `library` (the launcher's own
    /// libpmix); `tmpdir`, when the launcher has its own, is where its rendezvous files are.
    pub(crate) fn connect(
        launcher: u32,
        library: &Path,
        tmpdir: Option<&str>,
    ) -> Result<Self, PmixError> {
        let api = api(library)?;
        if OPEN.swap(true, Ordering::SeqCst) {
            return Err(PmixError::Busy);
        }
        let mut attrs = Infos::default().pid(ffi::PMIX_SERVER_PIDINFO, launcher);
        if let Some(dir) = tmpdir {
            attrs = attrs.string(ffi::PMIX_SERVER_TMPDIR, dir);
        }
        let mut me = Proc::new("", 0);
        // SAFETY: `me` and the attributes (and what they point to) outlive the call, which
        // only reads them.
        let status = unsafe { (api.tool_init)(&mut me, attrs.as_mut_ptr(), attrs.len()) };
        if status != ffi::PMIX_SUCCESS {
            OPEN.store(false, Ordering::SeqCst);
            return Err(PmixError::Connect {
                launcher,
                library: api.path.clone(),
                status,
                name: api.error_string(status),
            });
        }
        Ok(Self { api, me, launcher })
    }

    /// The namespaces the server knows, in its order (jobs, then tools), but this tool's.
    pub(crate) fn namespaces(&self) -> Result<Vec<String>, PmixError> {
        let results = self.query(ffi::PMIX_QUERY_NAMESPACES, Infos::default())?;
        let mine = self.me.nspace();
        let list = results
            .iter()
            .find(|i| i.value.kind == ffi::PMIX_STRING)
            .map(|i| ffi::c_string(i.value.ptr() as *const c_char))
            .unwrap_or_default();
        Ok(list
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty() && *n != mine)
            .map(str::to_owned)
            .collect())
    }

    /// The process table of namespace `nspace`, sorted by rank.
    pub(crate) fn proc_table(&self, nspace: &str) -> Result<Vec<Entry>, PmixError> {
        let results = self.query(
            ffi::PMIX_QUERY_PROC_TABLE,
            Infos::default().string(ffi::PMIX_NSPACE, nspace),
        )?;
        let mut out = Vec::new();
        for i in results
            .iter()
            .filter(|i| i.value.kind == ffi::PMIX_DATA_ARRAY)
        {
            let darray = i.value.ptr() as *const DataArray;
            if darray.is_null() {
                continue;
            }
            // SAFETY: a PMIX_DATA_ARRAY value points at a data array PMIx allocated,
            // alive until the results are freed.
            let darray = unsafe { &*darray };
            if darray.kind != ffi::PMIX_PROC_INFO || darray.array.is_null() {
                continue;
            }
            // SAFETY: an array of `size` pmix_proc_info_t (its type says so).
            let procs =
                unsafe { std::slice::from_raw_parts(darray.array as *const ProcInfo, darray.size) };
            out.extend(procs.iter().map(|p| Entry {
                rank: p.proc_.rank,
                host: ffi::c_string(p.hostname),
                executable: ffi::c_string(p.executable_name),
                pid: p.pid.max(0) as u32,
                state: p.state,
            }));
        }
        out.sort_by_key(|e| e.rank);
        Ok(out)
    }

    /// Sends the debugger-release event to every process of `nspace` (those held in
    /// `PMIx_Init` by `PMIX_DEBUG_STOP_IN_INIT` go on), and waits until it is sent.
    pub(crate) fn release(&self, nspace: &str) -> Result<(), PmixError> {
        let target = Proc::new(nspace, ffi::PMIX_RANK_WILDCARD);
        let mut attrs = Infos::default()
            .proc_(ffi::PMIX_EVENT_CUSTOM_RANGE, target)
            .flag(ffi::PMIX_EVENT_NON_DEFAULT);
        let (tx, rx) = std::sync::mpsc::sync_channel::<ffi::Status>(1);
        let tx = Box::into_raw(Box::new(tx));
        // SAFETY: the attributes outlive the call and its callback (waited for below, or
        // leaked if it does not come); the callback gets `tx` back as its data and frees it.
        let status = unsafe {
            (self.api.notify_event)(
                ffi::PMIX_DEBUGGER_RELEASE,
                &self.me,
                ffi::PMIX_RANGE_CUSTOM,
                attrs.as_mut_ptr(),
                attrs.len(),
                Some(sent),
                tx as *mut c_void,
            )
        };
        let done = match status {
            // A hang guard: the server answers at once.
            ffi::PMIX_SUCCESS => match rx.recv_timeout(std::time::Duration::from_secs(60)) {
                Ok(done) => done,
                Err(_) => {
                    // PMIx may still read the attributes (and the target they point to)
                    // until its callback fires, which may be never: leaked, not freed.
                    std::mem::forget(attrs);
                    return Err(self.failed(PMIX_ERR_TIMEOUT));
                }
            },
            other => {
                // No callback will come: the sender is ours to free.
                // SAFETY: from Box::into_raw above, not handed on.
                drop(unsafe { Box::from_raw(tx) });
                if other == ffi::PMIX_OPERATION_SUCCEEDED {
                    ffi::PMIX_SUCCESS
                } else {
                    other
                }
            }
        };
        drop(attrs);
        if done != ffi::PMIX_SUCCESS {
            return Err(self.failed(done));
        }
        Ok(())
    }

    /// The release's failure with `status`.
    fn failed(&self, status: ffi::Status) -> PmixError {
        PmixError::Call {
            launcher: self.launcher,
            call: "PMIx_Notify_event(PMIX_DEBUGGER_RELEASE)",
            status,
            name: self.api.error_string(status),
        }
    }

    /// `PMIx_Query_info` of one key with `qualifiers`.
    fn query(&self, key: &str, mut qualifiers: Infos) -> Result<Results, PmixError> {
        let key = CString::new(key).unwrap_or_default();
        let mut keys = [key.as_ptr() as *mut c_char, std::ptr::null_mut()];
        let mut q = Query {
            keys: keys.as_mut_ptr(),
            qualifiers: qualifiers.as_mut_ptr(),
            nqual: qualifiers.len(),
        };
        let mut out: *mut ffi::Info = std::ptr::null_mut();
        let mut n = 0usize;
        // SAFETY: the query, its NULL-terminated keys and qualifiers outlive the blocking
        // call, which only reads them; it allocates `out` for us.
        let status = unsafe { (self.api.query_info)(&mut q, 1, &mut out, &mut n) };
        let results = Results {
            api: self.api,
            infos: out,
            n,
        };
        if status != ffi::PMIX_SUCCESS {
            return Err(PmixError::Call {
                launcher: self.launcher,
                call: "PMIx_Query_info",
                status,
                name: self.api.error_string(status),
            });
        }
        Ok(results)
    }
}

impl Drop for Tool {
    fn drop(&mut self) {
        // SAFETY: this process's one open tool connection (see OPEN) is closed once.
        unsafe { (self.api.tool_finalize)() };
        OPEN.store(false, Ordering::SeqCst);
    }
}

/// The release event's completion: sends its status to the waiting [`Tool::release`].
extern "C" fn sent(status: ffi::Status, data: *mut c_void) {
    // SAFETY: `data` is the sender Tool::release leaked for this one callback.
    let tx = unsafe { Box::from_raw(data as *mut std::sync::mpsc::SyncSender<ffi::Status>) };
    let _ = tx.try_send(status);
}

/// Query results PMIx allocated, freed (where the library can) when dropped.
struct Results {
    api: &'static Api,
    infos: *mut ffi::Info,
    n: usize,
}

impl Results {
    fn iter(&self) -> impl Iterator<Item = &ffi::Info> {
        let all: &[ffi::Info] = if self.infos.is_null() {
            &[]
        } else {
            // SAFETY: PMIx returned `n` infos at `infos`, alive until freed in drop.
            unsafe { std::slice::from_raw_parts(self.infos, self.n) }
        };
        all.iter()
    }
}

impl Drop for Results {
    fn drop(&mut self) {
        if let (Some(free), false) = (self.api.info_free, self.infos.is_null()) {
            // SAFETY: the array PMIx allocated for these results, freed once.
            unsafe { free(self.infos, self.n) };
        }
    }
}
