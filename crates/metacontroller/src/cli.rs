//! Command-line interface. Flag names and defaults follow upstream Metacontroller v4.x so
//! existing Deployments and Helm values keep working; see README for the one deliberate
//! difference (`--client-go-qps`/`--client-go-burst` default to 0, no client-side limit).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use metacontroller_api::duration::parse_go_duration;

/// Metacontroller: lightweight Kubernetes controllers as a service, in Rust.
#[derive(Debug, Parser)]
#[command(
    name = "metacontroller",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    /// What to do; `run` when omitted.
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Flags of `run`, accepted without the subcommand as upstream does.
    #[command(flatten)]
    pub run: ControllerArgs,
}

impl Cli {
    /// The subcommand to execute, with `run` as the default.
    pub fn into_command(self) -> Command {
        self.command.unwrap_or(Command::Run(self.run))
    }
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the controller against a cluster (the default).
    Run(ControllerArgs),
    /// Start an embedded API server, install the CRDs, write a kubeconfig and run the
    /// controller against it until Ctrl-C.
    #[cfg_attr(
        not(feature = "embedded-apiserver"),
        command(
            about = "Not in this build (no cargo feature `embedded-apiserver`): start an embedded API server and run the controller against it",
            long_about = None
        )
    )]
    Dev(DevArgs),
    /// Debug helper for hook authors: print how a desired object merges onto an observed one.
    Merge(MergeArgs),
    /// Check CompositeController/DecoratorController manifests offline (field paths; exit 1
    /// on any error).
    Validate(ValidateArgs),
    /// Hook authors' loop: build the request the controller would send for one parent,
    /// call the hook (URL or command), check the answer as the controller does and print
    /// the desired children and status (or, with --diff, what the controller would write).
    #[cfg_attr(
        not(feature = "embedded-apiserver"),
        command(
            after_help = "This build has no embedded API server (cargo feature `embedded-apiserver`): only --live (or --kubeconfig) works."
        )
    )]
    Render(Box<crate::render::args::RenderArgs>),
    /// Progressive rollouts of hook code (`spec.hookRollout`), as `kubectl rollout`:
    /// status (exit 1 when rolled back), pause, resume, undo.
    Rollout(RolloutArgs),
}

/// `metacontroller rollout ACTION TARGET`.
#[derive(Debug, Args)]
pub struct RolloutArgs {
    /// What to do.
    #[arg(value_enum)]
    pub action: RolloutAction,

    /// The controller object: `NAME` (a CompositeController) or `KIND/NAME` with KIND
    /// `compositecontroller` (`cc`) or `decoratorcontroller` (`dc`).
    pub target: String,

    /// Kubeconfig to use ($KUBECONFIG, ~/.kube/config, then in-cluster when unset).
    #[arg(long, value_name = "PATH", visible_alias = "client-config-path")]
    pub kubeconfig: Option<PathBuf>,
}

/// A `rollout` action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RolloutAction {
    /// Print phase, step and counts once (`kubectl rollout status --watch=false`); exit 1
    /// when the rollout rolled back.
    Status,
    /// Set `spec.hookRollout.paused`: the rollout holds at its step.
    Pause,
    /// Clear `spec.hookRollout.paused`.
    Resume,
    /// Roll back: a running rollout returns every parent to `from`; a complete one
    /// returns every parent to the code before it (annotation
    /// `metacontroller.k8s.io/hook-rollout-undo`, acted on by the controller).
    Undo,
}

/// Settings of the controller process (upstream flag names and defaults).
#[derive(Debug, Clone, Args)]
pub struct ControllerArgs {
    /// How often to refresh the discovery cache to pick up newly installed resources.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = go_duration)]
    pub discovery_interval: Duration,

    /// How often to resync every parent from the local cache (no API request; the cache
    /// relists only after watch errors). 0 disables it.
    #[arg(long, value_name = "DURATION", default_value = "30m", value_parser = go_duration)]
    pub cache_flush_interval: Duration,

    /// Address to serve Prometheus metrics on (/metrics); "0" disables it.
    #[arg(long, value_name = "ADDR", default_value = ":9999")]
    pub metrics_address: String,

    /// Client-side API request rate limit in queries per second; 0 means no limit (upstream
    /// defaults to 5, which throttles large installations; the API server's priority and
    /// fairness already protects it).
    #[arg(long, value_name = "QPS", default_value_t = 0.0, allow_negative_numbers = true, value_parser = non_negative_f64)]
    pub client_go_qps: f64,

    /// Client-side burst allowance of the --client-go-qps token bucket (requests that may
    /// go at once after a quiet period); 0 means client-go's default of 10. Has no effect
    /// while --client-go-qps is 0.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub client_go_burst: u32,

    /// Deadline of every API request other than watches, until its response headers
    /// arrive (not an upstream flag). A request on a dead connection fails after it and
    /// its sync is retried with backoff instead of parking a worker; 0 disables it.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = go_duration)]
    pub api_request_timeout: Duration,

    /// Number of sync workers per controller: syncs of one controller that call hooks at
    /// once. A sync gives its worker up once only API writes remain (see
    /// --parents-in-flight), so hook servers see at most this many calls per controller.
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub workers: u32,

    /// Parents of one controller in a sync at once, counting those past their hook calls
    /// that wait on the API server for their writes (not an upstream flag; raised to
    /// --workers if lower). Upstream holds a worker for the whole sync, which leaves a real
    /// API server idle between one parent's writes and the next.
    #[arg(long, value_name = "N", default_value_t = metacontroller_controllers::composite::DEFAULT_PARENTS_IN_FLIGHT as u32, value_parser = clap::value_parser!(u32).range(1..))]
    pub parents_in_flight: u32,

    /// Child (and attachment) writes one sync sends at once (not an upstream flag). Writes
    /// of one parent are independent; sending them together keeps a worker from waiting on
    /// the API server one write at a time. The parent's status is still written after all
    /// of them, and a 409 Conflict still stops the sync's further writes. 1 sends them one
    /// after another, as upstream.
    #[arg(long, value_name = "N", default_value_t = metacontroller_controllers::DEFAULT_CHILD_WRITE_CONCURRENCY as u32, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_child_writes: u32,

    /// Rate of Kubernetes Event writes per object, in events per second [default: 1/300,
    /// one per 5 minutes]. Writes beyond it wait; they are not dropped.
    #[arg(long, value_name = "QPS", default_value_t = 1.0 / 300.0, hide_default_value = true, allow_negative_numbers = true, value_parser = non_negative_f64)]
    pub events_qps: f64,

    /// Number of Event writes allowed in a burst per object (new Events, and each Event's
    /// repeats, have budgets of their own).
    #[arg(long, value_name = "N", default_value_t = 25)]
    pub events_burst: u32,

    /// Address for pprof profiling (accepted for compatibility; "0" disables, which is
    /// all this implementation supports).
    #[arg(long, value_name = "ADDR", default_value = "0")]
    pub pprof_address: String,

    /// Use leader election so only one replica is active.
    #[arg(long, value_name = "BOOL", default_value_t = false, num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set, value_parser = go_bool)]
    pub leader_election: bool,

    /// Resource lock used for leader election.
    #[arg(long, value_name = "KIND", default_value = "leases")]
    pub leader_election_resource_lock: String,

    /// Namespace of the leader election lock (default: the pod's namespace).
    #[arg(long, value_name = "NAMESPACE", default_value = "")]
    pub leader_election_namespace: String,

    /// Name of the leader election lock.
    #[arg(long, value_name = "NAME", default_value = "metacontroller")]
    pub leader_election_id: String,

    /// Spread parents over all replicas: each replica syncs only the parents of the shards
    /// it owns (Leases in the leader election namespace). Excludes --leader-election.
    #[arg(long, value_name = "BOOL", default_value_t = false, num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set, value_parser = go_bool)]
    pub sharding: bool,

    /// Number of virtual shards parents are hashed into (with --sharding). Every replica
    /// must use the same value. The default splits evenly over 2, 3, 4, 5, 6, 10 or 12
    /// replicas.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_SHARDS, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub shards: u32,

    /// How long a replica's membership Lease stays valid without renewal: a dead replica's
    /// shards move to the others after this long (with --sharding).
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = go_duration)]
    pub shard_lease_duration: Duration,

    /// How long a replica keeps trying to renew its membership Lease before it stops
    /// syncing all its shards; must be shorter than --shard-lease-duration.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = go_duration)]
    pub shard_renew_deadline: Duration,

    /// Pause between membership renewals and shard assignment rounds (with --sharding).
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = go_duration)]
    pub shard_retry_period: Duration,

    /// Address to serve /healthz and /readyz on; "0" disables it.
    #[arg(long, value_name = "ADDR", default_value = ":8081")]
    pub health_probe_bind_address: String,

    /// Limit the process to these namespaces (comma-separated; not an upstream flag): parents,
    /// children and related objects are listed, watched and written there only, so Roles in
    /// them suffice. Empty: every namespace. See docs/src/namespaced-install.md.
    #[arg(
        long,
        env = "WATCH_NAMESPACE",
        value_name = "NS,...",
        value_delimiter = ',',
        default_value = ""
    )]
    pub watch_namespaces: Vec<String>,

    /// Only manage CompositeControllers/DecoratorControllers whose labels match this selector.
    #[arg(long, value_name = "SELECTOR", default_value = "")]
    pub target_label_selector: String,

    /// How children are written: three-way merge + update, or server-side apply.
    #[arg(long, value_name = "STRATEGY", value_enum, default_value_t = ApplyStrategy::DynamicApply)]
    pub apply_strategy: ApplyStrategy,

    /// Field manager name used with --apply-strategy=server-side-apply.
    #[arg(long, value_name = "NAME", default_value = "metacontroller")]
    pub apply_strategy_ssa_field_manager: String,

    /// Merge children and attachments with the schema of their kind (CRD openAPIV3Schema,
    /// the API server's OpenAPI v3 for built-in kinds): `auto`; or by upstream's conventional
    /// merge keys only: `off`.
    #[arg(long, value_name = "MODE", value_enum, default_value_t = ApplySchema::Auto)]
    pub apply_schema: ApplySchema,

    /// Path to a kubeconfig file; default: $KUBECONFIG, ~/.kube/config, then in-cluster.
    #[arg(long, value_name = "PATH", visible_alias = "client-config-path")]
    pub kubeconfig: Option<PathBuf>,

    /// Write every hook request and response (sync, finalize, customize) as a JSON file
    /// into this directory, created if missing (not an upstream flag). Secret data is
    /// redacted and request headers are never written; a file can be replayed with
    /// `metacontroller render --request FILE`.
    #[arg(long, value_name = "DIR")]
    pub record_hooks: Option<PathBuf>,

    /// With --record-hooks: keep at most this many recordings, removing the oldest.
    #[arg(long, value_name = "N", requires = "record_hooks", value_parser = clap::value_parser!(u64).range(1..))]
    pub record_hooks_max_files: Option<u64>,

    /// Memory all in-process hook calls (Jsonnet, WebAssembly) running at once may use
    /// together, a Kubernetes quantity (not an upstream flag). A call reserves its memory
    /// limit before it runs; over budget it waits, up to its timeout, then fails naming the
    /// budget. Keep it under the container's memory limit minus the controller's own use.
    #[arg(long, value_name = "QUANTITY", default_value = "1Gi", value_parser = quantity_bytes)]
    pub inprocess_hook_memory_budget: u64,

    /// In-process hook calls of one controller that run at once (not an upstream flag);
    /// more wait for the controller's share, so a controller whose hooks loop or time out
    /// delays only its own calls.
    #[arg(long, value_name = "N", default_value_t = metacontroller_hooks::inprocess::DEFAULT_PER_CONTROLLER as u32, value_parser = clap::value_parser!(u32).range(1..))]
    pub inprocess_hook_concurrency_per_controller: u32,

    /// In-process hook calls of all controllers that run at once (not an upstream flag).
    #[arg(long, value_name = "N", default_value_t = metacontroller_hooks::inprocess::DEFAULT_PROCESS as u32, value_parser = clap::value_parser!(u32).range(1..))]
    pub inprocess_hook_concurrency: u32,

    /// Enable upstream's HTTP API (accepted for compatibility; not served yet).
    #[arg(long, value_name = "BOOL", default_value_t = false, num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set, value_parser = go_bool)]
    pub api: bool,

    /// Port of upstream's HTTP API (accepted for compatibility).
    #[arg(long, value_name = "PORT", default_value = "8090")]
    pub api_port: String,

    /// Enable upstream's trigger-sync HTTP API (accepted for compatibility).
    #[arg(long, value_name = "BOOL", default_value_t = false, num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set, value_parser = go_bool)]
    pub api_trigger_sync: bool,

    #[command(flatten)]
    pub logging: LoggingArgs,
}

/// `--apply-strategy` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ApplyStrategy {
    /// Three-way merge with the last-applied annotation, written with update (default).
    DynamicApply,
    /// Kubernetes server-side apply with --apply-strategy-ssa-field-manager.
    ServerSideApply,
}

/// Default `--shards`: the bounded-load assignment splits 60 evenly over 2, 3, 4, 5, 6, 10 or 12
/// replicas (64 gave three replicas 22/21/21 shards, and the largest sets the group's memory).
pub const DEFAULT_SHARDS: u32 = 60;

/// `--apply-schema` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ApplySchema {
    /// Lists merge as their schema declares (list types, map keys); conventions where the
    /// schema says nothing.
    Auto,
    /// Upstream's merge: conventional keys only.
    Off,
}

/// Logging flags: ours plus upstream's zap flags, mapped onto tracing.
#[derive(Debug, Clone, Args)]
pub struct LoggingArgs {
    /// Log level: trace, debug, info, warn or error (overrides --zap-log-level).
    #[arg(long, value_name = "LEVEL", value_enum)]
    pub log_level: Option<LogLevel>,

    /// Log format.
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Upstream's zap verbosity: debug, info, error, or an integer (4 logs API calls, 5+
    /// hook calls). Mapped onto --log-level when that is not given.
    #[arg(long, value_name = "LEVEL", value_parser = zap_level)]
    pub zap_log_level: Option<LogLevel>,

    /// Upstream's zap development mode (text logs at debug level).
    #[arg(long, value_name = "BOOL", default_value_t = false, num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set, value_parser = go_bool)]
    pub zap_devel: bool,

    /// Upstream's zap encoder: json or console (mapped onto --log-format).
    #[arg(long, value_name = "ENCODER", value_parser = zap_encoder)]
    pub zap_encoder: Option<LogFormat>,

    /// Upstream's zap stack trace level (accepted for compatibility).
    #[arg(long, value_name = "LEVEL")]
    pub zap_stacktrace_level: Option<String>,

    /// Upstream's zap time encoding (accepted for compatibility).
    #[arg(long, value_name = "ENCODING")]
    pub zap_time_encoding: Option<String>,
}

impl LoggingArgs {
    /// The level to log at: --log-level, else --zap-log-level, else --zap-devel, else info.
    pub fn effective_level(&self) -> LogLevel {
        self.log_level
            .or(self.zap_log_level)
            .unwrap_or(if self.zap_devel {
                LogLevel::Debug
            } else {
                LogLevel::Info
            })
    }

    /// The format to log in: --zap-encoder=json wins over the default text format.
    pub fn effective_format(&self) -> LogFormat {
        match (self.log_format, self.zap_encoder) {
            (LogFormat::Json, _) => LogFormat::Json,
            (LogFormat::Text, Some(encoder)) => encoder,
            (LogFormat::Text, None) => LogFormat::Text,
        }
    }
}

/// Log verbosity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogLevel {
    /// Everything, including hook request and response bodies.
    Trace,
    /// Details of API and hook interactions.
    Debug,
    /// Normal operation.
    Info,
    /// Problems that are retried.
    Warn,
    /// Failures.
    Error,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Flags of `metacontroller dev`.
#[derive(Debug, Clone, Args)]
pub struct DevArgs {
    /// Where to write the kubeconfig for the embedded API server.
    #[arg(
        long = "dev-kubeconfig",
        value_name = "PATH",
        default_value = ".metacontroller-dev/kubeconfig"
    )]
    pub kubeconfig_out: PathBuf,

    /// Port for the embedded API server on 127.0.0.1 (0 picks a free port).
    #[arg(long, value_name = "PORT", default_value_t = 0)]
    pub port: u16,

    /// Simulate nodes, kubelets and the workload controllers (Deployment, ReplicaSet,
    /// StatefulSet, DaemonSet, Job, EndpointSlice) so pods run, without containers;
    /// `--simulate=false` serves a bare API server.
    #[arg(long, value_name = "BOOL", default_value_t = true, num_args = 0..=1,
          default_missing_value = "true", action = clap::ArgAction::Set, value_parser = go_bool)]
    pub simulate: bool,

    /// Number of simulated Ready nodes.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub nodes: u16,

    /// How long a simulated pod stays Pending before it is Running and Ready.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = go_duration)]
    pub pod_ready_after: Duration,

    /// How long a Job's simulated pod runs before it Succeeds.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = go_duration)]
    pub pod_succeed_after: Duration,

    #[command(flatten)]
    pub controller: ControllerArgs,
}

/// Flags of `metacontroller merge`.
#[derive(Debug, Clone, Args)]
pub struct MergeArgs {
    /// The object as it is in the cluster (JSON or YAML).
    #[arg(long, value_name = "FILE")]
    pub observed: PathBuf,
    /// The object as the hook wants it (JSON or YAML).
    #[arg(long, value_name = "FILE")]
    pub desired: PathBuf,
    /// What was applied last time; default: the last-applied annotation on the observed object.
    #[arg(long, value_name = "FILE")]
    pub last_applied: Option<PathBuf>,
    /// A structural schema (CRD, openAPIV3Schema, or OpenAPI v3 document) for list merging.
    #[arg(long, value_name = "FILE")]
    pub schema: Option<PathBuf>,
}

/// Flags of `metacontroller validate`.
#[derive(Debug, Clone, Args)]
pub struct ValidateArgs {
    /// Manifest files (YAML or JSON, multi-document; `-` reads standard input); other
    /// kinds are skipped.
    #[arg(short = 'f', long = "filename", value_name = "FILE", required = true, num_args = 1..)]
    pub files: Vec<PathBuf>,

    /// Also check against this cluster that every resource the controllers name is served
    /// (apiVersion + plural resource name), as `run --kubeconfig` connects.
    #[arg(long, value_name = "PATH", visible_alias = "client-config-path")]
    pub kubeconfig: Option<PathBuf>,

    /// Like --kubeconfig, with the cluster found as `run` finds it without that flag:
    /// $KUBECONFIG, ~/.kube/config, then in-cluster.
    #[arg(long, conflicts_with = "kubeconfig")]
    pub live: bool,

    /// The namespaces `run --watch-namespaces` will be limited to (comma-separated): warns
    /// about children elsewhere (`childResources[].namespaces`) such a process cannot reach.
    #[arg(long, value_name = "NS,...", value_delimiter = ',')]
    pub watch_namespaces: Vec<String>,
}

impl ValidateArgs {
    /// Whether the cluster checks run.
    pub fn online(&self) -> bool {
        self.live || self.kubeconfig.is_some()
    }
}

/// A Kubernetes quantity of bytes (`1Gi`, `512Mi`), at least 1Mi.
fn quantity_bytes(value: &str) -> Result<u64, String> {
    let bytes = metacontroller_api::inprocess::parse_quantity_bytes(value)?;
    if bytes < 1 << 20 {
        return Err(format!("{value:?}: at least 1Mi"));
    }
    Ok(bytes)
}

fn go_duration(value: &str) -> Result<Duration, String> {
    parse_go_duration(value).map_err(|err| err.to_string())
}

fn non_negative_f64(value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(number) if number.is_finite() && number >= 0.0 => Ok(number),
        _ => Err("expected a non-negative number such as 0, 5 or 0.5".to_string()),
    }
}

/// Go's `strconv.ParseBool` forms, as upstream's boolean flags accept them.
fn go_bool(value: &str) -> Result<bool, String> {
    match value {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err("expected true or false".to_string()),
    }
}

fn zap_level(value: &str) -> Result<LogLevel, String> {
    match value {
        "debug" => Ok(LogLevel::Debug),
        "info" => Ok(LogLevel::Info),
        "warn" => Ok(LogLevel::Warn),
        "error" => Ok(LogLevel::Error),
        other => match other.parse::<u32>() {
            Ok(n) if n >= 5 => Ok(LogLevel::Trace),
            Ok(n) if n >= 1 => Ok(LogLevel::Debug),
            Ok(_) => Ok(LogLevel::Info),
            Err(_) => Err("expected debug, info, warn, error or a positive integer".to_string()),
        },
    }
}

fn zap_encoder(value: &str) -> Result<LogFormat, String> {
    match value {
        "json" => Ok(LogFormat::Json),
        "console" => Ok(LogFormat::Text),
        _ => Err("expected json or console".to_string()),
    }
}

/// Renders a clap error as the single line the CLI contract promises: which flag, what
/// was wrong, and what is accepted.
pub fn one_line_error(err: &clap::Error) -> String {
    let rendered = err.render().to_string();
    rendered
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with("For more information"))
        .filter(|line| !line.starts_with("Usage:"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn defaults_match_upstream() {
        let cli = Cli::try_parse_from(["metacontroller"]).unwrap();
        let Command::Run(args) = cli.into_command() else {
            panic!("default command must be run");
        };
        assert_eq!(args.discovery_interval, Duration::from_secs(30));
        assert_eq!(args.cache_flush_interval, Duration::from_secs(1800));
        assert_eq!(args.metrics_address, ":9999");
        assert_eq!(args.health_probe_bind_address, ":8081");
        assert_eq!(args.workers, 5);
        assert_eq!(args.max_concurrent_child_writes, 8);
        assert_eq!(args.events_burst, 25);
        assert!((args.events_qps - 1.0 / 300.0).abs() < 1e-12);
        assert_eq!(args.client_go_qps, 0.0);
        assert_eq!(args.client_go_burst, 0);
        assert!(!args.leader_election);
        assert_eq!(args.leader_election_resource_lock, "leases");
        assert_eq!(args.leader_election_id, "metacontroller");
        assert_eq!(args.apply_strategy, ApplyStrategy::DynamicApply);
        assert_eq!(args.apply_schema, ApplySchema::Auto);
        assert_eq!(args.logging.effective_level(), LogLevel::Info);
        assert_eq!(args.logging.effective_format(), LogFormat::Text);
    }

    #[test]
    fn apply_schema_flag() {
        let parse = |flag: &str| match Cli::try_parse_from(["metacontroller", flag])
            .map(Cli::into_command)
        {
            Ok(Command::Run(args)) => Ok(args.apply_schema),
            Ok(_) => panic!("run expected"),
            Err(e) => Err(e.to_string()),
        };
        assert_eq!(parse("--apply-schema=off"), Ok(ApplySchema::Off));
        assert_eq!(parse("--apply-schema=auto"), Ok(ApplySchema::Auto));
        assert!(parse("--apply-schema=on").is_err());
    }

    #[test]
    fn upstream_style_flags_parse() {
        let cli = Cli::try_parse_from([
            "metacontroller",
            "--zap-log-level=4",
            "--discovery-interval=20s",
            "--cache-flush-interval",
            "1h30m",
            "--leader-election",
            "--zap-encoder=json",
            "--apply-strategy=server-side-apply",
            "--client-config-path=/tmp/kubeconfig",
        ])
        .unwrap();
        let Command::Run(args) = cli.into_command() else {
            panic!("expected run");
        };
        assert_eq!(args.discovery_interval, Duration::from_secs(20));
        assert_eq!(args.cache_flush_interval, Duration::from_secs(5400));
        assert!(args.leader_election);
        assert_eq!(args.apply_strategy, ApplyStrategy::ServerSideApply);
        assert_eq!(args.logging.effective_level(), LogLevel::Debug);
        assert_eq!(args.logging.effective_format(), LogFormat::Json);
        assert_eq!(args.kubeconfig, Some(PathBuf::from("/tmp/kubeconfig")));
    }

    #[test]
    fn go_bool_forms() {
        let cli =
            Cli::try_parse_from(["metacontroller", "run", "--leader-election=false"]).unwrap();
        let Command::Run(args) = cli.into_command() else {
            panic!("expected run");
        };
        assert!(!args.leader_election);
    }

    #[test]
    fn invalid_values_give_one_line_naming_flag_and_accepted_values() {
        for (argv, flag, accepted) in [
            (
                vec!["metacontroller", "--workers", "five"],
                "--workers",
                "invalid digit",
            ),
            (vec!["metacontroller", "--workers", "0"], "--workers", "1.."),
            (
                vec!["metacontroller", "--max-concurrent-child-writes", "0"],
                "--max-concurrent-child-writes",
                "1..",
            ),
            (
                vec!["metacontroller", "--discovery-interval", "30"],
                "--discovery-interval",
                "1h30m",
            ),
            (
                vec!["metacontroller", "--apply-strategy", "kubectl"],
                "--apply-strategy",
                "dynamic-apply",
            ),
            (
                vec!["metacontroller", "--log-format", "xml"],
                "--log-format",
                "json",
            ),
            (
                vec!["metacontroller", "--client-go-qps", "-1"],
                "--client-go-qps",
                "non-negative",
            ),
        ] {
            let err = Cli::try_parse_from(&argv).unwrap_err();
            assert_eq!(err.exit_code(), 2);
            let line = one_line_error(&err);
            assert!(!line.contains('\n'));
            assert!(line.contains(flag), "{line:?} should name {flag}");
            assert!(
                line.contains(accepted),
                "{line:?} should contain {accepted}"
            );
        }
    }
}
