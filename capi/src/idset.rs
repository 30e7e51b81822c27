//! Id-sets (`sdm_idset_*`): made from ranges, arrays and bitmaps, and read back the same
//! ways.

use std::ffi::{c_char, c_int};

use sdm_proto::IdSet;

use crate::args::{arg, arg_mut, boxed, bytes, c_string, free, text};
use crate::error::{guard, guard_ptr, invalid};
use crate::sdm_idset;

/// A new empty id-set.
#[unsafe(no_mangle)]
pub extern "C" fn sdm_idset_new() -> *mut sdm_idset {
    guard_ptr(|| Ok(boxed(sdm_idset(IdSet::new()))))
}

/// A new id-set of the ids `0..n`.
#[unsafe(no_mangle)]
pub extern "C" fn sdm_idset_all(n: u32) -> *mut sdm_idset {
    guard_ptr(|| Ok(boxed(sdm_idset(IdSet::all(n)))))
}

/// Parses the range form `"[0-3,7,100-199]"` (`"[]"` is empty) into a new id-set at
/// `*out`; `SDM_ERR_INVALID` names the column that is wrong.
///
/// # Safety
/// `src` is NULL or a C string; `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_idset_parse(src: *const c_char, out: *mut *mut sdm_idset) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise.
        let (t, out) = unsafe { (text(src, "text")?, arg_mut(out, "out")?) };
        let set: IdSet = t
            .parse()
            .map_err(|e| invalid(format!("id-set {t:?}: {e}")))?;
        *out = boxed(sdm_idset(set));
        Ok(())
    })
}

/// A new id-set of the `count` ids at `ids` (NULL with 0: empty).
///
/// # Safety
/// `ids` points to `count` readable `uint32_t`, or `count` is 0.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_idset_from_array(ids: *const u32, count: usize) -> *mut sdm_idset {
    guard_ptr(|| {
        if count > 0 && ids.is_null() {
            return Err(invalid(format!("ids is NULL with count {count}")));
        }
        let all: &[u32] = if count == 0 {
            &[]
        } else {
            // SAFETY: the caller's promise.
            unsafe { std::slice::from_raw_parts(ids, count) }
        };
        Ok(boxed(sdm_idset(all.iter().copied().collect())))
    })
}

/// A new id-set from a bitmap of `nbytes` bytes: id `i` is in the set when bit `i % 8`
/// (least significant first) of byte `i / 8` is set.
///
/// # Safety
/// `bits` points to `nbytes` readable bytes, or `nbytes` is 0.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_idset_from_bitmap(bits: *const u8, nbytes: usize) -> *mut sdm_idset {
    guard_ptr(|| {
        // SAFETY: the caller's promise.
        let b = unsafe { bytes(bits, nbytes, "bits") }?;
        let set = b
            .iter()
            .enumerate()
            .flat_map(|(i, byte)| {
                (0..8u32)
                    .filter(move |bit| byte & (1 << bit) != 0)
                    .map(move |bit| i as u32 * 8 + bit)
            })
            .collect();
        Ok(boxed(sdm_idset(set)))
    })
}

/// Frees an id-set (NULL is ignored). Never free one borrowed from a reply or event.
///
/// # Safety
/// `set` is NULL or an id-set this library returned as owned, not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_idset_free(set: *mut sdm_idset) {
    // SAFETY: the caller's promise.
    unsafe { free(set) }
}

/// Adds `id` to `set`.
///
/// # Safety
/// `set` is NULL or a live id-set.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_idset_add(set: *mut sdm_idset, id: u32) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise.
        unsafe { arg_mut(set, "set") }?.0.insert(id);
        Ok(())
    })
}

/// Whether `id` is in `set` (false for NULL).
///
/// # Safety
/// `set` is NULL or a live id-set.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_idset_contains(set: *const sdm_idset, id: u32) -> bool {
    // SAFETY: the caller's promise.
    unsafe { set.as_ref() }.is_some_and(|s| s.0.contains(id))
}

/// The number of ids in `set` (0 for NULL).
///
/// # Safety
/// `set` is NULL or a live id-set.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_idset_size(set: *const sdm_idset) -> u64 {
    // SAFETY: the caller's promise.
    unsafe { set.as_ref() }.map_or(0, |s| s.0.len())
}

/// `set` in the range form (`"[0-3,7]"`) as a new string (free with `sdm_string_free`);
/// NULL for NULL.
///
/// # Safety
/// `set` is NULL or a live id-set.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_idset_to_string(set: *const sdm_idset) -> *mut c_char {
    guard_ptr(|| {
        // SAFETY: the caller's promise.
        Ok(c_string(&unsafe { arg(set, "set") }?.0.to_string()))
    })
}

/// Writes the ids of `set` in ascending order to `out` (at most `cap` of them) and returns
/// how many it has: call with `cap` 0 to size the array.
///
/// # Safety
/// `set` is NULL or a live id-set; `out` has room for `cap` `uint32_t` (or `cap` is 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_idset_to_array(
    set: *const sdm_idset,
    out: *mut u32,
    cap: usize,
) -> usize {
    // SAFETY: the caller's promise.
    let Some(set) = (unsafe { set.as_ref() }) else {
        return 0;
    };
    if !out.is_null() {
        for (i, id) in set.0.iter().take(cap).enumerate() {
            // SAFETY: `i < cap`, and `out` has room for `cap` ids.
            unsafe { out.add(i).write(id) };
        }
    }
    set.0.len() as usize
}

/// Writes `set` as a bitmap (the layout of `sdm_idset_from_bitmap`) to `out`, at most
/// `nbytes` bytes (zeroing the rest of them), and returns the bytes the whole set needs.
///
/// # Safety
/// `set` is NULL or a live id-set; `out` has room for `nbytes` bytes (or `nbytes` is 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_idset_to_bitmap(
    set: *const sdm_idset,
    out: *mut u8,
    nbytes: usize,
) -> usize {
    // SAFETY: the caller's promise.
    let Some(set) = (unsafe { set.as_ref() }) else {
        return 0;
    };
    if !out.is_null() && nbytes > 0 {
        // SAFETY: the caller's promise.
        let buf = unsafe { std::slice::from_raw_parts_mut(out, nbytes) };
        buf.fill(0);
        for id in set.0.iter() {
            if let Some(b) = buf.get_mut(id as usize / 8) {
                *b |= 1 << (id % 8);
            }
        }
    }
    set.0.iter().last().map_or(0, |max| max as usize / 8 + 1)
}
