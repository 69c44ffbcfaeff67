//! Whatever a correct hook sends (any response our types can express, encoded as
//! JSON) decodes to the same value in loose and strict mode.

use std::collections::BTreeMap;

use metacontroller_api::hook::ResponseUnmarshallMode;
use metacontroller_api::wire::{
    decode_response, CompositeHookResponse, DecoratorHookResponse, HookEvent,
};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1e300f64..1e300).prop_map(Value::from),
        "[a-z0-9 ._-]{0,12}".prop_map(Value::from),
        Just(Value::Null),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("[a-zA-Z]{1,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn object() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::btree_map("[a-zA-Z]{1,8}", json_value(), 0..4)
        .prop_map(|m| m.into_iter().collect())
}

fn child() -> impl Strategy<Value = Value> {
    (object(), "[a-z][a-z0-9-]{0,10}").prop_map(|(mut extra, name)| {
        extra.insert("apiVersion".into(), json!("v1"));
        extra.insert("kind".into(), json!("ConfigMap"));
        extra.insert("metadata".into(), json!({"name": name}));
        Value::Object(extra)
    })
}

fn string_map() -> impl Strategy<Value = Option<BTreeMap<String, Option<String>>>> {
    prop::option::of(prop::collection::btree_map(
        "[a-z./-]{1,12}",
        prop::option::of("[a-z0-9]{0,8}"),
        0..4,
    ))
}

/// Events as hooks send them, valid or not (the controller checks them, decoding does not).
fn events() -> impl Strategy<Value = Vec<HookEvent>> {
    prop::collection::vec(
        (
            "(Normal|Warning|[A-Za-z]{0,6})",
            "[A-Za-z0-9 ]{0,10}",
            "\\PC{0,20}",
        )
            .prop_map(|(t, r, m)| HookEvent::new(t, r, m)),
        0..3,
    )
}

fn composite() -> impl Strategy<Value = CompositeHookResponse> {
    (
        prop::option::of(object()),
        prop::collection::vec(child(), 0..4),
        prop_oneof![Just(0.0), 0.001f64..1e6],
        any::<bool>(),
        events(),
    )
        .prop_map(
            |(status, children, resync, finalized, events)| CompositeHookResponse {
                status,
                children,
                resync_after_seconds: resync,
                finalized,
                events,
            },
        )
}

fn decorator() -> impl Strategy<Value = DecoratorHookResponse> {
    (
        string_map(),
        string_map(),
        prop::option::of(object()),
        prop::collection::vec(child(), 0..3),
        any::<bool>(),
        events(),
    )
        .prop_map(
            |(labels, annotations, status, attachments, finalized, events)| DecoratorHookResponse {
                labels,
                annotations,
                status,
                attachments,
                resync_after_seconds: 0.0,
                finalized,
                events,
            },
        )
}

proptest! {
    #[test]
    fn composite_responses_decode_identically_in_both_modes(resp in composite()) {
        let body = serde_json::to_vec(&resp).unwrap();
        for mode in [ResponseUnmarshallMode::Loose, ResponseUnmarshallMode::Strict] {
            let decoded: CompositeHookResponse = decode_response(&body, mode).unwrap();
            prop_assert_eq!(&decoded, &resp);
        }
    }

    #[test]
    fn decorator_responses_decode_identically_in_both_modes(resp in decorator()) {
        let body = serde_json::to_vec(&resp).unwrap();
        for mode in [ResponseUnmarshallMode::Loose, ResponseUnmarshallMode::Strict] {
            let decoded: DecoratorHookResponse = decode_response(&body, mode).unwrap();
            prop_assert_eq!(&decoded, &resp);
        }
    }

    /// Adding an unknown top-level field changes nothing in loose mode and is always
    /// reported, by name, in strict mode.
    #[test]
    fn unknown_fields_split_the_modes(resp in composite(), field in "x[A-Za-z]{0,8}") {
        let mut value = serde_json::to_value(&resp).unwrap();
        value[&field] = json!(true);
        let body = serde_json::to_vec(&value).unwrap();
        let loose: CompositeHookResponse = decode_response(&body, ResponseUnmarshallMode::Loose).unwrap();
        prop_assert_eq!(&loose, &resp);
        let err = decode_response::<CompositeHookResponse>(&body, ResponseUnmarshallMode::Strict).unwrap_err();
        prop_assert!(err.to_string().contains(&format!("\"{field}\"")), "{}", err);
    }
}
