//! Commands for a named service: the stock services' names and helpers that build a
//! command tagged with its service, so no sender leaves the tag out or misspells it.
//!
//! Every `sdm server` dispatches a command by its tag ([`Message::service`]), never by its
//! payload: [`SDM`] (`ping`, `info`, `value`, `sleep MS`; the empty tag), [`OMIS`] (OMIS
//! requests to the monitor), [`COUNTERS`], [`PROCSTAT`], and whatever services a tool adds
//! (a `sdm_server::Server` of its own, or a service plugin named in
//! `SessionOptions::service_plugins`). Send what these build with
//! [`crate::Handle::send_command`] or [`crate::Handle::request_command`] (a [`crate::Session`] derefs to its handle).

use bytes::Bytes;
use sdm_proto::{IdSet, Message, SyncMode};

pub use sdm_proto::service::{COUNTERS, EVALUATE, OMIS, PROCSTAT, SDM};

/// A command to `dest` for `service`, with `payload` as it is (any bytes).
pub fn command(service: &str, dest: &IdSet, sync: SyncMode, payload: impl Into<Bytes>) -> Message {
    Message::command(0, dest.clone(), sync, payload).for_service(service)
}

/// [`command`] with its replies merged by the filter `filter` (`name` or `name:params`).
pub fn filtered(
    service: &str,
    dest: &IdSet,
    sync: SyncMode,
    filter: &str,
    payload: impl Into<Bytes>,
) -> Message {
    let mut m = command(service, dest, sync, payload);
    m.aggregate.filter = filter.into();
    m
}

/// An OMIS request (`1 [] stop()`) for the monitors of `dest`.
pub fn omis(dest: &IdSet, sync: SyncMode, request: impl Into<Bytes>) -> Message {
    command(OMIS, dest, sync, request)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_carry_their_service_and_payload_as_given() {
        let dest = IdSet::all(4);
        let m = command("checksum", &dest, SyncMode::WaitAll, &b"\x00\xff"[..]);
        assert_eq!(
            (&*m.service, &m.payload[..]),
            ("checksum", &b"\x00\xff"[..])
        );
        assert_eq!(m.dest, dest);
        let m = filtered(PROCSTAT, &dest, SyncMode::Timeout(5), "stats", "");
        assert_eq!((&*m.service, &*m.aggregate.filter), ("procstat", "stats"));
        assert_eq!(omis(&dest, SyncMode::WaitAll, "1 [] stop()").service, OMIS);
    }
}
