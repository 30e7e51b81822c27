//! Filter plugins end to end: the example C plugin (built here with `cc`) and the example Rust
//! plugin (built here with `rustc`) are loaded, fold real data through a tree, and fail
//! cleanly: a bad payload, a panic, a wrong ABI version, wrong accounting.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use sdm_filters::{ErrorKind, Filter, Group, IdSet, Registry};
use sdm_topology::Shape;

use sdm_e2e as support;

/// The filters crate, whose examples/ hold the plugins built here.
fn manifest() -> PathBuf {
    support::filters_dir()
}

fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("sdm-filters-plugins-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    })
}

/// Builds a C plugin from `src` with extra `flags` into `lib<name>.so`.
fn build_c(src: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let out = scratch().join(format!("lib{name}.so"));
    support::build_c_plugin(src, flags, &out);
    out
}

fn c_plugin() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| build_c(&manifest().join("examples/c/sum_plugin.c"), "csum", &[]))
}

fn rust_plugin() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let out = scratch().join("librmax.so");
        let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
        support::run_ok(
            Command::new(rustc)
                .args(["--edition", "2021", "--crate-type", "cdylib", "-O"])
                .arg(manifest().join("examples/rust/max_plugin.rs"))
                .arg("-o")
                .arg(&out),
        );
        out
    })
}

fn through_tree(reg: &Registry, spec: &str, shape: Shape, leaves: &[String]) -> Vec<Group> {
    let leaves: Vec<Vec<u8>> = leaves.iter().map(|l| l.clone().into_bytes()).collect();
    support::through_tree(reg, spec, shape, &leaves, true)
}

#[test]
fn c_plugin_folds_through_trees_like_the_builtin_sum() {
    let mut reg = Registry::new();
    assert_eq!(reg.load_plugin(c_plugin()).unwrap(), "csum");
    let leaves: Vec<String> = (0..200i64).map(|i| (i * 37 - 3000).to_string()).collect();
    let want = through_tree(&reg, "sum", Shape::Flat, &leaves);
    assert_eq!(want.len(), 1);
    for shape in [
        Shape::Binomial,
        Shape::KAry(3),
        Shape::KNomial(4),
        Shape::Flat,
    ] {
        assert_eq!(
            through_tree(&reg, "csum", shape.clone(), &leaves),
            want,
            "{shape}"
        );
    }
}

#[test]
fn c_plugin_failure_fails_the_op_not_the_process() {
    let mut reg = Registry::new();
    reg.load_plugin(c_plugin()).unwrap();
    let mut f = reg.create("csum").unwrap();
    f.fold(b"40", &IdSet::single(0)).unwrap();
    let e = f.fold(b"forty-two", &"[5-6]".parse().unwrap()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Plugin);
    assert_eq!(e.filter(), "csum");
    assert_eq!(e.sources(), Some(&"[5-6]".parse().unwrap()));
    let msg = e.to_string();
    assert!(
        msg.contains("fold failed (code 1): payload of 9 bytes is not a decimal integer"),
        "{msg}"
    );
    // The failed fold left the state alone: the op can still be answered for the others.
    f.fold(b"2", &IdSet::single(1)).unwrap();
    let g = f.flush().unwrap();
    assert_eq!(
        (&g[0].payload[..], g[0].sources.to_string()),
        (&b"42"[..], "[0-1]".into())
    );
    let e = reg.create("csum:x").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Plugin);
    assert!(
        e.to_string()
            .contains("init failed (code 1): csum takes no parameters"),
        "{e}"
    );
}

#[test]
fn rust_plugin_folds_and_contains_its_panics() {
    let mut reg = Registry::new();
    assert_eq!(reg.load_plugin(rust_plugin()).unwrap(), "rmax");
    let leaves: Vec<String> = (0..123i64)
        .map(|i| ((i * 7919) % 1000 - 500).to_string())
        .collect();
    let want = through_tree(&reg, "max", Shape::Flat, &leaves);
    for shape in [Shape::Binomial, Shape::KAry(2), Shape::KNomial(4)] {
        assert_eq!(
            through_tree(&reg, "rmax", shape.clone(), &leaves),
            want,
            "{shape}"
        );
    }
    let mut f = reg.create("rmax").unwrap();
    f.fold(b"3", &IdSet::single(0)).unwrap();
    let e = f.fold(b"panic", &IdSet::single(1)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Plugin);
    assert!(
        e.to_string()
            .contains("panicked: asked to panic by a payload"),
        "{e}"
    );
    let e = f.fold(b"x", &IdSet::single(2)).unwrap_err();
    assert!(e.to_string().contains("is not an integer"), "{e}");
    let g = f.flush().unwrap();
    assert_eq!(
        (&g[0].payload[..], g[0].sources.to_string()),
        (&b"3"[..], "[0]".into())
    );
}

#[test]
fn abi_version_mismatch_is_refused() {
    let lib = build_c(
        &manifest().join("examples/c/sum_plugin.c"),
        "csum_v99",
        &["-DSDM_EXAMPLE_ABI=99"],
    );
    let mut reg = Registry::new();
    let e = reg.load_plugin(&lib).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PluginLoad);
    let msg = e.to_string();
    assert!(
        msg.contains("was built for filter ABI version 99, but this sdm speaks version 1"),
        "{msg}"
    );
    assert!(!reg.contains("csum"));
}

#[test]
fn not_a_plugin_is_refused() {
    let mut reg = Registry::new();
    let e = reg
        .load_plugin(scratch().join("no-such-plugin.so"))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PluginLoad);
    assert!(e.to_string().contains("cannot load plugin"), "{e}");
    let src = scratch().join("empty.c");
    std::fs::write(&src, "int not_a_filter(void) { return 0; }\n").unwrap();
    let lib = build_c(&src, "empty", &[]);
    let e = reg.load_plugin(&lib).unwrap_err();
    assert!(e.to_string().contains("no symbol sdm_filter_entry"), "{e}");
}

/// A plugin that loses ids in its flush is caught: every id must stay accounted.
#[test]
fn plugin_that_loses_ids_is_caught() {
    let src = scratch().join("lossy.c");
    std::fs::write(
        &src,
        r#"#include "sdm_filter.h"
static int init(const sdm_filter_host *h, const uint8_t *p, size_t n, void **s) {
    (void)h; (void)p; (void)n; *s = (void *)1; return 0; }
static int fold(void *s, const sdm_filter_host *h, const uint8_t *p, size_t n,
                const uint32_t *r, size_t nr) {
    (void)s; (void)h; (void)p; (void)n; (void)r; (void)nr; return 0; }
static int flush(void *s, const sdm_filter_host *h) {
    static const uint32_t runs[2] = {0, 0};
    (void)s; return h->emit(h->ctx, (const uint8_t *)"x", 1, runs, 1); }
static void destroy(void *s) { (void)s; }
static const sdm_filter_vtable vt = { SDM_FILTER_ABI_VERSION, 0, "lossy", init, fold, flush,
                                      0, destroy };
const sdm_filter_vtable *sdm_filter_entry(void) { return &vt; }
"#,
    )
    .unwrap();
    let lib = build_c(&src, "lossy", &[]);
    let mut reg = Registry::new();
    reg.load_plugin(&lib).unwrap();
    let mut f: Box<dyn Filter> = reg.create("lossy").unwrap();
    f.fold(b"a", &"[0-3]".parse().unwrap()).unwrap();
    let e = f.flush().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Plugin);
    assert!(
        e.to_string()
            .contains("flush emitted groups for [0], but [0-3] were folded"),
        "{e}"
    );
}
