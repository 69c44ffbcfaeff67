//! Events from hooks (an extension beyond upstream): the real binary records the `events` a
//! sync hook returns on the parent (CompositeController, hook v2, strict decoding) and on
//! the target (DecoratorController, hook v1), aggregates repeats into one Event whose
//! `count` grows, skips an invalid entry with an `InvalidHookEvent` Warning without
//! failing the sync, and rate limits their writes per object (`--events-burst`) without
//! losing what they say.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use kube::api::{Patch, PatchParams};
use metacontroller_api::composite::CompositeController;
use metacontroller_api::decorator::DecoratorController;
use metacontroller_testkit::{
    configmap_child_reply, create_object, events_about, eventually_within, unique_name,
    ApiRecorder, ControllerProcess, CrdBuilder, HookReply, HookServer, TestCluster,
};
use serde_json::{json, Value};

/// `metacontroller run` for the controllers labelled `team=<label>`, plus `extra` flags.
fn run(cluster: &TestCluster, label: &str, extra: &[&str]) -> ControllerProcess {
    ControllerProcess::run_team(
        env!("CARGO_BIN_EXE_metacontroller"),
        cluster.kubeconfig_path(),
        label,
        extra,
    )
}

/// The Events on `name` in `ns` by reason: `(type, count, message)` of each Event object.
async fn by_reason(
    cluster: &TestCluster,
    ns: &str,
    name: &str,
) -> BTreeMap<String, Vec<(String, i32, String)>> {
    let mut map: BTreeMap<String, Vec<(String, i32, String)>> = BTreeMap::new();
    for Event {
        reason,
        type_,
        count,
        message,
        ..
    } in events_about(cluster, ns, name).await
    {
        map.entry(reason.unwrap_or_default()).or_default().push((
            type_.unwrap_or_default(),
            count.unwrap_or(1),
            message.unwrap_or_default(),
        ));
    }
    map
}

/// The hook: `/sync` (composite) answers a ConfigMap child and two Events plus an invalid
/// one; `/decorate` (decorator) labels the target and answers two Events.
fn answer(path: &str, request: &Value) -> HookReply {
    if path == "/decorate" {
        let name = request["object"]["metadata"]["name"].as_str().unwrap_or("");
        return HookReply::json(json!({
            "labels": {"decorated": "yes"},
            "events": [
                {"type": "Normal", "reason": "Decorated", "message": format!("decorated {name}")},
                {"type": "Warning", "reason": "Careful", "message": "mind the gap"},
            ],
        }));
    }
    let mut reply = configmap_child_reply(request);
    reply["events"] = json!([
        {"type": "Normal", "reason": "Synced", "message": "all children in place"},
        {"type": "Warning", "reason": "QuotaLow", "message": "less than 10% left"},
        {"type": "Info", "reason": "NotAType", "message": "skipped"},
    ]);
    HookReply::json(reply)
}

fn decorator_spec(target: &CrdBuilder, url: &str) -> Value {
    json!({
        "resources": [{"apiVersion": target.api_version(), "resource": target.plural()}],
        "hooks": {"sync": {"version": "v1", "webhook": {"url": url}}},
    })
}

/// Waits (60 s) until the Events on `name` satisfy `check`; panics with them and the
/// controller's logs otherwise.
async fn wait_events(
    cluster: &TestCluster,
    (ns, name): (&str, &str),
    what: &str,
    process: &ControllerProcess,
    check: impl Fn(&BTreeMap<String, Vec<(String, i32, String)>>) -> bool,
) -> BTreeMap<String, Vec<(String, i32, String)>> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let events = by_reason(cluster, ns, name).await;
        if check(&events) {
            return events;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: Events on {name}: {events:#?}\nlogs:\n{}",
            process.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Whether `reason` has exactly one Event object, of `type_`, counted at least `count`.
fn one_event(
    events: &BTreeMap<String, Vec<(String, i32, String)>>,
    reason: &str,
    type_: &str,
    count: i32,
) -> bool {
    events
        .get(reason)
        .is_some_and(|e| e.len() == 1 && e[0].0 == type_ && e[0].1 >= count)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook_events_land_on_parent_and_target_and_repeats_count() {
    let (cluster, ns, parent) = TestCluster::start_with_parent("hkev").await;
    let target = cluster
        .install_unique_crd("hkevt", "Target", "targets")
        .await;
    let hook = HookServer::start(answer).await;
    let mut spec = parent.composite_spec(&hook.url("/sync"));
    spec["hooks"]["sync"]["version"] = json!("v2");
    spec["hooks"]["sync"]["webhook"]["responseUnMarshallMode"] = json!("strict");
    let label = unique_name("team");
    let _: CompositeController = cluster
        .create_controller(&unique_name("hkev"), &label, spec)
        .await;
    let _: DecoratorController = cluster
        .create_controller(
            &unique_name("hkevd"),
            &label,
            decorator_spec(&target, &hook.url("/decorate")),
        )
        .await;
    let process = run(&cluster, &label, &[]);

    let parents = parent.api(cluster.client(), Some(&ns));
    let targets = target.api(cluster.client(), Some(&ns));
    for (api, kind, api_version, name) in [
        (&parents, "Parent", parent.api_version(), "p"),
        (&targets, "Target", target.api_version(), "t"),
    ] {
        create_object(
            api,
            json!({"apiVersion": api_version, "kind": kind,
                   "metadata": {"name": name},
                   "spec": {"n": 1, "selector": {"matchLabels": {"app": name}}}}),
        )
        .await;
    }

    // First sync: both Events on each object, the invalid entry reported, no SyncError.
    let on_parent = wait_events(&cluster, (&ns, "p"), "parent Events", &process, |e| {
        one_event(e, "Synced", "Normal", 1)
            && one_event(e, "QuotaLow", "Warning", 1)
            && one_event(e, "InvalidHookEvent", "Warning", 1)
    })
    .await;
    assert!(on_parent["InvalidHookEvent"][0]
        .2
        .starts_with("sync hook event 2 skipped: type \"Info\""));
    assert_eq!(on_parent["Synced"][0].2, "all children in place");
    wait_events(&cluster, (&ns, "t"), "target Events", &process, |e| {
        one_event(e, "Decorated", "Normal", 1) && one_event(e, "Careful", "Warning", 1)
    })
    .await;

    // Another sync of each: the same Events again are the same Event objects, counted.
    let change = Patch::Merge(json!({"spec": {"n": 2}}));
    for (api, name) in [(&parents, "p"), (&targets, "t")] {
        api.patch(name, &PatchParams::default(), &change)
            .await
            .unwrap();
    }
    let on_parent = wait_events(&cluster, (&ns, "p"), "parent counts", &process, |e| {
        one_event(e, "Synced", "Normal", 2) && one_event(e, "QuotaLow", "Warning", 2)
    })
    .await;
    let on_target = wait_events(&cluster, (&ns, "t"), "target counts", &process, |e| {
        one_event(e, "Decorated", "Normal", 2) && one_event(e, "Careful", "Warning", 2)
    })
    .await;
    for events in [&on_parent, &on_target] {
        assert!(!events.contains_key("SyncError"), "{events:#?}");
    }
    // The syncs went on: the child exists and the target is labelled.
    cluster
        .wait_for_configmap(&ns, "p-cm", &process, Duration::from_secs(30))
        .await;
    eventually_within("target labelled", Duration::from_secs(30), || async {
        targets.get("t").await.is_ok_and(|t| {
            t.metadata
                .labels
                .unwrap_or_default()
                .get("decorated")
                .map(String::as_str)
                == Some("yes")
        })
    })
    .await;
}

/// The burst the rate-limit test runs with; its refill (`--events-qps 0.0001`, one token
/// per 10 000 s) cannot add a token while it runs.
const BURST: i32 = 25;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook_events_are_rate_limited_per_object() {
    let (cluster, ns, parent) = TestCluster::start_with_parent("hkrl").await;
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    // Every sync asks for another sync 50 ms later and one Event with a new message.
    let hook = HookServer::start(move |_, _| {
        let n = counted.fetch_add(1, Ordering::SeqCst);
        HookReply::json(json!({
            "status": {"ok": true},
            "resyncAfterSeconds": 0.05,
            "events": [{"type": "Normal", "reason": "Tick", "message": format!("tick {n}")}],
        }))
    })
    .await;
    let label = unique_name("team");
    let _: CompositeController = cluster
        .create_controller(
            &unique_name("hkrl"),
            &label,
            parent.composite_spec(&hook.url("/sync")),
        )
        .await;
    let burst = BURST.to_string();
    // The process talks through a recording proxy: its Event writes are counted.
    let proxy = ApiRecorder::start(cluster.client());
    let mut process = ControllerProcess::run_team(
        env!("CARGO_BIN_EXE_metacontroller"),
        proxy.kubeconfig_path(),
        &label,
        &["--events-burst", &burst, "--events-qps", "0.0001"],
    );
    let parents = parent.api(cluster.client(), Some(&ns));
    create_object(
        &parents,
        json!({"apiVersion": parent.api_version(), "kind": "Parent", "metadata": {"name": "p"},
               "spec": {"selector": {"matchLabels": {"app": "p"}}}}),
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while calls.load(Ordering::SeqCst) < 100 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {} syncs in 120 s:\n{}",
            calls.load(Ordering::SeqCst),
            process.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A clean shutdown writes every Event still queued, and what the rate limit held
    // back: afterwards the counts are final.
    process.terminate();
    let status = process.wait_exit(Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}\n{}",
        process.logs()
    );
    let synced = calls.load(Ordering::SeqCst);

    let events = by_reason(&cluster, &ns, "p").await;
    check_ticks(&events, synced, &proxy);
}

/// After `synced` syncs each asking for one Tick Event: every one counted, on ten Event
/// objects, written in paced requests (`proxy` saw them).
fn check_ticks(
    events: &BTreeMap<String, Vec<(String, i32, String)>>,
    synced: usize,
    proxy: &ApiRecorder,
) {
    let ticks = events.get("Tick").cloned().unwrap_or_default();
    let seen: i32 = ticks.iter().map(|(_, count, _)| count).sum();
    let writes = proxy
        .writes()
        .writes()
        .into_iter()
        .filter(|w| w.resource == "events" && w.accepted())
        .count();
    println!(
        "{synced} syncs asked for {synced} Tick Events; {} Event objects counting {seen}, written in {writes} requests",
        ticks.len()
    );
    // Nothing the hook said is lost: the counts add up to every Event it asked for.
    assert_eq!(seen as usize, synced, "{events:#?}");
    // Nine distinct messages, then one combined Event for the further similar ones,
    // carrying the newest message.
    assert_eq!(ticks.len(), 10, "{ticks:#?}");
    let combined: Vec<_> = ticks
        .iter()
        .filter(|(_, _, m)| m.starts_with("(combined from similar events): "))
        .collect();
    assert_eq!(combined.len(), 1, "{ticks:#?}");
    assert_eq!(
        combined[0].2,
        format!("(combined from similar events): tick {}", synced - 1)
    );
    // The writes were paced: the burst while running, then at most one per Event object
    // at shutdown, however many were asked for.
    assert!(
        writes <= BURST as usize + ticks.len(),
        "{writes} Event writes"
    );
    assert!(!events.contains_key("SyncError"), "{events:#?}");
}
