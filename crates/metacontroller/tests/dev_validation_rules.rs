//! CRD validation rules (`x-kubernetes-validations`, CEL) as kube-apiserver 1.28 checks them:
//! a table of writes run on the embedded API server by default and on a real one with
//! METACONTROLLER_E2E_KUBECONFIG, each with the verdict and the exact 422 message (and
//! causes) the real server gives. The expected texts were taken from kube-apiserver 1.28.7,
//! so the same table passing on both servers is the embedded server matching it. Also: dev
//! mode refuses a hook with two runtimes at `kubectl apply`, worded as the real server does.

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use metacontroller_testkit::example::{all_installed, ExampleCluster};
use metacontroller_testkit::TestCluster;
use serde_json::{json, Value};

const CRD: &str = include_str!("fixtures/cel_rules_crd.yaml");
const QUALIFIED: &str = "CelCheck.celrules.metacontroller-test.io";

/// One row: create `create`; then, with `update`, merge-patch it with `update`. `expect` is
/// the 422 message's part after `is invalid: ` of the last write, or `None` for success.
struct Case {
    name: &'static str,
    create: Value,
    update: Option<Value>,
    expect: Option<&'static str>,
}

fn case(name: &'static str, create: Value, expect: Option<&'static str>) -> Case {
    Case {
        name,
        create,
        update: None,
        expect,
    }
}

fn update(name: &'static str, create: Value, patch: Value, expect: Option<&'static str>) -> Case {
    Case {
        name,
        create,
        update: Some(patch),
        expect,
    }
}

/// Creates: one rule kind each.
fn create_cases() -> Vec<Case> {
    vec![
        case(
            "ok",
            json!({"name": "n", "min": 1, "max": 2, "fixed": "f", "ratio": 0.75,
            "tags": ["a", "bb"], "ports": [{"name": "http", "port": 80}], "labels": {"a": "x"},
            "noMsg": "abc", "withReason": "yes"}),
            None,
        ),
        case("has-absent", json!({"max": 3}), None),
        case(
            "min-max",
            json!({"min": 5, "max": 3}),
            Some(r#"spec: Invalid value: "object": min must be below max"#),
        ),
        case(
            "message-expression",
            json!({"mode": "bad"}),
            Some(r#"spec: Invalid value: "object": mode bad is not allowed"#),
        ),
        case(
            "two-rules",
            json!({"min": 5, "max": 3, "mode": "bad"}),
            Some(
                r#"[spec: Invalid value: "object": min must be below max, spec: Invalid value: "object": mode bad is not allowed]"#,
            ),
        ),
        case(
            "number",
            json!({"ratio": 0.25}),
            Some(r#"spec.ratio: Invalid value: "number": ratio must be at least 0.5"#),
        ),
        case(
            "no-message",
            json!({"noMsg": "bcd"}),
            Some(r#"spec.noMsg: Invalid value: "string": failed rule: self.startsWith('a')"#),
        ),
        case(
            "list-all",
            json!({"tags": ["abcdefg"]}),
            Some(r#"spec.tags: Invalid value: "array": tags are at most 5 characters"#),
        ),
        case(
            "list-exists-and-items",
            json!({"ports": [{"name": "x", "port": 0}]}),
            Some(
                r#"[spec.ports: Invalid value: "array": an http port is required, spec.ports[0]: Invalid value: "object": port out of range]"#,
            ),
        ),
        case(
            "map-values",
            json!({"labels": {"a": "", "b": "x"}}),
            Some(r#"spec.labels[a]: Invalid value: "string": label values may not be empty"#),
        ),
        case(
            "reason",
            json!({"withReason": "no"}),
            Some("spec.withReason: Forbidden: not no"),
        ),
        case(
            "type-error-blocks-rules",
            json!({"min": "x", "mode": "bad"}),
            Some(
                r#"[spec.min: Invalid value: "string": spec.min in body must be of type integer: "string", <nil>: Invalid value: "null": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]"#,
            ),
        ),
    ]
}

/// Updates: transition rules (`oldSelf`) and what they see.
fn update_cases() -> Vec<Case> {
    vec![
        update(
            "immutable",
            json!({"fixed": "f"}),
            json!({"fixed": "g"}),
            Some(r#"spec.fixed: Invalid value: "string": fixed is immutable"#),
        ),
        update(
            "immutable-unchanged",
            json!({"fixed": "f"}),
            json!({"min": 1}),
            None,
        ),
        update(
            "transition-needs-old-value",
            json!({"min": 1}),
            json!({"fixed": "g"}),
            None,
        ),
        update(
            "old-self-field",
            json!({"name": "a"}),
            json!({"name": "b"}),
            Some(r#"spec: Invalid value: "object": name is immutable"#),
        ),
        update(
            "map-list-items-correlate",
            json!({"ports": [{"name": "http", "port": 80}]}),
            json!({"ports": [{"name": "http", "port": 81}, {"name": "admin", "port": 9}]}),
            Some(r#"spec.ports[0]: Invalid value: "object": a port's number is immutable"#),
        ),
    ]
}

/// The project's own CRDs: the rules on hooks.
fn controller_cases() -> Vec<(&'static str, Value, Option<&'static str>)> {
    let jsonnet =
        json!({"configMapRef": {"namespace": "default", "name": "code"}, "key": "s.jsonnet"});
    let webhook = json!({"url": "http://127.0.0.1:1/sync"});
    let cc = |hooks: Value| {
        json!({"kind": "CompositeController", "spec": {
            "parentResource": {"apiVersion": "example.com/v1", "resource": "things"},
            "hooks": hooks}})
    };
    let dc = |hooks: Value| {
        json!({"kind": "DecoratorController", "spec": {
            "resources": [{"apiVersion": "v1", "resource": "configmaps"}], "hooks": hooks}})
    };
    vec![
        (
            "cc-jsonnet",
            cc(json!({"sync": {"jsonnet": jsonnet}})),
            None,
        ),
        (
            "cc-two-runtimes",
            cc(json!({"sync": {"webhook": webhook, "jsonnet": jsonnet}})),
            Some(
                r#"spec.hooks.sync: Invalid value: "object": exactly one of webhook, jsonnet or wasm may be set"#,
            ),
        ),
        (
            "cc-wasm-url-and-configmap",
            cc(json!({"sync": {"wasm": {
            "configMapRef": {"namespace": "default", "name": "code"}, "key": "m.wasm",
            "url": "http://127.0.0.1:1/m.wasm", "sha256": "00"}}})),
            Some(
                r#"spec.hooks.sync.wasm: Invalid value: "object": exactly one of configMapRef (with key) or url (with sha256) must be set"#,
            ),
        ),
        (
            "cc-wasm-no-key",
            cc(json!({"sync": {"wasm": {
            "configMapRef": {"namespace": "default", "name": "code"}}}})),
            Some(
                r#"spec.hooks.sync.wasm: Invalid value: "object": key is required with configMapRef"#,
            ),
        ),
        (
            "dc-finalize-two-runtimes",
            dc(json!({"sync": {"webhook": webhook},
            "finalize": {"webhook": webhook, "wasm": {"url": "http://127.0.0.1:1/m.wasm", "sha256": "00"}}})),
            Some(
                r#"spec.hooks.finalize: Invalid value: "object": exactly one of webhook, jsonnet or wasm may be set"#,
            ),
        ),
    ]
}

fn spec_object(name: &str, spec: &Value) -> Value {
    json!({"apiVersion": "celrules.metacontroller-test.io/v1", "kind": "CelCheck",
        "metadata": {"name": name}, "spec": spec})
}

/// What a write gave: `Ok` or the 422 Status as JSON.
fn outcome<T>(result: Result<T, kube::Error>) -> Result<(), Value> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) => Err(serde_json::to_value(&*status).unwrap()),
        Err(e) => panic!("unexpected error: {e}"),
    }
}

/// Checks `got` against `expect` for object `name` of `qualified` kind: the message, and a
/// cause per error whose `field: message` is in it.
fn check(row: &str, qualified: &str, name: &str, got: Result<(), Value>, expect: Option<&str>) {
    match (got, expect) {
        (Ok(()), None) => {}
        (Ok(()), Some(e)) => panic!("{row}: accepted, expected: {e}"),
        (Err(status), None) => panic!("{row}: refused: {status}"),
        (Err(status), Some(e)) => {
            assert_eq!(status["code"], 422, "{row}: {status}");
            assert_eq!(status["reason"], "Invalid", "{row}: {status}");
            let message = format!("{qualified} \"{name}\" is invalid: {e}");
            assert_eq!(status["message"], message.as_str(), "{row}");
            let causes = status["details"]["causes"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            assert!(!causes.is_empty(), "{row}: no causes: {status}");
            for cause in causes {
                let text = format!(
                    "{}: {}",
                    cause["field"].as_str().unwrap_or(""),
                    cause["message"].as_str().unwrap_or("")
                );
                assert!(e.contains(&text), "{row}: cause {cause} not in {e}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validation_rules_give_kube_apiservers_verdicts_and_messages() {
    let cluster = TestCluster::start().await;
    let crd: Value = serde_yaml::from_str(CRD).unwrap();
    cluster.install_crd(&crd).await;
    let ns = cluster.create_namespace("celrules").await;
    let gvk = GroupVersionKind::gvk("celrules.metacontroller-test.io", "v1", "CelCheck");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "celchecks");
    let api: Api<DynamicObject> = Api::namespaced_with(cluster.client(), &ns, &resource);
    for c in create_cases().into_iter().chain(update_cases()) {
        let object: DynamicObject = serde_json::from_value(spec_object(c.name, &c.create)).unwrap();
        let created = outcome(api.create(&PostParams::default(), &object).await);
        let got = match &c.update {
            None => created,
            Some(patch) => {
                assert!(created.is_ok(), "{}: create refused: {created:?}", c.name);
                let patch = Patch::Merge(json!({"spec": patch}));
                outcome(api.patch(c.name, &PatchParams::default(), &patch).await)
            }
        };
        check(c.name, QUALIFIED, c.name, got, c.expect);
    }

    cluster.install_metacontroller_crds().await;
    for (row, object, expect) in controller_cases() {
        let name = metacontroller_testkit::unique_name(row);
        let kind = object["kind"].as_str().unwrap().to_string();
        let mut object = object;
        object["apiVersion"] = json!("metacontroller.k8s.io/v1alpha1");
        object["metadata"] = json!({"name": name});
        let gvk = GroupVersionKind::gvk("metacontroller.k8s.io", "v1alpha1", &kind);
        let plural = format!("{}s", kind.to_lowercase());
        let resource = ApiResource::from_gvk_with_plural(&gvk, &plural);
        let api: Api<DynamicObject> = Api::all_with(cluster.client(), &resource);
        let object: DynamicObject = serde_json::from_value(object).unwrap();
        let got = outcome(api.create(&PostParams::default(), &object).await);
        if got.is_ok() {
            let _ = api.delete(&name, &Default::default()).await;
        }
        let qualified = format!("{kind}.metacontroller.k8s.io");
        check(row, &qualified, &name, got, expect);
    }
}

/// `kubectl apply` of a CompositeController whose sync hook has both `webhook` and
/// `jsonnet`, in dev mode (or against the real server): refused with the real server's words.
#[test]
fn dev_mode_refuses_a_hook_with_two_runtimes_at_kubectl_apply() {
    if !all_installed(&["kubectl"]) {
        return;
    }
    let cluster = ExampleCluster::start(env!("CARGO_BIN_EXE_metacontroller"));
    let name = metacontroller_testkit::unique_name("two-runtimes");
    let path = cluster.dir.path().join("two-runtimes.yaml");
    std::fs::write(
        &path,
        format!(
            r#"apiVersion: metacontroller.k8s.io/v1alpha1
kind: CompositeController
metadata:
  name: {name}
spec:
  parentResource: {{apiVersion: example.com/v1, resource: things}}
  hooks:
    sync:
      webhook: {{url: "http://127.0.0.1:1/sync"}}
      jsonnet:
        configMapRef: {{namespace: default, name: code}}
        key: sync.jsonnet
"#
        ),
    )
    .unwrap();
    let path = path.to_string_lossy().into_owned();
    let (ok, text) = cluster.kubectl.run(&["apply", "-f", &path]);
    assert!(!ok, "kubectl apply succeeded: {text}");
    let expected = format!(
        "The CompositeController \"{name}\" is invalid: spec.hooks.sync: Invalid value: \"object\": exactly one of webhook, jsonnet or wasm may be set"
    );
    assert!(text.contains(&expected), "{text}");
    let (found, _) = cluster.kubectl.run(&["get", "compositecontroller", &name]);
    assert!(!found, "the CompositeController was stored");
}
