//! Reading and writing the module's linear memory from host functions, with WASI error codes
//! for pointers that fall outside it (a hostile module gets `EFAULT`, never a host panic).

use wasmi::{Caller, Extern, Memory};

use super::super::state::HostState;

/// A WASI preview 1 error code (`errno`), returned by every WASI function but `proc_exit`.
pub(super) type Errno = i32;

pub(super) const SUCCESS: Errno = 0;
pub(super) const EBADF: Errno = 8;
pub(super) const EFAULT: Errno = 21;
pub(super) const EINVAL: Errno = 28;
pub(super) const EIO: Errno = 29;
pub(super) const ENOSYS: Errno = 52;
pub(super) const ENOTDIR: Errno = 54;
pub(super) const ENOTSOCK: Errno = 57;
pub(super) const ENOTSUP: Errno = 58;
pub(super) const ESPIPE: Errno = 70;

/// The WASI return value of a host function's outcome.
pub(super) fn errno(result: Result<(), Errno>) -> Errno {
    result.err().unwrap_or(SUCCESS)
}

/// The module's exported `memory`, through which WASI passes every buffer.
pub(super) fn memory(caller: &Caller<'_, HostState>) -> Result<Memory, Errno> {
    caller
        .get_export("memory")
        .and_then(Extern::into_memory)
        .ok_or(EFAULT)
}

/// `len` bytes at guest address `ptr` (WASI passes addresses as `i32`, meaning `u32`).
pub(super) fn bytes(mem: &[u8], ptr: i32, len: u32) -> Result<&[u8], Errno> {
    let start = ptr as u32 as usize;
    mem.get(start..start.checked_add(len as usize).ok_or(EFAULT)?)
        .ok_or(EFAULT)
}

/// The writable form of [`bytes`].
pub(super) fn bytes_mut(mem: &mut [u8], ptr: i32, len: u32) -> Result<&mut [u8], Errno> {
    let start = ptr as u32 as usize;
    mem.get_mut(start..start.checked_add(len as usize).ok_or(EFAULT)?)
        .ok_or(EFAULT)
}

/// Stores `value` at `ptr` (little-endian, as all Wasm memory is).
pub(super) fn write_u32(mem: &mut [u8], ptr: i32, value: u32) -> Result<(), Errno> {
    bytes_mut(mem, ptr, 4)?.copy_from_slice(&value.to_le_bytes());
    Ok(())
}

/// Stores `value` at `ptr`.
pub(super) fn write_u64(mem: &mut [u8], ptr: i32, value: u64) -> Result<(), Errno> {
    bytes_mut(mem, ptr, 8)?.copy_from_slice(&value.to_le_bytes());
    Ok(())
}

fn read_u32(mem: &[u8], ptr: i32) -> Result<u32, Errno> {
    let mut word = [0; 4];
    word.copy_from_slice(bytes(mem, ptr, 4)?);
    Ok(u32::from_le_bytes(word))
}

/// The `index`th entry of an `iovec` array at `iovs`: the buffer's address and length.
pub(super) fn iovec(mem: &[u8], iovs: i32, index: u32) -> Result<(i32, u32), Errno> {
    let entry = (iovs as u32)
        .checked_add(index.checked_mul(8).ok_or(EFAULT)?)
        .ok_or(EFAULT)?;
    let buf = read_u32(mem, entry as i32)?;
    let len = read_u32(mem, entry.checked_add(4).ok_or(EFAULT)? as i32)?;
    Ok((buf as i32, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_outside_memory_are_efault() {
        let mut mem = vec![0u8; 16];
        assert_eq!(bytes(&mem, 12, 4).map(<[u8]>::len), Ok(4));
        assert_eq!(bytes(&mem, 13, 4), Err(EFAULT));
        assert_eq!(bytes(&mem, -1, 1), Err(EFAULT)); // 4 GiB - 1
        assert_eq!(write_u64(&mut mem, 9, 1), Err(EFAULT));
        write_u32(&mut mem, 0, 8).unwrap();
        write_u32(&mut mem, 4, 3).unwrap();
        assert_eq!(iovec(&mem, 0, 0), Ok((8, 3)));
        assert_eq!(iovec(&mem, 0, 2), Err(EFAULT));
        assert_eq!(iovec(&mem, 0, u32::MAX), Err(EFAULT));
    }
}
