//! sdm-e2e-cli: the `sdm` command under test. It is `sdm::cli::main`, the whole of the real
//! `sdm` binary's `main`, built inside this package so that `CARGO_BIN_EXE_sdm-e2e-cli`
//! names it and `cargo test -p sdm-e2e` builds it (a test can only ask cargo for binaries of
//! its own package). Its name differs from `sdm` so the two never collide in target/; it
//! names itself in `SDM_BIN`, so the trees it launches run this same binary as their daemons.

fn main() -> std::process::ExitCode {
    if std::env::var_os("SDM_BIN").is_none()
        && let Ok(me) = std::env::current_exe()
    {
        // SAFETY: first thing in `main`, before any other thread exists.
        unsafe { std::env::set_var("SDM_BIN", me) };
    }
    sdm::cli::main()
}
