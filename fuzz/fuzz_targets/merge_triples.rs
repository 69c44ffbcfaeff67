//! Never panic on arbitrary (observed, last-applied, desired[, schema]) JSON triples, through
//! every public entry point of metacontroller-apply.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use metacontroller_apply::{
    last_applied, merge, merge_for_cli, merge_with_schema, needs_update, plan, plan_update,
    prepare_create, ssa, Schema,
};
use serde_json::{Map, Value};

/// Keys biased towards the ones the engine treats specially.
#[derive(Arbitrary, Debug)]
enum Key {
    Name,
    Port,
    ContainerPort,
    MountPath,
    Uid,
    Metadata,
    Status,
    Annotations,
    LastApplied,
    Properties,
    Items,
    ListType,
    ListMapKeys,
    PatchStrategy,
    PatchMergeKey,
    MapType,
    Other(String),
}

impl Key {
    fn as_str(&self) -> &str {
        match self {
            Key::Name => "name",
            Key::Port => "port",
            Key::ContainerPort => "containerPort",
            Key::MountPath => "mountPath",
            Key::Uid => "uid",
            Key::Metadata => "metadata",
            Key::Status => "status",
            Key::Annotations => "annotations",
            Key::LastApplied => last_applied::ANNOTATION,
            Key::Properties => "properties",
            Key::Items => "items",
            Key::ListType => "x-kubernetes-list-type",
            Key::ListMapKeys => "x-kubernetes-list-map-keys",
            Key::PatchStrategy => "x-kubernetes-patch-strategy",
            Key::PatchMergeKey => "x-kubernetes-patch-merge-key",
            Key::MapType => "x-kubernetes-map-type",
            Key::Other(s) => s,
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Json {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Word(u8),
    Arr(Vec<Json>),
    Obj(Vec<(Key, Json)>),
}

const WORDS: [&str; 8] = ["map", "set", "atomic", "merge", "TCP", "name", "{}", "1000m"];

impl Json {
    fn to_value(&self, depth: usize) -> Value {
        if depth > 24 {
            return Value::Null;
        }
        match self {
            Json::Null => Value::Null,
            Json::Bool(b) => Value::Bool(*b),
            Json::Int(i) => Value::from(*i),
            Json::Float(f) => serde_json::Number::from_f64(*f)
                .map(Value::Number)
                .unwrap_or(Value::Null),
            Json::Str(s) => Value::String(s.clone()),
            Json::Word(w) => Value::from(WORDS[*w as usize % WORDS.len()]),
            Json::Arr(a) => Value::Array(a.iter().map(|j| j.to_value(depth + 1)).collect()),
            Json::Obj(o) => {
                let mut m = Map::new();
                for (k, v) in o {
                    m.insert(k.as_str().to_string(), v.to_value(depth + 1));
                }
                Value::Object(m)
            }
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Input {
    observed: Json,
    last: Json,
    desired: Json,
    schema: Json,
}

fuzz_target!(|input: Input| {
    let o = input.observed.to_value(0);
    let l = input.last.to_value(0);
    let d = input.desired.to_value(0);
    let s = input.schema.to_value(0);
    let _ = merge(&o, Some(&l), &d);
    let _ = merge(&o, None, &d);
    let _ = needs_update(&o, &d);
    let _ = plan(&o, &d, None);
    let _ = plan_update(&o, &d, None);
    let _ = prepare_create(&d);
    let _ = ssa::apply_patch_body(&d, Some("ns"));
    let _ = last_applied::get(&o);
    let _ = last_applied::encode(&d);
    let _ = merge_for_cli(&o, &d, Some(&l), Some(&s));
    let _ = merge_for_cli(&o, &d, None, None);
    if let Ok(schema) = Schema::detect(&s, "v1", "X") {
        if let Ok(r) = merge_with_schema(&o, Some(&l), &d, &schema) {
            let _ = needs_update(&o, &r);
        }
        let _ = plan(&o, &d, Some(&schema));
    }
});
