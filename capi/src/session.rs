//! A session's life: `sdm_init` launches and initializes the tree (and starts the
//! program), `sdm_finalize` shuts it down; what the session knows of its servers.

use std::collections::HashMap;
use std::ffi::{c_char, c_int};
use std::sync::Mutex;
use std::time::Duration;

use sdm_client::Session;

use crate::args::{arg, arg_mut, boxed, c_string};
use crate::error::{Failure, guard, guard_ptr};
use crate::{SDM_ERR_IO, SDM_ERR_LAUNCH, sdm_idset, sdm_options, sdm_session};

/// Launches the master and the servers as `o` says, initializes the tree and, if
/// `sdm_options_set_program` named one, starts the program on every ready server. On
/// success `*out` is the session (end it with `sdm_finalize`); servers that did not come
/// up are left out of `sdm_session_ready`. `o` stays the caller's.
///
/// # Safety
/// `o` is NULL or live options; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_init(o: *const sdm_options, out: *mut *mut sdm_session) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise.
        let (o, out) = unsafe { (arg(o, "options")?, arg_mut(out, "out")?) };
        *out = std::ptr::null_mut();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("sdm-capi")
            .enable_all()
            .build()
            .map_err(|e| Failure(SDM_ERR_IO, format!("starting the runtime: {e}")))?;
        let session = rt.block_on(Session::launch(&o.opts, |_| {}))?;
        let s = sdm_session {
            rt,
            session,
            dests: Mutex::new(HashMap::new()),
            iof: Mutex::new(None),
        };
        if let Some((program, args)) = &o.program {
            let ready = s.session.report().ready.clone();
            let start =
                s.rt.block_on(s.session.start_program(&ready, program, args, "pipes"))?;
            if !start.failed.is_empty() {
                let why: Vec<String> = start
                    .failed
                    .iter()
                    .map(|(ids, why)| format!("{ids}: {why}"))
                    .collect();
                finish(s, Duration::from_secs(10));
                return Err(Failure(
                    SDM_ERR_LAUNCH,
                    format!("{program} did not start on {}", why.join("; ")),
                ));
            }
        }
        *out = boxed(s);
        Ok(())
    })
}

/// Shuts a session down and frees it.
pub(crate) fn finish(s: sdm_session, grace: Duration) {
    let sdm_session { rt, session, .. } = s;
    rt.block_on(session.shutdown(grace));
    rt.shutdown_background();
}

/// Closes the master link (the tree exits from the top down), waits up to `grace_ms` for
/// the launched processes, kills what is left, and frees the session. NULL is ignored. No
/// other thread may use the session during or after this call.
///
/// # Safety
/// `s` is NULL or a session from `sdm_init`, not finalized before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_finalize(s: *mut sdm_session, grace_ms: u32) -> c_int {
    guard(|| {
        if !s.is_null() {
            // SAFETY: the caller's promise.
            let s = unsafe { Box::from_raw(s) };
            finish(*s, Duration::from_millis(u64::from(grace_ms)));
        }
        Ok(())
    })
}

/// The number of servers the session was launched with (0 for NULL).
///
/// # Safety
/// `s` is NULL or a live session.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_session_size(s: *const sdm_session) -> u32 {
    // SAFETY: the caller's promise.
    unsafe { s.as_ref() }.map_or(0, |s| s.session.size())
}

/// The servers that acknowledged start-up, as a new id-set (free with `sdm_idset_free`);
/// NULL for a NULL session.
///
/// # Safety
/// `s` is NULL or a live session.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_session_ready(s: *const sdm_session) -> *mut sdm_idset {
    guard_ptr(|| {
        // SAFETY: the caller's promise.
        let s = unsafe { arg(s, "session") }?;
        Ok(boxed(sdm_idset(s.session.report().ready.clone())))
    })
}

/// Why the master link closed, as a new string (free with `sdm_string_free`), or NULL
/// while it is open.
///
/// # Safety
/// `s` is NULL or a live session.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_session_closed_reason(s: *const sdm_session) -> *mut c_char {
    guard_ptr(|| {
        // SAFETY: the caller's promise.
        let s = unsafe { arg(s, "session") }?;
        Ok(sdm_client::Handle::closed_reason(&s.session)
            .map_or(std::ptr::null_mut(), |r| c_string(&r)))
    })
}
