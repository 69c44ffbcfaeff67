//! Every hook request/response type, v1 and v2, round-trips through its Rust type
//! without losing or changing a field, and fixture keys follow the version's rules.

use std::path::PathBuf;

use metacontroller_api::hook::{HookVersion, ResponseUnmarshallMode};
use metacontroller_api::wire::{
    decode_response, CompositeHookRequest, CompositeHookResponse, CustomizableController,
    CustomizeHookRequest, CustomizeHookResponse, DecoratorHookRequest, DecoratorHookResponse,
    ObjectMap,
};
use metacontroller_apply::json_equal;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

const VERSIONS: [(&str, HookVersion); 2] = [("v1", HookVersion::V1), ("v2", HookVersion::V2)];

fn fixture(version: &str, name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hooks")
        .join(version)
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn round_trip<T: DeserializeOwned + Serialize>(version: &str, name: &str) -> T {
    let original = fixture(version, name);
    let typed: T = serde_json::from_value(original.clone())
        .unwrap_or_else(|e| panic!("{version}/{name} does not decode: {e}"));
    let again = serde_json::to_value(&typed).unwrap();
    assert!(
        json_equal(&original, &again),
        "{version}/{name} changed in a round trip:\nbefore: {original:#}\nafter:  {again:#}"
    );
    typed
}

/// Responses must also pass strict decoding (they are what a correct hook sends).
fn strict_response<T: DeserializeOwned + Serialize + Default + PartialEq + std::fmt::Debug>(
    version: &str,
    name: &str,
) {
    let typed: T = round_trip(version, name);
    let body = serde_json::to_vec(&fixture(version, name)).unwrap();
    let strict: T = decode_response(&body, ResponseUnmarshallMode::Strict).unwrap();
    assert_eq!(strict, typed, "{version}/{name}");
}

/// Rebuilds a children map with the version's keying and compares it with the fixture.
fn assert_keys(version: HookVersion, parent: &Value, map: &ObjectMap) {
    let parent_ns = parent
        .pointer("/metadata/namespace")
        .and_then(Value::as_str);
    let mut rebuilt = ObjectMap::new();
    for (group, objects) in &map.0 {
        rebuilt.0.entry(group.clone()).or_default();
        for object in objects.values() {
            rebuilt.insert(version, parent_ns, object.clone());
        }
    }
    assert_eq!(&rebuilt, map, "keys do not follow {version:?} rules");
}

#[test]
fn composite_requests_round_trip() {
    for (v, version) in VERSIONS {
        for name in [
            "composite-sync-request.json",
            "composite-finalize-request.json",
        ] {
            let req: CompositeHookRequest = round_trip(v, name);
            assert_eq!(req.finalizing, name.contains("finalize"));
            assert_keys(version, &req.parent, &req.children);
            assert_keys(version, &req.parent, &req.related);
        }
    }
}

#[test]
fn composite_responses_round_trip() {
    for (v, _) in VERSIONS {
        strict_response::<CompositeHookResponse>(v, "composite-sync-response.json");
        strict_response::<CompositeHookResponse>(v, "composite-finalize-response.json");
    }
}

#[test]
fn decorator_requests_round_trip_with_upstream_field_names() {
    for (v, version) in VERSIONS {
        for name in [
            "decorator-sync-request.json",
            "decorator-finalize-request.json",
        ] {
            // Upstream names the fields `object` and `attachments` in v1 *and* v2.
            let raw = fixture(v, name);
            for field in [
                "controller",
                "object",
                "attachments",
                "related",
                "finalizing",
            ] {
                assert!(raw.get(field).is_some(), "{v}/{name} lacks `{field}`");
            }
            for field in ["parent", "children"] {
                assert!(raw.get(field).is_none(), "{v}/{name} has `{field}`");
            }
            let req: DecoratorHookRequest = round_trip(v, name);
            assert_keys(version, &req.object, &req.attachments);
            assert_keys(version, &req.object, &req.related);
            assert_eq!(req.finalizing, name.contains("finalize"));

            let built = DecoratorHookRequest::new(
                req.controller.clone(),
                req.object.clone(),
                req.attachments.clone(),
                req.related.clone(),
                req.finalizing,
            );
            assert!(json_equal(&serde_json::to_value(&built).unwrap(), &raw));
        }
    }
}

#[test]
fn decorator_responses_round_trip() {
    for (v, _) in VERSIONS {
        strict_response::<DecoratorHookResponse>(v, "decorator-sync-response.json");
        strict_response::<DecoratorHookResponse>(v, "decorator-finalize-response.json");
    }
    let resp: DecoratorHookResponse = round_trip("v1", "decorator-sync-response.json");
    let labels = resp.labels.unwrap();
    assert_eq!(labels["obsolete-label"], None, "null removes a label");
    assert_eq!(labels["service-per-pod/decorated"].as_deref(), Some("true"));
}

#[test]
fn customize_messages_round_trip() {
    for (v, _) in VERSIONS {
        let req: CustomizeHookRequest = round_trip(v, "customize-request-composite.json");
        assert!(matches!(
            req.controller,
            CustomizableController::Composite(_)
        ));
        let req: CustomizeHookRequest = round_trip(v, "customize-request-decorator.json");
        assert!(matches!(
            req.controller,
            CustomizableController::Decorator(_)
        ));
        strict_response::<CustomizeHookResponse>(v, "customize-response.json");
        let resp: CustomizeHookResponse = round_trip(v, "customize-response.json");
        assert_eq!(resp.related_resource_rules.len(), 3);
        assert!(resp.related_resource_rules[1].selects_by_name());
    }
}

#[test]
fn every_fixture_is_covered() {
    for (v, _) in VERSIONS {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/hooks")
            .join(v);
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "composite-finalize-request.json",
                "composite-finalize-response.json",
                "composite-sync-request.json",
                "composite-sync-response.json",
                "customize-request-composite.json",
                "customize-request-decorator.json",
                "customize-response.json",
                "decorator-finalize-request.json",
                "decorator-finalize-response.json",
                "decorator-sync-request.json",
                "decorator-sync-response.json",
            ]
        );
    }
}
