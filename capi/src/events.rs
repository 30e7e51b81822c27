//! Taking events and stdio messages one at a time (`sdm_event_next`), as replies of one
//! group.

use std::ffi::c_int;
use std::time::Duration;

use sdm_client::ReplyGroup;
use sdm_overlay::stdio::IDLE;
use sdm_proto::{Kind, Status};

use crate::args::{arg, arg_mut};
use crate::error::{Failure, guard};
use crate::reply::reply;
use crate::{
    SDM_ERR_CLOSED, SDM_ERR_TIMEOUT, SDM_EVENT_EVENT, SDM_EVENT_STDIO, sdm_reply, sdm_session,
};

/// Waits up to `timeout_ms` (negative: without limit, 0: only what already arrived) for
/// the next event or stdio message. It comes as a reply of one group at `*out` (free with
/// `sdm_reply_free`; status `SDM_STATUS_REPLIED`, the ranks it came from, its payload),
/// and `*kind` receives `SDM_EVENT_EVENT` or `SDM_EVENT_STDIO`. `SDM_ERR_TIMEOUT`: none
/// came; `SDM_ERR_CLOSED`: the link is closed and every event was taken. Use either this
/// or the `sdm_iof_*` handlers on a session, not both.
///
/// # Safety
/// `s` NULL or live; `kind` and `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_event_next(
    s: *const sdm_session,
    timeout_ms: i32,
    kind: *mut c_int,
    out: *mut *mut sdm_reply,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise.
        let (s, kind, out) = unsafe {
            (
                arg(s, "session")?,
                arg_mut(kind, "kind")?,
                arg_mut(out, "out")?,
            )
        };
        *out = std::ptr::null_mut();
        // An idle marker (for the line alignment of `sdm_stdio_*`) is no event of its own.
        let next_event = async {
            loop {
                match s.session.next_event().await {
                    Some(m) if m.kind == Kind::Stdio && m.payload.first() == Some(&IDLE) => {}
                    m => return m,
                }
            }
        };
        let next = s.rt.block_on(async {
            match u64::try_from(timeout_ms) {
                Err(_) => Ok(next_event.await),
                Ok(ms) => tokio::time::timeout(Duration::from_millis(ms), next_event).await,
            }
        });
        let m = match next {
            Ok(Some(m)) => m,
            Ok(None) => {
                return Err(Failure(
                    SDM_ERR_CLOSED,
                    format!("no more events: {}", s.session.closed_reason()),
                ));
            }
            Err(_) => {
                return Err(Failure(
                    SDM_ERR_TIMEOUT,
                    format!("no event within {timeout_ms} ms"),
                ));
            }
        };
        *kind = if m.kind == Kind::Stdio {
            SDM_EVENT_STDIO
        } else {
            SDM_EVENT_EVENT
        };
        *out = reply(vec![ReplyGroup {
            status: Status::Replied,
            sources: m.source,
            payload: m.payload,
            link_end: None,
        }]);
        Ok(())
    })
}
