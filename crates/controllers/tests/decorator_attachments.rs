//! DecoratorController attachments: two decorators attaching the same type to the same
//! targets each keep their own objects; built-in resources can be decorated (a Service per
//! labelled Pod); attachment update strategies.

mod decorator_support;

use std::time::Duration;

use decorator_support::{
    object, sync_barrier, sync_decorator, target_name, wait_for, wait_until, Env,
};
use metacontroller_api::DECORATOR_CONTROLLER_ANNOTATION;
use metacontroller_controllers::decorator::DecoratorHandle;
use metacontroller_testkit::{eventually, CrdBuilder, HookReply, HookServer};
use serde_json::{json, Value};

fn configmap(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

/// The answer attaching ConfigMap `<target>-<suffix>` that carries the target's
/// `spec.value`.
fn value_attachment(req: &Value, suffix: &str) -> HookReply {
    let name = target_name(req);
    let value = req["object"]["spec"]["value"].clone();
    HookReply::json(
        json!({"attachments": [configmap(&format!("{name}-{suffix}"), json!({"value": value}))]}),
    )
}

/// Target `t` of `target` with `spec.value: "1"`.
fn valued_target(target: &CrdBuilder) -> Value {
    let mut obj = object(target, "t", json!({}));
    obj["spec"] = json!({"value": "1"});
    obj
}

/// Starts decorator `dc-<suffix>` over `target`, its sync hook at `hook`'s `/<suffix>`,
/// with the spec fields of `extra`.
async fn start_suffixed(
    env: &Env,
    target: &CrdBuilder,
    hook: &HookServer,
    suffix: &str,
    extra: Value,
) -> DecoratorHandle {
    let url = hook.url(&format!("/{suffix}"));
    env.start_decorator(sync_decorator(&format!("dc-{suffix}"), target, &url, extra))
        .await
}

/// Each decorator attaches `<target>-<suffix>` ConfigMaps. Each sees only its own
/// attachment in requests and neither deletes the other's, through many resyncs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_decorators_on_the_same_target_type_keep_their_own_attachments() {
    let env = Env::start("dec-two").await;
    let target = env.crd("Shared").await;
    let hook = HookServer::start(|path, req| {
        let name = target_name(req);
        let suffix = path.trim_start_matches('/');
        HookReply::json(
            json!({"attachments": [configmap(&format!("{name}-{suffix}"), json!({"by": suffix}))]}),
        )
    })
    .await;
    let mut handles = Vec::new();
    for suffix in ["a", "b"] {
        let extra = json!({
            "attachments": [{"apiVersion": "v1", "resource": "configmaps"}],
            "resyncPeriodSeconds": 1,
        });
        handles.push(start_suffixed(&env, &target, &hook, suffix, extra).await);
    }
    env.create(&env.api(&target), object(&target, "t", json!({})))
        .await;
    let cms = env.builtin("v1", "ConfigMap", "configmaps");
    for suffix in ["a", "b"] {
        let cm = wait_for(&cms, &format!("t-{suffix}")).await;
        assert_eq!(
            cm.metadata.annotations.as_ref().unwrap()[DECORATOR_CONTROLLER_ANNOTATION],
            format!("dc-{suffix}")
        );
    }
    // Several resyncs of both decorators after both attachments exist.
    hook.clear_calls();
    eventually("three resyncs of each decorator", || async {
        hook.calls("/a") >= 3 && hook.calls("/b") >= 3
    })
    .await;
    for suffix in ["a", "b"] {
        assert!(cms.get_opt(&format!("t-{suffix}")).await.unwrap().is_some());
        for req in hook.requests(&format!("/{suffix}")) {
            let keys: Vec<&String> = req["attachments"]["ConfigMap.v1"]
                .as_object()
                .unwrap()
                .keys()
                .collect();
            // The cache may lag right after a create, so a request may miss its own
            // attachment; it must never see the other decorator's.
            assert!(
                keys.iter().all(|k| **k == format!("t-{suffix}")),
                "{suffix} sees {keys:?}"
            );
        }
    }
}

/// The upstream documentation's example shape: a Service attached to every Pod carrying a
/// label; unlabelled Pods are left alone; the Service is owned by its Pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decorates_builtin_pods_with_a_service_each() {
    let env = Env::start("dec-pods").await;
    let hook = HookServer::start(|_, req| {
        let name = target_name(req);
        HookReply::json(json!({"attachments": [{
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name},
            "spec": {"selector": {"pod-name": name}, "ports": [{"port": 80}]}
        }]}))
    })
    .await;
    let _dc = env
        .start_decorator(json!({
            "metadata": {"name": "service-per-pod"},
            "spec": {
                "resources": [{"apiVersion": "v1", "resource": "pods",
                               "labelSelector": {"matchLabels": {"service-per-pod": "yes"}}}],
                "attachments": [{"apiVersion": "v1", "resource": "services"}],
                "hooks": {"sync": {"webhook": {"url": hook.url("/sync")}}}
            }
        }))
        .await;
    let pods = env.builtin("v1", "Pod", "pods");
    let pod = |name: &str, labels: Value| {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "labels": labels},
               "spec": {"containers": [{"name": "c", "image": "nginx"}]}})
    };
    let decorated = env
        .create(
            &pods,
            pod(
                "web-0",
                json!({"service-per-pod": "yes", "pod-name": "web-0"}),
            ),
        )
        .await;
    env.create(&pods, pod("other", json!({"pod-name": "other"})))
        .await;
    let services = env.builtin("v1", "Service", "services");
    let svc = wait_for(&services, "web-0").await;
    let owner = &svc.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(owner.kind, "Pod");
    assert_eq!(owner.uid, decorated.metadata.uid.clone().unwrap());
    // A selected pod created after "other": its events come after other's, and keys are
    // taken in order, so once web-1 is decorated a sync of "other" would have started.
    env.create(
        &pods,
        pod(
            "web-1",
            json!({"service-per-pod": "yes", "pod-name": "web-1"}),
        ),
    )
    .await;
    wait_for(&services, "web-1").await;
    assert!(services.get_opt("other").await.unwrap().is_none());
    assert!(hook
        .requests("/sync")
        .iter()
        .all(|r| r["object"]["metadata"]["name"] != "other"));
}

/// InPlace updates a differing attachment; Recreate deletes and creates it again (new
/// uid); OnDelete (the default) leaves it alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attachment_update_strategies() {
    let env = Env::start("dec-strategy").await;
    let target = env.crd("Strategic").await;
    let hook =
        HookServer::start(|path, req| value_attachment(req, path.trim_start_matches('/'))).await;
    let mut handles = Vec::new();
    for (suffix, method) in [
        ("inplace", "InPlace"),
        ("recreate", "Recreate"),
        ("ondelete", "OnDelete"),
        // Upstream accepts the rolling methods on attachments as their plain forms.
        ("rollinginplace", "RollingInPlace"),
        ("rollingrecreate", "RollingRecreate"),
    ] {
        let extra = json!({
            "attachments": [{"apiVersion": "v1", "resource": "configmaps",
                             "updateStrategy": {"method": method}}],
        });
        handles.push(start_suffixed(&env, &target, &hook, suffix, extra).await);
    }
    let targets = env.api(&target);
    env.create(&targets, valued_target(&target)).await;
    let cms = env.builtin("v1", "ConfigMap", "configmaps");
    let mut uids = Vec::new();
    for suffix in [
        "inplace",
        "recreate",
        "ondelete",
        "rollinginplace",
        "rollingrecreate",
    ] {
        let cm = wait_for(&cms, &format!("t-{suffix}")).await;
        uids.push(cm.metadata.uid.clone().unwrap());
    }
    decorator_support::merge_patch(&targets, "t", json!({"spec": {"value": "2"}})).await;
    let data = |o: &Value| o["data"]["value"] == "2";
    let inplace = wait_until(&cms, "t-inplace", "InPlace update", data).await;
    assert_eq!(inplace["metadata"]["uid"], uids[0].as_str());
    let recreated = wait_until(&cms, "t-recreate", "Recreate", data).await;
    assert_ne!(recreated["metadata"]["uid"], uids[1].as_str());
    let inplace = wait_until(&cms, "t-rollinginplace", "RollingInPlace update", data).await;
    assert_eq!(inplace["metadata"]["uid"], uids[3].as_str());
    let recreated = wait_until(&cms, "t-rollingrecreate", "RollingRecreate", data).await;
    assert_ne!(recreated["metadata"]["uid"], uids[4].as_str());
    // Every sync that saw value 2 has completed once a later one has started.
    sync_barrier(&targets, "t", &hook).await;
    let ondelete = cms.get("t-ondelete").await.unwrap();
    assert_eq!(ondelete.data["data"]["value"], "1");
    // OnDelete: recreated with the new content after someone deletes it.
    cms.delete("t-ondelete", &Default::default()).await.unwrap();
    wait_until(&cms, "t-ondelete", "OnDelete recreated", data).await;
}

/// A cluster-scoped target (a Namespace) gets a namespaced attachment inside it; v1 hooks
/// see it under `<namespace>/<name>`, as upstream keys children of cluster-scoped parents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_scoped_target_gets_a_namespaced_attachment() {
    let env = Env::start("dec-cluster").await;
    let marker = metacontroller_testkit::unique_name("ns");
    let hook = HookServer::start(|_, req| {
        let ns = req["object"]["metadata"]["name"].clone();
        HookReply::json(json!({"attachments": [{
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "ns-config", "namespace": ns}, "data": {"k": "v"}}]}))
    })
    .await;
    let _dc = env
        .start_decorator(json!({
            "metadata": {"name": "per-namespace"},
            "spec": {
                "resources": [{"apiVersion": "v1", "resource": "namespaces",
                               "labelSelector": {"matchLabels": {"decorate-ns": marker}}}],
                "attachments": [{"apiVersion": "v1", "resource": "configmaps"}],
                "hooks": {"sync": {"webhook": {"url": hook.url("/sync")}}}
            }
        }))
        .await;
    let namespaces =
        metacontroller_testkit::dynamic_api(env.client(), "v1", "Namespace", "namespaces", None);
    let patch = json!({"metadata": {"labels": {"decorate-ns": marker}}});
    decorator_support::merge_patch(&namespaces, &env.ns, patch).await;
    let cms = env.builtin("v1", "ConfigMap", "configmaps");
    let cm = wait_for(&cms, "ns-config").await;
    let owner = &cm.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(owner.kind, "Namespace");
    assert_eq!(owner.name, env.ns);
    let key = format!("{}/ns-config", env.ns);
    eventually(
        "the attachment under namespace/name in a v1 request",
        || async {
            hook.requests("/sync")
                .iter()
                .any(|r| r["attachments"]["ConfigMap.v1"].get(&key).is_some())
        },
    )
    .await;
}

/// With `--apply-strategy server-side-apply`, attachments are applied with the field
/// manager (annotation and ownerReference included), updated in place when the hook's
/// output changes, and a converged resync sends nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attachments_with_server_side_apply() {
    let env = Env::start("dec-ssa").await;
    let target = env.crd("Applied").await;
    let hook = HookServer::start(|_, req| value_attachment(req, "ssa")).await;
    let _dc = env
        .start_decorator_with(
            sync_decorator(
                "ssa",
                &target,
                &hook.url("/sync"),
                json!({
                    "attachments": [{"apiVersion": "v1", "resource": "configmaps",
                                     "updateStrategy": {"method": "InPlace"}}],
                    "resyncPeriodSeconds": 1,
                }),
            ),
            decorator_support::ApplyStrategy::ServerSideApply {
                field_manager: "metacontroller".into(),
            },
        )
        .await;
    let targets = env.api(&target);
    let created = env.create(&targets, valued_target(&target)).await;
    let cms = env.builtin("v1", "ConfigMap", "configmaps");
    let cm = wait_for(&cms, "t-ssa").await;
    assert!(cm
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .any(|m| m.manager.as_deref() == Some("metacontroller")
            && m.operation.as_deref() == Some("Apply")));
    assert_eq!(
        cm.metadata.annotations.as_ref().unwrap()[DECORATOR_CONTROLLER_ANNOTATION],
        "ssa"
    );
    assert_eq!(
        cm.metadata.owner_references.as_ref().unwrap()[0].uid,
        created.metadata.uid.clone().unwrap()
    );
    decorator_support::merge_patch(&targets, "t", json!({"spec": {"value": "2"}})).await;
    wait_until(&cms, "t-ssa", "applied update", |o| {
        o["data"]["value"] == "2"
    })
    .await;

    let Some(control) = env
        .cluster
        .control_or_skip("attachments_with_server_side_apply")
    else {
        return;
    };
    env.cluster
        .settle(Duration::from_millis(1200), Duration::from_secs(20))
        .await;
    control.reset_counts();
    let before = hook.calls("/sync");
    eventually("two resyncs", || async {
        hook.calls("/sync") >= before + 2
    })
    .await;
    assert_eq!(control.writes(), 0, "{:?}", control.request_counts());
}
