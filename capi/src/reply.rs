//! Reply groups as C reads them: a reply's groups (`sdm_reply_*`), each with its status,
//! ids and payload (`sdm_aggregate_*`), borrowed from the reply.

use std::ffi::c_int;

use sdm_client::ReplyGroup;
use sdm_proto::{LinkEndKind, Status};

use crate::args::{boxed, free};
use crate::{
    SDM_ERR_INVALID, SDM_LINK_END_CLOSED, SDM_LINK_END_GOODBYE, SDM_LINK_END_IO, SDM_LINK_END_NONE,
    SDM_LINK_END_PROTOCOL, SDM_LINK_END_SILENT, SDM_LINK_END_UNREACHABLE, SDM_STATUS_ERROR,
    SDM_STATUS_LOST, SDM_STATUS_REPLIED, SDM_STATUS_TIMED_OUT, sdm_aggregate, sdm_idset, sdm_reply,
};

pub(crate) fn reply(groups: Vec<ReplyGroup>) -> *mut sdm_reply {
    boxed(sdm_reply {
        groups: groups
            .into_iter()
            .map(|g| sdm_aggregate {
                status: match g.status {
                    Status::Replied => SDM_STATUS_REPLIED,
                    Status::Lost => SDM_STATUS_LOST,
                    Status::TimedOut => SDM_STATUS_TIMED_OUT,
                    Status::Error => SDM_STATUS_ERROR,
                },
                link_end: match g.link_end {
                    None => SDM_LINK_END_NONE,
                    Some(LinkEndKind::Goodbye) => SDM_LINK_END_GOODBYE,
                    Some(LinkEndKind::Closed) => SDM_LINK_END_CLOSED,
                    Some(LinkEndKind::Io) => SDM_LINK_END_IO,
                    Some(LinkEndKind::Protocol) => SDM_LINK_END_PROTOCOL,
                    Some(LinkEndKind::Silent) => SDM_LINK_END_SILENT,
                    Some(LinkEndKind::Unreachable) => SDM_LINK_END_UNREACHABLE,
                },
                ids: sdm_idset(g.sources),
                payload: g.payload,
            })
            .collect(),
    })
}

/// The number of groups in a reply (0 for NULL).
///
/// # Safety
/// `r` is NULL or a live reply.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_reply_count(r: *const sdm_reply) -> usize {
    // SAFETY: the caller's promise.
    unsafe { r.as_ref() }.map_or(0, |r| r.groups.len())
}

/// Group `i` of a reply, borrowed from it (NULL if out of range).
///
/// # Safety
/// `r` is NULL or a live reply.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_reply_group(r: *const sdm_reply, i: usize) -> *const sdm_aggregate {
    // SAFETY: the caller's promise.
    unsafe { r.as_ref() }
        .and_then(|r| r.groups.get(i))
        .map_or(std::ptr::null(), |g| g as *const sdm_aggregate)
}

/// Frees a reply and every group, id-set and payload borrowed from it (NULL is ignored).
///
/// # Safety
/// `r` is NULL or a reply from this library, not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_reply_free(r: *mut sdm_reply) {
    // SAFETY: the caller's promise.
    unsafe { free(r) }
}

/// The group's status: `SDM_STATUS_REPLIED`, `SDM_STATUS_LOST`, `SDM_STATUS_TIMED_OUT` or
/// `SDM_STATUS_ERROR` (`SDM_ERR_INVALID` for NULL).
///
/// # Safety
/// `g` is NULL or a group of a live reply.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_aggregate_status(g: *const sdm_aggregate) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { g.as_ref() }.map_or(SDM_ERR_INVALID, |g| g.status)
}

/// How a lost group's link ended: `SDM_LINK_END_CLOSED` (the server's process ended),
/// `SDM_LINK_END_SILENT` (a hung server), … ; `SDM_LINK_END_NONE` for other groups
/// (`SDM_ERR_INVALID` for NULL).
///
/// # Safety
/// `g` is NULL or a group of a live reply.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_aggregate_link_end(g: *const sdm_aggregate) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { g.as_ref() }.map_or(SDM_ERR_INVALID, |g| g.link_end)
}

/// The ids the group covers, borrowed from its reply (do not free).
///
/// # Safety
/// `g` is NULL or a group of a live reply.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_aggregate_idset(g: *const sdm_aggregate) -> *const sdm_idset {
    // SAFETY: the caller's promise.
    unsafe { g.as_ref() }.map_or(std::ptr::null(), |g| &g.ids as *const sdm_idset)
}

/// The group's payload (the reply, or for a lost group the reason), borrowed from its
/// reply; `*len` receives its length. Not NUL-terminated.
///
/// # Safety
/// `g` is NULL or a group of a live reply; `len` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_aggregate_payload(
    g: *const sdm_aggregate,
    len: *mut usize,
) -> *const u8 {
    // SAFETY: the caller's promise.
    let (p, n) = unsafe { g.as_ref() }.map_or((std::ptr::null(), 0), |g| {
        (g.payload.as_ptr(), g.payload.len())
    });
    // SAFETY: the caller's promise.
    if let Some(len) = unsafe { len.as_mut() } {
        *len = n;
    }
    p
}
