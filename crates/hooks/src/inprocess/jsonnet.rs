//! Jsonnet hooks, evaluated as upstream's jsonnetd does: the entry file is a function of one
//! top-level argument, `request` (the hook request object), and its result is the response.
//! The full standard library is available; `import`, `importstr` and `importbin` resolve only
//! to keys of the hook's own ConfigMap, so the code reads no file, network or environment.
//!
//! Evaluation cannot be interrupted from inside the process, so the controller runs it in
//! worker processes ([`super::jsonnet_pool`]) that it kills at the hook's timeout; this
//! module is what a worker runs. jrsonnet's values are bound to the thread that made them:
//! a [`Program`] lives on the worker's evaluation thread.

use std::collections::HashMap;
use std::sync::Arc;

use jrsonnet_evaluator::error::ErrorKind;
use jrsonnet_evaluator::manifest::JsonFormat;
use jrsonnet_evaluator::tla::TlaArg;
use jrsonnet_evaluator::trace::{CompactFormat, PathResolver, TraceFormat};
use jrsonnet_evaluator::{AsPathLike, IStr, ImportResolver, SourcePath, SourceVirtual, State, Val};
use jrsonnet_gcmodule::Acyclic;

/// How many lines of an evaluation error (message and stack frames) a hook error keeps:
/// an infinite recursion would otherwise bring its 200 identical frames along.
const MAX_ERROR_LINES: usize = 12;

use crate::sources::CodeObject;

mod locate;
pub(crate) mod trace;
pub(crate) use trace::take_traces;

/// Resolves imports to keys of the hook's ConfigMap (`data`, then `binaryData`), and
/// nothing else. The ConfigMap is the watched object itself: nothing is copied per call.
#[derive(Acyclic)]
struct ConfigMapImports(Arc<CodeObject>);

impl ConfigMapImports {
    fn file(&self, key: &str) -> Option<Vec<u8>> {
        let files = &self.0;
        files
            .data
            .get(key)
            .map(|text| text.clone().into_bytes())
            .or_else(|| files.binary_data.get(key).cloned())
    }

    fn has(&self, key: &str) -> bool {
        self.0.data.contains_key(key) || self.0.binary_data.contains_key(key)
    }
}

impl ImportResolver for ConfigMapImports {
    fn resolve_from(
        &self,
        _from: &SourcePath,
        path: &dyn AsPathLike,
    ) -> jrsonnet_evaluator::Result<SourcePath> {
        let wanted = path.as_path();
        let key = wanted.as_ref().to_string_lossy();
        let key = key.strip_prefix("./").unwrap_or(&key);
        if self.has(key) {
            return Ok(SourcePath::new(SourceVirtual(key.into())));
        }
        Err(runtime_error(format!(
            "import {key:?}: the hook's ConfigMap has no such key (imports resolve only to its keys)"
        )))
    }

    fn load_file_contents(&self, resolved: &SourcePath) -> jrsonnet_evaluator::Result<Vec<u8>> {
        let key = resolved
            .downcast_ref::<SourceVirtual>()
            .map(|v| v.0.to_string())
            .unwrap_or_default();
        self.file(&key)
            .ok_or_else(|| runtime_error(format!("import {key:?}: no such key")))
    }
}

fn runtime_error(message: String) -> jrsonnet_evaluator::Error {
    ErrorKind::RuntimeError(message.into()).into()
}

/// The deepest Jsonnet call stack an evaluation may build: jsonnetd's (go-jsonnet) default,
/// where jrsonnet's own is 200.
pub(crate) const MAX_STACK_DEPTH: usize = 500;

/// A hook's code ready to evaluate: the evaluation state of one ConfigMap, whose parse and
/// import caches are kept across calls (a worker keeps one per code digest). Bound to the
/// thread that made it, as jrsonnet's values are.
pub(crate) struct Program {
    state: State,
    files: Arc<CodeObject>,
}

impl Program {
    /// The state for `files`: imports resolve to its keys, `std.trace` goes to [`take_traces`].
    pub(crate) fn new(files: Arc<CodeObject>) -> Program {
        Program {
            state: sandboxed_state(files.clone()),
            files,
        }
    }

    /// Evaluates `entry` as a function of `request` and returns the response JSON. Errors
    /// are the evaluator's message with `key:line:column` frames.
    pub(crate) fn evaluate(&self, entry: &str, request: &[u8]) -> Result<Vec<u8>, String> {
        let request: Val =
            serde_json::from_slice(request).map_err(|e| format!("can't read the request: {e}"))?;
        let _entered = self.state.enter();
        let _depth = jrsonnet_evaluator::stack::limit_stack_depth(MAX_STACK_DEPTH);
        let result = (|| {
            let function = self.state.import(entry)?;
            // jrsonnet's interned strings are keys by address; the map never mutates them.
            #[allow(clippy::mutable_key_type)]
            let mut arguments = HashMap::new();
            arguments.insert(IStr::from("request"), TlaArg::Val(request));
            let response = jrsonnet_evaluator::apply_tla(&arguments, function)?;
            response.manifest(JsonFormat::minify())
        })();
        result.map(String::into_bytes).map_err(|error| {
            let source = self.files.data.get(entry).map(String::as_str);
            format_error(&error, entry, source)
        })
    }
}

/// Evaluates `entry` of `files` as a function of `request` on the calling thread, with a
/// state of its own (nothing cached): the in-thread path, kept to measure the pool against.
pub fn evaluate(files: Arc<CodeObject>, entry: &str, request: &[u8]) -> Result<Vec<u8>, String> {
    Program::new(files).evaluate(entry, request)
}

/// An evaluation state whose imports resolve only to the keys of `files`, with the
/// standard library and `std.trace` going to [`take_traces`]: what a call and a check both
/// evaluate in.
fn sandboxed_state(files: Arc<CodeObject>) -> State {
    let mut builder = State::builder();
    builder.import_resolver(ConfigMapImports(files));
    let context = jrsonnet_stdlib::ContextInitializer::new(PathResolver::FileName);
    context.settings_mut().trace_printer = std::rc::Rc::new(trace::Collector);
    builder.context_initializer(context);
    builder.build()
}

/// Loads the entry file as a call would, without calling it: a syntax error (of the entry,
/// or of a file it imports at its top level) or an error evaluating its top level.
pub(crate) fn load_entry(files: Arc<CodeObject>, entry: &str) -> Result<(), String> {
    let state = sandboxed_state(files.clone());
    let _entered = state.enter();
    let _depth = jrsonnet_evaluator::stack::limit_stack_depth(MAX_STACK_DEPTH);
    state.import(entry).map(drop).map_err(|error| {
        let source = files.data.get(entry).map(String::as_str);
        format_error(&error, entry, source)
    })
}

/// The evaluator's error as one message: its text and the first stack frames (file:line),
/// with file names as the ConfigMap's keys.
fn format_error(error: &jrsonnet_evaluator::Error, entry: &str, source: Option<&str>) -> String {
    let format = CompactFormat {
        resolver: PathResolver::FileName,
        max_trace: MAX_ERROR_LINES,
        padding: 2,
    };
    let mut text = format
        .format(error)
        .unwrap_or_else(|_| error.to_string())
        .replace("virtual:", "");
    if let Some(place) = unlocated_field(error, entry, source) {
        text = match text.split_once('\n') {
            Some((first, rest)) => format!("{first}\n{place}\n{rest}"),
            None => format!("{text}\n{place}"),
        };
    }
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() <= MAX_ERROR_LINES {
        return lines.join("\n");
    }
    let more = lines.len() - MAX_ERROR_LINES;
    format!(
        "{}\n  ... {more} more frames",
        lines[..MAX_ERROR_LINES].join("\n")
    )
}

/// For an error whose frames carry no source location: `  <entry>:<line>:<column>: field
/// <name>`, the field of the entry file whose evaluation failed (see [`locate`]).
fn unlocated_field(
    error: &jrsonnet_evaluator::Error,
    entry: &str,
    source: Option<&str>,
) -> Option<String> {
    let frames = &error.trace().0;
    if frames.iter().any(|frame| frame.location.is_some()) {
        return None;
    }
    if let ErrorKind::ImportSyntaxError { .. } = error.error() {
        return None;
    }
    let path = locate::field_path(frames.iter().map(|frame| frame.desc.as_str()));
    let (line, column) = locate::find_field(source?, &path)?;
    let name = path.last()?;
    Some(format!("  {entry}:{line}:{column}: field <{name}>"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_errors_without_a_location_name_the_field() {
        let files = files(&[(
            "sync.jsonnet",
            "function(request) {\n  status: {\n    r: request.parent.spec.replicas,\n  },\n}",
        )]);
        let err = evaluate(files, "sync.jsonnet", br#"{"parent":null}"#).unwrap_err();
        assert!(err.contains("sync.jsonnet:3:5: field <r>"), "{err}");
    }

    fn files(entries: &[(&str, &str)]) -> Arc<CodeObject> {
        Arc::new(CodeObject::from_text(entries))
    }

    #[test]
    fn evaluates_the_entry_as_a_function_of_the_request_with_imports() {
        let files = files(&[
            (
                "sync.jsonnet",
                "local lib = import 'lib.libsonnet';\nfunction(request) { children: [lib.cm(request.parent.metadata.name)], status: {n: std.length(std.range(1, 3))} }",
            ),
            ("lib.libsonnet", "{ cm(n):: {apiVersion: 'v1', kind: 'ConfigMap', metadata: {name: n}} }"),
        ]);
        let out = evaluate(
            files,
            "sync.jsonnet",
            br#"{"parent":{"metadata":{"name":"p"}}}"#,
        )
        .unwrap();
        let value: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(value["children"][0]["metadata"]["name"], "p");
        assert_eq!(value["status"]["n"], 3);
    }

    #[test]
    fn errors_name_file_and_line() {
        let files = files(&[("sync.jsonnet", "function(request) {\n  a: error 'boom',\n}")]);
        let err = evaluate(files, "sync.jsonnet", b"{}").unwrap_err();
        assert!(err.contains("boom"), "{err}");
        assert!(err.contains("sync.jsonnet:2"), "{err}");
    }

    #[test]
    fn imports_outside_the_config_map_are_refused() {
        for code in [
            "function(request) import '/etc/passwd'",
            "function(request) importstr '../secret'",
            "function(request) importbin 'missing.bin'",
        ] {
            let files = files(&[("sync.jsonnet", code)]);
            let err = evaluate(files, "sync.jsonnet", b"{}").unwrap_err();
            assert!(err.contains("no such key"), "{code}: {err}");
        }
    }

    #[test]
    fn infinite_recursion_is_a_bounded_error() {
        let files = files(&[(
            "sync.jsonnet",
            "local f(x) = f(x + 1) + 1;\nfunction(request) f(0)",
        )]);
        let err = evaluate(files, "sync.jsonnet", b"{}").unwrap_err();
        assert!(err.contains("stack overflow"), "{err}");
        assert!(err.lines().count() <= MAX_ERROR_LINES + 1, "{err}");
    }

    #[test]
    fn syntax_errors_and_non_functions_are_errors() {
        let files = files(&[
            ("a.jsonnet", "function(request) {a: }"),
            ("b.jsonnet", "{a: 1}"),
        ]);
        let err = evaluate(files.clone(), "a.jsonnet", b"{}").unwrap_err();
        assert!(err.contains("a.jsonnet:1"), "{err}");
        // Like jsonnetd, a plain value (not a function) is the response as it is.
        let out = evaluate(files, "b.jsonnet", b"{}").unwrap();
        assert_eq!(out, br#"{"a":1}"#);
    }
}
