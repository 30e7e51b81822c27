//! An example sdm filter plugin in Rust, standalone (no dependencies): filter `rmax` keeps
//! the largest decimal integer. It speaks the C ABI of `include/sdm_filter.h` and catches
//! panics at the boundary, so the payload `panic` (which panics on purpose) fails the op.
//!
//! Build: `rustc --edition 2021 --crate-type cdylib -O max_plugin.rs -o librmax.so`
//! (the tests in `filters/tests/plugins.rs` do this).

use std::ffi::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

const SDM_FILTER_ABI_VERSION: u32 = 1;

#[repr(C)]
pub struct Host {
    ctx: *mut c_void,
    emit: unsafe extern "C" fn(*mut c_void, *const u8, usize, *const u32, usize) -> c_int,
    error: unsafe extern "C" fn(*mut c_void, *const c_char, usize),
}

#[repr(C)]
pub struct VTable {
    abi_version: u32,
    reserved: u32,
    name: *const c_char,
    init: Option<unsafe extern "C" fn(*const Host, *const u8, usize, *mut *mut c_void) -> c_int>,
    fold: Option<
        unsafe extern "C" fn(*mut c_void, *const Host, *const u8, usize, *const u32, usize) -> c_int,
    >,
    flush: Option<unsafe extern "C" fn(*mut c_void, *const Host) -> c_int>,
    finish: Option<unsafe extern "C" fn(*mut c_void, *const Host) -> c_int>,
    destroy: Option<unsafe extern "C" fn(*mut c_void)>,
}

// SAFETY: static, read-only data.
unsafe impl Sync for VTable {}

/// The filter's state.
#[derive(Default)]
struct RMax {
    best: Option<i64>,
    runs: Vec<u32>,
}

/// Runs `f`, turning an `Err` or a panic into a non-zero return with a message to the host.
fn guard(host: *const Host, f: impl FnOnce() -> Result<(), String>) -> c_int {
    let msg = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => return 0,
        Ok(Err(m)) => m,
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown".into());
            format!("panicked: {what}")
        }
    };
    // SAFETY: the host pointer is valid for the call.
    unsafe { ((*host).error)((*host).ctx, msg.as_ptr().cast(), msg.len()) };
    1
}

unsafe extern "C" fn init(host: *const Host, _p: *const u8, len: usize, state: *mut *mut c_void) -> c_int {
    guard(host, || {
        if len > 0 {
            return Err("rmax takes no parameters".into());
        }
        // SAFETY: `state` is a valid out-pointer.
        unsafe { *state = Box::into_raw(Box::<RMax>::default()).cast() };
        Ok(())
    })
}

unsafe extern "C" fn fold(
    state: *mut c_void,
    host: *const Host,
    payload: *const u8,
    len: usize,
    runs: *const u32,
    nruns: usize,
) -> c_int {
    guard(host, || {
        // SAFETY: the host passes our state and valid buffers.
        let s = unsafe { &mut *state.cast::<RMax>() };
        let p = if len == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(payload, len) } };
        let r = if nruns == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(runs, 2 * nruns) } };
        let text = std::str::from_utf8(p).map_err(|_| "payload is not UTF-8".to_string())?;
        if text.trim() == "panic" {
            panic!("asked to panic by a payload");
        }
        let v: i64 = text
            .trim()
            .parse()
            .map_err(|e| format!("payload {text:?} is not an integer: {e}"))?;
        s.best = Some(s.best.map_or(v, |b| b.max(v)));
        s.runs.extend_from_slice(r);
        Ok(())
    })
}

unsafe extern "C" fn flush(state: *mut c_void, host: *const Host) -> c_int {
    guard(host, || {
        // SAFETY: the host passes our state.
        let s = unsafe { &mut *state.cast::<RMax>() };
        let runs = std::mem::take(&mut s.runs);
        if let Some(b) = s.best.take() {
            let text = b.to_string();
            // SAFETY: valid host, buffers valid during the call.
            let rc = unsafe {
                ((*host).emit)((*host).ctx, text.as_ptr(), text.len(), runs.as_ptr(), runs.len() / 2)
            };
            if rc != 0 {
                return Err(format!("emit failed ({rc})"));
            }
        }
        Ok(())
    })
}

unsafe extern "C" fn destroy(state: *mut c_void) {
    // SAFETY: made by `init` with Box::into_raw; destroyed once.
    drop(unsafe { Box::from_raw(state.cast::<RMax>()) });
}

static VTABLE: VTable = VTable {
    abi_version: SDM_FILTER_ABI_VERSION,
    reserved: 0,
    name: c"rmax".as_ptr(),
    init: Some(init),
    fold: Some(fold),
    flush: Some(flush),
    finish: None,
    destroy: Some(destroy),
};

#[no_mangle]
pub extern "C" fn sdm_filter_entry() -> *const VTable {
    &VTABLE
}
