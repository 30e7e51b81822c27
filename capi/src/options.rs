//! Launch options (`sdm_options_*`): ranks, launcher, hosts, tree shape, transport, the
//! `sdm` binary, filter plugins and the program every server starts.

use std::ffi::{c_char, c_int};
use std::path::PathBuf;
use std::time::Duration;

use sdm_client::SessionOptions;

use crate::args::{arg_mut, boxed, free, strings, text};
use crate::error::{guard, guard_ptr, invalid};
use crate::sdm_options;

/// New launch options with the defaults: 4 ranks on one server per host, the `local` launcher, tcp, a binomial
/// tree, the `sdm` binary from `$SDM_BIN` or next to the program. Free with
/// `sdm_options_free`.
#[unsafe(no_mangle)]
pub extern "C" fn sdm_options_new() -> *mut sdm_options {
    guard_ptr(|| {
        Ok(boxed(sdm_options {
            opts: SessionOptions::default(),
            program: None,
        }))
    })
}

/// Frees options (NULL is ignored).
///
/// # Safety
/// `o` is NULL or from `sdm_options_new`, not freed before.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_options_free(o: *mut sdm_options) {
    // SAFETY: the caller's promise.
    unsafe { free(o) }
}

/// Sets the number of ranks (at least 1): the ids commands are addressed to.
///
/// # Safety
/// `o` is NULL or live options.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_options_set_n(o: *mut sdm_options, n: u32) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise.
        unsafe { arg_mut(o, "options") }?.opts.n = n;
        Ok(())
    })
}

/// Sets how many ranks each server serves, in blocks (1: one server per rank); 0, the
/// default, is one server per host serving every rank on it.
///
/// # Safety
/// `o` is NULL or live options.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_options_set_ranks_per_server(o: *mut sdm_options, k: u32) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise.
        unsafe { arg_mut(o, "options") }?.opts.ranks_per_server = (k > 0).then_some(k);
        Ok(())
    })
}

/// Sets the launcher: `local`, `ssh`, `srun` or `mpirun`.
///
/// # Safety
/// `o` is NULL or live options; `launcher` is NULL or a C string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_options_set_launcher(
    o: *mut sdm_options,
    launcher: *const c_char,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise.
        let (o, l) = unsafe { (arg_mut(o, "options")?, text(launcher, "launcher")?) };
        o.opts.launcher = l
            .parse()
            .map_err(|e: sdm_deploy::LaunchError| invalid(e.to_string()))?;
        Ok(())
    })
}

/// Sets the hosts the `ssh` launcher uses (`count` C strings).
///
/// # Safety
/// `o` is NULL or live options; `hosts` points to `count` C strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_options_set_hosts(
    o: *mut sdm_options,
    hosts: *const *const c_char,
    count: usize,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise.
        let o = unsafe { arg_mut(o, "options") }?;
        o.opts.hosts = strings(hosts, count, "hosts")?;
        Ok(())
    })
}

/// Sets the tree shape: `binomial`, `flat`, `kary:K`, ... (as `sdm launch --topology`).
///
/// # Safety
/// `o` is NULL or live options; `topology` is NULL or a C string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_options_set_topology(
    o: *mut sdm_options,
    topology: *const c_char,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise.
        let (o, t) = unsafe { (arg_mut(o, "options")?, text(topology, "topology")?) };
        o.opts.topology = t
            .parse()
            .map_err(|e| invalid(format!("topology {t:?}: {e}")))?;
        Ok(())
    })
}

/// Sets the transport: `tcp` or `quic`.
///
/// # Safety
/// `o` is NULL or live options; `transport` is NULL or a C string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_options_set_transport(
    o: *mut sdm_options,
    transport: *const c_char,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise.
        let (o, t) = unsafe { (arg_mut(o, "options")?, text(transport, "transport")?) };
        if !matches!(t, "tcp" | "quic") {
            return Err(invalid(format!("transport {t:?}: expected tcp or quic")));
        }
        o.opts.transport = t.to_owned();
        Ok(())
    })
}

/// Sets the `sdm` binary that runs the daemons (default: `$SDM_BIN`, or `sdm` next to the
/// running program or one directory up).
///
/// # Safety
/// `o` is NULL or live options; `path` is NULL or a C string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_options_set_sdm_binary(
    o: *mut sdm_options,
    path: *const c_char,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise.
        let (o, p) = unsafe { (arg_mut(o, "options")?, text(path, "path")?) };
        o.opts.program = Some(PathBuf::from(p));
        Ok(())
    })
}

/// Sets the limit for the whole start-up (launch, connect, init), in milliseconds.
///
/// # Safety
/// `o` is NULL or live options.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_options_set_startup_timeout(o: *mut sdm_options, ms: u32) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise.
        unsafe { arg_mut(o, "options") }?.opts.startup_timeout =
            Duration::from_millis(u64::from(ms));
        Ok(())
    })
}

/// Adds a filter plugin (a shared library implementing `sdm_filter.h`) that the front-end
/// and every daemon load.
///
/// # Safety
/// `o` is NULL or live options; `path` is NULL or a C string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_options_add_filter_plugin(
    o: *mut sdm_options,
    path: *const c_char,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise.
        let (o, p) = unsafe { (arg_mut(o, "options")?, text(path, "path")?) };
        o.opts.filter_plugins.push(PathBuf::from(p));
        Ok(())
    })
}

/// Sets a program (`argv[0]` and its arguments, `argc` strings) that every ready server
/// starts under its control once the tree is up, its stdout and stderr kept apart (take
/// them with the `sdm_iof_*` handlers). `sdm_init` fails (`SDM_ERR_LAUNCH`, naming the
/// ranks and why) if a server could not start it.
///
/// # Safety
/// `o` is NULL or live options; `argv` points to `argc` C strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sdm_options_set_program(
    o: *mut sdm_options,
    argc: usize,
    argv: *const *const c_char,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's promise.
        let o = unsafe { arg_mut(o, "options") }?;
        let mut all = strings(argv, argc, "argv")?;
        if all.is_empty() {
            return Err(invalid("argv is empty: the program's name comes first"));
        }
        let args = all.split_off(1);
        o.program = Some((all.remove(0), args));
        Ok(())
    })
}
