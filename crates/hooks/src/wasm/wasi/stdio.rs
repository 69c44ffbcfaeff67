//! The three file descriptors a hook has: 0 reads the request, 1 collects the response (up to
//! the cap), 2 keeps the tail of its diagnostics. Every other descriptor is `EBADF`: there are
//! no preopened directories, so no path can be opened.

use wasmi::Caller;

use super::super::state::{HostState, StdoutFull};
use super::guest::{self, errno, Errno, EBADF, EINVAL, SUCCESS};

const STDIN: i32 = 0;
const STDOUT: i32 = 1;
const STDERR: i32 = 2;

/// `filetype::character_device`: what the standard streams of a process usually are.
const FILETYPE_CHARACTER_DEVICE: u8 = 2;
const RIGHT_FD_READ: u64 = 1 << 1;
const RIGHT_FD_WRITE: u64 = 1 << 6;
const RIGHT_POLL_FD_READWRITE: u64 = 1 << 27;

/// The most buffers one `fd_read`/`fd_write` takes (POSIX `IOV_MAX` on Linux; more is
/// `EINVAL`, as `readv`/`writev` answer). Without a cap a module could have the host walk
/// memory/8 entries in one call, outside the fuel that bounds its time.
pub(super) const MAX_IOVECS: i32 = 1024;
/// Fuel charged per buffer an `fd_read`/`fd_write` walks, on top of a byte-proportional
/// share: the host loop counts toward the slice after which the deadline is checked.
const FUEL_PER_IOVEC: u64 = 16;
/// Bytes copied per unit of fuel charged.
const BYTES_PER_FUEL: u64 = 64;

/// Charges the fuel of walking `iovecs` buffers (and copying `bytes`) to the call: the
/// remaining fuel shrinks, down to zero, so the next instruction runs out of fuel and the
/// deadline is checked.
fn charge(caller: &mut Caller<'_, HostState>, iovecs: i32, bytes: u64) {
    let cost = (iovecs.max(0) as u64) * FUEL_PER_IOVEC + bytes / BYTES_PER_FUEL;
    if let Ok(fuel) = caller.get_fuel() {
        let _ = caller.set_fuel(fuel.saturating_sub(cost));
    }
}

/// `fd_read`: copies the unread request bytes into the module's buffers (0 bytes at the end).
pub(super) fn fd_read(
    mut caller: Caller<'_, HostState>,
    fd: i32,
    iovs: i32,
    iovs_len: i32,
    nread: i32,
) -> Errno {
    if fd != STDIN {
        return EBADF;
    }
    if !(0..=MAX_IOVECS).contains(&iovs_len) {
        return EINVAL;
    }
    let unread = state_len(&caller);
    charge(&mut caller, iovs_len, unread);
    let memory = match guest::memory(&caller) {
        Ok(memory) => memory,
        Err(code) => return code,
    };
    let (mem, state) = memory.data_and_store_mut(&mut caller);
    errno((|| {
        let mut total: u32 = 0;
        for index in 0..iovs_len as u32 {
            let (buf, len) = guest::iovec(mem, iovs, index)?;
            let dest = guest::bytes_mut(mem, buf, len)?;
            let src = state.stdin_rest();
            let n = dest.len().min(src.len());
            dest[..n].copy_from_slice(&src[..n]);
            state.consume_stdin(n);
            total = total.saturating_add(n as u32);
            if n < dest.len() {
                break;
            }
        }
        guest::write_u32(mem, nread, total)
    })())
}

/// `fd_write`: appends to stdout or stderr. Passing the stdout cap stops the call (a host
/// error, reported as `OutputTooLarge`) instead of returning an error code the module might
/// ignore or retry.
pub(super) fn fd_write(
    mut caller: Caller<'_, HostState>,
    fd: i32,
    iovs: i32,
    iovs_len: i32,
    nwritten: i32,
) -> Result<Errno, wasmi::Error> {
    if fd != STDOUT && fd != STDERR {
        return Ok(EBADF);
    }
    if !(0..=MAX_IOVECS).contains(&iovs_len) {
        return Ok(EINVAL);
    }
    charge(&mut caller, iovs_len, 0);
    let memory = match guest::memory(&caller) {
        Ok(memory) => memory,
        Err(code) => return Ok(code),
    };
    let (mem, state) = memory.data_and_store_mut(&mut caller);
    let mut total: u32 = 0;
    for index in 0..iovs_len as u32 {
        let data = match guest::iovec(mem, iovs, index)
            .and_then(|(buf, len)| guest::bytes(mem, buf, len))
        {
            Ok(data) => data,
            Err(code) => return Ok(code),
        };
        if fd == STDOUT {
            state
                .write_stdout(data)
                .map_err(|StdoutFull| wasmi::Error::host(StdoutFull))?;
        } else {
            state.write_stderr(data);
        }
        total = total.saturating_add(data.len() as u32);
    }
    let written = errno(guest::write_u32(mem, nwritten, total));
    charge(&mut caller, 0, u64::from(total));
    Ok(written)
}

/// How much of the request is left to read: what one `fd_read` may copy at most.
fn state_len(caller: &Caller<'_, HostState>) -> u64 {
    caller.data().stdin_rest().len() as u64
}

/// `fd_fdstat_get`: the standard streams are character devices, readable (0) or writable.
pub(super) fn fd_fdstat_get(mut caller: Caller<'_, HostState>, fd: i32, out: i32) -> Errno {
    let rights = match fd {
        STDIN => RIGHT_FD_READ | RIGHT_POLL_FD_READWRITE,
        STDOUT | STDERR => RIGHT_FD_WRITE | RIGHT_POLL_FD_READWRITE,
        _ => return EBADF,
    };
    let memory = match guest::memory(&caller) {
        Ok(memory) => memory,
        Err(code) => return code,
    };
    // struct fdstat { filetype: u8, flags: u16 at 2, rights_base: u64 at 8, inheriting at 16 }
    let mut fdstat = [0u8; 24];
    fdstat[0] = FILETYPE_CHARACTER_DEVICE;
    fdstat[8..16].copy_from_slice(&rights.to_le_bytes());
    let mem = memory.data_mut(&mut caller);
    errno(guest::bytes_mut(mem, out, 24).map(|dest| dest.copy_from_slice(&fdstat)))
}

/// `fd_close`: closing a standard stream is accepted (and changes nothing); no other
/// descriptor exists.
pub(super) fn fd_close(_caller: Caller<'_, HostState>, fd: i32) -> Errno {
    if (STDIN..=STDERR).contains(&fd) {
        SUCCESS
    } else {
        EBADF
    }
}

/// `fd_prestat_get`: there are no preopened directories; `EBADF` ends the module's scan of
/// descriptors 3, 4, ... for them.
pub(super) fn fd_prestat_get(_caller: Caller<'_, HostState>, _fd: i32, _out: i32) -> Errno {
    EBADF
}
