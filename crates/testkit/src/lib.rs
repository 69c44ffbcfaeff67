//! `metacontroller-testkit`: what every end-to-end test of this workspace needs.
//!
//! - [`TestCluster`]: a Kubernetes API to test against — the embedded API server started
//!   in-process, or a real cluster when `METACONTROLLER_E2E_KUBECONFIG` names a kubeconfig
//!   file. Request counters and fault injection ([`TestCluster::control`]) exist only for the
//!   embedded server, so tests skip those assertions on a real cluster.
//! - [`HookServer`]: a real HTTP hook server on 127.0.0.1 whose behaviour a test can switch
//!   while it runs (answer JSON, fail with a status, time out, send garbage).
//! - [`eventually`]: poll a condition until a deadline instead of sleeping.
//! - [`crd`] / [`CrdBuilder`]: small CRDs for parents and children.
//! - [`example`]: the `examples/` READMEs as tests (dev-mode binary, kubectl, local hooks);
//!   [`hello`]: what the hello-world variants share.
//! - [`ControllerProcess`]: the real binary as a child process (logs captured, signals,
//!   killed on drop).
//! - [`OtlpReceiver`]: an OTLP/HTTP trace receiver (what a traced controller exports).
//! - [`TcpProxy`]: a TCP fault proxy (stall, heal, cut) between a process and the API server.
//! - [`ApiRecorder`]: an HTTP proxy recording one process's API writes (both servers).
//! - [`replicas`]: several replicas of the binary (their `run` flags, a hook recording which
//!   replica synced what and when, shard Leases, a stallable kubeconfig).
//!
//! Every test must be able to run in parallel with the others against the same real cluster,
//! so names come from [`unique_name`] and each test creates its own namespace.

pub mod api_recorder;
mod cluster;
mod crd;
mod credentials;
mod events;
pub mod example;
pub mod hello;
mod hook;
pub mod metrics;
mod otlp;
pub mod pki;
mod poll;
mod process;
mod proxy;
pub mod replicas;
mod tools;
pub mod wasm;

pub use api_recorder::{ApiRecorder, ApiWrite, ApiWrites};
pub use cluster::{
    create_object, dynamic_api, real_cluster_requested, skip_on_real_cluster, ControllerKind,
    TestCluster, E2E_KUBECONFIG_ENV,
};
pub use crd::{crd, unique_crd, CrdBuilder};
pub use credentials::{service_account_token, write_token_kubeconfig};
pub use embedded_apiserver::{Control, Fault, FaultAction};
pub use events::{events_about, until_event, until_sync_error};
pub use hook::{
    assert_no_status_only_syncs, configmap_child_reply, parent_name, HookCall, HookReply,
    HookServer,
};
pub use otlp::{OtlpReceiver, ReceivedSpan};
pub use poll::{eventually, eventually_within, unique_name, DEFAULT_TIMEOUT, REAL_CLUSTER_TIMEOUT};
pub use process::ControllerProcess;
pub use proxy::{kubeconfig_server, TcpProxy};
pub use tools::{in_ci, missing_tool};
