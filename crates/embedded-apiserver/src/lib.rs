//! `embedded-apiserver`: an in-process Kubernetes API server (storage, watch,
//! CRDs, discovery, garbage collection) for tests and `metacontroller dev`.
//!
//! It serves plain HTTP on loopback and behaves like kube-apiserver + etcd +
//! the garbage collector for what kube-rs, kubectl and the controller use:
//! discovery (legacy and aggregated v2/v2beta1), `/version`, health checks, an
//! OpenAPI v3 index and an `/openapi/v2` document (JSON and protobuf) for
//! kubectl's and Helm's server-side field validation check, get/list
//! (label and field selectors, limit/continue), watch (resourceVersion
//! replay, bookmarks, `sendInitialEvents`, timeouts, 410 once history is
//! compacted), create/update/patch (JSON, merge, strategic for built-ins,
//! apply)/delete/deletecollection, `/status`, `/scale`, `/finalize`, dry-run,
//! `fieldValidation`, Tables for `kubectl get`, CRDs (all served versions,
//! pruning/defaulting/validation from the structural schema, status/scale
//! subresources, cleanup on deletion), finalizers, namespace termination and
//! background/foreground/orphan garbage collection. Errors are `Status`
//! objects with the real reasons and messages.
//!
//! Built-in kinds: namespaces, configmaps, secrets, limitranges, resourcequotas, services,
//! pods, nodes, endpointslices, serviceaccounts, events (core and events.k8s.io), leases,
//! deployments, replicasets, statefulsets, daemonsets, jobs, cronjobs,
//! horizontalpodautoscalers (autoscaling/v2 only), poddisruptionbudgets, RBAC (4 kinds) and
//! customresourcedefinitions. Their quantities and `[]byte` fields are stored in the form
//! kube-apiserver stores them (`0.5` → `500m`, base64 re-encoded).
//!
//! With `Config::simulation` (on in `metacontroller dev`, off by default) it also
//! simulates nodes, the scheduler, kubelets and the workload controllers
//! (Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, EndpointSlice) so pods
//! "run" without containers; see [`sim`].
//!
//! With `Config::write_latency` (off by default; benchmarks only) writes take a
//! realistic service time and commit through a bounded number of slots, so a load
//! harness sees a real server's shape (about 5 ms per write for one client, about
//! 465 writes/s in total with [`WriteLatency::realistic`]).
//!
//! Not emulated: protobuf request
//! bodies other than those of `kubectl create namespace|configmap|secret|
//! serviceaccount`; unknown-field detection for built-in kinds; conversion
//! webhooks; server-side apply field ownership until the `ssa` module lands
//! (apply currently merges the applied configuration).
//!
//! ```no_run
//! # async fn demo() -> Result<(), embedded_apiserver::StartError> {
//! let server = embedded_apiserver::ApiServer::start(Default::default()).await?;
//! server.write_kubeconfig("/tmp/kubeconfig").expect("write kubeconfig");
//! println!("serving at {}", server.url());
//! // ... point kube-rs or kubectl at it ...
//! server.shutdown().await;
//! # Ok(()) }
//! ```

mod builtin_fields;
mod control;
mod controllers;
mod crd;
pub mod defaults;
mod discovery;
pub mod errors;
mod hooks;
mod latency;
mod openapi;
mod openapi_builtin;
mod openapi_described;
mod openapi_v2;
mod ops;
mod patch;
mod protobuf;
mod registry;
mod scale;
pub mod schema;
pub mod selector;
mod server;
pub mod sim;
pub mod ssa;
mod store;
pub mod strategic_merge;
mod string_list;
mod table;
mod time;
mod typed_values;
mod validation;
mod watch;

pub use control::{Control, Fault, FaultAction, HistoryEntry};
pub use errors::ApiError;
pub use latency::WriteLatency;
pub use sim::SimulationConfig;

use server::Shared;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

/// Server settings. `Config::default()` listens on a random loopback port without auth.
#[derive(Clone, Debug)]
pub struct Config {
    /// Address to bind (default 127.0.0.1).
    pub bind: IpAddr,
    /// Port (0 = pick a free one).
    pub port: u16,
    /// Kubernetes version reported by `/version` (e.g. `v1.32.4`).
    pub version: String,
    /// If set, every request except /version and health checks needs `Authorization: Bearer <token>`.
    pub token: Option<String>,
    /// Events kept for watches to resume from; older resourceVersions get 410.
    pub history_size: usize,
    /// How often watches with `allowWatchBookmarks=true` get a BOOKMARK.
    pub bookmark_interval: Duration,
    /// Simulated nodes, kubelets and workload controllers (Deployments, StatefulSets, …) so
    /// pods run without containers; `None` (the default) keeps the server a bare API server.
    pub simulation: Option<SimulationConfig>,
    /// Realistic write latency for benchmarks (see [`WriteLatency`]; `None`, the default:
    /// writes are served as fast as possible). Tests keep it off.
    pub write_latency: Option<WriteLatency>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 0,
            version: "v1.32.4".into(),
            token: None,
            history_size: 100_000,
            bookmark_interval: Duration::from_secs(10),
            simulation: None,
            write_latency: None,
        }
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// Entry point.
pub struct ApiServer;

impl ApiServer {
    /// Starts serving in the current tokio runtime and returns once the port is bound.
    pub async fn start(config: Config) -> Result<ApiServerHandle, StartError> {
        let addr = SocketAddr::new(config.bind, config.port);
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| StartError::Bind { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| StartError::Bind { addr, source })?;
        let (tx, _) = tokio::sync::broadcast::channel(65_536);
        let (watch_close, _) = tokio::sync::watch::channel(0u64);
        let shared = Arc::new(Shared {
            state: parking_lot::Mutex::new(store::State::new(config.history_size, tx)),
            config: config.clone(),
            control: Default::default(),
            controllers: tokio::sync::Notify::new(),
            watch_close,
            open_watches: AtomicUsize::new(0),
            commits: config.write_latency.clone().map(latency::CommitSlots::new),
            addr,
        });
        shared.write(|st| {
            let info = st
                .registry
                .get_gr("", "namespaces")
                .expect("namespaces are built in");
            for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
                let obj = serde_json::json!({"metadata": {"name": ns}});
                let _ = ops::create(st, &info, "v1", None, obj, &Default::default());
            }
            // The `kubernetes` Service every cluster has in `default` (on the first service
            // IP), with the simulation only: bare-server tests count the Services they make.
            let svc_info = st.registry.get_gr("", "services");
            if let Some(svc_info) = svc_info.filter(|_| config.simulation.is_some()) {
                let svc = serde_json::json!({
                    "metadata": {"name": "kubernetes", "namespace": "default",
                                 "labels": {"component": "apiserver", "provider": "kubernetes"}},
                    "spec": {"clusterIP": "10.96.0.1", "type": "ClusterIP", "sessionAffinity": "None",
                             "ports": [{"name": "https", "port": 443, "protocol": "TCP",
                                        "targetPort": addr.port()}]},
                });
                let _ = ops::create(st, &svc_info, "v1", Some("default"), svc, &Default::default());
            }
        });
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let app = server::router(shared.clone());
        let mut stop_http = stop_rx.clone();
        let sh_close = shared.clone();
        let http = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stop_http.changed().await;
                    sh_close.close_watches();
                })
                .await;
        });
        let mut tasks = vec![http];
        if let Some(sim_config) = config.simulation.clone() {
            // Subscribed before the first write so the simulation misses no event.
            let events = shared.write(|st| {
                st.simulated_cluster = true;
                st.subscribe()
            });
            tasks.push(tokio::spawn(sim::run(
                shared.clone(),
                sim_config,
                events,
                stop_rx.clone(),
            )));
        }
        tasks.push(tokio::spawn(controllers::run(shared.clone(), stop_rx)));
        Ok(ApiServerHandle {
            shared,
            addr,
            stop: stop_tx,
            tasks,
        })
    }
}

/// A running server. Dropping it stops the server.
pub struct ApiServerHandle {
    shared: Arc<Shared>,
    addr: SocketAddr,
    stop: tokio::sync::watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl ApiServerHandle {
    /// Base URL, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A kubeconfig (YAML) for kubectl and kube-rs; context `embedded`, namespace `default`.
    pub fn kubeconfig_yaml(&self) -> String {
        let user = match &self.shared.config.token {
            Some(t) => format!("    token: {t}\n"),
            None => "    {}\n".to_string(),
        };
        let user = if self.shared.config.token.is_some() {
            format!("  user:\n{user}")
        } else {
            "  user: {}\n".to_string()
        };
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: embedded\n  cluster:\n    server: {}\ncontexts:\n- name: embedded\n  context:\n    cluster: embedded\n    user: embedded\n    namespace: default\ncurrent-context: embedded\nusers:\n- name: embedded\n{}preferences: {{}}\n",
            self.url(),
            user
        )
    }

    /// A kube-rs client of this server, configured from [`Self::kubeconfig_yaml`].
    pub async fn client(&self) -> Result<kube::Client, kube::Error> {
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&self.kubeconfig_yaml())?;
        let options = kube::config::KubeConfigOptions::default();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?;
        kube::Client::try_from(config)
    }

    /// Writes [`Self::kubeconfig_yaml`] to `path`, creating parent directories.
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        let path = path.as_ref();
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir)?;
            }
        }
        std::fs::write(path, self.kubeconfig_yaml())
    }

    /// Test control: request counters, faults, watch closing, history.
    pub fn control(&self) -> Control {
        Control {
            shared: self.shared.clone(),
        }
    }

    /// Stops serving (open watches end) and waits for the server tasks.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        for t in self.tasks.drain(..) {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
    }
}

impl Drop for ApiServerHandle {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// The `/version` document for a `vMAJOR.MINOR.PATCH` string.
pub(crate) fn version_info(v: &str) -> serde_json::Value {
    let trimmed = v.trim_start_matches('v');
    let mut parts = trimmed.split('.');
    let major = parts.next().unwrap_or("1");
    let minor = parts.next().unwrap_or("32");
    serde_json::json!({
        "major": major,
        "minor": minor,
        "gitVersion": v,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-04-22T16:00:00Z",
        "goVersion": "go1.23.8",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}
