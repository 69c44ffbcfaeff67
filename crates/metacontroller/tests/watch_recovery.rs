//! The binary across watch outages and cache flushes (embedded API server only: these tests
//! break watches, forget the event history and count requests).
//!
//! - A CompositeController deleted while the controller watch is down (the next watch gets
//!   410 Gone and relists) is stopped: Stopping/Stopped Events, and its new parents are not
//!   synced.
//! - `--cache-flush-interval` resyncs every parent from the cache (hook calls) without
//!   listing anything from the API server.

use std::time::Duration;

use kube::api::{Api, DeleteParams, PostParams};
use kube::core::DynamicObject;
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::replicas::run_args;
use metacontroller_testkit::{
    create_object, events_about, eventually_within, unique_name, Control, ControllerProcess,
    CrdBuilder, Fault, HookReply, HookServer, TestCluster,
};
use serde_json::json;

fn controller(
    name: &str,
    label: &str,
    parent: &CrdBuilder,
    selector: serde_json::Value,
    url: String,
) -> CompositeController {
    serde_json::from_value(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": name, "labels": {"team": label}},
        "spec": {
            "generateSelector": true,
            "parentResource": {"apiVersion": parent.api_version(), "resource": parent.plural(),
                               "labelSelector": selector},
            "hooks": {"sync": {"webhook": {"url": url}}},
        }
    }))
    .unwrap()
}

/// An embedded API server with the Metacontroller CRDs, a namespace, a parent kind and a
/// hook answering `status.ok`, all named after `prefix`.
struct Embedded {
    cluster: TestCluster,
    control: Control,
    ns: String,
    hook: HookServer,
    parent: CrdBuilder,
    label: String,
}

impl Embedded {
    /// `None` (the test skips, saying it `needs`) on a real cluster.
    async fn start(prefix: &str, needs: &str) -> Option<Self> {
        let cluster = TestCluster::start().await;
        let Some(control) = cluster.control() else {
            eprintln!("skipped: needs the embedded API server ({needs})");
            return None;
        };
        cluster.install_metacontroller_crds().await;
        let ns = cluster.create_namespace(prefix).await;
        let hook = HookServer::start(|_, _| HookReply::json(json!({"status": {"ok": true}}))).await;
        let parent = cluster.install_parent_crd(prefix).await;
        Some(Embedded {
            cluster,
            control,
            ns,
            hook,
            parent,
            label: unique_name("team"),
        })
    }

    /// Creates a CompositeController `name` for the parents labelled with `selector`,
    /// calling the hook at `path`.
    async fn create_controller(&self, name: &str, selector: serde_json::Value, path: &str) {
        let cc = controller(
            name,
            &self.label,
            &self.parent,
            selector,
            self.hook.url(path),
        );
        Api::<CompositeController>::all(self.cluster.client())
            .create(&PostParams::default(), &cc)
            .await
            .unwrap();
    }

    /// The binary for this setup's controllers, with `extra` flags.
    fn start_binary(&self, extra: &[&str]) -> ControllerProcess {
        let mut args = run_args(self.cluster.kubeconfig_path(), &self.label);
        args.extend(extra.iter().map(|s| s.to_string()));
        ControllerProcess::start(env!("CARGO_BIN_EXE_metacontroller"), args)
    }

    /// The parents in the test's namespace.
    fn parents(&self) -> Api<DynamicObject> {
        self.parent.api(self.cluster.client(), Some(&self.ns))
    }

    /// Creates parent `name` labelled `which: <which>`.
    async fn create_parent(&self, name: &str, which: &str) {
        let p = json!({
            "apiVersion": self.parent.api_version(), "kind": "Parent",
            "metadata": {"name": name, "labels": {"which": which}}, "spec": {}
        });
        create_object(&self.parents(), p).await;
    }

    /// The reasons of the Events about controller `name` (in `default`).
    async fn reasons(&self, name: &str) -> Vec<String> {
        events_about(&self.cluster, "default", name)
            .await
            .into_iter()
            .filter_map(|e| e.reason)
            .collect()
    }

    /// Waits (30 s) until the hook got a call on `path` for parent `parent`.
    async fn wait_synced(&self, what: &str, path: &str, parent: &str) {
        eventually_within(what, Duration::from_secs(30), || async {
            parent_calls(&self.hook, path, parent) > 0
        })
        .await;
    }
}

fn parent_calls(hook: &HookServer, path: &str, parent: &str) -> usize {
    hook.requests(path)
        .iter()
        .filter(|r| r["parent"]["metadata"]["name"] == parent)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_deleted_while_the_watch_is_down_is_stopped_after_the_relist() {
    let Some(setup) = Embedded::start("relist", "fault injection").await else {
        return;
    };
    // `doomed` is deleted during the outage; `witness` (same parent informer, other
    // parents) proves the process handled the parent events that follow.
    let doomed = unique_name("doomed");
    let witness = unique_name("witness");
    for (name, which, path) in [(&doomed, "one", "/one"), (&witness, "two", "/two")] {
        setup
            .create_controller(name, json!({"matchLabels": {"which": which}}), path)
            .await;
    }
    let _process = setup.start_binary(&[]);
    setup.create_parent("before", "one").await;
    setup
        .wait_synced("doomed syncs its parent", "/one", "before")
        .await;

    // Watches of controller objects fail until the history is gone, so the deletion is
    // only learnt from a relist (410 Gone → list).
    let control = &setup.control;
    control.inject(Fault::status(
        Some("watch"),
        Some("compositecontrollers"),
        10_000,
        500,
    ));
    control.close_watches();
    Api::<CompositeController>::all(setup.cluster.client())
        .delete(&doomed, &DeleteParams::default())
        .await
        .unwrap();
    control.compact_history();
    control.clear_faults();

    eventually_within(
        "Stopped Event for the deleted controller",
        Duration::from_secs(30),
        || async { setup.reasons(&doomed).await.iter().any(|r| r == "Stopped") },
    )
    .await;
    let reasons = setup.reasons(&doomed).await;
    assert!(reasons.iter().any(|r| r == "Stopping"), "{reasons:?}");

    setup.create_parent("after", "one").await;
    setup.create_parent("seen", "two").await;
    // Positive signal: the witness synced the parent created after ours.
    setup
        .wait_synced("witness syncs its parent", "/two", "seen")
        .await;
    assert_eq!(
        parent_calls(&setup.hook, "/one", "after"),
        0,
        "the deleted controller still syncs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_flush_resyncs_parents_from_the_cache_without_listing() {
    let Some(setup) = Embedded::start("flush", "request counts").await else {
        return;
    };
    setup
        .create_controller(&unique_name("flush"), json!({}), "/sync")
        .await;
    let _process = setup.start_binary(&["--cache-flush-interval=2s"]);
    setup.create_parent("p", "any").await;
    let parents = setup.parents();
    eventually_within("parent status", Duration::from_secs(30), || async {
        parents
            .get("p")
            .await
            .is_ok_and(|p| p.data["status"]["ok"] == true)
    })
    .await;

    let (control, hook) = (&setup.control, &setup.hook);
    control.reset_counts();
    let before = parent_calls(hook, "/sync", "p");
    // Three flush intervals: at least two resyncs of an unchanged parent.
    eventually_within(
        "parent resynced by the cache flush",
        Duration::from_secs(10),
        || async { parent_calls(hook, "/sync", "p") >= before + 2 },
    )
    .await;
    let lists: Vec<_> = control
        .request_counts()
        .into_iter()
        .filter(|((verb, _), n)| verb == "list" && *n > 0)
        .collect();
    assert!(
        lists.is_empty(),
        "a cache flush listed from the API server: {lists:?}"
    );
    assert_eq!(
        control.requests("watch", setup.parent.plural()),
        0,
        "the parent watch was restarted"
    );
}
