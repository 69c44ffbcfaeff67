//! The in-process API server (crates/embedded-apiserver) that `metacontroller dev` and offline
//! `metacontroller render` start, behind the cargo feature `embedded-apiserver` (on by default).
//!
//! This is the only module that knows whether the server is compiled in. A build without it
//! (the container image, see docs/src/operations.md) keeps every command: the two uses that
//! need the server are refused before anything starts, with a usage error that names the
//! feature ([`missing_for`]), and the rest of the binary compiles the same either way.

use std::path::Path;
use std::time::Duration;

use crate::cli::Command;

/// Whether this binary carries the embedded API server.
pub const AVAILABLE: bool = cfg!(feature = "embedded-apiserver");

/// The cargo feature that compiles the server in.
pub const FEATURE: &str = "embedded-apiserver";

/// Nodes, kubelets and workload controllers dev mode simulates.
#[derive(Debug, Clone)]
pub struct Simulation {
    /// Ready nodes to create.
    pub nodes: usize,
    /// How long a bound pod stays Pending before it runs and is Ready.
    pub pod_ready_after: Duration,
    /// How long a run-to-completion pod runs before it ends.
    // Only the server reads it (dev mode prints the other two).
    #[cfg_attr(not(feature = "embedded-apiserver"), expect(dead_code))]
    pub pod_succeed_after: Duration,
}

/// The use of `command` that needs the embedded API server, if any (whether or not this
/// binary has it).
pub fn needed_by(command: &Command) -> Option<&'static str> {
    match command {
        Command::Dev(_) => Some("`metacontroller dev`"),
        Command::Render(args) if !args.is_live() => {
            Some("`metacontroller render` without --live (offline)")
        }
        Command::Run(_)
        | Command::Merge(_)
        | Command::Validate(_)
        | Command::Render(_)
        | Command::Rollout(_) => None,
    }
}

/// The usage error for `command` when it needs the embedded API server and this binary was
/// built without it.
pub fn missing_for(command: &Command) -> Option<String> {
    if AVAILABLE {
        return None;
    }
    needed_by(command).map(missing_message)
}

fn missing_message(what: &str) -> String {
    format!(
        "{what} needs the embedded API server, which this binary was built without (cargo \
         feature `{FEATURE}`; the container image leaves it out). Use a binary built with the \
         default features (`cargo install --locked --path crates/metacontroller`, or \
         `cargo run -p metacontroller -- ...`); `render --live` works against a real cluster"
    )
}

#[cfg(feature = "embedded-apiserver")]
mod imp {
    use super::Simulation;

    /// A running in-process API server.
    pub struct Server(embedded_apiserver::ApiServerHandle);

    /// Starts a server on 127.0.0.1 (`port` 0 picks a free one).
    pub async fn start(port: u16, simulation: Option<Simulation>) -> anyhow::Result<Server> {
        let config = embedded_apiserver::Config {
            port,
            simulation: simulation.map(|sim| embedded_apiserver::SimulationConfig {
                nodes: sim.nodes,
                pod_ready_after: sim.pod_ready_after,
                pod_succeed_after: sim.pod_succeed_after,
            }),
            ..Default::default()
        };
        Ok(Server(embedded_apiserver::ApiServer::start(config).await?))
    }

    impl Server {
        /// Base URL (`http://127.0.0.1:PORT`).
        pub fn url(&self) -> String {
            self.0.url()
        }

        /// A kubeconfig for this server.
        pub fn kubeconfig_yaml(&self) -> String {
            self.0.kubeconfig_yaml()
        }

        /// Stops serving and waits for the server's tasks.
        pub async fn shutdown(self) {
            self.0.shutdown().await;
        }
    }
}

#[cfg(not(feature = "embedded-apiserver"))]
mod imp {
    use super::Simulation;

    /// No server can exist in this build ([`start`] always fails).
    pub enum Server {}

    /// Fails: `main` refuses the commands that get here ([`super::missing_for`]); this
    /// error only guards a caller that skipped that check.
    pub async fn start(_port: u16, _simulation: Option<Simulation>) -> anyhow::Result<Server> {
        anyhow::bail!(
            "this binary was built without the embedded API server (cargo feature `{}`)",
            super::FEATURE
        )
    }

    impl Server {
        /// Unreachable: there is no server.
        pub fn url(&self) -> String {
            match *self {}
        }

        /// Unreachable: there is no server.
        pub fn kubeconfig_yaml(&self) -> String {
            match *self {}
        }

        /// Unreachable: there is no server.
        pub async fn shutdown(self) {
            match self {}
        }
    }
}

pub use imp::{start, Server};

impl Server {
    /// Writes [`Server::kubeconfig_yaml`] to `path`.
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig_yaml())
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::Cli;

    fn command(args: &[&str]) -> Command {
        let argv = std::iter::once("metacontroller").chain(args.iter().copied());
        Cli::try_parse_from(argv)
            .expect("valid command line")
            .into_command()
    }

    #[test]
    fn dev_and_offline_render_need_the_server() {
        assert!(needed_by(&command(&["dev"])).is_some());
        let offline = [
            "render",
            "--controller",
            "c.yaml",
            "--parent",
            "p.yaml",
            "--hook-url",
            "http://127.0.0.1:1",
        ];
        assert!(needed_by(&command(&offline)).is_some());
    }

    #[test]
    fn live_render_and_the_other_commands_do_not() {
        let live = [
            "render",
            "--controller",
            "c.yaml",
            "--parent",
            "p.yaml",
            "--live",
        ];
        assert_eq!(needed_by(&command(&live)), None);
        let kubeconfig = [
            "render",
            "--controller",
            "c.yaml",
            "--parent",
            "p.yaml",
            "--kubeconfig",
            "k",
        ];
        assert_eq!(needed_by(&command(&kubeconfig)), None);
        assert_eq!(needed_by(&command(&[])), None);
        assert_eq!(needed_by(&command(&["run"])), None);
        let merge = ["merge", "--observed", "o.yaml", "--desired", "d.yaml"];
        assert_eq!(needed_by(&command(&merge)), None);
    }

    #[test]
    fn the_refusal_names_the_feature_and_where_to_get_it() {
        let message = missing_message("`metacontroller dev`");
        assert!(message.starts_with("`metacontroller dev` needs the embedded API server"));
        assert!(message.contains("`embedded-apiserver`"), "{message}");
        assert!(message.contains("cargo install"), "{message}");
        // The default build has the server and refuses nothing.
        assert_eq!(missing_for(&command(&["dev"])).is_none(), AVAILABLE);
    }
}
