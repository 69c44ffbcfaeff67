//! Our own minimal WASI preview 1 host, sandboxed by construction: it has stdin, stdout and
//! stderr, arguments, clocks, random bytes and exit, and nothing else to give. Every other
//! preview 1 function exists (so modules built against a full WASI, such as Go's `wasip1`
//! programs, link) and answers with an error code: no files, no sockets, no sleeping.
//!
//! [`linker`] checks a module's imports against the preview 1 function list and builds the
//! definitions it links against.

mod guest;
mod stdio;
mod system;

use wasmi::{Engine, ExternType, FuncType, Linker, Module, Val, ValType};

use super::error::WasmError;
use super::state::HostState;
use guest::{Errno, EBADF, ENOSYS, ENOTDIR, ENOTSOCK, ENOTSUP, ESPIPE};

/// The import module name of WASI preview 1.
pub(super) const WASI_MODULE: &str = "wasi_snapshot_preview1";

const I: ValType = ValType::I32;
const L: ValType = ValType::I64;

/// Every preview 1 function with its parameters; all return an `errno` (i32) but
/// `proc_exit`, which returns nothing.
const FUNCTIONS: &[(&str, &[ValType])] = &[
    ("args_get", &[I, I]),
    ("args_sizes_get", &[I, I]),
    ("environ_get", &[I, I]),
    ("environ_sizes_get", &[I, I]),
    ("clock_res_get", &[I, I]),
    ("clock_time_get", &[I, L, I]),
    ("fd_advise", &[I, L, L, I]),
    ("fd_allocate", &[I, L, L]),
    ("fd_close", &[I]),
    ("fd_datasync", &[I]),
    ("fd_fdstat_get", &[I, I]),
    ("fd_fdstat_set_flags", &[I, I]),
    ("fd_fdstat_set_rights", &[I, L, L]),
    ("fd_filestat_get", &[I, I]),
    ("fd_filestat_set_size", &[I, L]),
    ("fd_filestat_set_times", &[I, L, L, I]),
    ("fd_pread", &[I, I, I, L, I]),
    ("fd_prestat_get", &[I, I]),
    ("fd_prestat_dir_name", &[I, I, I]),
    ("fd_pwrite", &[I, I, I, L, I]),
    ("fd_read", &[I, I, I, I]),
    ("fd_readdir", &[I, I, I, L, I]),
    ("fd_renumber", &[I, I]),
    ("fd_seek", &[I, L, I, I]),
    ("fd_sync", &[I]),
    ("fd_tell", &[I, I]),
    ("fd_write", &[I, I, I, I]),
    ("path_create_directory", &[I, I, I]),
    ("path_filestat_get", &[I, I, I, I, I]),
    ("path_filestat_set_times", &[I, I, I, I, L, L, I]),
    ("path_link", &[I, I, I, I, I, I, I]),
    ("path_open", &[I, I, I, I, I, L, L, I, I]),
    ("path_readlink", &[I, I, I, I, I, I]),
    ("path_remove_directory", &[I, I, I]),
    ("path_rename", &[I, I, I, I, I, I]),
    ("path_symlink", &[I, I, I, I, I]),
    ("path_unlink_file", &[I, I, I]),
    ("poll_oneoff", &[I, I, I, I]),
    ("proc_exit", &[I]),
    ("proc_raise", &[I]),
    ("sched_yield", &[]),
    ("random_get", &[I, I]),
    ("sock_accept", &[I, I, I]),
    ("sock_recv", &[I, I, I, I, I, I]),
    ("sock_send", &[I, I, I, I, I]),
    ("sock_shutdown", &[I, I]),
];

/// The functions with a real implementation (see [`define_implemented`]); the rest are stubs.
const IMPLEMENTED: &[&str] = &[
    "args_get",
    "args_sizes_get",
    "environ_get",
    "environ_sizes_get",
    "clock_res_get",
    "clock_time_get",
    "fd_close",
    "fd_fdstat_get",
    "fd_prestat_get",
    "fd_read",
    "fd_write",
    "proc_exit",
    "random_get",
    "sched_yield",
];

/// The preview 1 type of `name`, if it is a preview 1 function.
fn wasi_type(name: &str) -> Option<FuncType> {
    let (_, params) = FUNCTIONS.iter().find(|(known, _)| *known == name)?;
    let results: &[ValType] = if name == "proc_exit" { &[] } else { &[I] };
    Some(FuncType::new(
        params.iter().copied(),
        results.iter().copied(),
    ))
}

/// Checks every import of `module` and returns the linker to instantiate it with: the
/// implemented functions plus a stub for each other preview 1 function it imports.
///
/// # Errors
///
/// [`WasmError::Import`] for an import from another module, of a non-function, or of a name
/// preview 1 does not have; [`WasmError::Invalid`] for a preview 1 import of the wrong type.
pub(super) fn linker(engine: &Engine, module: &Module) -> Result<Linker<HostState>, WasmError> {
    let mut linker = Linker::new(engine);
    define_implemented(&mut linker)?;
    for import in module.imports() {
        let unknown = || WasmError::Import {
            module: import.module().to_string(),
            name: import.name().to_string(),
        };
        let (ExternType::Func(actual), WASI_MODULE) = (import.ty(), import.module()) else {
            return Err(unknown());
        };
        let expected = wasi_type(import.name()).ok_or_else(unknown)?;
        if *actual != expected {
            return Err(WasmError::Invalid(format!(
                "import {WASI_MODULE}.{} has type {}, but WASI preview 1 defines {}",
                import.name(),
                signature(actual),
                signature(&expected)
            )));
        }
        if !IMPLEMENTED.contains(&import.name()) {
            define_stub(&mut linker, import.name(), expected)?;
        }
    }
    Ok(linker)
}

fn define_implemented(linker: &mut Linker<HostState>) -> Result<(), WasmError> {
    let m = WASI_MODULE;
    (|| {
        linker
            .func_wrap(m, "args_get", system::args_get)?
            .func_wrap(m, "args_sizes_get", system::args_sizes_get)?
            .func_wrap(m, "environ_get", system::environ_get)?
            .func_wrap(m, "environ_sizes_get", system::environ_sizes_get)?
            .func_wrap(m, "clock_res_get", system::clock_res_get)?
            .func_wrap(m, "clock_time_get", system::clock_time_get)?
            .func_wrap(m, "fd_close", stdio::fd_close)?
            .func_wrap(m, "fd_fdstat_get", stdio::fd_fdstat_get)?
            .func_wrap(m, "fd_prestat_get", stdio::fd_prestat_get)?
            .func_wrap(m, "fd_read", stdio::fd_read)?
            .func_wrap(m, "fd_write", stdio::fd_write)?
            .func_wrap(m, "proc_exit", system::proc_exit)?
            .func_wrap(m, "random_get", system::random_get)?
            .func_wrap(m, "sched_yield", system::sched_yield)?;
        Ok::<_, wasmi::errors::LinkerError>(())
    })()
    .map_err(|err| WasmError::Invalid(format!("can't define the WASI functions: {err}")))
}

/// A preview 1 function the hook sandbox does not provide: it returns the error code a
/// program expects when the resource is missing (see [`stub_errno`]).
fn define_stub(linker: &mut Linker<HostState>, name: &str, ty: FuncType) -> Result<(), WasmError> {
    let owned = name.to_string();
    linker
        .func_new(WASI_MODULE, name, ty, move |_caller, params, results| {
            if let Some(result) = results.first_mut() {
                *result = Val::I32(stub_errno(&owned, params));
            }
            Ok(())
        })
        .map(|_| ())
        .map_err(|err| WasmError::Invalid(format!("can't define {WASI_MODULE}.{name}: {err}")))
}

/// What a stub answers: `EBADF` for a descriptor that does not exist (all but 0, 1 and 2:
/// there are no files, directories or sockets), what a standard stream answers to a request
/// it cannot serve, and `ENOSYS` for the rest (`poll_oneoff`, `proc_raise`).
fn stub_errno(name: &str, params: &[Val]) -> Errno {
    let takes_fd = ["fd_", "path_", "sock_"]
        .iter()
        .any(|prefix| name.starts_with(prefix));
    if !takes_fd {
        return ENOSYS;
    }
    if !matches!(params.first(), Some(Val::I32(0..=2))) {
        return EBADF;
    }
    match name {
        "fd_seek" | "fd_tell" => ESPIPE,
        _ if name.starts_with("path_") || name == "fd_readdir" => ENOTDIR,
        _ if name.starts_with("sock_") => ENOTSOCK,
        _ => ENOTSUP,
    }
}

/// `(i32, i64) -> i32`, for messages.
fn signature(ty: &FuncType) -> String {
    let list = |types: &[ValType]| {
        types
            .iter()
            .map(|ty| format!("{ty:?}").to_lowercase())
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!("({}) -> ({})", list(ty.params()), list(ty.results()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_implemented_function_is_a_preview1_function() {
        for name in IMPLEMENTED {
            assert!(wasi_type(name).is_some(), "{name}");
        }
        assert_eq!(FUNCTIONS.len(), 46);
    }

    #[test]
    fn stubs_answer_ebadf_for_unknown_descriptors() {
        assert_eq!(stub_errno("path_open", &[Val::I32(3)]), EBADF);
        assert_eq!(stub_errno("path_open", &[Val::I32(0)]), ENOTDIR);
        assert_eq!(stub_errno("fd_seek", &[Val::I32(1), Val::I64(0)]), ESPIPE);
        assert_eq!(stub_errno("sock_send", &[Val::I32(1)]), ENOTSOCK);
        assert_eq!(stub_errno("poll_oneoff", &[Val::I32(0)]), ENOSYS);
    }

    #[test]
    fn signatures_read_like_wat() {
        let ty = wasi_type("clock_time_get").unwrap();
        assert_eq!(signature(&ty), "(i32, i64, i32) -> (i32)");
    }
}
