//! Hook faults, end to end: the sync hook answers 500, times out, sends invalid JSON or
//! returns a child of an undeclared type. Each gives a `SyncError` Warning Event on the
//! parent, the parent is retried with backoff (a handful of calls, not a hot loop), and
//! once the test switches the hook server to a good answer the parent converges.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Event;
use metacontroller_testkit::{eventually, HookReply, TestCluster};
use metacontroller_workqueue::Backoff;
use serde_json::{json, Value};

use common::{configmap_rule, parent_crd, Env};

/// The good answer: one ConfigMap child and a status.
fn good(req: &Value) -> HookReply {
    let name = req["parent"]["metadata"]["name"]
        .as_str()
        .unwrap_or_default();
    HookReply::json(json!({
        "children": [{"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": format!("{name}-cm")}, "data": {"ok": "yes"}}],
        "status": {"healthy": true},
    }))
}

/// The SyncError Events about `parent`.
async fn sync_errors(env: &Env, parent: &str) -> Vec<Event> {
    env.events_for(&env.ns, parent, "SyncError").await
}

/// When each failing call came, to see the backoff in the gaps between them.
type CallTimes = Arc<Mutex<Vec<Instant>>>;

/// An environment whose hook answers every call with `bad`, recording when each came.
async fn env_recording_calls(
    bad: impl Fn(&Value) -> HookReply + Send + Sync + 'static,
) -> (Env, CallTimes) {
    let times = CallTimes::default();
    let record = times.clone();
    let env = Env::new(TestCluster::start().await, parent_crd(), move |_, req| {
        record.lock().unwrap().push(Instant::now());
        bad(req)
    })
    .await;
    (env, times)
}

/// Starts with a real Event recorder; the sync webhook gets `timeout` when given.
async fn start_with_timeout(env: &mut Env, timeout: Option<&str>) {
    let mut webhook = json!({"url": env.hook.url("/sync")});
    if let Some(t) = timeout {
        webhook["timeout"] = json!(t);
    }
    env.start_with_events(json!({
        "generateSelector": true,
        "childResources": [configmap_rule("InPlace")],
        "hooks": {"sync": {"webhook": webhook}},
    }))
    .await;
}

/// An Event on the parent, with the upstream reason, type and message prefix (the hook
/// failure's own prefix when `hook_failure`); no child was written.
async fn assert_sync_error_event(env: &Env, expected: &str, hook_failure: bool) {
    eventually("SyncError event on the parent", || async {
        sync_errors(env, "p").await.iter().any(|e| {
            let msg = e.message.as_deref().unwrap_or_default();
            msg.starts_with("Sync error: ") && msg.contains(expected)
        })
    })
    .await;
    if hook_failure {
        let prefix = format!("Sync error: sync hook failed for Parent {}/p: ", env.ns);
        let event = sync_errors(env, "p").await.remove(0);
        let msg = event.message.unwrap_or_default();
        assert!(msg.starts_with(&prefix), "{msg}");
    }
    let event = sync_errors(env, "p").await.remove(0);
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(
        event.source.and_then(|s| s.component).as_deref(),
        Some("metacontroller")
    );
    assert_eq!(event.involved_object.kind.as_deref(), Some("Parent"));
    assert!(env.configmap("p-cm").await.is_none());
}

/// Backoff (5 ms doubling): the gaps between failing calls double, however fast or slow the
/// machine is; a hot loop keeps them constant. Each failing sync also costs its Event
/// write, which on a busy real API server adds a few hundred milliseconds of noise to every
/// gap, so compare at the one-second scale: wait for the first gap of at least 1 s, which
/// must be well over the gap two before it (4x with pure doubling). (With a hook timeout
/// every gap also holds the timeout, which hides the doubling: then only the wait.)
async fn assert_backoff(times: &CallTimes, timeout: Option<&str>) {
    let gaps = || -> Vec<Duration> {
        let t = times.lock().unwrap();
        t.windows(2).map(|w| w[1] - w[0]).collect()
    };
    let long = |g: &Duration| *g >= Duration::from_secs(1);
    eventually("a failing call 1 s after the previous one", || async {
        gaps().iter().skip(2).any(long)
    })
    .await;
    if timeout.is_none() {
        let gaps = gaps();
        let i = 2 + gaps.iter().skip(2).position(long).unwrap();
        assert!(
            gaps[i].as_secs_f64() >= 1.5 * gaps[i - 2].as_secs_f64(),
            "no backoff: gaps between failing calls {gaps:?}"
        );
    }
}

/// Repeats of the same failure are one Event with a count, not a flood.
async fn assert_repeats_counted(env: &Env) {
    let errors = sync_errors(env, "p").await;
    assert!(errors.len() <= 2, "{} SyncError events", errors.len());
    assert!(
        errors.iter().any(|e| e.count.unwrap_or(0) >= 2),
        "repeated failures counted: {:?}",
        errors.iter().map(|e| e.count).collect::<Vec<_>>()
    );
}

/// Fixed hook: the parent converges (on the next backoff retry).
async fn assert_recovers(env: &Env) {
    env.hook.set_handler(|_, req| good(req));
    env.wait_configmap("p-cm", "child after recovery", |cm| {
        cm.data.as_ref().is_some_and(|d| d["ok"] == "yes")
    })
    .await;
    env.wait_status("p", "status after recovery", |s| s["healthy"] == true)
        .await;
}

/// Runs one fault scenario: `bad` answers every sync until the hook is fixed; the Event
/// message must contain `expected`.
async fn fault_then_recovery(
    bad: impl Fn(&Value) -> HookReply + Send + Sync + 'static,
    timeout: Option<&str>,
    expected: &str,
    hook_failure: bool,
) {
    let (mut env, times) = env_recording_calls(bad).await;
    start_with_timeout(&mut env, timeout).await;
    env.create_parent("p", json!({})).await;
    assert_sync_error_event(&env, expected, hook_failure).await;
    assert_backoff(&times, timeout).await;
    assert_repeats_counted(&env).await;
    assert_recovers(&env).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook_500_records_event_backs_off_and_recovers() {
    fault_then_recovery(
        |_| HookReply::status(500, "internal trouble"),
        None,
        "unsupported status code 500",
        true,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook_timeout_records_event_backs_off_and_recovers() {
    fault_then_recovery(
        |req| good(req).delayed(Duration::from_secs(2)),
        Some("200ms"),
        "no response within",
        true,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook_invalid_json_records_event_backs_off_and_recovers() {
    fault_then_recovery(
        |_| HookReply::raw("{\"children\": [oops"),
        None,
        "can't decode response",
        true,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undeclared_child_type_records_event_backs_off_and_recovers() {
    fault_then_recovery(
        |req| {
            let name = req["parent"]["metadata"]["name"]
                .as_str()
                .unwrap_or_default();
            HookReply::json(json!({"children": [{"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": format!("{name}-secret")}}]}))
        },
        None,
        "Secret.v1 is not a declared child resource",
        false,
    )
    .await;
}

/// The spec of the tests answered by [`good`]: generated selector, ConfigMap children in
/// place, the sync hook.
fn good_spec(env: &Env) -> Value {
    json!({
        "generateSelector": true,
        "childResources": [configmap_rule("InPlace")],
        "hooks": env.sync_hook(),
    })
}

/// An environment whose hook answers [`good`] and whose API server answers the next `count`
/// ConfigMap creates with `code`; None (`test` skipped) on a real cluster.
async fn env_failing_creates(test: &str, count: usize, code: u16) -> Option<Env> {
    let env = Env::new(TestCluster::start().await, parent_crd(), |_, req| good(req)).await;
    let control = env.cluster.control_or_skip(test)?;
    control.inject(metacontroller_testkit::Fault::status(
        Some("create"),
        Some("configmaps"),
        count,
        code,
    ));
    Some(env)
}

/// A failed child write (the API server answers 500 to creates) is a SyncError Event too;
/// the parent converges once the server recovers. Needs the embedded API server's faults.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_child_create_records_event_and_recovers() {
    let test = "failed_child_create_records_event_and_recovers";
    let Some(mut env) = env_failing_creates(test, 3, 500).await else {
        return;
    };
    env.start_with_events(good_spec(&env)).await;
    env.create_parent("p", json!({})).await;
    // Upstream's wording: "Sync error: can't reconcile children for <Kind> <ns>/<name>: ...".
    let prefix = format!(
        "Sync error: can't reconcile children for Parent {}/p: ",
        env.ns
    );
    eventually("SyncError event naming the failed create", || async {
        sync_errors(&env, "p").await.iter().any(|e| {
            let msg = e.message.as_deref().unwrap_or_default();
            msg.starts_with(&prefix) && msg.contains("create ConfigMap")
        })
    })
    .await;
    env.wait_configmap("p-cm", "child after the server recovers", |_| true)
        .await;
    env.wait_status("p", "status", |s| s["healthy"] == true)
        .await;
}

/// A 409 Conflict on a child write does not keep the parent's status from being written
/// (upstream writes the status after the children whatever their errors).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_conflict_still_writes_the_status() {
    let test = "child_conflict_still_writes_the_status";
    let Some(mut env) = env_failing_creates(test, 1_000_000, 409).await else {
        return;
    };
    env.start(good_spec(&env)).await;
    env.create_parent("p", json!({})).await;
    env.wait_status("p", "status despite the conflicting child create", |s| {
        s["healthy"] == true
    })
    .await;
    assert!(env.configmap("p-cm").await.is_none());
}

/// Children refused by validation (undeclared type, another namespace) are skipped, as
/// upstream: the valid child and the status are still written, a SyncError Event names the
/// refused ones, and the parent keeps being retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_children_are_skipped_and_the_rest_is_written() {
    let mut env = Env::new(TestCluster::start().await, parent_crd(), |_, req| {
        let name = req["parent"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default();
        HookReply::json(json!({
            "children": [
                {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": format!("{name}-s")}},
                {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": format!("{name}-other"), "namespace": "elsewhere"}},
                {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": format!("{name}-cm")}, "data": {"ok": "yes"}},
            ],
            "status": {"healthy": true},
        }))
    })
    .await;
    env.start_with_events(good_spec(&env)).await;
    env.create_parent("p", json!({})).await;
    env.wait_configmap("p-cm", "the valid child", |cm| {
        cm.data.as_ref().is_some_and(|d| d["ok"] == "yes")
    })
    .await;
    env.wait_status("p", "status", |s| s["healthy"] == true)
        .await;
    eventually("SyncError event naming both refused children", || async {
        sync_errors(&env, "p").await.iter().any(|e| {
            let msg = e.message.as_deref().unwrap_or_default();
            msg.contains("Secret.v1 is not a declared child resource")
                && msg.contains("\"elsewhere\"")
        })
    })
    .await;
    assert_retried_with_backoff(&env).await;
}

/// How long the retries of a failing sync are counted.
const RETRY_WINDOW: Duration = Duration::from_secs(3);
/// Syncs of the parent not caused by its failures, in the window: the watch events of its
/// own first writes (the valid child, the status) queue it at once, once each.
const EVENT_SYNCS: usize = 6;

/// The most syncs the queue's documented backoff ([`Backoff::default`]: 5 ms doubling per
/// failure) allows within `window` of a first failed sync at 0: that one, plus each retry
/// `k` due at `delay(0) + .. + delay(k - 1)`. Slowness only delays retries further.
fn most_syncs_with_backoff(window: Duration) -> usize {
    let backoff = Backoff::default();
    let mut due = Duration::ZERO;
    let mut syncs = 1;
    for failures in 0.. {
        due += backoff.delay(failures);
        if due > window {
            break;
        }
        syncs += 1;
    }
    syncs
}

/// The sync keeps failing (refused children): it is retried (more than one call), but with
/// growing delays, not in a loop: within [`RETRY_WINDOW`] of the first call, no more calls
/// than the backoff allows plus [`EVENT_SYNCS`]. A hot loop (a sync every few ms) makes
/// hundreds.
async fn assert_retried_with_backoff(env: &Env) {
    let times = env.hook.call_times("/sync");
    let first = *times.first().expect("the hook was called");
    eventually("retried after the failure", || async {
        env.hook.calls("/sync") >= 3
    })
    .await;
    // Waits out the window (an upper bound on calls needs the whole window).
    tokio::time::sleep_until((first + RETRY_WINDOW).into()).await;
    let in_window = env
        .hook
        .call_times("/sync")
        .iter()
        .filter(|t| **t <= first + RETRY_WINDOW)
        .count();
    let most = most_syncs_with_backoff(RETRY_WINDOW) + EVENT_SYNCS;
    assert!(
        (2..=most).contains(&in_window),
        "{in_window} hook calls within {RETRY_WINDOW:?} of the first; the backoff allows at \
         most {most}"
    );
    eprintln!("{in_window} hook calls within {RETRY_WINDOW:?} of the first (at most {most})");
}

/// A live parent of a controller with only a finalize hook: as upstream, the sync fails
/// (a SyncError Event, retried with backoff) instead of silently doing nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_parent_without_sync_hook_is_a_sync_error() {
    let mut env = Env::new(TestCluster::start().await, parent_crd(), |_, req| good(req)).await;
    env.start_with_events(json!({
        "generateSelector": true,
        "childResources": [configmap_rule("InPlace")],
        "hooks": {"finalize": {"webhook": {"url": env.hook.url("/finalize")}}},
    }))
    .await;
    env.create_parent("p", json!({})).await;
    eventually("SyncError event: no sync hook", || async {
        sync_errors(&env, "p").await.iter().any(|e| {
            e.message
                .as_deref()
                .unwrap_or_default()
                .contains("sync hook not defined")
        })
    })
    .await;
    assert_eq!(env.hook.calls("/finalize"), 0);
}
