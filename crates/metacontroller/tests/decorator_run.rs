//! The real binary runs DecoratorControllers: only those matching
//! `--target-label-selector` are started, a spec change restarts the reconciler with the new
//! spec, and deleting the controller object stops it.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::DynamicObject;
use metacontroller_api::decorator::DecoratorController;
use metacontroller_testkit::{
    create_object, events_about, eventually_within, unique_name, ControllerProcess, CrdBuilder,
    HookReply, HookServer, TestCluster,
};
use serde_json::{json, Value};

/// Whether an Event with `reason` was recorded on the (cluster-scoped, so in `default`)
/// controller object `name`.
async fn has_event(cluster: &TestCluster, name: &str, reason: &str) -> bool {
    events_about(cluster, "default", name)
        .await
        .iter()
        .any(|e| e.reason.as_deref() == Some(reason))
}

fn decorator(name: &str, labels: Value, target: &CrdBuilder, url: &str) -> DecoratorController {
    serde_json::from_value(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "resources": [{"apiVersion": target.api_version(), "resource": target.plural()}],
            "attachments": [{"apiVersion": "v1", "resource": "configmaps"}],
            "hooks": {"sync": {"webhook": {"url": url}}},
        }
    }))
    .unwrap()
}

/// Whether target `name` carries the label `seen-<suffix>` (it was decorated through the
/// hook path `/<suffix>`).
async fn labelled(targets: &Api<DynamicObject>, name: &str, suffix: &str) -> bool {
    targets.get(name).await.is_ok_and(|t| {
        t.metadata
            .labels
            .unwrap_or_default()
            .contains_key(&format!("seen-{suffix}"))
    })
}

/// Three DecoratorControllers over one target kind and the binary running those labelled
/// `team=<label>`: `selected` (hook path `/one`), `witness` (`/witness`), and `other`, outside
/// the selector (`/other`).
struct Decorators {
    ns: String,
    target: CrdBuilder,
    hook: HookServer,
    dcs: Api<DecoratorController>,
    selected: String,
    _process: ControllerProcess,
}

impl Decorators {
    async fn start(cluster: &TestCluster) -> Self {
        cluster.install_metacontroller_crds().await;
        let ns = cluster.create_namespace("decrun").await;
        let target = cluster
            .install_unique_crd("decrun", "Target", "targets")
            .await;
        // Labels the target `seen-<path>` and attaches ConfigMap `<target>-<path>`.
        let hook = HookServer::start(|path, req| {
            let name = req["object"]["metadata"]["name"]
                .as_str()
                .unwrap_or_default();
            let suffix = path.trim_start_matches('/');
            HookReply::json(json!({
                "labels": {format!("seen-{suffix}"): "yes"},
                "attachments": [{"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": format!("{name}-{suffix}")}}],
            }))
        })
        .await;
        let label = unique_name("team");
        let selected = unique_name("selected");
        let dcs = Api::<DecoratorController>::all(cluster.client());
        // A second selected decorator on the same targets: once it has decorated a target,
        // the process has handled that target's events (the positive signal before checking
        // that a stopped controller did nothing).
        let witness = unique_name("witness");
        let other = unique_name("other");
        for (name, team, path) in [
            (&selected, label.as_str(), "/one"),
            (&witness, label.as_str(), "/witness"),
            (&other, "nobody", "/other"),
        ] {
            let dc = decorator(name, json!({"team": team}), &target, &hook.url(path));
            dcs.create(&PostParams::default(), &dc).await.unwrap();
        }
        let selector = format!("team={label}");
        let _process = ControllerProcess::run(
            env!("CARGO_BIN_EXE_metacontroller"),
            cluster.kubeconfig_path(),
            &[
                "--discovery-interval",
                "500ms",
                "--target-label-selector",
                &selector,
            ],
        );
        Decorators {
            ns,
            target,
            hook,
            dcs,
            selected,
            _process,
        }
    }

    /// Creates target `name` (empty spec).
    async fn create_target(&self, targets: &Api<DynamicObject>, name: &str) {
        create_object(
            targets,
            json!({
                "apiVersion": self.target.api_version(), "kind": "Target",
                "metadata": {"name": name}, "spec": {}
            }),
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_runs_selected_decorators_restarts_on_change_and_stops_on_delete() {
    let cluster = TestCluster::start().await;
    let d = Decorators::start(&cluster).await;
    let targets = d.target.api(cluster.client(), Some(&d.ns));
    let cms: Api<ConfigMap> = Api::namespaced(cluster.client(), &d.ns);
    d.create_target(&targets, "t1").await;
    eventually_within(
        "t1 decorated by the selected controller",
        Duration::from_secs(60),
        || async {
            cms.get_opt("t1-one").await.unwrap().is_some() && labelled(&targets, "t1", "one").await
        },
    )
    .await;
    assert_eq!(
        d.hook.calls("/other"),
        0,
        "a controller outside the selector ran"
    );

    // A spec change restarts the reconciler with the new hook.
    let patch = json!({"spec": {"hooks": {"sync": {"webhook": {"url": d.hook.url("/two")}}}}});
    d.dcs
        .patch(&d.selected, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    eventually_within(
        "t1 decorated by the new spec",
        Duration::from_secs(60),
        || async { cms.get_opt("t1-two").await.unwrap().is_some() },
    )
    .await;

    // Deleted: the reconciler is stopped (Stopped Event) and new targets are no longer
    // decorated by it, while the witness still decorates them.
    d.dcs
        .delete(&d.selected, &Default::default())
        .await
        .unwrap();
    eventually_within("Stopped Event", Duration::from_secs(60), || {
        has_event(&cluster, &d.selected, "Stopped")
    })
    .await;
    d.create_target(&targets, "t2").await;
    eventually_within(
        "t2 decorated by the witness",
        Duration::from_secs(60),
        || labelled(&targets, "t2", "witness"),
    )
    .await;
    assert!(cms.get_opt("t2-two").await.unwrap().is_none());
    // A sync of t1 that was in flight when the controller stopped may still reach the hook
    // server after the Stopped Event (it was sent before); a target created afterwards must
    // never reach the stopped controller's hook.
    let synced_t2 = d
        .hook
        .all_calls()
        .iter()
        .any(|c| c.path == "/two" && c.body["object"]["metadata"]["name"] == "t2");
    assert!(!synced_t2, "a stopped controller synced a new target");
}
