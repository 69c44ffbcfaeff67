//! The process-level WASI functions a hook may use: its (fixed) arguments, an empty
//! environment, clocks, random bytes and exit.

use std::time::{SystemTime, UNIX_EPOCH};

use ring::rand::{SecureRandom, SystemRandom};
use wasmi::Caller;

use super::super::state::HostState;
use super::guest::{self, errno, Errno, EINVAL, EIO, SUCCESS};

/// The only argument, `argv[0]`: programs (Go's `flag` package for one) expect a program name.
const ARGV0: &[u8] = b"hook\0";

const CLOCK_REALTIME: i32 = 0;
const CLOCK_MONOTONIC: i32 = 1;
const CLOCK_PROCESS_CPUTIME: i32 = 2;
const CLOCK_THREAD_CPUTIME: i32 = 3;

/// `args_sizes_get`: one argument, `hook`.
pub(super) fn args_sizes_get(mut caller: Caller<'_, HostState>, argc: i32, size: i32) -> Errno {
    with_memory(&mut caller, |mem| {
        guest::write_u32(mem, argc, 1)?;
        guest::write_u32(mem, size, ARGV0.len() as u32)
    })
}

/// `args_get`: writes `argv[0]` and its pointer.
pub(super) fn args_get(mut caller: Caller<'_, HostState>, argv: i32, buf: i32) -> Errno {
    with_memory(&mut caller, |mem| {
        guest::bytes_mut(mem, buf, ARGV0.len() as u32)?.copy_from_slice(ARGV0);
        guest::write_u32(mem, argv, buf as u32)
    })
}

/// `environ_sizes_get`: the environment is empty.
pub(super) fn environ_sizes_get(mut caller: Caller<'_, HostState>, count: i32, size: i32) -> Errno {
    with_memory(&mut caller, |mem| {
        guest::write_u32(mem, count, 0)?;
        guest::write_u32(mem, size, 0)
    })
}

/// `environ_get`: nothing to write.
pub(super) fn environ_get(_caller: Caller<'_, HostState>, _environ: i32, _buf: i32) -> Errno {
    SUCCESS
}

/// `clock_res_get`: nanosecond resolution for the four WASI clocks.
pub(super) fn clock_res_get(mut caller: Caller<'_, HostState>, id: i32, out: i32) -> Errno {
    if !(CLOCK_REALTIME..=CLOCK_THREAD_CPUTIME).contains(&id) {
        return EINVAL;
    }
    with_memory(&mut caller, |mem| guest::write_u64(mem, out, 1))
}

/// `clock_time_get`: wall-clock time, or the time since the call started for the monotonic
/// and CPU-time clocks (a call runs on one thread, start to end).
pub(super) fn clock_time_get(
    mut caller: Caller<'_, HostState>,
    id: i32,
    _precision: i64,
    out: i32,
) -> Errno {
    let nanos = match id {
        CLOCK_REALTIME => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos()),
        CLOCK_MONOTONIC | CLOCK_PROCESS_CPUTIME | CLOCK_THREAD_CPUTIME => {
            caller.data().started.elapsed().as_nanos()
        }
        _ => return EINVAL,
    };
    let nanos = u64::try_from(nanos).unwrap_or(u64::MAX);
    with_memory(&mut caller, |mem| guest::write_u64(mem, out, nanos))
}

/// The most `random_get` fills in one call. Host functions run outside fuel metering, so each
/// is kept short: filling all of a 64 MiB memory would take a tenth of a second, past the
/// deadline. Programs ask for a few bytes (a hash seed, a key); 1 MiB is far above that.
const MAX_RANDOM_BYTES: u32 = 1024 * 1024;

/// `random_get`: bytes from the operating system's generator (`EINVAL` above 1 MiB).
pub(super) fn random_get(mut caller: Caller<'_, HostState>, buf: i32, len: i32) -> Errno {
    if len as u32 > MAX_RANDOM_BYTES {
        return EINVAL;
    }
    with_memory(&mut caller, |mem| {
        let dest = guest::bytes_mut(mem, buf, len as u32)?;
        SystemRandom::new().fill(dest).map_err(|_| EIO)
    })
}

/// `sched_yield`: nothing else runs on this thread, so there is nothing to yield to.
pub(super) fn sched_yield(_caller: Caller<'_, HostState>) -> Errno {
    SUCCESS
}

/// `proc_exit`: ends the call; status 0 is success, anything else a hook error.
pub(super) fn proc_exit(_caller: Caller<'_, HostState>, code: i32) -> Result<(), wasmi::Error> {
    Err(wasmi::Error::i32_exit(code))
}

/// Runs `write` on the module's memory and returns its outcome as a WASI error code.
fn with_memory(
    caller: &mut Caller<'_, HostState>,
    write: impl FnOnce(&mut [u8]) -> Result<(), Errno>,
) -> Errno {
    match guest::memory(caller) {
        Ok(memory) => errno(write(memory.data_mut(caller))),
        Err(code) => code,
    }
}
