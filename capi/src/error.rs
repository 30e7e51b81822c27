//! Failures at the C boundary: [`Failure`] (an `SDM_ERR_*` code and its text), the
//! per-thread text behind `sdm_last_error`, and the guards that turn a failure or a
//! panic into a code (no panic crosses into C).

use std::cell::RefCell;
use std::ffi::{CString, c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::{
    SDM_ERR_CLOSED, SDM_ERR_INVALID, SDM_ERR_IO, SDM_ERR_LAUNCH, SDM_ERR_PANIC, SDM_ERR_TIMEOUT,
    SDM_OK,
};

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// A failure on its way to C: the code and the text for `sdm_last_error`.
pub(crate) struct Failure(pub(crate) c_int, pub(crate) String);

impl From<sdm_client::Error> for Failure {
    fn from(e: sdm_client::Error) -> Self {
        let code = if e.is_timeout() {
            SDM_ERR_TIMEOUT
        } else if e.is_closed() {
            SDM_ERR_CLOSED
        } else if e.is_launch() {
            SDM_ERR_LAUNCH
        } else if e.is_io() {
            SDM_ERR_IO
        } else {
            SDM_ERR_INVALID
        };
        Failure(code, e.to_string())
    }
}

/// A bad argument, `what` saying which and why.
pub(crate) fn invalid(what: impl Into<String>) -> Failure {
    Failure(SDM_ERR_INVALID, what.into())
}

/// Keeps `text` for `sdm_last_error` on this thread.
pub(crate) fn set_last_error(text: &str) {
    let c = CString::new(text.replace('\0', "\\0")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = c);
}

/// Runs `f` with panics caught; a failure's text goes to `sdm_last_error`.
pub(crate) fn guard(f: impl FnOnce() -> Result<(), Failure>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => SDM_OK,
        Ok(Err(Failure(code, text))) => {
            set_last_error(&text);
            code
        }
        Err(p) => {
            let what = sdm_overlay::panic_text(&*p);
            set_last_error(&format!("internal error in libsdm: {what}"));
            SDM_ERR_PANIC
        }
    }
}

/// Runs `f` with panics caught, for functions returning a pointer (NULL on failure).
pub(crate) fn guard_ptr<T>(f: impl FnOnce() -> Result<*mut T, Failure>) -> *mut T {
    let mut out = std::ptr::null_mut();
    guard(|| {
        out = f()?;
        Ok(())
    });
    out
}

/// The last failure on this thread, as text (never NULL; empty if none). Valid until the
/// next failing call on this thread; do not free.
#[unsafe(no_mangle)]
pub extern "C" fn sdm_last_error() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}
