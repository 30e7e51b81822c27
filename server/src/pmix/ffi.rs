//! The few PMIx tool calls, types and constants sdm uses, bound by hand and loaded at run
//! time (dlopen) from the library the launcher itself maps: a PMIx tool must speak its
//! server's version (Debian's libpmix 4.2.2 fails the handshake with Open MPI 5.0's PMIx
//! 5.0 server, and the failed attempt leaves that server refusing later tools), and no
//! header or library is then needed to build sdm.
//!
//! Layouts are those of the PMIx standard's stable ABI (x86_64 and other LP64 targets): the
//! tests below compare them with the `sizeof`/`offsetof` values the C headers give (written
//! into the tests, since no header is needed to build).

use std::ffi::{CStr, CString, c_char, c_void};
use std::path::{Path, PathBuf};

/// `pmix_status_t`.
pub(super) type Status = i32;

pub(super) const PMIX_SUCCESS: Status = 0;
/// The operation completed at once; no callback follows.
pub(super) const PMIX_OPERATION_SUCCEEDED: Status = -157;
// The server cannot be reached, or the connection to it was lost: no query will work.
pub(super) const PMIX_ERR_UNREACH: Status = -25;
pub(super) const PMIX_ERR_COMM_FAILURE: Status = -49;
pub(super) const PMIX_ERR_LOST_CONNECTION: Status = -61;
/// The event that lets processes held by `PMIX_DEBUG_STOP_IN_INIT` go on.
pub(super) const PMIX_DEBUGGER_RELEASE: Status = -3;

/// `pmix_data_type_t` values.
pub(super) const PMIX_BOOL: u16 = 1;
pub(super) const PMIX_STRING: u16 = 3;
pub(super) const PMIX_PID: u16 = 5;
pub(super) const PMIX_PROC: u16 = 22;
pub(super) const PMIX_PROC_INFO: u16 = 38;
pub(super) const PMIX_DATA_ARRAY: u16 = 39;

/// `pmix_data_range_t` `PMIX_RANGE_CUSTOM`: the processes `PMIX_EVENT_CUSTOM_RANGE` names.
pub(super) const PMIX_RANGE_CUSTOM: u8 = 6;
/// `PMIX_RANK_WILDCARD`: every rank of a namespace.
pub(super) const PMIX_RANK_WILDCARD: u32 = 0xffff_fffe;

/// `pmix_proc_state_t`: connected to its PMIx server (in `PMIx_Init` or later).
pub(super) const PMIX_PROC_STATE_CONNECTED: u8 = 6;
/// `pmix_proc_state_t`: at and above, the process has ended.
pub(super) const PMIX_PROC_STATE_TERMINATED: u8 = 20;

/// Attribute keys.
pub(super) const PMIX_SERVER_PIDINFO: &str = "pmix.srvr.pidinfo";
pub(super) const PMIX_SERVER_TMPDIR: &str = "pmix.srvr.tmpdir";
pub(super) const PMIX_QUERY_NAMESPACES: &str = "pmix.qry.ns";
pub(super) const PMIX_QUERY_PROC_TABLE: &str = "pmix.qry.ptable";
pub(super) const PMIX_NSPACE: &str = "pmix.nspace";
pub(super) const PMIX_EVENT_CUSTOM_RANGE: &str = "pmix.evrange";
pub(super) const PMIX_EVENT_NON_DEFAULT: &str = "pmix.evnondef";

/// Longest namespace (`PMIX_MAX_NSLEN`), plus its NUL.
const NSPACE_LEN: usize = 256;
/// Longest key (`PMIX_MAX_KEYLEN`), plus its NUL.
const KEY_LEN: usize = 512;

/// `pmix_proc_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct Proc {
    pub(super) nspace: [c_char; NSPACE_LEN],
    pub(super) rank: u32,
}

impl Proc {
    pub(super) fn new(nspace: &str, rank: u32) -> Self {
        let mut p = Self {
            nspace: [0; NSPACE_LEN],
            rank,
        };
        for (d, s) in p.nspace.iter_mut().zip(nspace.bytes().take(NSPACE_LEN - 1)) {
            *d = s as c_char;
        }
        p
    }

    pub(super) fn nspace(&self) -> String {
        // The array is NUL-terminated by construction (the library's and ours).
        let bytes: Vec<u8> = self
            .nspace
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// `pmix_value_t`: a type tag and a 24-byte union, read and written as the member the tag
/// names.
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct Value {
    pub(super) kind: u16,
    data: [u64; 3],
}

impl Value {
    fn with(kind: u16, first: u64) -> Self {
        Self {
            kind,
            data: [first, 0, 0],
        }
    }

    /// The union's first member as a pointer (`string`, `darray`, `proc`).
    pub(super) fn ptr(&self) -> *mut c_void {
        self.data[0] as usize as *mut c_void
    }
}

/// `pmix_info_t`.
#[repr(C)]
pub(super) struct Info {
    key: [c_char; KEY_LEN],
    flags: u32,
    pub(super) value: Value,
}

impl Info {
    fn new(key: &str, value: Value) -> Self {
        let mut i = Self {
            key: [0; KEY_LEN],
            flags: 0,
            value,
        };
        for (d, s) in i.key.iter_mut().zip(key.bytes().take(KEY_LEN - 1)) {
            *d = s as c_char;
        }
        i
    }

    #[cfg(test)]
    pub(super) fn key(&self) -> String {
        // SAFETY: the key is NUL-terminated within its array (written so, here or by PMIx).
        unsafe { CStr::from_ptr(self.key.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }
}

/// `pmix_query_t`.
#[repr(C)]
pub(super) struct Query {
    pub(super) keys: *mut *mut c_char,
    pub(super) qualifiers: *mut Info,
    pub(super) nqual: usize,
}

/// `pmix_proc_info_t`: one process of a proc table.
#[repr(C)]
pub(super) struct ProcInfo {
    pub(super) proc_: Proc,
    pub(super) hostname: *mut c_char,
    pub(super) executable_name: *mut c_char,
    pub(super) pid: i32,
    pub(super) exit_code: i32,
    pub(super) state: u8,
}

/// `pmix_data_array_t`.
#[repr(C)]
pub(super) struct DataArray {
    pub(super) kind: u16,
    pub(super) size: usize,
    pub(super) array: *mut c_void,
}

/// Attributes passed to PMIx, with the memory their values point into (strings, procs),
/// kept for as long as the array is.
#[derive(Default)]
pub(super) struct Infos {
    infos: Vec<Info>,
    strings: Vec<CString>,
    /// Boxed: the infos point at them, so they must not move as the list grows.
    #[allow(clippy::vec_box)]
    procs: Vec<Box<Proc>>,
}

impl Infos {
    pub(super) fn flag(mut self, key: &str) -> Self {
        self.infos.push(Info::new(key, Value::with(PMIX_BOOL, 1)));
        self
    }

    pub(super) fn string(mut self, key: &str, value: &str) -> Self {
        let s = CString::new(value.replace('\0', "")).unwrap_or_default();
        self.infos
            .push(Info::new(key, Value::with(PMIX_STRING, s.as_ptr() as u64)));
        self.strings.push(s);
        self
    }

    pub(super) fn pid(mut self, key: &str, pid: u32) -> Self {
        self.infos
            .push(Info::new(key, Value::with(PMIX_PID, u64::from(pid))));
        self
    }

    pub(super) fn proc_(mut self, key: &str, p: Proc) -> Self {
        let b = Box::new(p);
        let at = &*b as *const Proc as u64;
        self.infos.push(Info::new(key, Value::with(PMIX_PROC, at)));
        self.procs.push(b);
        self
    }

    pub(super) fn len(&self) -> usize {
        self.infos.len()
    }

    pub(super) fn as_mut_ptr(&mut self) -> *mut Info {
        if self.infos.is_empty() {
            std::ptr::null_mut()
        } else {
            self.infos.as_mut_ptr()
        }
    }
}

/// An operation's completion callback (`pmix_op_cbfunc_t`).
pub(super) type OpCallback = extern "C" fn(Status, *mut c_void);

type ToolInit = unsafe extern "C" fn(*mut Proc, *mut Info, usize) -> Status;
type ToolFinalize = unsafe extern "C" fn() -> Status;
type QueryInfo = unsafe extern "C" fn(*mut Query, usize, *mut *mut Info, *mut usize) -> Status;
type InfoFree = unsafe extern "C" fn(*mut Info, usize);
type NotifyEvent = unsafe extern "C" fn(
    Status,
    *const Proc,
    u8,
    *mut Info,
    usize,
    Option<OpCallback>,
    *mut c_void,
) -> Status;
type ErrorString = unsafe extern "C" fn(Status) -> *const c_char;

/// The PMIx library's entry points sdm calls, from one loaded copy.
pub(super) struct Api {
    /// Where it was loaded from.
    pub(super) path: PathBuf,
    pub(super) tool_init: ToolInit,
    pub(super) tool_finalize: ToolFinalize,
    pub(super) query_info: QueryInfo,
    /// Absent before PMIx 4.1's `PMIx_Info_free` (results are then left allocated).
    pub(super) info_free: Option<InfoFree>,
    pub(super) notify_event: NotifyEvent,
    error_string: ErrorString,
    /// Kept loaded for the life of the process: PMIx runs threads of its own.
    _lib: libloading::Library,
}

/// Why the library could not be used.
#[derive(Debug, thiserror::Error)]
pub(super) enum LoadError {
    /// dlopen failed.
    #[error("cannot load {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: libloading::Error,
    },
    /// A function is missing from it.
    #[error("{path} has no {symbol}: {source}")]
    Symbol {
        path: PathBuf,
        symbol: &'static str,
        #[source]
        source: libloading::Error,
    },
}

impl Api {
    /// Loads `path` (a `libpmix.so`), resolving its functions.
    pub(super) fn load(path: &Path) -> Result<Self, LoadError> {
        // SAFETY: loading runs the library's initialisers; libpmix's only set up its own
        // globals.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|source| LoadError::Open {
            path: path.to_owned(),
            source,
        })?;
        fn get<T: Copy>(
            lib: &libloading::Library,
            path: &Path,
            symbol: &'static str,
        ) -> Result<T, LoadError> {
            // SAFETY: each symbol is read as the type its C prototype declares (above).
            unsafe { lib.get::<T>(symbol.as_bytes()) }
                .map(|s| *s)
                .map_err(|source| LoadError::Symbol {
                    path: path.to_owned(),
                    symbol,
                    source,
                })
        }
        Ok(Self {
            path: path.to_owned(),
            tool_init: get(&lib, path, "PMIx_tool_init")?,
            tool_finalize: get(&lib, path, "PMIx_tool_finalize")?,
            query_info: get(&lib, path, "PMIx_Query_info")?,
            info_free: get(&lib, path, "PMIx_Info_free").ok(),
            notify_event: get(&lib, path, "PMIx_Notify_event")?,
            error_string: get(&lib, path, "PMIx_Error_string")?,
            _lib: lib,
        })
    }

    /// PMIx's name for `status` (`PMIX_ERR_UNREACH`).
    pub(super) fn error_string(&self, status: Status) -> String {
        // SAFETY: PMIx_Error_string returns a static NUL-terminated string for any status.
        let s = unsafe { (self.error_string)(status) };
        if s.is_null() {
            return format!("PMIx status {status}");
        }
        // SAFETY: non-null, NUL-terminated (above).
        unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
    }
}

/// A C string PMIx owns, copied (empty for NULL).
pub(super) fn c_string(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: PMIx's strings are NUL-terminated.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// The sizes and offsets the C headers give (PMIx 4.2 and 5.0 alike: the stable ABI).
    #[test]
    fn layouts_match_the_c_headers() {
        assert_eq!(size_of::<Proc>(), 260);
        assert_eq!(size_of::<Value>(), 32);
        assert_eq!(offset_of!(Value, data), 8);
        assert_eq!(size_of::<Info>(), 552);
        assert_eq!(offset_of!(Info, flags), 512);
        assert_eq!(offset_of!(Info, value), 520);
        assert_eq!(size_of::<Query>(), 24);
        assert_eq!(size_of::<ProcInfo>(), 296);
        assert_eq!(offset_of!(ProcInfo, hostname), 264);
        assert_eq!(offset_of!(ProcInfo, executable_name), 272);
        assert_eq!(offset_of!(ProcInfo, pid), 280);
        assert_eq!(offset_of!(ProcInfo, exit_code), 284);
        assert_eq!(offset_of!(ProcInfo, state), 288);
        assert_eq!(size_of::<DataArray>(), 24);
        assert_eq!(offset_of!(DataArray, array), 16);
    }

    #[test]
    fn attributes_hold_their_keys_and_values() {
        let mut i = Infos::default()
            .flag(PMIX_EVENT_NON_DEFAULT)
            .string(PMIX_NSPACE, "job@1")
            .pid(PMIX_SERVER_PIDINFO, 42)
            .proc_(
                PMIX_EVENT_CUSTOM_RANGE,
                Proc::new("job@1", PMIX_RANK_WILDCARD),
            );
        assert_eq!(i.len(), 4);
        assert!(!i.as_mut_ptr().is_null());
        assert_eq!(i.infos[1].key(), PMIX_NSPACE);
        assert_eq!(c_string(i.infos[1].value.ptr() as *const c_char), "job@1");
        assert_eq!(i.infos[2].value.data[0], 42);
        // SAFETY: the value points at the boxed proc the list keeps.
        let p = unsafe { &*(i.infos[3].value.ptr() as *const Proc) };
        assert_eq!(
            (p.nspace(), p.rank),
            ("job@1".to_owned(), PMIX_RANK_WILDCARD)
        );
    }
}
