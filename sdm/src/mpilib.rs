//! Whether a program is an MPI program: Open MPI's mpirun holds a job for a tool only in
//! `MPI_Init` (see held.rs), so launch mode under it needs a program linked with libmpi.

/// Whether `program` (a path, or a name found in `PATH`) is an ELF executable that needs
/// a `libmpi` library (its `DT_NEEDED` entries); a script or a file not found is not.
pub(crate) fn links_mpi(program: &str) -> bool {
    let path = if program.contains('/') {
        Some(std::path::PathBuf::from(program))
    } else {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(program))
                .find(|p| p.is_file())
        })
    };
    let Some(data) = path.and_then(|p| std::fs::read(p).ok()) else {
        return false;
    };
    needed(&data).is_ok_and(|libs| libs.iter().any(|l| l.starts_with("libmpi")))
}

/// The `DT_NEEDED` libraries of a 64-bit ELF file.
fn needed(data: &[u8]) -> object::read::Result<Vec<String>> {
    use object::elf::{DT_NEEDED, FileHeader64};
    use object::read::elf::{Dyn, FileHeader};
    let header = FileHeader64::<object::Endianness>::parse(data)?;
    let endian = header.endian()?;
    let sections = header.sections(endian, data)?;
    // The entries, and the index of the string table they name.
    let Some((entries, strtab)) = sections.dynamic(endian, data)? else {
        return Ok(Vec::new());
    };
    let strings = sections.strings(endian, data, strtab)?;
    Ok(entries
        .iter()
        .filter(|d| d.tag32(endian) == Some(DT_NEEDED))
        .filter_map(|d| d.string(endian, strings).ok())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shell_and_this_test_do_not_link_mpi_and_a_missing_program_neither() {
        let me = std::env::current_exe().unwrap();
        let libs = needed(&std::fs::read(&me).unwrap()).unwrap();
        assert!(libs.iter().any(|l| l.starts_with("libc.so")), "{libs:?}");
        assert!(!links_mpi(me.to_str().unwrap()));
        assert!(!links_mpi("sh"));
        assert!(!links_mpi("/nonexistent/program"));
    }
}
