//! The boundary's own rules: id-set round trips, argument errors, panics, status codes,
//! and the checked-in header.

use std::ffi::{CStr, c_char};

use sdm_client::ReplyGroup;
use sdm_proto::{LinkEndKind, Status};

use super::*;
use crate::error::guard;
use crate::reply::reply;

fn last_error() -> String {
    // SAFETY: `sdm_last_error` never returns NULL.
    unsafe { CStr::from_ptr(sdm_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn owned_text(p: *mut c_char) -> String {
    assert!(!p.is_null());
    // SAFETY: a string from this library, freed right after.
    let t = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
    unsafe { sdm_string_free(p) };
    t
}

#[test]
fn idsets_round_trip_through_ranges_arrays_and_bitmaps() {
    let mut set = std::ptr::null_mut();
    // SAFETY: valid arguments throughout; every handle is freed once.
    unsafe {
        assert_eq!(sdm_idset_parse(c"[0-3,7, 9]".as_ptr(), &mut set), SDM_OK);
        assert_eq!(sdm_idset_size(set), 6);
        assert_eq!(owned_text(sdm_idset_to_string(set)), "[0-3,7,9]");
        let mut ids = [0u32; 8];
        assert_eq!(sdm_idset_to_array(set, std::ptr::null_mut(), 0), 6);
        assert_eq!(sdm_idset_to_array(set, ids.as_mut_ptr(), 4), 6);
        assert_eq!(ids[..4], [0, 1, 2, 3]);
        let mut bits = [0xffu8; 3];
        assert_eq!(sdm_idset_to_bitmap(set, bits.as_mut_ptr(), bits.len()), 2);
        assert_eq!(bits, [0b1000_1111, 0b10, 0]);
        let back = sdm_idset_from_bitmap(bits.as_ptr(), bits.len());
        let arr = sdm_idset_from_array([9, 7, 3, 2, 1, 0].as_ptr(), 6);
        assert_eq!(owned_text(sdm_idset_to_string(back)), "[0-3,7,9]");
        assert_eq!(owned_text(sdm_idset_to_string(arr)), "[0-3,7,9]");
        assert!(sdm_idset_contains(arr, 7) && !sdm_idset_contains(arr, 8));
        assert_eq!(sdm_idset_add(arr, 8), SDM_OK);
        assert_eq!(owned_text(sdm_idset_to_string(arr)), "[0-3,7-9]");
        for p in [set, back, arr] {
            sdm_idset_free(p);
        }
        let empty = sdm_idset_from_array(std::ptr::null(), 0);
        assert_eq!(sdm_idset_size(empty), 0);
        assert_eq!(sdm_idset_to_bitmap(empty, std::ptr::null_mut(), 0), 0);
        sdm_idset_free(empty);
    }
}

#[test]
fn bad_arguments_give_a_code_and_say_what_was_wrong() {
    let mut set = std::ptr::null_mut();
    // SAFETY: NULL handles and bad text are what is tested; valid pointers otherwise.
    unsafe {
        assert_eq!(
            sdm_idset_parse(c"[0-3,x]".as_ptr(), &mut set),
            SDM_ERR_INVALID
        );
        assert!(set.is_null());
        assert!(last_error().contains("[0-3,x]"), "{}", last_error());
        assert_eq!(sdm_options_set_n(std::ptr::null_mut(), 3), SDM_ERR_INVALID);
        assert_eq!(last_error(), "options is NULL");
        let o = sdm_options_new();
        assert_eq!(
            sdm_options_set_launcher(o, c"pbs".as_ptr()),
            SDM_ERR_INVALID
        );
        assert_eq!(
            sdm_options_set_transport(o, c"udp".as_ptr()),
            SDM_ERR_INVALID
        );
        assert!(last_error().contains("udp"), "{}", last_error());
        assert_eq!(sdm_options_set_launcher(o, c"mpirun".as_ptr()), SDM_OK);
        assert_eq!(
            sdm_options_set_program(o, 0, std::ptr::null()),
            SDM_ERR_INVALID
        );
        // No servers: refused before anything is launched.
        assert_eq!(sdm_options_set_n(o, 0), SDM_OK);
        let mut s = std::ptr::null_mut();
        assert_eq!(sdm_init(o, &mut s), SDM_ERR_INVALID);
        assert!(s.is_null());
        sdm_options_free(o);
        let mut op = 0;
        let code = sdm_message_send(
            std::ptr::null(),
            std::ptr::null(),
            std::ptr::null(),
            std::ptr::null(),
            SDM_SYNC_WAIT_ALL,
            0,
            std::ptr::null(),
            0,
            &mut op,
        );
        assert_eq!(code, SDM_ERR_INVALID);
        assert_eq!(sync_mode(7, 0).err().map(|f| f.0), Some(SDM_ERR_INVALID));
        // Queries on NULL answer empty, frees of NULL do nothing.
        assert_eq!(sdm_reply_count(std::ptr::null()), 0);
        assert!(sdm_reply_group(std::ptr::null(), 0).is_null());
        assert_eq!(sdm_aggregate_status(std::ptr::null()), SDM_ERR_INVALID);
        sdm_reply_free(std::ptr::null_mut());
        assert_eq!(sdm_finalize(std::ptr::null_mut(), 0), SDM_OK);
    }
}

#[test]
fn a_panic_stops_at_the_boundary() {
    let code = guard(|| panic!("boom"));
    assert_eq!(code, SDM_ERR_PANIC);
    assert_eq!(last_error(), "internal error in libsdm: boom");
}

/// Each reply status has its own code: a filter's error is `SDM_STATUS_ERROR` with the
/// error as payload, never `SDM_STATUS_LOST`.
#[test]
fn every_reply_status_maps_to_its_code() {
    let group = |status, id, payload: &'static str| ReplyGroup {
        status,
        sources: IdSet::single(id),
        payload: Bytes::from(payload),
        link_end: None,
    };
    let r = reply(vec![
        group(Status::Replied, 0, "1"),
        group(Status::Lost, 1, "link died"),
        group(Status::TimedOut, 2, ""),
        group(Status::Error, 3, "filter \"sum\": refused"),
    ]);
    let want = [
        SDM_STATUS_REPLIED,
        SDM_STATUS_LOST,
        SDM_STATUS_TIMED_OUT,
        SDM_STATUS_ERROR,
    ];
    for (i, code) in want.into_iter().enumerate() {
        // SAFETY: `r` is live and has four groups.
        let g = unsafe { sdm_reply_group(r, i) };
        assert_eq!(unsafe { sdm_aggregate_status(g) }, code, "group {i}");
    }
    // SAFETY: `r` came from `reply` and is freed once.
    unsafe { sdm_reply_free(r) };
}

/// A lost group says how its link ended; other groups say none.
#[test]
fn a_lost_group_carries_its_link_end() {
    let group = |status, link_end| ReplyGroup {
        status,
        sources: IdSet::single(1),
        payload: Bytes::from("link died"),
        link_end,
    };
    let r = reply(vec![
        group(Status::Replied, None),
        group(Status::Lost, Some(LinkEndKind::Closed)),
        group(Status::Lost, Some(LinkEndKind::Silent)),
    ]);
    let want = [SDM_LINK_END_NONE, SDM_LINK_END_CLOSED, SDM_LINK_END_SILENT];
    for (i, code) in want.into_iter().enumerate() {
        // SAFETY: `r` is live and has three groups.
        let g = unsafe { sdm_reply_group(r, i) };
        assert_eq!(unsafe { sdm_aggregate_link_end(g) }, code, "group {i}");
    }
    // SAFETY: a NULL group is allowed.
    assert_eq!(
        unsafe { sdm_aggregate_link_end(std::ptr::null()) },
        SDM_ERR_INVALID
    );
    // SAFETY: `r` came from `reply` and is freed once.
    unsafe { sdm_reply_free(r) };
}

#[test]
fn header_is_current() {
    let generated = include_str!(concat!(env!("OUT_DIR"), "/sdm.h"));
    let checked_in = include_str!("../include/sdm.h");
    assert!(
        generated == checked_in,
        "capi/include/sdm.h differs from what cbindgen generates: build sdm-capi outside \
         CI (it rewrites the header) and commit it"
    );
}
