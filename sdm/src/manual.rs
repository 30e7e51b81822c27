//! The documentation generated from the `sdm` command's own clap definitions: shell
//! completion scripts (`sdm completions SHELL`, clap_complete) and man pages (`sdm man`,
//! clap_mangen), so neither can drift from `--help`.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

pub use clap_complete::Shell;

/// Writes the completion script of `cmd` for `shell` to `out`.
pub fn completions(shell: Shell, cmd: &mut clap::Command, out: &mut dyn Write) {
    let name = cmd.get_name().to_owned();
    clap_complete::generate(shell, cmd, name, out);
}

/// Writes the man page of `cmd` (roff, section 1) to `out`, its subcommands summarized.
pub fn man_page(cmd: clap::Command, out: &mut dyn Write) -> io::Result<()> {
    clap_mangen::Man::new(cmd).render(out)
}

/// Writes one man page per command into `dir` (`sdm.1`, `sdm-launch.1`, …) and returns
/// their paths, sorted.
pub fn man_pages(cmd: clap::Command, dir: &Path) -> io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    clap_mangen::generate_to(cmd, dir)?;
    let mut pages = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let path = e?.path();
        if path.extension().is_some_and(|x| x == "1") {
            pages.push(path);
        }
    }
    pages.sort();
    Ok(pages)
}
