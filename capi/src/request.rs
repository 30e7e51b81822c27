//! Sending commands and collecting their reply groups: `sdm_message_send` and
//! `sdm_aggregate_collect`, or both in one `sdm_request`.

use std::ffi::{c_char, c_int};

use bytes::Bytes;
use sdm_proto::{Message, SyncMode};

use crate::args::{arg, arg_mut, bytes, text_or_empty};
use crate::error::{Failure, guard, invalid};
use crate::reply::reply;
use crate::{
    SDM_SYNC_DONT_WAIT, SDM_SYNC_TIMEOUT, SDM_SYNC_WAIT_ALL, lock, sdm_idset, sdm_reply,
    sdm_session,
};

/// The command: payload to `dest` for `service` (`""`/NULL: the built-in requests), merged
/// by `filter` (NULL/`""`: `identical`), with a sync mode.
///
/// # Safety
/// As the exported functions that take these arguments.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn command(
    dest: *const sdm_idset,
    service: *const c_char,
    filter: *const c_char,
    sync: c_int,
    timeout_ms: u32,
    payload: *const u8,
    len: usize,
) -> Result<Message, Failure> {
    // SAFETY: the caller's promise.
    let (dest, service, filter, payload) = unsafe {
        (
            arg(dest, "dest")?,
            text_or_empty(service, "service")?,
            text_or_empty(filter, "filter")?,
            bytes(payload, len, "payload")?,
        )
    };
    let mut m = Message::command(
        0,
        dest.0.clone(),
        sync_mode(sync, timeout_ms)?,
        Bytes::copy_from_slice(payload),
    )
    .for_service(service);
    m.aggregate.filter = filter.into();
    Ok(m)
}

/// Sends `len` payload bytes to the servers of `dest`, for `service` (NULL or `""`: the
/// built-in `sdm` requests such as `info`), merged by `filter` (NULL or `""`: identical
/// replies merge; or a filter name such as `sum`, `mean`, `stats`), with `sync`
/// (`SDM_SYNC_*`; `timeout_ms` counts for `SDM_SYNC_TIMEOUT`). `*op` receives the op id for
/// `sdm_aggregate_collect`. Threads may send and collect on one session at once.
///
/// # Safety
/// `s`, `dest` NULL or live; `service`, `filter` NULL or C strings; `payload` points to
/// `len` bytes (or `len` is 0); `op` NULL or writable.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn sdm_message_send(
    s: *const sdm_session,
    dest: *const sdm_idset,
    service: *const c_char,
    filter: *const c_char,
    sync: c_int,
    timeout_ms: u32,
    payload: *const u8,
    len: usize,
    op: *mut u64,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise.
        let (s, op) = unsafe { (arg(s, "session")?, arg_mut(op, "op")?) };
        // SAFETY: the caller's promise.
        let m = unsafe { command(dest, service, filter, sync, timeout_ms, payload, len) }?;
        let to = m.dest.clone();
        let id = s.rt.block_on(s.session.send_command(m))?;
        lock(&s.dests).insert(id, to);
        *op = id;
        Ok(())
    })
}

/// Waits for every reply group of `op` (from `sdm_message_send`) and stores them at `*out`
/// (free with `sdm_reply_free`): together they account for each destination id once,
/// replied, lost (with the reason) or timed out. A dead master link gives the missing ids
/// as one lost group. Collect each op once.
///
/// # Safety
/// `s` NULL or live; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_aggregate_collect(
    s: *const sdm_session,
    op: u64,
    out: *mut *mut sdm_reply,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise.
        let (s, out) = unsafe { (arg(s, "session")?, arg_mut(out, "out")?) };
        *out = std::ptr::null_mut();
        let dest = lock(&s.dests)
            .remove(&op)
            .ok_or_else(|| invalid(format!("op {op} was not sent, or is collected already")))?;
        let groups = s.rt.block_on(s.session.collect(op, &dest))?;
        *out = reply(groups);
        Ok(())
    })
}

/// `sdm_message_send` then `sdm_aggregate_collect`, in one call.
///
/// # Safety
/// As `sdm_message_send` and `sdm_aggregate_collect`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn sdm_request(
    s: *const sdm_session,
    dest: *const sdm_idset,
    service: *const c_char,
    filter: *const c_char,
    sync: c_int,
    timeout_ms: u32,
    payload: *const u8,
    len: usize,
    out: *mut *mut sdm_reply,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise.
        let (s, out) = unsafe { (arg(s, "session")?, arg_mut(out, "out")?) };
        *out = std::ptr::null_mut();
        // SAFETY: the caller's promise.
        let m = unsafe { command(dest, service, filter, sync, timeout_ms, payload, len) }?;
        let to = m.dest.clone();
        let groups = s.rt.block_on(async {
            let op = s.session.send_command(m).await?;
            s.session.collect(op, &to).await
        })?;
        *out = reply(groups);
        Ok(())
    })
}

pub(crate) fn sync_mode(sync: c_int, timeout_ms: u32) -> Result<SyncMode, Failure> {
    match sync {
        SDM_SYNC_WAIT_ALL => Ok(SyncMode::WaitAll),
        SDM_SYNC_DONT_WAIT => Ok(SyncMode::DontWait),
        SDM_SYNC_TIMEOUT => Ok(SyncMode::Timeout(timeout_ms)),
        other => Err(invalid(format!(
            "sync mode {other}: expected SDM_SYNC_WAIT_ALL, SDM_SYNC_DONT_WAIT or SDM_SYNC_TIMEOUT"
        ))),
    }
}
