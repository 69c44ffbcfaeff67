//! autoscaling/v2 `SetDefaults_HorizontalPodAutoscaler`: `minReplicas: 1`, a CPU
//! utilization target of 80 % when no metric is given, and, when `behavior` is given, the
//! default scale-up and scale-down rules for every field it leaves unset. Plus the status
//! fields Go always serializes.

use serde_json::{json, Map, Value};

use super::util::{default_nil, obj_at};

/// Defaults of a HorizontalPodAutoscaler (autoscaling/v2).
pub(crate) fn horizontal_pod_autoscaler(o: &mut Map<String, Value>) {
    if let Some(spec) = obj_at(o, "spec") {
        default_nil(spec, "minReplicas", json!(1));
        if spec
            .get("metrics")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
        {
            spec.insert(
                "metrics".into(),
                json!([{"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 80}}}]),
            );
        }
        if let Some(Value::Object(behavior)) = spec.get_mut("behavior") {
            let up = json!({"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15},
                             {"type": "Percent", "value": 100, "periodSeconds": 15}]});
            // No default stabilization window down: the controller's flag decides it.
            let down = json!({"selectPolicy": "Max",
                "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]});
            rules(behavior, "scaleUp", up);
            rules(behavior, "scaleDown", down);
        }
    }
    if let Some(status) = obj_at(o, "status") {
        status.entry("currentMetrics").or_insert(Value::Null);
        status.entry("desiredReplicas").or_insert(json!(0));
    }
}

/// The rules at `key`, each unset field (null or absent) taken from `defaults`.
fn rules(behavior: &mut Map<String, Value>, key: &str, defaults: Value) {
    let Value::Object(defaults) = defaults else {
        return;
    };
    let Some(given) = obj_at(behavior, key) else {
        return;
    };
    for (field, value) in defaults {
        default_nil(given, &field, value);
    }
}
