//! The merge of Python frames into native stacks, on stacks as a walk of CPython 3.11
//! finds them.

use super::*;

fn native(function: &str, module: &str) -> Frame {
    Frame {
        pc: 1,
        fp: 0,
        function: function.into(),
        location: None,
        inlined: false,
        module: module.into(),
        offset: 1,
    }
}

fn py(name: &str, line: i32, is_entry: bool) -> py_spy::Frame {
    py_spy::Frame {
        name: name.into(),
        filename: "/tmp/job/main.py".into(),
        module: None,
        short_filename: None,
        line,
        locals: None,
        is_entry,
        is_shim_entry: false,
    }
}

fn labels(frames: &[Frame]) -> Vec<String> {
    frames
        .iter()
        .map(|f| match &f.location {
            Some(l) => format!("{} at {l}", f.function),
            None => f.function.clone(),
        })
        .collect()
}

const EXE: &str = "python3.11";

#[test]
fn a_call_into_an_extension_into_libmpi_reads_as_one_path() {
    let stack = [
        native("opal_progress", "libopen-pal.so.80"),
        native("PMPI_Barrier", "libmpi.so.40"),
        native("__pyx_pf_6mpi4py_3MPI_4Comm_118Barrier", "MPI.so"),
        native("__pyx_pw_6mpi4py_3MPI_4Comm_119Barrier", "MPI.so"),
        native("__Pyx_PyObject_Call", "MPI.so"),
        native("method_vectorcall_NOARGS", EXE),
        native("_PyEval_EvalFrameDefault", EXE),
        native("PyEval_EvalCode", EXE),
        native("Py_BytesMain", EXE),
        native("__libc_start_main", "libc.so.6"),
        native("_start", EXE),
    ];
    // 3.11: one eval call runs `step` and `<module>` (`<module>` is the entry frame).
    let python = [py("step", 12, false), py("<module>", 20, true)];
    assert_eq!(
        labels(&merge(&stack, &python)),
        [
            "opal_progress",
            "PMPI_Barrier",
            "mpi4py.MPI.Comm.Barrier",
            "step at main.py:12",
            "<module> at main.py:20",
            "__libc_start_main",
        ]
    );
}

#[test]
fn each_eval_call_runs_its_own_python_frames() {
    let stack = [
        native("clock_nanosleep", "libc.so.6"),
        native("pysleep", EXE),
        native("time_sleep", EXE),
        native("cfunction_vectorcall_O", EXE),
        native("_PyEval_EvalFrameDefault", EXE),
        native("_PyObject_Call", EXE),
        native("_PyEval_EvalFrameDefault.cold", EXE),
        native("start_thread", "libc.so.6"),
    ];
    let python = [
        py("nap", 3, true),
        py("run", 9, false),
        py("_bootstrap", 99, true),
    ];
    assert_eq!(
        labels(&merge(&stack, &python)),
        [
            "clock_nanosleep",
            "pysleep",
            "time_sleep",
            "nap at main.py:3",
            "run at main.py:9",
            "_bootstrap at main.py:99",
            "start_thread",
        ]
    );
}

#[test]
fn the_interpreter_running_python_shows_the_python_frame_innermost() {
    let stack = [
        native("__tls_get_addr", "ld-linux-x86-64.so.2"),
        native("long_add", EXE),
        native("_PyEval_EvalFrameDefault", EXE),
        native("_start", EXE),
    ];
    let python = [py("compute", 5, false), py("<module>", 8, true)];
    assert_eq!(
        labels(&merge(&stack, &python)),
        ["compute at main.py:5", "<module> at main.py:8"]
    );
}

#[test]
fn python_frames_no_eval_call_took_stay_outside_the_merged_ones() {
    let stack = [native("_PyEval_EvalFrameDefault", EXE)];
    let python = [py("inner", 1, true), py("outer", 2, true)];
    assert_eq!(
        labels(&merge(&stack, &python)),
        ["inner at main.py:1", "outer at main.py:2"]
    );
    // A native stack without Python frames (not a Python thread) is left as it is.
    let plain = [native("epoll_wait", "libc.so.6"), native("_start", EXE)];
    assert_eq!(labels(&merge(&plain, &[])), ["epoll_wait", "_start"]);
}

#[test]
fn cython_wrappers_are_named_as_python_names_them() {
    assert_eq!(
        cython_name("__pyx_pw_6mpi4py_3MPI_4Comm_119Barrier").as_deref(),
        Some("mpi4py.MPI.Comm.Barrier")
    );
    assert_eq!(
        cython_name("__pyx_pw_6mpi4py_3MPI_4Comm_5Get_size").as_deref(),
        Some("mpi4py.MPI.Comm.Get_size")
    );
    assert_eq!(cython_name("__pyx_pw_x"), None);
    assert_eq!(cython_name("PMPI_Barrier"), None);
}
