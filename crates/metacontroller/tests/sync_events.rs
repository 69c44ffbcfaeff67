//! What `kubectl describe` tells about a parent: the real binary, default Event flags
//! (`--events-qps` one per 5 minutes, `--events-burst` 25 per object), real hook servers.
//!
//! * Three different mistakes then the fix: each error is an Event, the fix one
//!   `SyncRecovered`, and ordered by `lastTimestamp` (as kubectl does) the newest is last.
//! * A hundred failing syncs of one parent hide neither a new error nor a hook's Event
//!   (repeats only raise the count of their own Event).
//! * A hook flooding Events does not hold back the controller's `SyncError`.
//! * A hook using one of the controller's reasons gets `InvalidHookEvent` instead.
//! * An answer from the ETag cache (a 304) does not record its Events again.
//! * A DecoratorController's target recovers with `SyncRecovered` too.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Event;
use kube::api::{Patch, PatchParams};
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::{
    configmap_child_reply, create_object, events_about, unique_name, until_event,
    ControllerProcess, CrdBuilder, HookReply, HookServer, TestCluster,
};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(120);

/// `metacontroller run` with default flags for the controllers labelled `team=<label>`.
fn run(cluster: &TestCluster, label: &str) -> ControllerProcess {
    ControllerProcess::run_team(
        env!("CARGO_BIN_EXE_metacontroller"),
        cluster.kubeconfig_path(),
        label,
        &[],
    )
}

/// A CompositeController on `parent` calling `url`, and parent `p` in `ns`.
async fn controller_and_parent(
    cluster: &TestCluster,
    ns: &str,
    parent: &CrdBuilder,
    spec: Value,
) -> (ControllerProcess, kube::Api<kube::core::DynamicObject>) {
    let label = unique_name("team");
    let _: CompositeController = cluster
        .create_controller(&unique_name("sev"), &label, spec)
        .await;
    let process = run(cluster, &label);
    let parents = parent.api(cluster.client(), Some(ns));
    create_object(
        &parents,
        json!({"apiVersion": parent.api_version(), "kind": "Parent", "metadata": {"name": "p"},
               "spec": {"n": 1, "selector": {"matchLabels": {"app": "p"}}}}),
    )
    .await;
    (process, parents)
}

/// A child the API server refuses (its name is not a DNS subdomain), so the sync fails
/// with a message naming it.
fn refused_child(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
}

/// When an Event was last seen, as `kubectl describe` sorts them.
fn last_seen(event: &Event) -> Option<k8s_openapi::jiff::Timestamp> {
    event
        .last_timestamp
        .as_ref()
        .map(|t| t.0)
        .or_else(|| event.event_time.as_ref().map(|t| t.0))
}

/// `(reason, message, count)` of the Events on `p`, oldest first by [`last_seen`].
async fn described(cluster: &TestCluster, ns: &str) -> Vec<(String, String, i32, String)> {
    let mut events = events_about(cluster, ns, "p").await;
    events.sort_by_key(last_seen);
    events
        .iter()
        .map(|e| {
            (
                e.reason.clone().unwrap_or_default(),
                e.message.clone().unwrap_or_default(),
                e.count.unwrap_or(1),
                last_seen(e).map(|t| t.to_string()).unwrap_or_default(),
            )
        })
        .collect()
}

/// What the test asks the hook to do, and when it last answered: the hook moves on to a
/// new mistake only after its calls paused for longer than a second, because Event times
/// have one-second resolution (a user's mistakes are at least that far apart, and two
/// Events seen in the same second have no order in `kubectl describe`).
#[derive(Default)]
struct Script {
    wanted: AtomicUsize,
    phase: AtomicUsize,
    last_call: Mutex<Option<Instant>>,
}

impl Script {
    const PAUSE: Duration = Duration::from_millis(1500);

    /// The phase to answer in now.
    fn phase_now(&self) -> usize {
        let mut last = self.last_call.lock().unwrap();
        let paused = last.is_none_or(|t| t.elapsed() > Self::PAUSE);
        *last = Some(Instant::now());
        let wanted = self.wanted.load(Ordering::SeqCst);
        if paused && self.phase.load(Ordering::SeqCst) < wanted {
            self.phase.store(wanted, Ordering::SeqCst);
        }
        self.phase.load(Ordering::SeqCst)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_mistakes_then_the_fix_newest_last() {
    let (cluster, ns, parent) = TestCluster::start_with_parent("sevseq").await;
    let script = Arc::new(Script::default());
    let hook_script = script.clone();
    let hook = HookServer::start(move |_, request| match hook_script.phase_now() {
        0 => HookReply::status(500, "syntax error at line 3"),
        1 => HookReply::raw("{\"children\": [oops"),
        2 => HookReply::json(json!({"children": [refused_child("Bad_Name")]})),
        _ => {
            let mut reply = configmap_child_reply(request);
            // From the second change of the parent on, an Event per sync: a marker that
            // everything recorded before it was written.
            if let Some(n) = request["parent"]["spec"]["n"].as_i64().filter(|n| *n > 1) {
                reply["events"] =
                    json!([{"type": "Normal", "reason": "Observed", "message": format!("n={n}")}]);
            }
            HookReply::json(reply)
        }
    })
    .await;
    let (process, parents) = controller_and_parent(
        &cluster,
        &ns,
        &parent,
        parent.composite_spec(&hook.url("/sync")),
    )
    .await;
    let on_p = (ns.as_str(), "p");

    let mistakes = [
        "syntax error at line 3",
        "can't decode response",
        "Bad_Name",
    ];
    for (phase, needle) in mistakes.iter().enumerate() {
        script.wanted.store(phase, Ordering::SeqCst);
        until_event(&cluster, on_p, "SyncError", needle, WAIT).await;
    }
    script.wanted.store(3, Ordering::SeqCst);
    until_event(&cluster, on_p, "SyncRecovered", "Sync succeeded", WAIT).await;
    cluster
        .wait_for_configmap(&ns, "p-cm", &process, WAIT)
        .await;

    // Two more syncs that succeed: no second recovery. Events are written in the order
    // they are recorded, so once the marker of the last sync is there, a recovery
    // recorded by the sync before it would be too.
    for n in [2, 3] {
        parents
            .patch(
                "p",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"n": n}})),
            )
            .await
            .unwrap();
    }
    until_event(&cluster, on_p, "Observed", "n=3", WAIT).await;

    let events = described(&cluster, &ns).await;
    let context = format!(
        "Events oldest first: {events:#?}\nlogs:\n{}",
        process.logs()
    );
    let own: Vec<_> = events
        .iter()
        .filter(|(reason, ..)| reason == "SyncError" || reason == "SyncRecovered")
        .collect();
    assert_eq!(own.len(), 4, "{context}");
    for (event, needle) in own.iter().zip(mistakes) {
        assert_eq!(event.0, "SyncError", "{context}");
        assert!(event.1.contains(needle), "{needle}: {context}");
    }
    assert_eq!(own[3].0, "SyncRecovered", "{context}");
    assert_eq!(own[3].2, 1, "one recovery: {context}");
    // Newest last without ties, as `kubectl describe` would show it.
    for pair in own.windows(2) {
        assert!(pair[0].3 < pair[1].3, "{context}");
    }
}

/// A hook whose children the API server refuses with `bad` in the message, asking for
/// another sync 20 ms later (which stands when the sync fails), with `events`.
fn failing_fast(bad: &str, events: Value) -> HookReply {
    HookReply::json(json!({
        "children": [refused_child(bad)],
        "resyncAfterSeconds": 0.02,
        "events": events,
    }))
}

/// Waits until the hook was called `calls` times.
async fn until_calls(hook: &HookServer, calls: usize, process: &ControllerProcess) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while hook.calls("/sync") < calls {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {} hook calls:\n{}",
            hook.calls("/sync"),
            process.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_failing_syncs_hide_neither_a_new_error_nor_a_hook_event() {
    let (cluster, ns, parent) = TestCluster::start_with_parent("sevflood").await;
    let hook = HookServer::start(|_, _| failing_fast("First_Bad", json!([]))).await;
    let (process, _parents) = controller_and_parent(
        &cluster,
        &ns,
        &parent,
        parent.composite_spec(&hook.url("/sync")),
    )
    .await;
    let on_p = (ns.as_str(), "p");
    until_calls(&hook, 100, &process).await;
    let first = until_event(&cluster, on_p, "SyncError", "First_Bad", WAIT).await;
    println!("after 100 failing syncs: count {:?}", first.count);

    hook.set_handler(|_, _| {
        failing_fast(
            "Second_Bad",
            json!([{"type": "Normal", "reason": "Hello", "message": "from the hook"}]),
        )
    });
    until_event(&cluster, on_p, "SyncError", "Second_Bad", WAIT).await;
    until_event(&cluster, on_p, "Hello", "from the hook", WAIT).await;
    // The first error is still one Event, counted.
    let firsts: Vec<_> = events_about(&cluster, &ns, "p")
        .await
        .into_iter()
        .filter(|e| {
            e.message
                .as_deref()
                .is_some_and(|m| m.contains("First_Bad"))
        })
        .collect();
    assert_eq!(firsts.len(), 1, "{firsts:#?}");
    assert!(firsts[0].count.unwrap_or(0) > 1, "{firsts:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_flooding_events_does_not_hold_back_the_controllers() {
    let (cluster, ns, parent) = TestCluster::start_with_parent("sevhook").await;
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    // Ten new Events per sync, a sync every 20 ms: the hook's budget is gone at once.
    let hook = HookServer::start(move |_, request| {
        let n = counted.fetch_add(1, Ordering::SeqCst);
        let mut reply = configmap_child_reply(request);
        reply["resyncAfterSeconds"] = json!(0.02);
        reply["events"] = (0..10)
            .map(|i| json!({"type": "Normal", "reason": format!("Tick{i}"), "message": format!("tick {n}")}))
            .collect();
        HookReply::json(reply)
    })
    .await;
    let (process, _parents) = controller_and_parent(
        &cluster,
        &ns,
        &parent,
        parent.composite_spec(&hook.url("/sync")),
    )
    .await;
    until_calls(&hook, 50, &process).await;
    hook.set_handler(|_, _| HookReply::status(500, "the hook broke"));
    let error = until_event(
        &cluster,
        (ns.as_str(), "p"),
        "SyncError",
        "the hook broke",
        WAIT,
    )
    .await;
    println!(
        "SyncError after {} flooding calls: {:?}",
        calls.load(Ordering::SeqCst),
        error.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_cannot_use_the_controllers_reasons() {
    let (cluster, ns, parent) = TestCluster::start_with_parent("sevres").await;
    let hook = HookServer::start(|_, request| {
        let mut reply = configmap_child_reply(request);
        reply["events"] = json!([
            {"type": "Warning", "reason": "SyncError", "message": "forged failure"},
            {"type": "Normal", "reason": "SyncRecovered", "message": "forged recovery"},
            {"type": "Normal", "reason": "Fine", "message": "after the forged ones"},
        ]);
        HookReply::json(reply)
    })
    .await;
    let (process, _parents) = controller_and_parent(
        &cluster,
        &ns,
        &parent,
        parent.composite_spec(&hook.url("/sync")),
    )
    .await;
    let on_p = (ns.as_str(), "p");
    for needle in [
        "sync hook event 0 skipped: reason \"SyncError\" is reserved",
        "sync hook event 1 skipped: reason \"SyncRecovered\" is reserved",
    ] {
        until_event(&cluster, on_p, "InvalidHookEvent", needle, WAIT).await;
    }
    // Recorded in the answer's order: once `Fine` is written, so would the forged be.
    until_event(&cluster, on_p, "Fine", "after the forged ones", WAIT).await;
    let events = described(&cluster, &ns).await;
    assert!(
        events
            .iter()
            .all(|(reason, ..)| reason != "SyncError" && reason != "SyncRecovered"),
        "{events:#?}\nlogs:\n{}",
        process.logs()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etag_304_does_not_record_the_events_again() {
    let (cluster, ns, parent) = TestCluster::start_with_parent("sevetag").await;
    let answered = Arc::new(AtomicUsize::new(0));
    let counter = answered.clone();
    // The first answer carries an ETag; every later one is 304 Not Modified (the
    // controller accepts a 304 only for the ETag it sent in If-None-Match).
    let hook = HookServer::start(move |_, request| {
        if counter.fetch_add(1, Ordering::SeqCst) > 0 {
            return HookReply::status(304, "");
        }
        let mut reply = configmap_child_reply(request);
        reply["events"] = json!([{"type": "Normal", "reason": "Once", "message": "said once"}]);
        HookReply::json(reply).header("ETag", "\"v1\"")
    })
    .await;
    let mut spec = parent.composite_spec(&hook.url("/sync"));
    spec["hooks"]["sync"]["webhook"]["etag"] = json!({"enabled": true});
    let (process, parents) = controller_and_parent(&cluster, &ns, &parent, spec).await;
    let on_p = (ns.as_str(), "p");
    until_event(&cluster, on_p, "Once", "said once", WAIT).await;

    // Two more syncs, both answered 304 from the cache.
    for n in [2, 3] {
        let before = hook.calls("/sync");
        parents
            .patch(
                "p",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"n": n}})),
            )
            .await
            .unwrap();
        until_calls(&hook, before + 1, &process).await;
    }
    // A fresh answer with another Event: once it is written, Events the 304 answers
    // recorded before it would be too.
    hook.set_handler(|_, request| {
        let mut reply = configmap_child_reply(request);
        reply["events"] = json!([{"type": "Normal", "reason": "Fresh", "message": "a new answer"}]);
        HookReply::json(reply).header("ETag", "\"v2\"")
    });
    parents
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"n": 4}})),
        )
        .await
        .unwrap();
    until_event(&cluster, on_p, "Fresh", "a new answer", WAIT).await;
    let events = described(&cluster, &ns).await;
    let once: Vec<_> = events.iter().filter(|e| e.0 == "Once").collect();
    assert_eq!(once.len(), 1, "{events:#?}");
    assert_eq!(once[0].2, 1, "{events:#?}\nlogs:\n{}", process.logs());
    assert!(!events.iter().any(|e| e.0 == "SyncError"), "{events:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decorator_target_that_recovers_says_so() {
    let (cluster, ns, target) = TestCluster::start_with_parent("sevdec").await;
    let hook = HookServer::start(|_, _| HookReply::status(500, "decorator broke")).await;
    let label = unique_name("team");
    let _: metacontroller_api::decorator::DecoratorController = cluster
        .create_controller(
            &unique_name("sevdec"),
            &label,
            json!({
                "resources": [{"apiVersion": target.api_version(), "resource": target.plural()}],
                "hooks": {"sync": {"webhook": {"url": hook.url("/sync")}}},
            }),
        )
        .await;
    let process = run(&cluster, &label);
    create_object(
        &target.api(cluster.client(), Some(&ns)),
        json!({"apiVersion": target.api_version(), "kind": "Parent", "metadata": {"name": "p"},
               "spec": {"selector": {"matchLabels": {"app": "p"}}}}),
    )
    .await;
    let on_p = (ns.as_str(), "p");
    until_event(&cluster, on_p, "SyncError", "decorator broke", WAIT).await;
    hook.set_handler(|_, _| HookReply::json(json!({"labels": {"decorated": "yes"}})));
    until_event(&cluster, on_p, "SyncRecovered", "Sync succeeded", WAIT).await;
    // Within one second the sort keeps the server's list order (Event names carry the
    // creation time), so the recovery is last.
    let events = described(&cluster, &ns).await;
    let newest = events.last().map(|e| e.0.as_str());
    assert_eq!(
        newest,
        Some("SyncRecovered"),
        "{events:#?}\nlogs:\n{}",
        process.logs()
    );
}
