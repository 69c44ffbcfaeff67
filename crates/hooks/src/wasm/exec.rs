//! One call, on the thread that runs it: a fresh store and instance, `_start` run in slices of
//! fuel with the deadline checked between slices, and the outcome mapped to a [`WasmError`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use wasmi::{Store, TypedResumableCall};

use super::compile::{Compiled, START};
use super::error::WasmError;
use super::state::{HostState, StdoutFull};
use super::{WasmLimits, WasmOutput};

/// Fuel (about one unit per instruction) a call runs between two deadline checks: well under
/// a millisecond of an optimised build, a few milliseconds of an unoptimised one; resuming
/// costs next to nothing in comparison.
const FUEL_SLICE: u64 = 1_000_000;

/// When a call must stop.
pub(super) struct Stop<'a> {
    /// The call's deadline (its start plus the timeout).
    pub(super) deadline: Instant,
    /// Set when the caller stopped waiting (timed out or dropped the call).
    pub(super) cancelled: &'a AtomicBool,
}

impl Stop<'_> {
    fn now(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed) || Instant::now() >= self.deadline
    }
}

/// Runs `_start` of a fresh instance of `compiled` with `stdin` until it ends or `stop` says so.
pub(super) fn execute(
    compiled: &Compiled,
    stdin: Vec<u8>,
    limits: &WasmLimits,
    stop: &Stop<'_>,
) -> Result<WasmOutput, WasmError> {
    let timeout = || WasmError::Timeout {
        timeout: limits.timeout,
    };
    if stop.now() {
        return Err(timeout());
    }
    let state = HostState::new(stdin, limits.max_stdout_bytes, limits.memory_bytes);
    let mut store = Store::new(&compiled.engine, state);
    store.limiter(|state| &mut state.limiter);
    refuel(&mut store, 0)?;
    let instance = match compiled
        .linker
        .instantiate_and_start(&mut store, &compiled.module)
    {
        Ok(instance) => instance,
        Err(err) => return outcome(Some(&err), store),
    };
    let start = instance
        .get_typed_func::<(), ()>(&store, START)
        .map_err(|_| WasmError::NoStart)?;
    let mut call = start.call_resumable(&mut store, ());
    loop {
        match call {
            Ok(TypedResumableCall::Finished(())) => return outcome(None, store),
            Ok(TypedResumableCall::OutOfFuel(paused)) => {
                if stop.now() {
                    return Err(timeout());
                }
                refuel(&mut store, paused.required_fuel())?;
                call = paused.resume(&mut store);
            }
            Ok(TypedResumableCall::HostTrap(trapped)) => {
                return outcome(Some(trapped.host_error()), store)
            }
            Err(err) => return outcome(Some(&err), store),
        }
    }
}

/// Gives the store the next slice (at least what the paused instruction needs: a bulk
/// memory operation is charged in one go).
fn refuel(store: &mut Store<HostState>, required: u64) -> Result<(), WasmError> {
    store
        .set_fuel(FUEL_SLICE.max(required))
        .map_err(|err| WasmError::Trap {
            message: format!("can't set fuel: {err}"),
            stderr: String::new(),
        })
}

/// The call's result: its stdout when `_start` returned or the module exited with status 0,
/// else the error that ended it.
fn outcome(
    error: Option<&wasmi::Error>,
    mut store: Store<HostState>,
) -> Result<WasmOutput, WasmError> {
    let state = store.data_mut();
    let stderr = state.stderr_tail();
    let Some(error) = error else {
        return Ok(WasmOutput {
            stdout: state.take_stdout(),
            stderr,
        });
    };
    if let Some(code) = error.i32_exit_status() {
        return match code {
            0 => Ok(WasmOutput {
                stdout: state.take_stdout(),
                stderr,
            }),
            code => Err(WasmError::Exit { code, stderr }),
        };
    }
    if error.downcast_ref::<StdoutFull>().is_some() {
        return Err(WasmError::OutputTooLarge {
            limit: state.max_stdout(),
        });
    }
    if state.limiter.exceeded() {
        return Err(WasmError::MemoryLimit {
            limit: state.limiter.limit(),
            stderr,
        });
    }
    Err(WasmError::Trap {
        message: error.to_string(),
        stderr,
    })
}
