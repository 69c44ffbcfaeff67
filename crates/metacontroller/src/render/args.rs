//! The flags of `metacontroller render`.

use std::path::PathBuf;

use clap::{ArgGroup, Args, ValueEnum};

use crate::cli::{ApplySchema, ApplyStrategy};

/// `metacontroller render`: one sync of one parent, offline or against a live cluster,
/// without writing anything.
#[derive(Debug, Clone, Args)]
#[command(group(ArgGroup::new("hook_target").args(["hook_url", "hook_command", "jsonnet", "wasm"])))]
pub struct RenderArgs {
    /// The CompositeController or DecoratorController manifest (YAML or JSON; other
    /// documents in the file, such as CRDs, are used to resolve resources offline).
    #[arg(long, value_name = "FILE")]
    pub controller: PathBuf,

    /// The parent (CompositeController) or target (DecoratorController) object. Offline, an
    /// object without metadata.uid is first created in an in-process API server so the
    /// request carries what a real API server adds. With --live, the object of that name
    /// is read from the cluster.
    #[arg(long, value_name = "FILE", required_unless_present = "request")]
    pub parent: Option<PathBuf>,

    /// Observed children (attachments), as the controller would see them (several files,
    /// multi-document YAML and `kind: List` accepted).
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub children: Vec<PathBuf>,

    /// Related objects (as the customize hook's rules would select them).
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub related: Vec<PathBuf>,

    /// CustomResourceDefinitions of the parent, child or related resources (offline: the
    /// in-process API server serves them, so resources resolve as in a cluster).
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub crd: Vec<PathBuf>,

    /// Call the hook at this URL (instead of the controller's webhook URL or Service);
    /// the controller's timeout and decoding mode still apply.
    #[arg(long, value_name = "URL")]
    pub hook_url: Option<String>,

    /// Run the hook as `sh -c CMD`: the request on stdin, the response on stdout; a
    /// non-zero exit is a failed call (its stderr is reported).
    #[arg(long, value_name = "CMD")]
    pub hook_command: Option<String>,

    /// Evaluate this Jsonnet file as the hook (a function of `request`, as a `jsonnet:`
    /// hook); the other files of its directory are importable by name.
    #[arg(long, value_name = "FILE")]
    pub jsonnet: Option<PathBuf>,

    /// Run this WebAssembly module as the hook (WASI: request on stdin, response on
    /// stdout, as a `wasm:` hook, with the controller's memoryLimit and timeout).
    #[arg(long, value_name = "FILE")]
    pub wasm: Option<PathBuf>,

    /// Run a code version stored by `spec.hookRollout` instead of the live ConfigMaps of
    /// the controller's in-process hooks: `from` (the last good code), `to` (the code being
    /// rolled out) or a digest (a prefix of `from` or `to` suffices). Needs --live.
    #[arg(long, value_name = "from|to|DIGEST", conflicts_with = "hook_target")]
    pub code: Option<String>,

    /// Call the finalize hook as for a parent being deleted (`finalizing: true`).
    #[arg(long, conflicts_with = "hook")]
    pub finalizing: bool,

    /// Which hook to call [default: the one the controller would call].
    #[arg(long, value_enum, value_name = "HOOK")]
    pub hook: Option<HookName>,

    /// Print what the controller would do instead of the desired objects: per child
    /// create / update (with a diff) / delete / unchanged, and the status change.
    #[arg(long)]
    pub diff: bool,

    /// Read the parent and its observed children from the cluster (kubeconfig from
    /// --kubeconfig, $KUBECONFIG or ~/.kube/config).
    #[arg(long)]
    pub live: bool,

    /// Kubeconfig of the cluster to read from (implies --live).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,

    /// Replay this hook request instead of building one: a bare request body, or a file
    /// written by --record-hooks.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["parent", "children", "related", "live", "kubeconfig", "finalizing"])]
    pub request: Option<PathBuf>,

    /// How the controller writes children (as `run --apply-strategy`), for --diff.
    #[arg(long, value_name = "STRATEGY", value_enum, default_value_t = ApplyStrategy::DynamicApply)]
    pub apply_strategy: ApplyStrategy,

    /// Merge with the resource's OpenAPI schema (as `run --apply-schema`), for --diff.
    #[arg(long, value_name = "MODE", value_enum, default_value_t = ApplySchema::Auto)]
    pub apply_schema: ApplySchema,
}

impl RenderArgs {
    /// Whether objects come from a cluster.
    pub fn is_live(&self) -> bool {
        self.live || self.kubeconfig.is_some()
    }
}

/// A hook of a controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HookName {
    /// The sync hook.
    Sync,
    /// The finalize hook (`finalizing: true`).
    Finalize,
    /// The customize hook (prints the related resource rules).
    Customize,
}
