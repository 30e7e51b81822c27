//! Service plugins: shared libraries implementing the C ABI of `include/sdm_service.h`,
//! loaded (with the loader filter plugins use) when the init command names them.
//!
//! The ABI (version [`ABI_VERSION`]): the library exports `sdm_service_entry`, which returns a
//! static [`VTable`] (`abi_version` first, then `name`, `init`, `handle`, `destroy`). Each
//! command for the plugin's service is one `handle` call, off the node's event loop, given a
//! [`Host`] with this server's id, the monitored program's pid and the reply and error
//! callbacks. A failing call fails that command with an error reply naming the plugin; the
//! server carries on.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use sdm_overlay::filters::plugin::{VersionedLibrary, c_message};

use crate::error::{Error, ErrorKind};
use crate::service::{Handler, Reply, Request};

/// The ABI version this build speaks (`SDM_SERVICE_ABI_VERSION` in the header).
pub const ABI_VERSION: u32 = 1;

/// The symbol every service plugin exports.
pub const ENTRY_SYMBOL: &str = "sdm_service_entry";

/// `sdm_service_host`: what the host offers during a call.
#[repr(C)]
#[derive(Debug)]
pub struct Host {
    /// Opaque to the plugin.
    pub ctx: *mut c_void,
    /// This server's id.
    pub server_id: u32,
    /// The monitored program's pid (0: none).
    pub pid: u32,
    /// Sends the reply of the command being handled.
    pub reply: unsafe extern "C" fn(ctx: *mut c_void, payload: *const u8, len: usize),
    /// Records why the current call fails.
    pub error: unsafe extern "C" fn(ctx: *mut c_void, msg: *const c_char, len: usize),
}

/// `init`: makes the plugin's state.
pub type InitFn = unsafe extern "C" fn(host: *const Host, state: *mut *mut c_void) -> c_int;
/// `handle`: answers one command.
pub type HandleFn = unsafe extern "C" fn(
    state: *mut c_void,
    host: *const Host,
    request: *const u8,
    len: usize,
) -> c_int;
/// `destroy`: frees the state.
pub type DestroyFn = unsafe extern "C" fn(state: *mut c_void);

/// `sdm_service_vtable`.
#[repr(C)]
#[derive(Debug)]
pub struct VTable {
    /// Must equal [`ABI_VERSION`].
    pub abi_version: u32,
    /// Zero.
    pub reserved: u32,
    /// NUL-terminated service name.
    pub name: *const c_char,
    /// Required.
    pub init: Option<InitFn>,
    /// Required.
    pub handle: Option<HandleFn>,
    /// Optional.
    pub destroy: Option<DestroyFn>,
}

/// The plugin's state pointer, used by one call at a time.
struct State(*mut c_void);

// SAFETY: the ABI lets the host call a plugin from any thread, one call at a time; the
// mutex around `State` ensures the latter.
unsafe impl Send for State {}

/// A loaded service plugin: the [`Handler`] of the service it names.
pub struct ServicePlugin {
    name: String,
    path: PathBuf,
    handle: HandleFn,
    destroy: Option<DestroyFn>,
    state: Mutex<State>,
    // Last, so it unloads after everything else.
    _lib: VersionedLibrary,
}

impl std::fmt::Debug for ServicePlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServicePlugin")
            .field("name", &self.name)
            .field("path", &self.path)
            .finish()
    }
}

/// What the host callbacks collected during one call.
#[derive(Debug, Default)]
struct Call {
    reply: Option<Vec<u8>>,
    replies: usize,
    error: Option<String>,
}

impl Call {
    fn host(&mut self, server_id: u32, pid: u32) -> Host {
        Host {
            ctx: (self as *mut Call).cast(),
            server_id,
            pid,
            reply: host_reply,
            error: host_error,
        }
    }
}

unsafe extern "C" fn host_reply(ctx: *mut c_void, payload: *const u8, len: usize) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `ctx` is the `Call` the host passed for this call.
        let call = unsafe { &mut *ctx.cast::<Call>() };
        call.replies += 1;
        call.reply = Some(if len == 0 || payload.is_null() {
            Vec::new()
        } else {
            // SAFETY: `payload` has `len` readable bytes, per the ABI.
            unsafe { std::slice::from_raw_parts(payload, len) }.to_vec()
        });
    }));
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

/// A plugin's library, opened and its table checked, before `init`.
struct Opened {
    lib: VersionedLibrary,
    name: String,
    init: InitFn,
    handle: HandleFn,
    destroy: Option<DestroyFn>,
}

/// Opens the library at `path` and checks its ABI version and vtable (a name, `init` and
/// `handle`), without running anything of it.
fn open(path: &Path) -> Result<Opened, Error> {
    let shown = path.display().to_string();
    let err = |what: String| {
        Error::new(
            ErrorKind::PluginLoad,
            format!("service plugin {shown}: {what}"),
        )
    };
    let lib = VersionedLibrary::open(path, "service", ENTRY_SYMBOL, ABI_VERSION, "sdm_service.h")
        .map_err(|e| {
        Error::with_source(ErrorKind::PluginLoad, "cannot open the service plugin", e)
    })?;
    // SAFETY: the version matches, so the table's layout is `VTable`.
    let v = unsafe { &*lib.table().cast::<VTable>() };
    if v.name.is_null() {
        return Err(err("it has no name".into()));
    }
    // SAFETY: the ABI says `name` is NUL-terminated static data.
    let name = unsafe { CStr::from_ptr(v.name) }
        .to_str()
        .map_err(|_| err("its name is not UTF-8".into()))?
        .to_owned();
    if name.is_empty() {
        return Err(err("its name is empty".into()));
    }
    let init = v
        .init
        .ok_or_else(|| err(format!("{name} has no init function")))?;
    let handle = v
        .handle
        .ok_or_else(|| err(format!("{name} has no handle function")))?;
    let destroy = v.destroy;
    Ok(Opened {
        lib,
        name,
        init,
        handle,
        destroy,
    })
}

/// Checks that the service plugin at `path` loads (the library opens, exports the entry
/// point with this build's ABI version and a complete table) and returns its service's
/// name; runs none of its code. A front-end checks a plugin it was named this way before
/// it starts servers that would load it.
pub fn check(path: &Path) -> Result<String, Error> {
    open(path).map(|o| o.name)
}

impl ServicePlugin {
    /// Loads the plugin at `path` for server `server`: checks its ABI version and vtable,
    /// then runs its `init`.
    pub fn load(path: &Path, server: u32) -> Result<Self, Error> {
        let shown = path.display().to_string();
        let err = |what: String| {
            Error::new(
                ErrorKind::PluginLoad,
                format!("service plugin {shown}: {what}"),
            )
        };
        let Opened {
            lib,
            name,
            init,
            handle,
            destroy,
        } = open(path)?;
        let mut call = Call::default();
        let host = call.host(server, 0);
        let mut state: *mut c_void = std::ptr::null_mut();
        // SAFETY: a valid host for the duration of the call, per the ABI.
        let rc = unsafe { init(&host, &mut state) };
        let plugin = Self {
            name,
            path: path.to_owned(),
            handle,
            destroy,
            state: Mutex::new(State(state)),
            _lib: lib,
        };
        if rc != 0 {
            let why = call.error.unwrap_or_else(|| "no message".into());
            return Err(err(format!(
                "init of {} failed (code {rc}): {why}",
                plugin.name
            )));
        }
        Ok(plugin)
    }

    /// The service name the plugin declares.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `handle` on `request` (server `server`, program `pid`): the reply bytes, or
    /// why the call failed.
    pub fn call(&self, server: u32, pid: u32, request: &[u8]) -> Result<Vec<u8>, Error> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut call = Call::default();
        let host = call.host(server, pid);
        // SAFETY: `state` came from `init`; buffers are valid for the call; the lock keeps
        // calls one at a time.
        let rc = unsafe { (self.handle)(state.0, &host, request.as_ptr(), request.len()) };
        drop(state);
        let at = format!("plugin {}", self.path.display());
        let failed = |what: String| Error::new(ErrorKind::PluginCall, format!("{at}: {what}"));
        if rc != 0 {
            let why = call.error.unwrap_or_else(|| "no message".into());
            return Err(failed(format!("handle failed (code {rc}): {why}")));
        }
        match (call.replies, call.reply) {
            (1, Some(bytes)) => Ok(bytes),
            (0, _) => Err(failed("handle returned without a reply".into())),
            (n, _) => Err(failed(format!(
                "handle replied {n} times (once is the rule)"
            ))),
        }
    }
}

/// The handler of a loaded plugin's service: asks the monitor for the program's pid, then
/// runs the plugin off the node's event loop.
#[derive(Debug, Clone)]
pub(crate) struct PluginService(pub(crate) Arc<ServicePlugin>);

impl Handler for PluginService {
    fn call(&self, req: Request, reply: Reply) {
        let plugin = Arc::clone(&self.0);
        tokio::spawn(async move {
            let pid = req.pid().await.unwrap_or(0);
            let server = req.server();
            let payload = req.payload().clone();
            let done =
                tokio::task::spawn_blocking(move || plugin.call(server, pid, &payload)).await;
            match done {
                Ok(Ok(bytes)) => reply.send(bytes),
                Ok(Err(why)) => reply.error(why),
                Err(e) => reply.error(format!("the plugin call failed: {e}")),
            }
        });
    }
}

impl Drop for ServicePlugin {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Some(destroy) = self.destroy {
            // SAFETY: `state` came from `init` and is destroyed once.
            unsafe { destroy(state.0) };
        }
    }
}
