//! `meta.k8s.io/v1 Table` rendering for `kubectl get` (Accept `as=Table`).

use crate::registry::ResourceInfo;
use crate::time::{human_duration, now_unix, parse_rfc3339};
use serde_json::{json, Value};

/// `includeObject` query parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    Metadata,
    Object,
}

impl IncludeObject {
    /// Parses the parameter (default Metadata).
    pub fn parse(s: Option<&str>) -> Self {
        match s {
            Some("None") => IncludeObject::None,
            Some("Object") => IncludeObject::Object,
            _ => IncludeObject::Metadata,
        }
    }
}

struct Column {
    name: String,
    type_: String,
    format: String,
    description: String,
    priority: i64,
    /// `None` = name, `Some("")` = age, else a simple JSONPath.
    path: Option<String>,
    /// Computed cell (takes precedence over `path`).
    func: Option<fn(&Value) -> Value>,
}

fn columns(info: &ResourceInfo, version: &str) -> Vec<Column> {
    let name = Column {
        name: "Name".into(),
        type_: "string".into(),
        format: "name".into(),
        description: "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names".into(),
        priority: 0,
        path: None,
        func: None,
    };
    let age = || {
        Column {
        name: "Age".into(),
        type_: "string".into(),
        format: String::new(),
        description: "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata".into(),
        priority: 0,
        path: Some(String::new()),
        func: None,
    }
    };
    let simple = |n: &str, p: &str| Column {
        name: n.into(),
        type_: "string".into(),
        format: String::new(),
        description: String::new(),
        priority: 0,
        path: Some(p.into()),
        func: None,
    };
    if let Some(crd) = &info.crd {
        let mut cols = vec![name];
        match crd.printer_columns.get(version) {
            Some(pcs) if !pcs.is_empty() => {
                for pc in pcs {
                    cols.push(Column {
                        name: pc.get("name").and_then(Value::as_str).unwrap_or("").into(),
                        type_: pc
                            .get("type")
                            .and_then(Value::as_str)
                            .unwrap_or("string")
                            .into(),
                        format: pc
                            .get("format")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .into(),
                        description: pc
                            .get("description")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .into(),
                        priority: pc.get("priority").and_then(Value::as_i64).unwrap_or(0),
                        path: Some(
                            pc.get("jsonPath")
                                .and_then(Value::as_str)
                                .unwrap_or("")
                                .into(),
                        ),
                        func: None,
                    });
                }
            }
            _ => cols.push(age()),
        }
        return cols;
    }
    let computed = |n: &str, f: fn(&Value) -> Value| Column {
        name: n.into(),
        type_: "string".into(),
        format: String::new(),
        description: String::new(),
        priority: 0,
        path: Some("-".into()),
        func: Some(f),
    };
    match (info.group.as_str(), info.resource.as_str()) {
        ("", "namespaces") => vec![name, simple("Status", ".status.phase"), age()],
        ("", "pods") => vec![
            name,
            computed("Ready", |o| {
                let total = o
                    .pointer("/spec/containers")
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len);
                let ready = o
                    .pointer("/status/containerStatuses")
                    .and_then(Value::as_array)
                    .map_or(0, |a| {
                        a.iter()
                            .filter(|c| c.get("ready") == Some(&Value::Bool(true)))
                            .count()
                    });
                json!(format!("{ready}/{total}"))
            }),
            simple("Status", ".status.phase"),
            computed("Restarts", |o| {
                json!(o
                    .pointer("/status/containerStatuses")
                    .and_then(Value::as_array)
                    .map_or(0, |a| a
                        .iter()
                        .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
                        .sum::<i64>()))
            }),
            age(),
        ],
        ("", "services") => vec![
            name,
            simple("Type", ".spec.type"),
            simple("Cluster-IP", ".spec.clusterIP"),
            computed("External-IP", |o| {
                json!(o
                    .pointer("/spec/externalIPs")
                    .and_then(Value::as_array)
                    .filter(|a| !a.is_empty())
                    .map_or("<none>".to_string(), |a| {
                        a.iter()
                            .filter_map(Value::as_str)
                            .collect::<Vec<_>>()
                            .join(",")
                    }))
            }),
            computed("Port(s)", |o| {
                let ports: Vec<String> = o
                    .pointer("/spec/ports")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .map(|p| {
                                let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
                                let proto =
                                    p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
                                match p.get("nodePort").and_then(Value::as_i64) {
                                    Some(np) => format!("{port}:{np}/{proto}"),
                                    None => format!("{port}/{proto}"),
                                }
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                json!(if ports.is_empty() {
                    "<none>".to_string()
                } else {
                    ports.join(",")
                })
            }),
            age(),
        ],
        ("", "configmaps") => vec![
            name,
            computed("Data", |o| {
                let n = o
                    .get("data")
                    .and_then(Value::as_object)
                    .map_or(0, |m| m.len())
                    + o.get("binaryData")
                        .and_then(Value::as_object)
                        .map_or(0, |m| m.len());
                json!(n)
            }),
            age(),
        ],
        ("", "secrets") => vec![
            name,
            simple("Type", ".type"),
            computed("Data", |o| {
                json!(o
                    .get("data")
                    .and_then(Value::as_object)
                    .map_or(0, |m| m.len()))
            }),
            age(),
        ],
        ("apps", "deployments") => vec![
            name,
            computed("Ready", ready_of_desired),
            computed("Up-to-date", |o| json!(int(o, "/status/updatedReplicas"))),
            computed("Available", |o| json!(int(o, "/status/availableReplicas"))),
            age(),
        ],
        ("apps", "statefulsets") => vec![name, computed("Ready", ready_of_desired), age()],
        ("apps", "replicasets") => vec![
            name,
            computed("Desired", |o| json!(int(o, "/spec/replicas"))),
            computed("Current", |o| json!(int(o, "/status/replicas"))),
            computed("Ready", |o| json!(int(o, "/status/readyReplicas"))),
            age(),
        ],
        ("", "events") | ("events.k8s.io", "events") => {
            let wide = |mut c: Column| {
                c.priority = 1;
                c
            };
            let mut name = name;
            name.priority = 1;
            vec![
                computed("Last Seen", |o| json!(event_age(o, true))),
                computed("Type", |o| {
                    json!(o.get("type").and_then(Value::as_str).unwrap_or(""))
                }),
                computed("Reason", |o| {
                    json!(o.get("reason").and_then(Value::as_str).unwrap_or(""))
                }),
                computed("Object", |o| {
                    let r = event_object(o);
                    let kind = r.get("kind").and_then(Value::as_str).unwrap_or("");
                    let n = r.get("name").and_then(Value::as_str).unwrap_or("");
                    json!(format!("{}/{n}", kind.to_lowercase()))
                }),
                wide(computed("Subobject", |o| {
                    json!(event_object(o)
                        .get("fieldPath")
                        .and_then(Value::as_str)
                        .unwrap_or(""))
                })),
                wide(computed("Source", |o| {
                    let c = o
                        .pointer("/source/component")
                        .or_else(|| o.get("reportingController"))
                        .or_else(|| o.get("reportingComponent"))
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    match o.pointer("/source/host").and_then(Value::as_str) {
                        Some(h) if !h.is_empty() => json!(format!("{c}, {h}")),
                        _ => json!(c),
                    }
                })),
                computed("Message", |o| {
                    json!(o
                        .get("message")
                        .or_else(|| o.get("note"))
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .trim())
                }),
                wide(computed("First Seen", |o| json!(event_age(o, false)))),
                wide(computed("Count", |o| {
                    json!(o
                        .get("count")
                        .or_else(|| o.get("deprecatedCount"))
                        .and_then(Value::as_i64)
                        .unwrap_or(1))
                })),
                name,
            ]
        }
        ("apiextensions.k8s.io", _) => vec![
            name,
            Column {
                name: "Created At".into(),
                type_: "date".into(),
                format: String::new(),
                description: String::new(),
                priority: 0,
                path: Some(".metadata.creationTimestamp".into()),
                // The generic table of kube-apiserver prints the RFC 3339 timestamp itself
                // (`kubectl get crd` shows `CREATED AT 2024-05-01T10:00:00Z`), not an age.
                func: Some(|o| {
                    o.pointer("/metadata/creationTimestamp")
                        .cloned()
                        .unwrap_or(Value::Null)
                }),
            },
        ],
        _ => vec![name, age()],
    }
}

/// What an Event is about: `involvedObject` (core/v1) or `regarding` (events.k8s.io/v1).
fn event_object(o: &Value) -> &Value {
    o.get("involvedObject")
        .or_else(|| o.get("regarding"))
        .unwrap_or(&Value::Null)
}

/// The age of an Event's last (or first) occurrence, as kubectl's "Last Seen" shows it.
fn event_age(o: &Value, last: bool) -> String {
    let keys: &[&str] = if last {
        &[
            "/series/lastObservedTime",
            "/lastTimestamp",
            "/deprecatedLastTimestamp",
            "/eventTime",
        ]
    } else {
        &["/firstTimestamp", "/deprecatedFirstTimestamp", "/eventTime"]
    };
    let ts = keys
        .iter()
        .filter_map(|k| o.pointer(k).and_then(Value::as_str))
        .find_map(parse_rfc3339)
        .or_else(|| {
            o.pointer("/metadata/creationTimestamp")
                .and_then(Value::as_str)
                .and_then(parse_rfc3339)
        });
    ts.map(|t| human_duration(crate::time::now_unix() - t))
        .unwrap_or_else(|| "<unknown>".into())
}

/// Evaluates the simple JSONPaths printer columns use (`.a.b`, `.a[0].b`, `.a[*].b`).
fn eval_path(obj: &Value, path: &str) -> Value {
    let path = path
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim_start_matches('$');
    let mut cur = vec![obj.clone()];
    for seg in path.split('.').filter(|s| !s.is_empty()) {
        let (field, index) = match seg.find('[') {
            Some(i) => (&seg[..i], Some(seg[i + 1..].trim_end_matches(']'))),
            None => (seg, None),
        };
        let mut next = Vec::new();
        for v in cur {
            let v = if field.is_empty() {
                Some(v)
            } else {
                v.get(field).cloned()
            };
            let Some(v) = v else { continue };
            match index {
                None => next.push(v),
                Some("*") => next.extend(v.as_array().cloned().unwrap_or_default()),
                Some(i) => {
                    if let (Ok(i), Some(a)) = (i.parse::<usize>(), v.as_array()) {
                        if let Some(x) = a.get(i) {
                            next.push(x.clone());
                        }
                    }
                }
            }
        }
        cur = next;
    }
    match cur.len() {
        0 => Value::Null,
        1 => cur.remove(0),
        _ => Value::Array(cur),
    }
}

/// The `Ready` cell of a Deployment or StatefulSet: ready replicas of the desired ones (`2/3`).
fn ready_of_desired(o: &Value) -> Value {
    json!(format!(
        "{}/{}",
        int(o, "/status/readyReplicas"),
        int(o, "/spec/replicas")
    ))
}

fn int(o: &Value, ptr: &str) -> i64 {
    o.pointer(ptr).and_then(Value::as_i64).unwrap_or(0)
}

fn cell(col: &Column, obj: &Value, now: i64) -> Value {
    if let Some(f) = col.func {
        return f(obj);
    }
    match &col.path {
        None => obj.pointer("/metadata/name").cloned().unwrap_or(json!("")),
        Some(p) if p.is_empty() => {
            let ts = obj
                .pointer("/metadata/creationTimestamp")
                .and_then(Value::as_str)
                .and_then(parse_rfc3339);
            json!(ts
                .map(|t| human_duration(now - t))
                .unwrap_or_else(|| "<unknown>".into()))
        }
        Some(p) => {
            let v = eval_path(obj, p);
            if col.type_ == "date" {
                if let Some(t) = v.as_str().and_then(parse_rfc3339) {
                    return json!(human_duration(now - t));
                }
            }
            match v {
                Value::Null => {
                    if col.type_ == "string" || col.type_ == "date" {
                        json!("<none>")
                    } else {
                        Value::Null
                    }
                }
                Value::Array(a) => json!(a
                    .iter()
                    .map(|x| x
                        .as_str()
                        .map(String::from)
                        .unwrap_or_else(|| x.to_string()))
                    .collect::<Vec<_>>()
                    .join(",")),
                Value::String(s) => json!(s),
                other => {
                    if col.type_ == "string" {
                        json!(other.to_string())
                    } else {
                        other
                    }
                }
            }
        }
    }
}

fn row_object(obj: &Value, include: IncludeObject) -> Option<Value> {
    match include {
        IncludeObject::None => None,
        IncludeObject::Object => Some(obj.clone()),
        IncludeObject::Metadata => Some(json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
        })),
    }
}

/// Renders objects (already in `version`) as a Table.
pub fn render(
    info: &ResourceInfo,
    version: &str,
    objs: &[&Value],
    include: IncludeObject,
    list_meta: Value,
) -> Value {
    let cols = columns(info, version);
    let now = now_unix();
    let defs: Vec<Value> = cols
        .iter()
        .map(|c| json!({"name": c.name, "type": c.type_, "format": c.format, "description": c.description, "priority": c.priority}))
        .collect();
    let rows: Vec<Value> = objs
        .iter()
        .map(|o| {
            let cells: Vec<Value> = cols.iter().map(|c| cell(c, o, now)).collect();
            let mut r = json!({"cells": cells});
            if let Some(obj) = row_object(o, include) {
                r["object"] = obj;
            }
            r
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": defs,
        "rows": rows,
    })
}

/// Whether an `Accept` header asks for a Table.
pub fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.replace(' ', "").contains("as=Table"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_paths() {
        let o = json!({"spec": {"a": [{"b": 1}, {"b": 2}], "c": "x"}});
        assert_eq!(eval_path(&o, ".spec.c"), json!("x"));
        assert_eq!(eval_path(&o, ".spec.a[1].b"), json!(2));
        assert_eq!(eval_path(&o, ".spec.a[*].b"), json!([1, 2]));
        assert_eq!(eval_path(&o, ".spec.missing"), Value::Null);
    }

    #[test]
    fn accept() {
        assert!(wants_table("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"));
        assert!(!wants_table("application/json"));
    }
}
