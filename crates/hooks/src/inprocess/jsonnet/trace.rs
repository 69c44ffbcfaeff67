//! `std.trace` output of one evaluation, bounded: kept on the evaluating thread and handed
//! back with the result so that the controller logs it (with the hook's name) instead of
//! the worker printing to stderr.

use std::cell::RefCell;

use jrsonnet_evaluator::function::CallLocation;
use jrsonnet_evaluator::IStr;
use jrsonnet_gcmodule::Acyclic;
use jrsonnet_stdlib::TracePrinter;

/// The most `std.trace` lines one evaluation reports; the rest are counted.
pub(crate) const MAX_TRACE_LINES: usize = 20;
/// The most bytes of one `std.trace` line reported.
pub(crate) const MAX_TRACE_LINE_BYTES: usize = 1024;

#[derive(Default)]
struct Lines {
    kept: Vec<String>,
    dropped: usize,
}

thread_local! {
    static LINES: RefCell<Lines> = RefCell::new(Lines::default());
}

/// The `std.trace` printer of a [`super::Program`]: records `key:line:column message`.
#[derive(Acyclic)]
pub(crate) struct Collector;

impl TracePrinter for Collector {
    fn print_trace(&self, loc: CallLocation, value: IStr) {
        let place = loc
            .0
            .map(|span| {
                let at = span.0.map_source_locations(&[span.1]);
                let key = span.0.source_path().to_string().replace("virtual:", "");
                match at.first() {
                    Some(at) => format!("{key}:{}:{} ", at.line, at.column),
                    None => format!("{key} "),
                }
            })
            .unwrap_or_default();
        record(format!("{place}{value}"));
    }
}

fn record(mut line: String) {
    if line.len() > MAX_TRACE_LINE_BYTES {
        let mut cut = MAX_TRACE_LINE_BYTES;
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        line.truncate(cut);
        line.push_str("...");
    }
    LINES.with(|lines| {
        let mut lines = lines.borrow_mut();
        if lines.kept.len() < MAX_TRACE_LINES {
            lines.kept.push(line);
        } else {
            lines.dropped += 1;
        }
    });
}

/// The lines recorded on this thread since the last call (a last line counts those left out).
pub(crate) fn take_traces() -> Vec<String> {
    LINES.with(|lines| {
        let Lines { mut kept, dropped } = std::mem::take(&mut *lines.borrow_mut());
        if dropped > 0 {
            kept.push(format!("... {dropped} more std.trace lines"));
        }
        kept
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_are_bounded_in_count_and_length() {
        take_traces();
        record("x".repeat(5000));
        for i in 0..100 {
            record(format!("line {i}"));
        }
        let lines = take_traces();
        assert_eq!(lines.len(), MAX_TRACE_LINES + 1);
        assert!(lines[0].len() <= MAX_TRACE_LINE_BYTES + 3);
        assert_eq!(lines[MAX_TRACE_LINES], "... 81 more std.trace lines");
        assert!(take_traces().is_empty());
    }
}
