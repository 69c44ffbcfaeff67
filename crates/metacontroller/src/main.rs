//! The `metacontroller` binary: `run` (default), `dev`, `merge` and `validate`.

// A future awaited inline is part of its caller's state and of every stack frame that moves
// or polls it; the main thread's stack, once touched, stays resident (see `main`).
#![warn(clippy::large_futures)]

mod cli;
mod client;
mod code_source;
mod coordination;
mod dev;
mod embedded;
mod health;
mod leader;
mod list_errors;
mod listen;
mod logging;
mod merge_cmd;
mod metrics;
mod namespaces;
mod render;
mod rollout_cmd;
mod run;
mod shard;
mod shutdown;
mod sources;
mod stranded;
mod stranded_children;
mod telemetry;
mod validate_cmd;
mod validate_code;
mod validate_scope;
mod validate_served;

use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command};

/// jemalloc: fewer CPU cycles per sync than glibc's malloc (see Cargo.toml).
#[cfg(not(target_env = "musl"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    // A Jsonnet worker process (started by this binary's own hook client): nothing of the
    // controller is set up; not a listed command.
    if std::env::args_os().nth(1).as_deref()
        == Some(metacontroller_hooks::JSONNET_WORKER_ARG.as_ref())
    {
        return metacontroller_hooks::run_jsonnet_worker();
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) if err.exit_code() == 0 => {
            // --help and --version.
            let _ = err.print();
            return ExitCode::SUCCESS;
        }
        Err(err) => {
            eprintln!("{}", cli::one_line_error(&err));
            return ExitCode::from(2);
        }
    };
    let command = cli.into_command();
    // Before anything starts: a build without the embedded API server refuses its two uses
    // as it refuses a bad flag.
    if let Some(message) = embedded::missing_for(&command) {
        eprintln!("error: {message}");
        return ExitCode::from(2);
    }
    let logging_args = match &command {
        Command::Run(args) => Some(&args.logging),
        Command::Dev(args) => Some(&args.controller.logging),
        Command::Merge(_) | Command::Validate(_) | Command::Render(_) | Command::Rollout(_) => None,
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(args) = logging_args {
        // Trace export (when on) runs on the runtime, so the runtime comes first.
        logging::init(args, runtime.handle());
    }
    // The commands' futures are boxed so that the main thread's stack (resident for the
    // process's lifetime once touched) never holds one: `block_on` polls this small future.
    let result = runtime.block_on(async move {
        match command {
            Command::Run(args) => Box::pin(run::run(args)).await,
            Command::Dev(args) => Box::pin(dev::dev(args)).await,
            Command::Merge(args) => merge_cmd::run(&args),
            Command::Validate(args) => validate_cmd::run(&args).await,
            Command::Render(args) => Box::pin(render::run(&args)).await,
            Command::Rollout(args) => rollout_cmd::run(&args).await,
        }
    });
    // The runtime is still up: the last spans are sent before the process exits.
    telemetry::shutdown();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!(error = %format!("{err:#}"), "metacontroller failed");
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
