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
    serde_json::from_value(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1",
        "kind": "CompositeController",
        "metadata": {"name": "c"},
        "spec": spec
    }))
    .unwrap()
}

fn decorator(spec: Value) -> DecoratorController {
    serde_json::from_value(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1",
        "kind": "DecoratorController",
        "metadata": {"name": "d"},
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
