//! A blue-green rollout as a CompositeController sync hook.
//!
//! A `BlueGreenDeployment` owns two Deployments, `<name>-blue` and `<name>-green`, and a
//! Service `<name>` whose selector picks the active color. The decision is made from
//! the observed children only (the Service's selector says which color is active), so
//! the hook is stateless and a repeated call gives the same answer:
//!
//! 1. The active color runs the parent's current pod template: it gets `spec.replicas`,
//!    the other color is scaled to 0.
//! 2. The template changed: the other color gets the new template and `spec.replicas`;
//!    the active one keeps its template and replicas, so traffic is untouched.
//! 3. Once the new color's Deployment reports the new template fully rolled out and
//!    `readyReplicas == replicas`, the Service's selector switches to it; on the next
//!    sync (triggered by the Service change) step 1 scales the old color down.

use metacontroller_hook::serde_json::{json, Map, Value};
use metacontroller_hook::{CompositeHookRequest, CompositeHookResponse, Error, Hooks};

/// Annotation on each Deployment naming the parent template it runs.
pub const TEMPLATE_HASH: &str = "example.com/template-hash";

/// The router: `POST /sync`.
pub fn hooks() -> Hooks {
    Hooks::new().sync(sync)
}

/// The sync hook.
pub async fn sync(req: CompositeHookRequest) -> Result<CompositeHookResponse, Error> {
    let parent = &req.parent;
    let name = parent["metadata"]["name"]
        .as_str()
        .ok_or_else(|| Error::msg("parent has no metadata.name"))?;
    let spec = &parent["spec"];
    let replicas = spec["replicas"].as_i64().unwrap_or(1);
    let port = spec["port"].as_i64().unwrap_or(80);
    let template = spec
        .get("template")
        .filter(|t| t.is_object())
        .ok_or_else(|| Error::msg("spec.template is required"))?;
    let hash = template_hash(template);

    let deployment = |color: &str| {
        req.children
            .group("apps/v1", "Deployment")
            .and_then(|group| {
                group
                    .values()
                    .find(|d| d["metadata"]["name"] == format!("{name}-{color}"))
            })
    };
    let service = req
        .children
        .group("v1", "Service")
        .and_then(|group| group.values().find(|s| s["metadata"]["name"] == name));
    let active = service
        .and_then(|s| s["spec"]["selector"]["color"].as_str())
        .filter(|c| *c == "blue" || *c == "green")
        .unwrap_or("blue")
        .to_string();
    let inactive = if active == "blue" { "green" } else { "blue" };

    let runs_current = |d: Option<&Value>| {
        d.is_none_or(|d| d["metadata"]["annotations"][TEMPLATE_HASH] == hash.as_str())
    };
    // (template, hash) a color keeps when it is not being changed.
    let kept = |color: &str| match deployment(color) {
        Some(d) => (
            d["spec"]["template"].clone(),
            d["metadata"]["annotations"][TEMPLATE_HASH]
                .as_str()
                .unwrap_or(&hash)
                .to_string(),
        ),
        None => (template.clone(), hash.clone()),
    };

    let (mut serving, mut phase) = (active.clone(), "Stable");
    let mut children = Vec::new();
    if runs_current(deployment(&active)) {
        let (old_template, old_hash) = kept(inactive);
        children.push(deployment_object(name, &active, template, &hash, replicas));
        children.push(deployment_object(
            name,
            inactive,
            &old_template,
            &old_hash,
            0,
        ));
    } else {
        let (old_template, old_hash) = kept(&active);
        children.push(deployment_object(
            name,
            &active,
            &old_template,
            &old_hash,
            replicas,
        ));
        children.push(deployment_object(name, inactive, template, &hash, replicas));
        if rolled_out(deployment(inactive), &hash, replicas) {
            serving = inactive.to_string();
            phase = "Switching";
        } else {
            phase = "RollingOut";
        }
    }
    children.push(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {
            "selector": {"app": name, "color": serving},
            "ports": [{"port": port, "targetPort": port}],
        },
    }));

    let mut status = Map::new();
    status.insert("activeColor".into(), json!(serving));
    status.insert("phase".into(), json!(phase));
    for color in ["blue", "green"] {
        let d = deployment(color);
        status.insert(
            color.into(),
            json!({
                "replicas": d.map_or(json!(0), |d| d["spec"]["replicas"].clone()),
                "readyReplicas": d.and_then(|d| d["status"]["readyReplicas"].as_i64()).unwrap_or(0),
                "templateHash": d.map_or(Value::Null, |d| d["metadata"]["annotations"][TEMPLATE_HASH].clone()),
            }),
        );
    }
    Ok(CompositeHookResponse {
        status: Some(status),
        children,
        ..Default::default()
    })
}

/// True when `d` runs template `hash` with all `replicas` updated and ready.
fn rolled_out(d: Option<&Value>, hash: &str, replicas: i64) -> bool {
    let Some(d) = d else { return false };
    let status = &d["status"];
    let generation = d["metadata"]["generation"].as_i64().unwrap_or(0);
    d["metadata"]["annotations"][TEMPLATE_HASH] == hash
        && d["spec"]["replicas"].as_i64() == Some(replicas)
        && status["observedGeneration"].as_i64().unwrap_or(0) >= generation
        && status["updatedReplicas"].as_i64().unwrap_or(0) == replicas
        && status["readyReplicas"].as_i64().unwrap_or(0) == replicas
}

fn deployment_object(
    name: &str,
    color: &str,
    template: &Value,
    hash: &str,
    replicas: i64,
) -> Value {
    let mut template = template.clone();
    let labels = template
        .as_object_mut()
        .map(|t| t.entry("metadata").or_insert_with(|| json!({})))
        .and_then(Value::as_object_mut)
        .map(|m| m.entry("labels").or_insert_with(|| json!({})));
    if let Some(Value::Object(labels)) = labels {
        labels.insert("app".into(), json!(name));
        labels.insert("color".into(), json!(color));
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": format!("{name}-{color}"),
            "labels": {"app": name, "color": color},
            "annotations": {TEMPLATE_HASH: hash},
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name, "color": color}},
            "template": template,
        },
    })
}

/// FNV-1a of the template's JSON text: stable across builds and platforms (unlike
/// std's hasher), so a restarted hook does not see every template as changed.
fn template_hash(template: &Value) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut text = String::new();
    canonical(template, &mut text);
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{:010x}", hash & 0xff_ffff_ffff)
}

/// JSON text with object keys sorted, whatever order the API server returned them in.
fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}
