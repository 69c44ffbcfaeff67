//! Process-wide tracing subscriber set up from the logging flags.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::cli::{LogFormat, LogLevel, LoggingArgs};

/// Installs the global subscriber. `RUST_LOG`, when set, refines the level per module.
pub fn init(args: &LoggingArgs) {
    let level = match args.effective_level() {
        LogLevel::Trace => "trace",
        LogLevel::Debug => "debug",
        LogLevel::Info => "info",
        LogLevel::Warn => "warn",
        LogLevel::Error => "error",
    };
    // Dependencies (hyper, rustls, tower) are noisy at debug; keep them at warn unless
    // RUST_LOG asks for them.
    let default_directives = format!("warn,metacontroller={level},metacontroller_api={level},metacontroller_apply={level},metacontroller_hooks={level},metacontroller_dynamic={level},metacontroller_controllers={level},embedded_apiserver={level}");
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_directives));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    // A second init (tests) is harmless; ignore the error it returns.
    let _ = match args.effective_format() {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
}
