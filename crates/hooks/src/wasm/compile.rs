//! Turning bytes into a [`Compiled`] module: validation, the import check, the `_start` check
//! and the linker the calls instantiate it with.

use wasmi::{CompilationMode, Config, CustomFuelCosts, Engine, ExternType, Linker, Module};

use super::error::WasmError;
use super::state::HostState;
use super::wasi;

/// The entry point of a WASI command.
pub(super) const START: &str = "_start";

/// A validated module and what its calls need. Each module has its own engine: wasmi keeps
/// the code of every module an engine compiled until the engine is dropped, and hooks are
/// recompiled whenever their source changes, so a shared engine would grow for ever.
pub(super) struct Compiled {
    pub(super) engine: Engine,
    pub(super) module: Module,
    pub(super) linker: Linker<HostState>,
}

/// wasmi's default for bulk memory and table operations, kept.
const BYTES_COPIED_PER_FUEL: u32 = 64;

/// The engine settings of every hook module.
pub(super) fn config() -> Config {
    let mut config = Config::default();
    // Fuel is how a call is interrupted: execution stops when a slice of fuel is spent,
    // the deadline is checked, and the call resumes with a new slice (see exec.rs).
    config.consume_fuel(true);
    // A start function runs during instantiation, where fuel slices cannot resume it, so a
    // looping one could not be stopped. WASI commands begin at `_start` and have none.
    config.allow_start_fn(false);
    // Validate everything now (a bad module fails here, not in the middle of a call);
    // function bodies are translated on first use and kept with the module.
    config.compilation_mode(CompilationMode::LazyTranslation);
    // Translating a function on first use costs no fuel. By default it does, and when a
    // slice runs out in the middle of translating a callee, wasmi 2.0 ends the call with a
    // non-resumable "out of fuel" error instead of pausing it (a Go hello world hit this).
    // Translation is bounded by the function's size and the deadline is checked right after.
    config.fuel_cost(CustomFuelCosts {
        bytes_copied_per_fuel: BYTES_COPIED_PER_FUEL,
        fuel_per_bytes_translated: 0,
        fuel_per_bytes_validated: 0,
    });
    config
}

/// Validates `bytes`, checks imports and `_start`, and prepares the linker.
pub(super) fn compile(config: &Config, bytes: &[u8]) -> Result<Compiled, WasmError> {
    let engine = Engine::new(config);
    let module = Module::new(&engine, bytes).map_err(|err| WasmError::Invalid(err.to_string()))?;
    let linker = wasi::linker(&engine, &module)?;
    match module.get_export(START) {
        Some(ExternType::Func(ty)) if ty.params().is_empty() && ty.results().is_empty() => {}
        Some(ExternType::Func(_)) => {
            return Err(WasmError::Invalid(format!(
                "{START} must take no parameters and return nothing"
            )))
        }
        _ => return Err(WasmError::NoStart),
    }
    Ok(Compiled {
        engine,
        module,
        linker,
    })
}
