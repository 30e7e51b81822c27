//! Links the `sdm` binary with its hot functions first, in the order of
//! `hot-symbols.txt` (written by `bench/hot-symbols.sh`).
//!
//! A daemon sleeps between frames, and with hundreds of daemons per core every wake-up
//! finds its code evicted from the caches and the TLB. The functions one wake-up runs are
//! spread over some 8 MiB of text, about 85 pages per wake-up; laid out together they take
//! about 50 (BENCHMARKS.md, "Per-hop cost, seventh pass"). The list names the release
//! build's symbols; a name the build does not have is skipped, so a stale list costs only
//! the layout, and `bench/hot-symbols.sh --check` (run by CI) says when it is stale.
//!
//! The option is lld's (and mold's), which Rust uses by default to link for
//! x86_64-unknown-linux-gnu. It is left out for other targets, when the linker is
//! configured by hand (`RUSTFLAGS` or `CARGO_TARGET_*_LINKER`), and when
//! `SDM_NO_SYMBOL_ORDER` is set.

use std::env;
use std::path::Path;

fn main() {
    println!("cargo::rerun-if-changed=hot-symbols.txt");
    println!("cargo::rerun-if-env-changed=SDM_NO_SYMBOL_ORDER");
    println!("cargo::rerun-if-env-changed=CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER");
    let target = env::var("TARGET").unwrap_or_default();
    let flags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let own_linker = flags.split('\x1f').any(|f| f.contains("link"))
        || env::var_os("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER").is_some();
    if target != "x86_64-unknown-linux-gnu"
        || own_linker
        || env::var_os("SDM_NO_SYMBOL_ORDER").is_some()
    {
        return;
    }
    let list =
        Path::new(&env::var("CARGO_MANIFEST_DIR").expect("cargo sets it")).join("hot-symbols.txt");
    if !list.is_file() {
        return;
    }
    // The linker reads a copy in OUT_DIR, which lives as long as this script's output: a
    // target directory shared by two checkouts may keep the output of the other's build,
    // whose checkout can be gone since.
    let copy = Path::new(&env::var("OUT_DIR").expect("cargo sets it")).join("hot-symbols.txt");
    std::fs::copy(&list, &copy).expect("hot-symbols.txt copies into OUT_DIR");
    println!(
        "cargo::rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
        copy.display()
    );
    // Names of another build (debug, another toolchain) are not an error.
    println!("cargo::rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
}
