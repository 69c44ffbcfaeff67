//! Validation rejects what the schema cannot express, naming the field path.

use metacontroller_api::update::ChildUpdateMethod;
use metacontroller_api::validation::{
    validate_composite_controller, validate_decorator_controller, validate_hook,
    validate_related_rules, ValidationErrors,
};
use metacontroller_api::wire::CustomizeHookResponse;
use metacontroller_api::{CompositeController, DecoratorController, Hook};
use serde_json::{json, Value};

fn composite(spec: Value) -> CompositeController {
    controller("CompositeController", "c", spec)
}

fn decorator(spec: Value) -> DecoratorController {
    controller("DecoratorController", "d", spec)
}

/// A controller object of `kind` named `name` with `spec`.
fn controller<T: serde::de::DeserializeOwned>(kind: &str, name: &str, spec: Value) -> T {
    serde_json::from_value(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec
    }))
    .unwrap()
}

fn hook(webhook: Value) -> Result<(), ValidationErrors> {
    let hook: Hook = serde_json::from_value(json!({"webhook": webhook})).unwrap();
    validate_hook("spec.hooks.sync", &hook)
}

fn assert_error_at(result: Result<(), ValidationErrors>, path: &str, needle: &str) {
    let errors = result.expect_err("expected a validation error");
    assert!(errors.has_path(path), "no error at {path}: {errors}");
    assert!(errors.to_string().contains(needle), "{errors}");
    assert!(errors.to_string().contains(path), "{errors}");
}

#[test]
fn authorization_and_basic_auth_are_exclusive() {
    let result = hook(json!({
        "url": "https://h/sync",
        "authorization": {"secretRef": {"name": "t", "namespace": "n", "key": "token"}},
        "basicAuth": {"secretRef": {"name": "b", "namespace": "n"}}
    }));
    assert_error_at(result, "spec.hooks.sync.webhook", "mutually exclusive");
}

#[test]
fn authorization_type_basic_is_refused() {
    let result = hook(json!({
        "url": "https://h/sync",
        "authorization": {"type": "basic", "secretRef": {"name": "t", "namespace": "n", "key": "k"}}
    }));
    assert_error_at(
        result,
        "spec.hooks.sync.webhook.authorization.type",
        "use basicAuth",
    );
    let result = hook(json!({
        "url": "https://h/sync",
        "authorization": {"secretRef": {"name": "t", "namespace": "n"}}
    }));
    assert_error_at(
        result,
        "spec.hooks.sync.webhook.authorization.secretRef.key",
        "required",
    );
}

#[test]
fn webhook_needs_url_or_service_with_path() {
    assert_error_at(
        hook(json!({"timeout": "5s"})),
        "spec.hooks.sync.webhook",
        "either url or service",
    );
    assert_error_at(
        hook(json!({"service": {"name": "s", "namespace": "n"}})),
        "spec.hooks.sync.webhook.path",
        "required",
    );
    assert!(hook(json!({"service": {"name": "s", "namespace": "n"}, "path": "/sync"})).is_ok());
    assert_error_at(
        hook(json!({"service": {"name": "s", "namespace": "n", "port": 70000}, "path": "/"})),
        "spec.hooks.sync.webhook.service.port",
        "65535",
    );
    assert_error_at(
        hook(json!({"url": "ftp://h/sync"})),
        "spec.hooks.sync.webhook.url",
        "http",
    );
    let missing: Hook = serde_json::from_value(json!({"version": "v2"})).unwrap();
    assert_error_at(
        validate_hook("spec.hooks.sync", &missing),
        "spec.hooks.sync.webhook",
        "needs a webhook",
    );
}

#[test]
fn timeouts_are_go_durations_and_positive() {
    assert_error_at(
        hook(json!({"url": "http://h", "timeout": "10"})),
        "spec.hooks.sync.webhook.timeout",
        "missing unit",
    );
    assert_error_at(
        hook(json!({"url": "http://h", "timeout": "0s"})),
        "spec.hooks.sync.webhook.timeout",
        "positive",
    );
    assert!(hook(json!({"url": "http://h", "timeout": "1m30s"})).is_ok());
}

#[test]
fn ca_bundle_needs_exactly_one_source() {
    assert_error_at(
        hook(
            json!({"url": "https://h", "caBundle": {"inline": "pem", "secretRef": {"name": "s", "namespace": "n"}}}),
        ),
        "spec.hooks.sync.webhook.caBundle",
        "exactly one",
    );
    assert_error_at(
        hook(json!({"url": "https://h", "caBundle": {}})),
        "spec.hooks.sync.webhook.caBundle",
        "exactly one",
    );
}

#[test]
fn decorators_accept_rolling_update_methods_as_their_plain_forms() {
    let dc = decorator(json!({
        "resources": [{"apiVersion": "apps/v1", "resource": "statefulsets"}],
        "attachments": [
            {"apiVersion": "v1", "resource": "services", "updateStrategy": {"method": "RollingInPlace"}},
            {"apiVersion": "v1", "resource": "pods", "updateStrategy": {"method": "RollingRecreate"}},
            {"apiVersion": "v1", "resource": "secrets", "updateStrategy": {"method": "Sideways"}}
        ]
    }));
    assert_error_at(
        validate_decorator_controller(&dc),
        "spec.attachments[2].updateStrategy.method",
        "Sideways",
    );
    let errors = validate_decorator_controller(&dc).unwrap_err();
    assert!(
        !errors.has_path("spec.attachments[0].updateStrategy.method"),
        "{errors}"
    );
    assert!(
        !errors.has_path("spec.attachments[1].updateStrategy.method"),
        "{errors}"
    );
    assert_eq!(
        dc.spec.attachments[0].update_method(),
        ChildUpdateMethod::InPlace
    );
    assert_eq!(
        dc.spec.attachments[1].update_method(),
        ChildUpdateMethod::Recreate
    );
}

#[test]
fn unknown_update_methods_and_bad_selectors_are_reported() {
    let cc = composite(json!({
        "parentResource": {
            "apiVersion": "v1", "resource": "things",
            "labelSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}
        },
        "childResources": [
            {"apiVersion": "v1", "resource": "pods", "updateStrategy": {"method": "Sideways"}},
            {"apiVersion": "v1", "resource": "", "updateStrategy": {"method": ""}}
        ],
        "resyncPeriodSeconds": -1
    }));
    // Upstream raises a period below one second to one second instead of refusing it.
    assert!(!validate_composite_controller(&composite(json!({
        "parentResource": {"apiVersion": "v1", "resource": "things"},
        "resyncPeriodSeconds": -1
    })))
    .is_err_and(|e| e.has_path("spec.resyncPeriodSeconds")));
    let errors = validate_composite_controller(&cc).unwrap_err();
    assert_eq!(cc.validate().unwrap_err(), errors);
    for path in [
        "spec.parentResource.labelSelector.matchExpressions[0].operator",
        "spec.childResources[0].updateStrategy.method",
        "spec.childResources[1].resource",
    ] {
        assert!(errors.has_path(path), "missing {path}: {errors}");
    }
    // The empty method means OnDelete, as upstream.
    assert!(
        !errors.has_path("spec.childResources[1].updateStrategy.method"),
        "{errors}"
    );
    assert!(errors.to_string().contains("\"Sideways\""), "{errors}");
}

#[test]
fn endpoint_configs_are_checked_like_webhooks() {
    let dc = decorator(json!({
        "resources": [{"apiVersion": "v1", "resource": "pods"}],
        "endpointConfigs": [
            {"host": "h.example",
             "authorization": {"secretRef": {"name": "t", "namespace": "n", "key": "k"}},
             "basicAuth": {"secretRef": {"name": "b", "namespace": "n"}}},
            {"host": "H.example"}
        ]
    }));
    let errors = validate_decorator_controller(&dc).unwrap_err();
    assert_eq!(dc.validate().unwrap_err(), errors);
    assert!(errors.has_path("spec.endpointConfigs[0]"), "{errors}");
    assert!(errors.has_path("spec.endpointConfigs[1].host"), "{errors}");
}

#[test]
fn related_rules_select_by_labels_or_by_names_not_both() {
    let response: CustomizeHookResponse = serde_json::from_value(json!({"relatedResources": [
        {"apiVersion": "v1", "resource": "configmaps", "labelSelector": {"matchLabels": {"a": "b"}}},
        {"apiVersion": "v1", "resource": "secrets", "names": ["x"], "labelSelector": {}},
        {"apiVersion": "v1", "resource": "secrets", "namespace": "ns", "names": ["x"]},
        {"apiVersion": "v1", "resource": "configmaps", "namespace": "ns", "namespaceSelector": {}}
    ]}))
    .unwrap();
    let errors = validate_related_rules(&response.related_resource_rules).unwrap_err();
    assert_eq!(errors.0.len(), 2, "{errors}");
    assert!(errors.has_path("relatedResources[1]"), "{errors}");
    assert!(errors.has_path("relatedResources[3]"), "{errors}");
    assert!(errors
        .to_string()
        .contains("labelSelector cannot be combined with namespace/names"));
}

fn in_process(
    value: serde_json::Value,
) -> Result<(), metacontroller_api::validation::ValidationErrors> {
    let hook: Hook = serde_json::from_value(value).unwrap();
    validate_hook("spec.hooks.sync", &hook)
}

#[test]
fn a_hook_has_exactly_one_runtime() {
    let both = json!({
        "webhook": {"url": "http://h/sync"},
        "wasm": {"configMapRef": {"namespace": "hooks", "name": "m"}, "key": "m.wasm"}
    });
    assert_error_at(
        in_process(both),
        "spec.hooks.sync",
        "found webhook and wasm",
    );
    let ok = json!({"jsonnet": {"configMapRef": {"namespace": "hooks", "name": "c"}, "key": "sync.jsonnet"}});
    assert!(in_process(ok).is_ok());
}

#[test]
fn jsonnet_hooks_name_their_config_map_and_key() {
    let no_key =
        json!({"jsonnet": {"configMapRef": {"namespace": "hooks", "name": "c"}, "key": ""}});
    assert_error_at(
        in_process(no_key),
        "spec.hooks.sync.jsonnet.key",
        "must not be empty",
    );
    let no_ns = json!({"jsonnet": {"configMapRef": {"namespace": "", "name": "c"}, "key": "k"}});
    assert_error_at(
        in_process(no_ns),
        "spec.hooks.sync.jsonnet.configMapRef.namespace",
        "must not be empty",
    );
    let bad_timeout = json!({"jsonnet": {"configMapRef": {"namespace": "h", "name": "c"}, "key": "k", "timeout": "soon"}});
    assert_error_at(
        in_process(bad_timeout),
        "spec.hooks.sync.jsonnet.timeout",
        "",
    );
}

#[test]
fn wasm_hooks_take_a_config_map_key_or_a_pinned_url() {
    let cm = json!({"namespace": "hooks", "name": "m"});
    let both = json!({"wasm": {"configMapRef": cm, "key": "m.wasm", "url": "https://h/m.wasm", "sha256": "00".repeat(32)}});
    assert_error_at(in_process(both), "spec.hooks.sync.wasm", "found both");
    let neither = json!({"wasm": {"timeout": "1s"}});
    assert_error_at(in_process(neither), "spec.hooks.sync.wasm", "must be set");
    let no_key = json!({"wasm": {"configMapRef": cm}});
    assert_error_at(
        in_process(no_key),
        "spec.hooks.sync.wasm.key",
        "must not be empty",
    );
    let unpinned = json!({"wasm": {"url": "https://h/m.wasm"}});
    assert_error_at(
        in_process(unpinned),
        "spec.hooks.sync.wasm.sha256",
        "required with url",
    );
    let bad_digest = json!({"wasm": {"url": "https://h/m.wasm", "sha256": "abc"}});
    assert_error_at(
        in_process(bad_digest),
        "spec.hooks.sync.wasm.sha256",
        "64 hexadecimal",
    );
    let bad_url = json!({"wasm": {"url": "file:///m.wasm", "sha256": "00".repeat(32)}});
    assert_error_at(in_process(bad_url), "spec.hooks.sync.wasm.url", "http");
    for (limit, message) in [
        ("64MB", "unknown unit"),
        ("512Ki", "at least 1Mi"),
        ("8Gi", "at most 4Gi"),
    ] {
        let hook = json!({"wasm": {"configMapRef": cm, "key": "m.wasm", "memoryLimit": limit}});
        assert_error_at(
            in_process(hook),
            "spec.hooks.sync.wasm.memoryLimit",
            message,
        );
    }
    let ok = json!({"wasm": {"configMapRef": cm, "key": "m.wasm", "memoryLimit": "128Mi", "timeout": "3s"}});
    assert!(in_process(ok).is_ok());
    for (limit, message) in [
        ("1.5Gi", "is not a quantity"),
        ("8Mi", "at least 16Mi"),
        ("5Gi", "at most 4Gi"),
    ] {
        let hook =
            json!({"jsonnet": {"configMapRef": cm, "key": "s.jsonnet", "memoryLimit": limit}});
        assert_error_at(
            in_process(hook),
            "spec.hooks.sync.jsonnet.memoryLimit",
            message,
        );
    }
    let ok = json!({"jsonnet": {"configMapRef": cm, "key": "s.jsonnet", "memoryLimit": "1Gi"}});
    assert!(in_process(ok).is_ok());
}

#[test]
fn child_namespaces_are_names_or_a_lone_star() {
    let with = |namespaces: Value| {
        validate_composite_controller(&composite(json!({
            "parentResource": {"apiVersion": "example.com/v1", "resource": "teamspaces"},
            "childResources": [{"apiVersion": "v1", "resource": "configmaps", "namespaces": namespaces}]
        })))
    };
    assert!(with(json!(["*"])).is_ok());
    assert!(with(json!(["team-a", "shared"])).is_ok());
    assert!(with(json!([])).is_ok());
    let path = "spec.childResources[0].namespaces";
    assert_error_at(
        with(json!(["*", "team-a"])),
        &format!("{path}[0]"),
        "only entry",
    );
    assert_error_at(
        with(json!(["Team_A"])),
        &format!("{path}[0]"),
        "not a namespace name",
    );
    assert_error_at(
        with(json!([""])),
        &format!("{path}[0]"),
        "not a namespace name",
    );
    assert_error_at(
        with(json!(["-a"])),
        &format!("{path}[0]"),
        "not a namespace name",
    );
    assert_error_at(
        with(json!(["a", "a"])),
        &format!("{path}[1]"),
        "more than once",
    );
}

#[test]
fn child_placement_keeps_upstreams_rule_unless_opted_in() {
    use metacontroller_api::composite::CompositeControllerChildResourceRule;
    let rule = |namespaces: &[&str]| CompositeControllerChildResourceRule {
        api_version: "v1".into(),
        resource: "configmaps".into(),
        namespaces: namespaces.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    };
    let upstream = rule(&[]);
    assert!(upstream.allows_placement(Some("p"), Some("p")));
    assert!(!upstream.allows_placement(Some("p"), Some("other")));
    assert!(!upstream.allows_placement(Some("p"), None));
    assert!(upstream.allows_placement(None, Some("any")));
    assert!(upstream.allows_placement(None, None));
    let listed = rule(&["shared"]);
    assert!(listed.allows_placement(Some("p"), Some("shared")));
    assert!(listed.allows_placement(Some("p"), Some("p")));
    assert!(!listed.allows_placement(Some("p"), Some("other")));
    assert!(!listed.allows_placement(Some("p"), None));
    let anywhere = rule(&["*"]);
    assert!(anywhere.allows_placement(Some("p"), Some("other")));
    assert!(anywhere.allows_placement(Some("p"), None));
}
