//! The embedded server fills the same defaults as a real kube-apiserver 1.28.7 (issue 33):
//! each object of `fixtures/real-defaults/inputs.json` is created (server-side dry run) and
//! must read back as the real server's answer recorded in `fixtures/real-defaults/<Kind>.json`
//! (see the README there), after the same normalization. A missing default makes the
//! controller's no-write guarantee untestable here (the embedded server would accept what the
//! real one rewrites), so every difference is a failure.

mod common;

use std::path::PathBuf;

use serde_json::Value;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/real-defaults")
}

fn read(name: &str) -> Value {
    let path = fixtures().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

/// The object's own uid, wherever it appears (a Job's selector and labels), as `<uid>`.
fn replace_uid(v: &mut Value, uid: &str) {
    match v {
        Value::Object(m) => m.values_mut().for_each(|x| replace_uid(x, uid)),
        Value::Array(a) => a.iter_mut().for_each(|x| replace_uid(x, uid)),
        Value::String(s) if s == uid => *s = "<uid>".into(),
        _ => {}
    }
}

/// `creationTimestamp: null` (Go's zero time in embedded object metadata, e.g. a pod
/// template's) means "unset": removed on both sides.
fn drop_null_timestamps(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if m.get("creationTimestamp").is_some_and(Value::is_null) {
                m.remove("creationTimestamp");
            }
            m.values_mut().for_each(drop_null_timestamps);
        }
        Value::Array(a) => a.iter_mut().for_each(drop_null_timestamps),
        _ => {}
    }
}

/// What `record.py` strips: fields that differ on every create.
fn normalize(mut obj: Value) -> Value {
    let uid = obj["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if !uid.is_empty() {
        replace_uid(&mut obj, &uid);
    }
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for f in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "managedFields",
            "namespace",
        ] {
            meta.remove(f);
        }
    }
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("clusterIP");
        spec.remove("clusterIPs");
    }
    if let Some(m) = obj.as_object_mut() {
        m.remove("status");
    }
    drop_null_timestamps(&mut obj);
    obj
}

fn plural(kind: &str) -> String {
    match kind {
        "Ingress" => "ingresses".into(),
        "NetworkPolicy" => "networkpolicies".into(),
        k => format!("{}s", k.to_lowercase()),
    }
}

/// The paths where `got` differs from `want`.
fn diff(path: &str, want: &Value, got: &Value, out: &mut Vec<String>) {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            let keys: std::collections::BTreeSet<&String> = w.keys().chain(g.keys()).collect();
            for k in keys {
                let (wv, gv) = (w.get(k), g.get(k));
                match (wv, gv) {
                    (Some(wv), Some(gv)) => diff(&format!("{path}.{k}"), wv, gv, out),
                    (Some(wv), None) => out.push(format!("{path}.{k}: missing (real: {wv})")),
                    (None, Some(gv)) => out.push(format!("{path}.{k}: extra {gv}")),
                    (None, None) => {}
                }
            }
        }
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => {
            for (i, (wv, gv)) in w.iter().zip(g).enumerate() {
                diff(&format!("{path}[{i}]"), wv, gv, out);
            }
        }
        _ if want == got => {}
        _ => out.push(format!("{path}: {got} (real: {want})")),
    }
}

#[tokio::test]
async fn created_objects_read_back_with_the_real_servers_defaults() {
    let (_server, client) = common::start().await;
    let inputs = read("inputs.json");
    let mut failures = Vec::new();
    for (kind, input) in inputs.as_object().expect("inputs.json is an object") {
        let api_version = input["apiVersion"].as_str().unwrap_or_default();
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let api = common::dynamic(
            &client,
            group,
            version,
            kind,
            &plural(kind),
            Some("default"),
        );
        let pp = kube::api::PostParams {
            dry_run: true,
            ..Default::default()
        };
        let created = match api.create(&pp, &common::obj(input.clone())).await {
            Ok(o) => serde_json::to_value(o).expect("object"),
            Err(e) => {
                failures.push(format!("{kind}: create failed: {e}"));
                continue;
            }
        };
        let mut diffs = Vec::new();
        let mut want = read(&format!("{kind}.json"));
        drop_null_timestamps(&mut want);
        diff("", &want, &normalize(created), &mut diffs);
        failures.extend(diffs.into_iter().map(|d| format!("{kind}{d}")));
    }
    assert!(
        failures.is_empty(),
        "the embedded server differs from kube-apiserver 1.28.7:\n{}",
        failures.join("\n")
    );
}
