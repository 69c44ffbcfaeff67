//! The memory cap of one call: linear memory plus tables, against `WasmLimits::memory_bytes`.
//!
//! Growing past the cap traps (instead of `memory.grow` returning -1) and records that it
//! happened, so the call ends at once with [`WasmError::MemoryLimit`](super::WasmError)
//! rather than running on (often in a loop retrying the allocation) until its timeout.

use wasmi::errors::{MemoryError, TableError};
use wasmi::ResourceLimiter;
use wasmi_core::LimiterError;

/// Bytes a table element is counted for: a function reference in wasmi's tables.
const TABLE_ELEMENT_BYTES: u64 = 8;

/// One instance per call; more would only be a way around the cap.
const MAX_INSTANCES: usize = 1;
/// WASI commands have one memory (multi-memory modules are refused when instantiated).
const MAX_MEMORIES: usize = 1;
/// Compilers emit one function table; reference-types modules may declare a few more.
const MAX_TABLES: usize = 4;

/// Counts the bytes of the store's memories and tables against a limit.
#[derive(Debug)]
pub(super) struct MemoryLimiter {
    limit: u64,
    used: u64,
    /// Bytes granted by the last permitted growth, given back if the growth then fails.
    pending: u64,
    exceeded: bool,
}

impl MemoryLimiter {
    /// A limiter allowing `limit` bytes in all.
    pub(super) fn new(limit: u64) -> Self {
        Self {
            limit,
            used: 0,
            pending: 0,
            exceeded: false,
        }
    }

    /// The limit in bytes.
    pub(super) fn limit(&self) -> u64 {
        self.limit
    }

    /// Whether the module asked for more than the limit (the call then trapped).
    pub(super) fn exceeded(&self) -> bool {
        self.exceeded
    }

    fn grow(&mut self, current: u64, desired: u64) -> Result<bool, LimiterError> {
        let more = desired.saturating_sub(current);
        let total = self.used.saturating_add(more);
        if total > self.limit {
            self.exceeded = true;
            return Err(LimiterError::ResourceLimiterDeniedAllocation);
        }
        self.used = total;
        self.pending = more;
        Ok(true)
    }

    fn grow_failed(&mut self) {
        self.used = self.used.saturating_sub(self.pending);
        self.pending = 0;
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> Result<bool, LimiterError> {
        self.grow(current as u64, desired as u64)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> Result<bool, LimiterError> {
        let bytes = |elements: usize| (elements as u64).saturating_mul(TABLE_ELEMENT_BYTES);
        self.grow(bytes(current), bytes(desired))
    }

    fn memory_grow_failed(&mut self, _error: &MemoryError) -> Result<(), LimiterError> {
        self.grow_failed();
        Ok(())
    }

    fn table_grow_failed(&mut self, _error: &TableError) -> Result<(), LimiterError> {
        self.grow_failed();
        Ok(())
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_memory_and_tables_together() {
        let mut limiter = MemoryLimiter::new(1024);
        assert!(matches!(limiter.memory_growing(0, 1000, None), Ok(true)));
        assert!(matches!(limiter.table_growing(0, 3, None), Ok(true))); // 24 bytes
        assert!(limiter.table_growing(3, 4, None).is_err()); // 1032 > 1024
        assert!(limiter.exceeded());
    }

    #[test]
    fn a_failed_growth_gives_its_bytes_back() {
        let mut limiter = MemoryLimiter::new(1024);
        assert!(matches!(limiter.memory_growing(0, 1024, None), Ok(true)));
        limiter.grow_failed();
        assert!(matches!(limiter.memory_growing(0, 1024, None), Ok(true)));
        assert!(!limiter.exceeded());
    }
}
