//! libFuzzer entry for the `template` target of `sdm_fuzz` (see `fuzz/run.sh`).
//! Built only with the `libfuzzer` feature and rustc's sancov flags.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = sdm_fuzz::template_line(data);
});
