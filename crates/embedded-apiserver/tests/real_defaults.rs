//! The embedded server fills the same defaults as a real kube-apiserver 1.28.7 (issue 33):
//! each object of `fixtures/real-defaults/inputs.json` is created (server-side dry run) and
//! must read back as the real server's answer recorded in `fixtures/real-defaults/<Kind>.json`
//! (see the README there), after the same normalization. A missing default makes the
//! controller's no-write guarantee untestable here (the embedded server would accept what the
//! real one rewrites), so every difference is a failure.

mod common;

use std::path::PathBuf;

use serde_json::{Map, Value};

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

const DECLARATIONS: [&str; 3] = [
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
];

/// Follows `$ref` and single-element `allOf` wrappers to the schema node itself, collecting
/// the merge declarations met on the way (a wrapper may carry them next to its `allOf`).
fn resolve<'a>(mut node: &'a Value, comps: &'a Value, decl: &mut Map<String, Value>) -> &'a Value {
    loop {
        for k in DECLARATIONS {
            if let Some(v) = node.get(k) {
                decl.entry(k.to_string()).or_insert_with(|| v.clone());
            }
        }
        if let Some(r) = node.get("$ref").and_then(Value::as_str) {
            let name = r.rsplit('/').next().unwrap_or_default();
            match comps.get(name) {
                Some(n) => node = n,
                None => return node,
            }
        } else if let Some([only]) = node
            .get("allOf")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
        {
            node = only;
        } else {
            return node;
        }
    }
}

/// `record_openapi.py`'s walk: the merge declarations along every field path of `value`.
fn declarations(
    value: &Value,
    node: &Value,
    comps: &Value,
    path: &str,
    out: &mut Map<String, Value>,
) {
    let mut decl = Map::new();
    let node = resolve(node, comps, &mut decl);
    if !decl.is_empty() {
        let key = if path.is_empty() { "." } else { path };
        out.insert(key.to_string(), Value::Object(decl));
    }
    match value {
        Value::Object(m) => {
            for (k, v) in m {
                let child = node
                    .get("properties")
                    .and_then(|p| p.get(k))
                    .or_else(|| node.get("additionalProperties").filter(|a| a.is_object()));
                if let Some(child) = child {
                    declarations(v, child, comps, &format!("{path}.{k}"), out);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_node) = node.get("items") {
                for v in items {
                    declarations(v, item_node, comps, &format!("{path}[]"), out);
                }
            }
        }
        _ => {}
    }
}

/// Every list/map type kube-apiserver 1.28.7 declares along the corpus objects
/// (`openapi-declarations.json`, recorded by `record_openapi.py`) is declared alike by the
/// embedded server's `/openapi/v3`. The embedded server may declare more: it also marks lists
/// `x-kubernetes-list-type: map` where 1.28 has only `x-kubernetes-patch-merge-key` (pod
/// `containers`, `env`, `volumes`), which merges the same.
#[tokio::test]
async fn openapi_declares_the_real_servers_list_and_map_types() {
    let (_server, client) = common::start().await;
    let inputs = read("inputs.json");
    let real = read("openapi-declarations.json");
    let mut failures = Vec::new();
    for (kind, input) in inputs.as_object().expect("inputs.json is an object") {
        let gv = input["apiVersion"].as_str().unwrap_or_default();
        let path = if gv == "v1" {
            "/openapi/v3/api/v1".to_string()
        } else {
            format!("/openapi/v3/apis/{gv}")
        };
        let (status, doc, _) = common::raw(&client, "GET", &path, &[], None).await;
        assert_eq!(status, 200, "{path}");
        let comps = &doc["components"]["schemas"];
        let (group, version) = gv.rsplit_once('/').unwrap_or(("", gv));
        let gvk = serde_json::json!({"group": group, "version": version, "kind": kind});
        let root = comps.as_object().and_then(|c| {
            c.values().find(|s| {
                s["x-kubernetes-group-version-kind"]
                    .as_array()
                    .is_some_and(|a| a.contains(&gvk))
            })
        });
        let Some(root) = root else {
            failures.push(format!("{kind}: no schema in {path}"));
            continue;
        };
        let mut ours = Map::new();
        declarations(input, root, comps, "", &mut ours);
        for (field, want) in real[kind].as_object().into_iter().flatten() {
            if ours.get(field) != Some(want) {
                failures.push(format!(
                    "{kind} {field}: {} (real: {want})",
                    ours.get(field)
                        .map_or("undeclared".into(), Value::to_string)
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "the embedded /openapi/v3 differs from kube-apiserver 1.28.7:\n{}",
        failures.join("\n")
    );
}
