//! PodSpec, Container, Volume and Probe defaults (core/v1 `SetDefaults_*`
//! plus the generated per-field defaulters), and the Pod-only defaults.

use super::util::*;
use serde_json::{json, Map, Value};

/// `SetDefaults_PodSpec` and everything nested in a PodSpec. Applies to
/// pods and to every pod template (deployments, jobs, ...).
pub(crate) fn pod_spec(spec: &mut Map<String, Value>) {
    default_str(spec, "dnsPolicy", "ClusterFirst");
    default_str(spec, "restartPolicy", "Always");
    default_nil(spec, "securityContext", json!({}));
    default_nil(spec, "terminationGracePeriodSeconds", json!(30));
    default_str(spec, "schedulerName", "default-scheduler");
    for key in ["containers", "initContainers", "ephemeralContainers"] {
        each_obj_in(spec, key, container);
    }
    each_obj_in(spec, "volumes", volume);
    mirror_service_account(spec);
}

/// The v1 conversion keeps the deprecated `serviceAccount` and
/// `serviceAccountName` in sync (the latter wins when both are set).
fn mirror_service_account(spec: &mut Map<String, Value>) {
    if is_empty_str(spec, "serviceAccountName") {
        if let Some(sa) = spec.get("serviceAccount").filter(|v| !is_blank(v)).cloned() {
            spec.insert("serviceAccountName".into(), sa);
        }
    }
    if let Some(sa) = spec
        .get("serviceAccountName")
        .filter(|v| !is_blank(v))
        .cloned()
    {
        spec.insert("serviceAccount".into(), sa);
    }
}

fn is_blank(v: &Value) -> bool {
    matches!(v, Value::Null) || v.as_str() == Some("")
}

/// `SetDefaults_Container` plus ports, probes, env field refs; Go always
/// emits the non-pointer `resources` struct, so `resources: {}` appears.
pub(crate) fn container(c: &mut Map<String, Value>) {
    if is_empty_str(c, "imagePullPolicy") {
        let image = c.get("image").and_then(Value::as_str).unwrap_or("");
        let policy = if image_tag(image).as_deref() == Some("latest") {
            "Always"
        } else {
            "IfNotPresent"
        };
        c.insert("imagePullPolicy".into(), json!(policy));
    }
    default_str(c, "terminationMessagePath", "/dev/termination-log");
    default_str(c, "terminationMessagePolicy", "File");
    default_nil(c, "resources", json!({}));
    each_obj_in(c, "ports", |p| default_str(p, "protocol", "TCP"));
    for probe_key in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = existing_obj(c, probe_key) {
            probe(p);
        }
    }
    if let Some(lc) = existing_obj(c, "lifecycle") {
        for hook in ["postStart", "preStop"] {
            if let Some(h) = existing_obj(lc, hook) {
                if let Some(g) = existing_obj(h, "httpGet") {
                    http_get(g);
                }
            }
        }
    }
    each_obj_in(c, "env", |e| {
        if let Some(vf) = existing_obj(e, "valueFrom") {
            if let Some(fr) = existing_obj(vf, "fieldRef") {
                default_str(fr, "apiVersion", "v1");
            }
        }
    });
}

fn probe(p: &mut Map<String, Value>) {
    default_num(p, "timeoutSeconds", 1);
    default_num(p, "periodSeconds", 10);
    default_num(p, "successThreshold", 1);
    default_num(p, "failureThreshold", 3);
    if let Some(g) = existing_obj(p, "httpGet") {
        http_get(g);
    }
}

fn http_get(g: &mut Map<String, Value>) {
    default_str(g, "path", "/");
    default_str(g, "scheme", "HTTP");
}

const VOLUME_SOURCES: &[&str] = &[
    "hostPath",
    "emptyDir",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "persistentVolumeClaim",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "downwardAPI",
    "fc",
    "azureFile",
    "configMap",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "projected",
    "portworxVolume",
    "scaleIO",
    "storageos",
    "csi",
    "ephemeral",
    "image",
];

/// `SetDefaults_Volume` (no source → `emptyDir: {}`) and the per-source
/// `defaultMode: 420` (0644) defaults.
fn volume(v: &mut Map<String, Value>) {
    if VOLUME_SOURCES.iter().all(|k| is_nil(v, k)) {
        v.insert("emptyDir".into(), json!({}));
    }
    for key in ["secret", "configMap", "downwardAPI", "projected"] {
        if let Some(src) = existing_obj(v, key) {
            default_nil(src, "defaultMode", json!(420));
        }
    }
    if let Some(hp) = existing_obj(v, "hostPath") {
        default_nil(hp, "type", json!(""));
    }
    if let Some(d) = existing_obj(v, "downwardAPI") {
        downward_api_items(d);
    }
    if let Some(p) = existing_obj(v, "projected") {
        each_obj_in(p, "sources", |s| {
            if let Some(t) = existing_obj(s, "serviceAccountToken") {
                default_nil(t, "expirationSeconds", json!(3600));
            }
            if let Some(d) = existing_obj(s, "downwardAPI") {
                downward_api_items(d);
            }
        });
    }
}

/// `SetDefaults_ObjectFieldSelector` for the `fieldRef` of each downward API item.
fn downward_api_items(d: &mut Map<String, Value>) {
    each_obj_in(d, "items", |i| {
        if let Some(fr) = existing_obj(i, "fieldRef") {
            default_str(fr, "apiVersion", "v1");
        }
    });
}

/// The tag the kubelet's image-name parser finds (`latest` when the
/// reference has neither tag nor digest; `None` when it has only a digest).
pub(crate) fn image_tag(image: &str) -> Option<String> {
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    // A tag is after the last ':' that follows the last '/' (a ':' before
    // it is a registry port).
    let last_slash = name.rfind('/').map(|i| i + 1).unwrap_or(0);
    let tag = name[last_slash..]
        .rsplit_once(':')
        .map(|(_, t)| t.to_string());
    match (tag, digest) {
        (Some(t), _) => Some(t),
        (None, Some(_)) => None,
        (None, None) => Some("latest".to_string()),
    }
}

/// `SetDefaults_Pod`: requests default to limits per container,
/// `enableServiceLinks: true`, host-network host ports. Plus what the default
/// admission chain adds to every pod: the `default` service account,
/// `priority: 0` with `preemptionPolicy: PreemptLowerPriority`, and the
/// not-ready/unreachable tolerations for 300s. (The projected service
/// account token volume is not injected.)
pub(crate) fn pod_only(spec: &mut Map<String, Value>) {
    for key in ["containers", "initContainers"] {
        each_obj_in(spec, key, |c| {
            if let Some(res) = existing_obj(c, "resources") {
                if let Some(Value::Object(limits)) = res.get("limits").cloned() {
                    if let Some(req) = obj_at(res, "requests") {
                        for (k, v) in limits {
                            req.entry(k).or_insert(v);
                        }
                    }
                }
            }
        });
    }
    default_nil(spec, "enableServiceLinks", json!(true));
    if spec.get("hostNetwork") == Some(&Value::Bool(true)) {
        for key in ["containers", "initContainers"] {
            each_obj_in(spec, key, |c| {
                each_obj_in(c, "ports", |p| {
                    if is_zero_num(p, "hostPort") {
                        if let Some(cp) = p.get("containerPort").cloned() {
                            p.insert("hostPort".into(), cp);
                        }
                    }
                })
            });
        }
    }
    // ServiceAccount admission.
    if is_empty_str(spec, "serviceAccountName") && is_empty_str(spec, "serviceAccount") {
        spec.insert("serviceAccountName".into(), json!("default"));
    }
    mirror_service_account(spec);
    // Priority admission: no class named → 0 (no default PriorityClass
    // exists); the two built-in system classes have fixed values. Other
    // class names would need PriorityClass objects, which are not served.
    let class_priority = match spec.get("priorityClassName").and_then(Value::as_str) {
        None | Some("") => Some(0),
        Some("system-cluster-critical") => Some(2_000_000_000),
        Some("system-node-critical") => Some(2_000_001_000),
        Some(_) => None,
    };
    if let Some(p) = class_priority {
        default_nil(spec, "priority", json!(p));
        default_nil(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
    }
    // DefaultTolerationSeconds admission.
    let tolerations = spec
        .entry("tolerations".to_string())
        .or_insert(Value::Array(Vec::new()));
    if tolerations.is_null() {
        *tolerations = Value::Array(Vec::new());
    }
    if let Value::Array(list) = tolerations {
        for key in [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        ] {
            // An empty key counts as tolerating the taint, as upstream checks it.
            let present = list.iter().any(|t| {
                let k = t.get("key").and_then(Value::as_str).unwrap_or("");
                let effect = t.get("effect").and_then(Value::as_str).unwrap_or("");
                (k.is_empty() || k == key) && (effect.is_empty() || effect == "NoExecute")
            });
            if !present {
                list.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
            }
        }
    }
}

/// Pod QoS class as the real `qos.GetPodQOS` computes it, from cpu/memory
/// requests and limits of all (init) containers.
pub(crate) fn qos_class(spec: &Map<String, Value>) -> &'static str {
    let mut any = false;
    let mut guaranteed = true;
    for key in ["containers", "initContainers"] {
        let Some(Value::Array(cs)) = spec.get(key) else {
            continue;
        };
        for c in cs {
            let req = c.pointer("/resources/requests");
            let lim = c.pointer("/resources/limits");
            for r in ["cpu", "memory"] {
                let rq = req.and_then(|m| m.get(r));
                let lm = lim.and_then(|m| m.get(r));
                if rq.is_some() || lm.is_some() {
                    any = true;
                }
                match (rq, lm) {
                    (Some(a), Some(b)) if quantity_eq(a, b) => {}
                    (None, Some(_)) => {}
                    _ => guaranteed = false,
                }
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

fn quantity_eq(a: &Value, b: &Value) -> bool {
    let s = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    s(a) == s(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_tags_like_the_kubelet_parser() {
        assert_eq!(image_tag("nginx").as_deref(), Some("latest"));
        assert_eq!(image_tag("nginx:latest").as_deref(), Some("latest"));
        assert_eq!(image_tag("nginx:1.25").as_deref(), Some("1.25"));
        assert_eq!(image_tag("registry:5000/app").as_deref(), Some("latest"));
        assert_eq!(image_tag("registry:5000/app:v1").as_deref(), Some("v1"));
        assert_eq!(image_tag("app@sha256:abcd"), None);
        assert_eq!(image_tag("app:v2@sha256:abcd").as_deref(), Some("v2"));
    }

    #[test]
    fn qos_classes() {
        let best = json!({"containers": [{"name": "a"}]});
        assert_eq!(qos_class(best.as_object().unwrap()), "BestEffort");
        let g = json!({"containers": [{"resources": {
            "limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}}}]});
        assert_eq!(qos_class(g.as_object().unwrap()), "Guaranteed");
        let b = json!({"containers": [{"resources": {"requests": {"cpu": "100m"}}}]});
        assert_eq!(qos_class(b.as_object().unwrap()), "Burstable");
    }
}
