//! Several replicas of the binary on one API server (leader election, sharding): their
//! common `run` flags, a hook that records which replica synced which parent and when, the
//! check that no parent was synced by two replicas at once, the shard Leases of a sharded
//! group, and a kubeconfig whose API link a test can stall.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::Request;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams};
use serde_json::Value;

use crate::api_recorder::ApiWrite;
use crate::{kubeconfig_server, TcpProxy};

/// `metacontroller run` against `kubeconfig` for the controllers labelled `team=<label>`,
/// with discovery every 500 ms: the arguments every replica starts with (more flags follow).
pub fn run_args(kubeconfig: &Path, label: &str) -> Vec<String> {
    vec![
        "run".to_string(),
        "--kubeconfig".to_string(),
        kubeconfig.display().to_string(),
        "--discovery-interval=500ms".to_string(),
        format!("--target-label-selector=team={label}"),
    ]
}

/// One hook call as the recording hook saw it.
#[derive(Debug, Clone)]
pub struct ReplicaCall {
    /// The caller's identity (`X-Metacontroller-Replica`; empty when it sent none).
    pub replica: String,
    /// The parent's name (a decorator's target `object`).
    pub parent: String,
    /// When the hook received the call.
    pub start: Instant,
    /// When the hook answered it.
    pub end: Instant,
}

/// The calls a recording hook answered (see [`start_recording_hook`]).
#[derive(Clone, Default)]
pub struct ReplicaCalls(Arc<Mutex<Vec<ReplicaCall>>>);

impl ReplicaCalls {
    /// Every call answered so far, in the order of the answers.
    pub fn calls(&self) -> Vec<ReplicaCall> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Starts a sync hook on 127.0.0.1 that answers each call after `delay` with
/// `reply(parent name, is a decorator's request)` and records it. Returns the hook's URL
/// (`http://<addr>/sync`) and the record.
pub async fn start_recording_hook(
    delay: Duration,
    reply: impl Fn(&str, bool) -> Value + Send + Sync + 'static,
) -> (String, ReplicaCalls) {
    let log = ReplicaCalls::default();
    let reply = Arc::new(reply);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binding the recording hook");
    let addr = listener.local_addr().expect("recording hook address");
    let app = axum::Router::new().fallback({
        let log = log.clone();
        move |request: Request<Body>| {
            let (log, reply) = (log.clone(), reply.clone());
            async move {
                let start = Instant::now();
                let replica = request
                    .headers()
                    .get("x-metacontroller-replica")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                let bytes = axum::body::to_bytes(request.into_body(), 64 << 20)
                    .await
                    .unwrap_or_default();
                let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                // A decorator's request names its target `object`.
                let decorator = body.get("object").is_some();
                let parent = if decorator {
                    &body["object"]
                } else {
                    &body["parent"]
                };
                let name = parent["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                tokio::time::sleep(delay).await;
                let answer = reply(&name, decorator);
                log.0
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(ReplicaCall {
                        replica,
                        parent: name,
                        start,
                        end: Instant::now(),
                    });
                axum::Json(answer)
            }
        }
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}/sync"), log)
}

/// Panics when two calls for one parent overlap in time, whichever replicas made them.
pub fn assert_no_concurrent_syncs(calls: &[ReplicaCall]) {
    let mut by_parent: HashMap<&str, Vec<&ReplicaCall>> = HashMap::new();
    for c in calls {
        by_parent.entry(&c.parent).or_default().push(c);
    }
    for (parent, mut calls) in by_parent {
        calls.sort_by_key(|c| c.start);
        for pair in calls.windows(2) {
            assert!(
                pair[1].start >= pair[0].end,
                "{parent} synced concurrently by {} and {}",
                pair[0].replica,
                pair[1].replica
            );
        }
    }
}

/// The writes of each replica's [`crate::ApiRecorder`], each under the identity its process
/// wrote into its Leases (`unidentified-<n>` for one that never got a Lease).
pub fn writes_by_replica(recorders: &[crate::ApiRecorder]) -> Vec<(String, ApiWrite)> {
    let mut all = Vec::new();
    for (n, recorder) in recorders.iter().map(crate::ApiRecorder::writes).enumerate() {
        let who = recorder
            .identity()
            .unwrap_or_else(|| format!("unidentified-{n}"));
        all.extend(recorder.writes().into_iter().map(|w| (who.clone(), w)));
    }
    all
}

/// One act of a replica on a parent: a hook call, or a write the server accepted.
#[derive(Debug, Clone)]
struct Act {
    replica: String,
    what: String,
    hook: bool,
    start: Instant,
    end: Instant,
}

/// A run of one replica's acts on one parent (see [`assert_one_writer_at_a_time`]).
#[derive(Debug, Clone)]
struct Turn {
    replica: String,
    first: String,
    last: String,
    start: Instant,
    end: Instant,
}

/// "One writer at a time", per parent, over hook calls *and* API writes: panics when two
/// replicas' turns on one parent overlap. Returns how many writes were checked.
///
/// The rule. A replica's acts on parent P are its hook calls for P and the writes the server
/// accepted (2xx) that `parent_of` maps to P (its children, its status). They form *turns*:
/// a hook call opens a new turn of its replica; a write joins the turn of that replica's
/// latest hook call for P before it (and opens a turn when there is none); a turn lasts from
/// its first act's start to its last act's end (a write ends when its answer came back, so
/// the server applied it inside the turn). Turns of different replicas on one parent never
/// overlap. So once replica B has called the hook for P, replica A writes nothing more for P
/// until A itself calls the hook for P again (a sync of its own, with what B wrote in its
/// cache), and B's turn only begins after A's last write for P was answered. Checking hook
/// calls alone misses a replica that keeps writing after it lost P: its writes come after
/// its hook call has ended.
///
/// Refused writes (409, 404, ...) changed nothing and are left out; so are Events (written
/// asynchronously, about the parent but not to it) and Leases.
pub fn assert_one_writer_at_a_time(
    calls: &[ReplicaCall],
    writes: &[(String, ApiWrite)],
    parent_of: impl Fn(&ApiWrite) -> Option<String>,
) -> usize {
    let mut acts: HashMap<String, Vec<Act>> = HashMap::new();
    for c in calls {
        acts.entry(c.parent.clone()).or_default().push(Act {
            replica: c.replica.clone(),
            what: "hook call".to_string(),
            hook: true,
            start: c.start,
            end: c.end,
        });
    }
    let mut checked = 0;
    for (replica, w) in writes.iter().filter(|(_, w)| w.accepted()) {
        let Some(parent) = parent_of(w) else {
            continue;
        };
        checked += 1;
        acts.entry(parent).or_default().push(Act {
            replica: replica.clone(),
            what: w.describe(),
            hook: false,
            start: w.start,
            end: w.end,
        });
    }
    let origin = acts.values().flatten().map(|a| a.start).min();
    for (parent, acts) in acts {
        if let Some(clash) = first_clash(turns(acts)) {
            let origin = origin.unwrap_or(clash.0.start);
            let at = |t: Instant| t.saturating_duration_since(origin);
            panic!(
                "{parent}: {}'s turn ({} .. {}, {:?} .. {:?}) overlaps {}'s turn ({} .. {}, \
                 {:?} .. {:?}): two writers at once (times from the first act of the test)",
                clash.0.replica,
                clash.0.first,
                clash.0.last,
                at(clash.0.start),
                at(clash.0.end),
                clash.1.replica,
                clash.1.first,
                clash.1.last,
                at(clash.1.start),
                at(clash.1.end),
            );
        }
    }
    checked
}

/// The turns of `acts` (one parent's), per replica, in the order they began.
fn turns(mut acts: Vec<Act>) -> Vec<Turn> {
    acts.sort_by_key(|a| a.start);
    let mut open: HashMap<String, usize> = HashMap::new();
    let mut turns: Vec<Turn> = Vec::new();
    for a in acts {
        match open.get(&a.replica) {
            Some(&i) if !a.hook => {
                let t = &mut turns[i];
                t.end = t.end.max(a.end);
                t.last = a.what;
            }
            _ => {
                open.insert(a.replica.clone(), turns.len());
                turns.push(Turn {
                    replica: a.replica,
                    first: a.what.clone(),
                    last: a.what,
                    start: a.start,
                    end: a.end,
                });
            }
        }
    }
    turns.sort_by_key(|t| t.start);
    turns
}

/// `(earlier, later)` for the first turn that began before another replica's earlier turn
/// ended.
fn first_clash(turns: Vec<Turn>) -> Option<(Turn, Turn)> {
    // The turn of each replica that ends last among those begun so far.
    let mut latest: HashMap<String, Turn> = HashMap::new();
    for t in turns {
        if let Some(other) = latest
            .values()
            .find(|o| o.replica != t.replica && o.end > t.start)
        {
            return Some((other.clone(), t));
        }
        match latest.get(&t.replica) {
            Some(held) if held.end >= t.end => {}
            _ => {
                latest.insert(t.replica.clone(), t);
            }
        }
    }
    None
}

/// The shard Leases of a sharded group (`<group>-shard-<n>`, in one namespace).
#[derive(Clone)]
pub struct ShardLeases {
    leases: Api<Lease>,
    group: String,
    prefix: String,
    shards: u32,
}

impl ShardLeases {
    /// The `shards` Leases of a new group in `namespace`, named `mc-<unique>` (its
    /// `--leader-election-id`).
    pub fn new_group(client: kube::Client, namespace: &str, shards: u32) -> Self {
        let group = crate::unique_name("mc");
        ShardLeases {
            leases: Api::namespaced(client, namespace),
            prefix: format!("{group}-shard-"),
            group,
            shards,
        }
    }

    /// The group's name (`--leader-election-id`).
    pub fn group(&self) -> &str {
        &self.group
    }

    /// Every held shard Lease: shard number → (holder, `leaseTransitions`).
    pub async fn read(&self) -> kube::Result<BTreeMap<u32, (String, i32)>> {
        let list = self.leases.list(&ListParams::default()).await?;
        Ok(list
            .items
            .into_iter()
            .filter_map(|l| {
                let shard = l.metadata.name.as_deref()?.strip_prefix(&self.prefix)?;
                let spec = l.spec?;
                let holder = spec.holder_identity.filter(|h| !h.is_empty())?;
                let transitions = spec.lease_transitions.unwrap_or(0);
                Some((shard.parse().ok()?, (holder, transitions)))
            })
            .collect())
    }

    /// Holder of each shard (shard number → identity), free ones left out.
    pub async fn holders(&self) -> BTreeMap<u32, String> {
        let held = self.read().await.expect("listing the shard Leases");
        held.into_iter().map(|(s, (h, _))| (s, h)).collect()
    }

    /// Waits until every shard is held, the holders are exactly `ids`, and the holders did
    /// not change for three seconds (three rounds of `--shard-retry-period=1s`): the
    /// handoffs are done. Returns the holders.
    pub async fn wait_spread(
        &self,
        ids: &BTreeSet<String>,
        within: Duration,
    ) -> BTreeMap<u32, String> {
        let deadline = Instant::now() + within;
        let mut stable: Option<(BTreeMap<u32, String>, Instant)> = None;
        loop {
            let last = self.holders().await;
            let holders: BTreeSet<String> = last.values().cloned().collect();
            if last.len() == self.shards as usize && holders == *ids {
                match &stable {
                    Some((seen, since)) if *seen == last => {
                        if since.elapsed() >= Duration::from_secs(3) {
                            return last;
                        }
                    }
                    _ => stable = Some((last.clone(), Instant::now())),
                }
            } else {
                stable = None;
            }
            assert!(
                Instant::now() < deadline,
                "shards not spread over {ids:?} within {within:?}: {last:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A kubeconfig that reaches the API server through a [`TcpProxy`], so a test can stall
/// one process's API link while the others keep theirs.
pub struct ProxiedKubeconfig {
    /// The proxy between the process and the API server.
    pub proxy: TcpProxy,
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl ProxiedKubeconfig {
    /// A copy of `kubeconfig` whose server is a new proxy to the server it names.
    pub async fn start(kubeconfig: &Path) -> Self {
        let upstream = kubeconfig_server(kubeconfig).expect("the kubeconfig's server");
        let proxy = TcpProxy::start(upstream).await.expect("starting the proxy");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("kubeconfig");
        proxy
            .write_kubeconfig(kubeconfig, &path)
            .expect("writing the proxied kubeconfig");
        ProxiedKubeconfig {
            proxy,
            path,
            _dir: dir,
        }
    }

    /// The proxied kubeconfig file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The `children` of a sync hook's answer for parent `name`: one ConfigMap `<name>-cm` with
/// data `k: v`.
pub fn configmap_child(name: &str) -> Value {
    serde_json::json!([{"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": format!("{name}-cm")},
                        "data": {"k": "v"}}])
}

/// The flags that make a replica a member of sharded group `group` (`--leader-election-id`)
/// with `shards` shards, Leases of `lease` whose renew deadline is three quarters of it, and
/// a retry period of one second.
pub fn sharding_args(group: &str, shards: u32, lease: Duration) -> Vec<String> {
    vec![
        "--sharding".to_string(),
        format!("--shards={shards}"),
        format!("--leader-election-id={group}"),
        format!("--shard-lease-duration={}ms", lease.as_millis()),
        format!("--shard-renew-deadline={}ms", (lease * 3 / 4).as_millis()),
        "--shard-retry-period=1s".to_string(),
    ]
}

/// The flags of one sharded replica in a test: [`run_args`] for `label` against
/// `kubeconfig`, [`sharding_args`], metrics on an ephemeral port and no probe listener
/// (replicas run side by side on one machine).
pub fn sharded_replica_args(
    kubeconfig: &Path,
    label: &str,
    group: &str,
    shards: u32,
    lease: Duration,
) -> Vec<String> {
    let mut args = run_args(kubeconfig, label);
    args.extend(sharding_args(group, shards, lease));
    args.extend([
        "--metrics-address=127.0.0.1:0".to_string(),
        "--health-probe-bind-address=0".to_string(),
    ]);
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(replica: &str, at: Instant, from: u64, to: u64) -> ReplicaCall {
        ReplicaCall {
            replica: replica.to_string(),
            parent: "p".to_string(),
            start: at + Duration::from_millis(from),
            end: at + Duration::from_millis(to),
        }
    }

    fn write(replica: &str, at: Instant, from: u64, to: u64, status: u16) -> (String, ApiWrite) {
        let w = ApiWrite {
            method: "PUT".to_string(),
            resource: "configmaps".to_string(),
            namespace: Some("ns".to_string()),
            name: Some("p-a".to_string()),
            subresource: None,
            status,
            start: at + Duration::from_millis(from),
            end: at + Duration::from_millis(to),
            holder: None,
        };
        (replica.to_string(), w)
    }

    fn parent(w: &ApiWrite) -> Option<String> {
        w.name.as_deref()?.strip_suffix("-a").map(str::to_string)
    }

    fn passes(calls: &[ReplicaCall], writes: &[(String, ApiWrite)]) -> bool {
        let (calls, writes) = (calls.to_vec(), writes.to_vec());
        std::panic::catch_unwind(move || assert_one_writer_at_a_time(&calls, &writes, parent))
            .is_ok()
    }

    #[test]
    fn a_write_after_another_replicas_hook_call_is_two_writers() {
        let t = Instant::now();
        // A syncs, B syncs, A's write lands after B's hook call: hook calls alone never
        // overlap, the turns do.
        let calls = [call("a", t, 0, 10), call("b", t, 20, 30)];
        let late = [write("a", t, 40, 45, 200)];
        assert_no_concurrent_syncs(&calls);
        assert!(!passes(&calls, &late));
        // Refused, it changed nothing.
        assert!(passes(&calls, &[write("a", t, 40, 45, 409)]));
        // Answered before B began: fine.
        assert!(passes(&calls, &[write("a", t, 11, 15, 200)]));
        // Still running when B began.
        assert!(!passes(&calls, &[write("a", t, 11, 25, 200)]));
    }

    #[test]
    fn turns_may_alternate_when_each_begins_with_a_hook_call() {
        let t = Instant::now();
        let calls = [
            call("a", t, 0, 10),
            call("b", t, 20, 30),
            call("a", t, 50, 60),
        ];
        let writes = [
            write("a", t, 10, 12, 200),
            write("b", t, 30, 40, 201),
            write("a", t, 60, 70, 200),
        ];
        assert!(passes(&calls, &writes));
        // B's write still running when A's new turn began.
        let mut slow = writes.to_vec();
        slow[1] = write("b", t, 30, 55, 200);
        assert!(!passes(&calls, &slow));
    }
}
