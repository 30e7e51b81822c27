//! The `sdm` command (see [`sdm::cli`]): the front-end commands, the console, and the
//! daemons `sdm master` and `sdm server`.

fn main() -> std::process::ExitCode {
    sdm::cli::main()
}
