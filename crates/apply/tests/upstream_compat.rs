//! Objects created by upstream (Go) Metacontroller, with its last-applied annotation, are
//! adopted without a single write, and our record is byte-identical to Go's.

use metacontroller_apply::{last_applied, plan, plan_update, prepare_create, Plan};
use serde_json::{json, Value};

/// What a hook returned (key order as a hook author would write it).
fn hook_desired() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web",
            "labels": {"app": "web"},
            "annotations": {"example.com/link": "https://x/?a=1&b=<2>"}
        },
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{
                    "name": "app",
                    "image": "nginx:1.25",
                    "ports": [{"containerPort": 80, "name": "http"}],
                    "env": [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}],
                    "resources": {"limits": {"cpu": "1000m", "memory": "128Mi"}}
                }]}
            }
        }
    })
}

/// The annotation Go Metacontroller (encoding/json) writes for `hook_desired()`: keys sorted,
/// compact, HTML characters escaped.
const GO_ANNOTATION: &str = r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"annotations":{"example.com/link":"https://x/?a=1\u0026b=\u003c2\u003e"},"labels":{"app":"web"},"name":"web"},"spec":{"replicas":3,"selector":{"matchLabels":{"app":"web"}},"template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"env":[{"name":"B","value":"2"},{"name":"A","value":"1"}],"image":"nginx:1.25","name":"app","ports":[{"containerPort":80,"name":"http"}],"resources":{"limits":{"cpu":"1000m","memory":"128Mi"}}}]}}}}"#;

/// The Deployment as the API server returns it after Go Metacontroller created it.
fn observed_from_go() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web",
            "namespace": "default",
            "uid": "0b6d2b8e-1c1c-4f57-9d0e-3f1c2a7a9d11",
            "resourceVersion": "48213",
            "generation": 1,
            "creationTimestamp": "2024-05-01T10:00:00Z",
            "labels": {"app": "web"},
            "annotations": {
                "deployment.kubernetes.io/revision": "1",
                "example.com/link": "https://x/?a=1&b=<2>",
                "metacontroller.k8s.io/last-applied-configuration": GO_ANNOTATION
            },
            "ownerReferences": [{
                "apiVersion": "ctl.example.com/v1", "kind": "Web", "name": "web",
                "uid": "8a1d", "controller": true, "blockOwnerDeletion": true
            }],
            "managedFields": [{"manager": "metacontroller", "operation": "Update"}]
        },
        "spec": {
            "replicas": 3,
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            "template": {
                "metadata": {"creationTimestamp": null, "labels": {"app": "web"}},
                "spec": {
                    "containers": [{
                        "name": "app",
                        "image": "nginx:1.25",
                        "ports": [{"containerPort": 80, "name": "http", "protocol": "TCP"}],
                        "env": [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}],
                        // The API server canonicalises 1000m to 1.
                        "resources": {"limits": {"cpu": "1", "memory": "128Mi"}},
                        "imagePullPolicy": "IfNotPresent",
                        "terminationMessagePath": "/dev/termination-log",
                        "terminationMessagePolicy": "File"
                    }],
                    "dnsPolicy": "ClusterFirst",
                    "restartPolicy": "Always",
                    "schedulerName": "default-scheduler",
                    "securityContext": {},
                    "terminationGracePeriodSeconds": 30
                }
            }
        },
        "status": {"observedGeneration": 1, "replicas": 3, "readyReplicas": 3}
    })
}

#[test]
fn record_is_byte_identical_to_go() {
    assert_eq!(last_applied::encode(&hook_desired()), GO_ANNOTATION);
    let created = prepare_create(&hook_desired()).unwrap();
    assert_eq!(
        created["metadata"]["annotations"][last_applied::ANNOTATION],
        json!(GO_ANNOTATION)
    );
}

#[test]
fn object_created_by_go_metacontroller_reapplied_unchanged_causes_no_write() {
    let observed = observed_from_go();
    let plan = plan_update(&observed, &hook_desired(), None).unwrap();
    assert!(!plan.update, "merged: {:#}", plan.merged);
    assert_eq!(super_plan(&observed), Plan::Unchanged);
    // The record we would write is the very string Go wrote.
    assert_eq!(
        plan.merged["metadata"]["annotations"][last_applied::ANNOTATION],
        json!(GO_ANNOTATION)
    );
}

#[test]
fn go_record_with_other_formatting_is_still_no_write() {
    // An older writer (or a human) formatted the record differently: same meaning.
    let mut observed = observed_from_go();
    let reparsed: Value = serde_json::from_str(GO_ANNOTATION).unwrap();
    observed["metadata"]["annotations"][last_applied::ANNOTATION] =
        json!(serde_json::to_string_pretty(&reparsed).unwrap());
    let plan = plan_update(&observed, &hook_desired(), None).unwrap();
    assert!(!plan.update);
}

#[test]
fn go_object_with_a_real_change_is_written_and_keeps_foreign_fields() {
    let observed = observed_from_go();
    let mut desired = hook_desired();
    desired["spec"]["replicas"] = json!(5);
    let plan = plan_update(&observed, &desired, None).unwrap();
    assert!(plan.update);
    assert_eq!(plan.merged["spec"]["replicas"], json!(5));
    assert_eq!(
        plan.merged["metadata"]["ownerReferences"],
        observed["metadata"]["ownerReferences"]
    );
    assert_eq!(plan.merged["metadata"]["resourceVersion"], json!("48213"));
    assert_eq!(plan.merged["status"], observed["status"]);
    assert_eq!(
        plan.merged["spec"]["template"]["spec"]["dnsPolicy"],
        json!("ClusterFirst")
    );
}

#[test]
fn go_record_still_removes_fields_we_stopped_setting() {
    let observed = observed_from_go();
    let mut desired = hook_desired();
    desired["metadata"]["annotations"] = json!({"example.com/new": "x"});
    let plan = plan_update(&observed, &desired, None).unwrap();
    assert!(plan.update);
    let ann = plan.merged["metadata"]["annotations"].as_object().unwrap();
    assert!(!ann.contains_key("example.com/link"));
    assert_eq!(ann["example.com/new"], json!("x"));
    assert!(ann.contains_key("deployment.kubernetes.io/revision"));
}

fn super_plan(observed: &Value) -> Plan {
    plan(observed, &hook_desired(), None).unwrap()
}
