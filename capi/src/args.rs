//! Crossing the boundary: C pointers, strings and buffers taken as Rust values (a NULL
//! or a bad text is a failure naming the argument), and handles and strings handed back
//! to C, each with its free function.

use std::ffi::{CStr, CString, c_char};

use crate::error::{Failure, invalid};

/// `&T` from a C pointer, or a failure naming the argument.
///
/// # Safety
/// `p` is NULL or points to a live `T`.
pub(crate) unsafe fn arg<'a, T>(p: *const T, name: &str) -> Result<&'a T, Failure> {
    // SAFETY: the caller's promise.
    unsafe { p.as_ref() }.ok_or_else(|| invalid(format!("{name} is NULL")))
}

/// `&mut T` from a C pointer, or a failure naming the argument.
///
/// # Safety
/// `p` is NULL or points to a live `T` nobody else uses during the call.
pub(crate) unsafe fn arg_mut<'a, T>(p: *mut T, name: &str) -> Result<&'a mut T, Failure> {
    // SAFETY: the caller's promise.
    unsafe { p.as_mut() }.ok_or_else(|| invalid(format!("{name} is NULL")))
}

/// The UTF-8 text of a C string, or a failure naming the argument.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
pub(crate) unsafe fn text<'a>(p: *const c_char, name: &str) -> Result<&'a str, Failure> {
    if p.is_null() {
        return Err(invalid(format!("{name} is NULL")));
    }
    // SAFETY: the caller's promise.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| invalid(format!("{name} is not UTF-8")))
}

/// Text of an optional C string (`NULL` is `""`).
///
/// # Safety
/// As [`text`].
pub(crate) unsafe fn text_or_empty<'a>(p: *const c_char, name: &str) -> Result<&'a str, Failure> {
    if p.is_null() {
        Ok("")
    } else {
        // SAFETY: the caller's promise.
        unsafe { text(p, name) }
    }
}

/// `len` bytes at `p` (`NULL` with 0 is empty).
///
/// # Safety
/// `p` points to `len` readable bytes, or `len` is 0.
pub(crate) unsafe fn bytes<'a>(p: *const u8, len: usize, name: &str) -> Result<&'a [u8], Failure> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(invalid(format!("{name} is NULL with length {len}")));
    }
    // SAFETY: the caller's promise.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

pub(crate) fn boxed<T>(v: T) -> *mut T {
    Box::into_raw(Box::new(v))
}

/// Frees a handle made by [`boxed`] (NULL is ignored).
///
/// # Safety
/// `p` is NULL or came from [`boxed`] and is not used again.
pub(crate) unsafe fn free<T>(p: *mut T) {
    if !p.is_null() {
        // SAFETY: the caller's promise.
        drop(unsafe { Box::from_raw(p) });
    }
}

/// `count` C strings at `p` as Rust strings.
pub(crate) fn strings(
    p: *const *const c_char,
    count: usize,
    name: &str,
) -> Result<Vec<String>, Failure> {
    if count == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(invalid(format!("{name} is NULL with count {count}")));
    }
    // SAFETY: the caller of the exported function promised `count` C strings at `p`.
    let all = unsafe { std::slice::from_raw_parts(p, count) };
    all.iter()
        .enumerate()
        // SAFETY: as above.
        .map(|(i, s)| unsafe { text(*s, &format!("{name}[{i}]")) }.map(str::to_owned))
        .collect()
}

pub(crate) fn c_string(s: &str) -> *mut c_char {
    CString::new(s.replace('\0', "\\0"))
        .unwrap_or_default()
        .into_raw()
}

/// Frees a string returned by the library (`sdm_idset_to_string`). NULL is ignored.
///
/// # Safety
/// `s` is NULL or a string from this library, not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_string_free(s: *mut c_char) {
    if !s.is_null() {
        // SAFETY: the caller's promise: it came from `CString::into_raw`.
        drop(unsafe { CString::from_raw(s) });
    }
}
