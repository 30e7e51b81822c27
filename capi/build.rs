//! Generates `include/sdm.h` from the crate's `extern "C"` items with cbindgen, into
//! `$OUT_DIR/sdm.h`; outside CI it also refreshes the checked-in copy, and a unit test
//! (`header_is_current`) fails where the two differ (CI: a header not regenerated).

use std::path::PathBuf;

fn main() {
    let crate_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it")).join("sdm.h");
    println!("cargo::rerun-if-changed=src");
    println!("cargo::rerun-if-changed=cbindgen.toml");
    println!("cargo::rerun-if-env-changed=CI");
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .expect("capi/cbindgen.toml is valid");
    cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates sdm.h from src/")
        .write_to_file(&out);
    let ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty());
    if !ci {
        let checked_in = crate_dir.join("include/sdm.h");
        let new = std::fs::read(&out).expect("the header was just written");
        if std::fs::read(&checked_in).ok().as_deref() != Some(&new[..]) {
            std::fs::write(&checked_in, new).expect("capi/include/sdm.h is writable");
        }
    }
}
