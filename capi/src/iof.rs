//! Stdio forwarding (`sdm_iof_*`): the programs' merged output lines and events handed to
//! C handlers, and their standard input.

use std::ffi::{CString, c_int, c_void};
use std::time::Duration;

use sdm_client::iof::Iof;
use sdm_proto::{IdSet, Status};

use crate::args::{arg, bytes};
use crate::error::{Failure, guard};
use crate::{SDM_ERR_IO, lock, sdm_event_handler, sdm_idset, sdm_line_handler, sdm_session};

/// A C callback and its `user` pointer, carried into the stdio handlers.
struct Callback<F> {
    f: F,
    user: *mut c_void,
}

// SAFETY: the C caller promises the callback and its `user` pointer may be used from the
// thread that calls `sdm_iof_progress` (documented on the setters).
unsafe impl<F> Send for Callback<F> {}

/// The session's stdio handlers (made on first use: merging the identical k-th lines of
/// all ranks, waiting at most 5 s for the slow ones), for `f` to change or drive.
pub(crate) fn with_iof<T>(s: &sdm_session, f: impl FnOnce(&mut Iof) -> T) -> T {
    let mut iof = lock(&s.iof);
    let iof = iof.get_or_insert_with(|| Iof::new(s.session.all(), Duration::from_secs(5)));
    f(iof)
}

/// Runs `f` on the stdio handlers of session `s` (for the exported setters).
///
/// # Safety
/// `s` is NULL or a live session.
pub(crate) unsafe fn on_iof(s: *const sdm_session, f: impl FnOnce(&mut Iof)) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise.
        with_iof(unsafe { arg(s, "session") }?, f);
        Ok(())
    })
}

/// A line handler for [`Iof`] calling the C handler `h` (NULL: lines are dropped).
pub(crate) fn line_handler(
    h: sdm_line_handler,
    user: *mut c_void,
) -> impl FnMut(&IdSet, &[u8]) + Send {
    let cb = Callback { f: h, user };
    move |ids: &IdSet, line: &[u8]| {
        let cb = &cb;
        if let Some(f) = cb.f {
            let ranks = sdm_idset(ids.clone());
            // SAFETY: the C caller registered `f` for these arguments.
            unsafe { f(&ranks, line.as_ptr(), line.len(), cb.user) }
        }
    }
}

/// Calls `handler(ranks, line, len, user)` for every merged line the programs print on
/// standard output (NULL: drop them). Default: printed as `[ranks] line`. The handler runs
/// on the thread that calls `sdm_iof_progress`.
///
/// # Safety
/// `s` NULL or live; `handler` and `user` usable from the thread calling
/// `sdm_iof_progress`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_iof_set_stdout_handler(
    s: *const sdm_session,
    handler: sdm_line_handler,
    user: *mut c_void,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe {
        on_iof(s, |iof| {
            iof.set_stdout_handler(line_handler(handler, user));
        })
    }
}

/// As `sdm_iof_set_stdout_handler`, for standard error.
///
/// # Safety
/// As `sdm_iof_set_stdout_handler`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_iof_set_stderr_handler(
    s: *const sdm_session,
    handler: sdm_line_handler,
    user: *mut c_void,
) -> c_int {
    // SAFETY: the caller's promise.
    unsafe {
        on_iof(s, |iof| {
            iof.set_stderr_handler(line_handler(handler, user));
        })
    }
}

/// Calls `handler(ranks, text, user)` for every event (a program's end:
/// `process_terminated("exited",0)`), in order with the ranks' output.
///
/// # Safety
/// As `sdm_iof_set_stdout_handler`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_iof_set_event_handler(
    s: *const sdm_session,
    handler: sdm_event_handler,
    user: *mut c_void,
) -> c_int {
    let cb = Callback { f: handler, user };
    let forward = move |ids: &IdSet, text: &str| {
        let cb = &cb;
        if let (Some(f), Ok(t)) = (cb.f, CString::new(text)) {
            let ranks = sdm_idset(ids.clone());
            // SAFETY: as in `line_handler`.
            unsafe { f(&ranks, t.as_ptr(), cb.user) }
        }
    };
    // SAFETY: the caller's promise.
    unsafe {
        on_iof(s, |iof| {
            iof.set_event_handler(forward);
        })
    }
}

/// Hands the programs' output and events to the handlers as they arrive, for `ms`
/// milliseconds (the SDM's progress call). `SDM_ERR_CLOSED` if the tree went away.
///
/// # Safety
/// `s` NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_iof_progress(s: *const sdm_session, ms: u32) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise.
        let s = unsafe { arg(s, "session") }?;
        with_iof(s, |iof| {
            s.rt.block_on(async {
                let until = tokio::time::Instant::now() + Duration::from_millis(u64::from(ms));
                s.session.pump_stdio(iof, until).await
            })
        })?;
        Ok(())
    })
}

/// Hands every buffered line to the handlers now, without waiting for slow ranks.
///
/// # Safety
/// `s` NULL or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_iof_flush(s: *const sdm_session) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { on_iof(s, Iof::flush) }
}

/// Writes `len` bytes to the standard input of the programs on `ids`; with `eof`, then
/// closes it.
///
/// # Safety
/// `s`, `ids` NULL or live; `data` points to `len` bytes (or `len` is 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_iof_write_stdin(
    s: *const sdm_session,
    ids: *const sdm_idset,
    data: *const u8,
    len: usize,
    eof: bool,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise.
        let (s, ids, data) = unsafe {
            (
                arg(s, "session")?,
                arg(ids, "ids")?,
                bytes(data, len, "data")?,
            )
        };
        let groups = s.rt.block_on(s.session.write_stdin(&ids.0, data, eof))?;
        match groups.iter().find(|g| g.status != Status::Replied) {
            Some(g) => Err(Failure(
                SDM_ERR_IO,
                format!(
                    "stdin of {}: {}",
                    g.sources,
                    String::from_utf8_lossy(&g.payload)
                ),
            )),
            None => Ok(()),
        }
    })
}
