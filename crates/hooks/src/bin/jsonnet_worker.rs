//! A Jsonnet worker program for the hooks crate's own tests and benchmarks; the
//! `metacontroller` binary serves the same as its hidden `jsonnet-worker` command.

fn main() -> std::process::ExitCode {
    metacontroller_hooks::run_jsonnet_worker()
}
