//! apps/v1 and batch/v1 defaults (`SetDefaults_Deployment`, `_StatefulSet`,
//! `_DaemonSet`, `_ReplicaSet`, `_Job`, `_CronJob`) and the pod templates
//! inside them; empty statuses as Go serializes them.

use super::pod::pod_spec;
use super::util::*;
use serde_json::{json, Map, Value};

/// Defaults of a PodTemplateSpec: `metadata.creationTimestamp: null` and the
/// PodSpec defaults.
pub(crate) fn pod_template(template: &mut Map<String, Value>) {
    template_metadata(template);
    if let Some(spec) = obj_at(template, "spec") {
        pod_spec(spec);
    }
}

fn spec_template(spec: &mut Map<String, Value>) {
    if let Some(t) = obj_at(spec, "template") {
        pod_template(t);
    }
}

pub(crate) fn deployment(obj: &mut Map<String, Value>) {
    if let Some(spec) = obj_at(obj, "spec") {
        default_nil(spec, "replicas", json!(1));
        if let Some(strategy) = obj_at(spec, "strategy") {
            default_str(strategy, "type", "RollingUpdate");
            if strategy.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
                if let Some(ru) = obj_at(strategy, "rollingUpdate") {
                    default_nil(ru, "maxUnavailable", json!("25%"));
                    default_nil(ru, "maxSurge", json!("25%"));
                }
            }
        }
        default_nil(spec, "revisionHistoryLimit", json!(10));
        default_nil(spec, "progressDeadlineSeconds", json!(600));
        spec_template(spec);
    }
    default_nil(obj, "status", json!({}));
}

pub(crate) fn daemon_set(obj: &mut Map<String, Value>) {
    if let Some(spec) = obj_at(obj, "spec") {
        if let Some(us) = obj_at(spec, "updateStrategy") {
            default_str(us, "type", "RollingUpdate");
            if us.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
                if let Some(ru) = obj_at(us, "rollingUpdate") {
                    default_nil(ru, "maxUnavailable", json!(1));
                    default_nil(ru, "maxSurge", json!(0));
                }
            }
        }
        default_nil(spec, "revisionHistoryLimit", json!(10));
        spec_template(spec);
    }
    if let Some(status) = obj_at(obj, "status") {
        for k in [
            "currentNumberScheduled",
            "numberMisscheduled",
            "desiredNumberScheduled",
            "numberReady",
        ] {
            default_nil(status, k, json!(0));
        }
    }
}

pub(crate) fn stateful_set(obj: &mut Map<String, Value>) {
    if let Some(spec) = obj_at(obj, "spec") {
        default_str(spec, "podManagementPolicy", "OrderedReady");
        if let Some(us) = obj_at(spec, "updateStrategy") {
            // rollingUpdate only materializes when the type itself was defaulted.
            if is_empty_str(us, "type") {
                us.insert("type".into(), json!("RollingUpdate"));
                default_nil(us, "rollingUpdate", json!({}));
            }
            if us.get("type").and_then(Value::as_str) == Some("RollingUpdate") {
                if let Some(ru) = existing_obj(us, "rollingUpdate") {
                    default_nil(ru, "partition", json!(0));
                }
            }
        }
        if let Some(p) = obj_at(spec, "persistentVolumeClaimRetentionPolicy") {
            default_str(p, "whenDeleted", "Retain");
            default_str(p, "whenScaled", "Retain");
        }
        default_nil(spec, "replicas", json!(1));
        default_nil(spec, "revisionHistoryLimit", json!(10));
        spec_template(spec);
        each_obj_in(spec, "volumeClaimTemplates", |t| {
            // `SetDefaults_StatefulSet`: claim templates are full PersistentVolumeClaims.
            default_str(t, "apiVersion", "v1");
            default_str(t, "kind", "PersistentVolumeClaim");
            pvc(t);
        });
    }
    if let Some(status) = obj_at(obj, "status") {
        default_nil(status, "replicas", json!(0));
        default_nil(status, "availableReplicas", json!(0));
    }
}

/// A PersistentVolumeClaim (also as a StatefulSet claim template).
pub(crate) fn pvc(obj: &mut Map<String, Value>) {
    template_metadata(obj);
    if let Some(spec) = obj_at(obj, "spec") {
        default_nil(spec, "volumeMode", json!("Filesystem"));
        default_nil(spec, "resources", json!({}));
    }
    if let Some(status) = obj_at(obj, "status") {
        default_str(status, "phase", "Pending");
    }
}

pub(crate) fn replica_set(obj: &mut Map<String, Value>) {
    if let Some(spec) = obj_at(obj, "spec") {
        default_nil(spec, "replicas", json!(1));
        spec_template(spec);
    }
    if let Some(status) = obj_at(obj, "status") {
        default_nil(status, "replicas", json!(0));
    }
}

/// `SetDefaults_Job` (Kubernetes 1.31 with default feature gates:
/// JobPodReplacementPolicy on).
pub(crate) fn job(obj: &mut Map<String, Value>) {
    let template_labels = obj
        .get("spec")
        .and_then(|s| s.pointer("/template/metadata/labels"))
        .cloned();
    if let Some(spec) = obj_at(obj, "spec") {
        job_spec(spec);
    }
    // Job labels default to the template's labels.
    if let Some(Value::Object(labels)) = template_labels {
        if let Some(meta) = obj_at(obj, "metadata") {
            let empty = match meta.get("labels") {
                None | Some(Value::Null) => true,
                Some(Value::Object(m)) => m.is_empty(),
                _ => false,
            };
            if empty {
                meta.insert("labels".into(), Value::Object(labels));
            }
        }
    }
    default_nil(obj, "status", json!({}));
}

fn job_spec(spec: &mut Map<String, Value>) {
    if is_nil(spec, "completions") && is_nil(spec, "parallelism") {
        spec.insert("completions".into(), json!(1));
        spec.insert("parallelism".into(), json!(1));
    }
    default_nil(spec, "parallelism", json!(1));
    if is_nil(spec, "backoffLimit") {
        let v = if is_nil(spec, "backoffLimitPerIndex") {
            6
        } else {
            i64::from(i32::MAX)
        };
        spec.insert("backoffLimit".into(), json!(v));
    }
    default_nil(spec, "completionMode", json!("NonIndexed"));
    default_nil(spec, "suspend", json!(false));
    // `podReplacementPolicy` is defaulted only under the JobPodReplacementPolicy feature
    // gate, alpha (off) in Kubernetes 1.28: a 1.28 server leaves it unset.
    if let Some(pfp) = existing_obj(spec, "podFailurePolicy") {
        each_obj_in(pfp, "rules", |r| {
            each_obj_in(r, "onPodConditions", |c| default_str(c, "status", "True"));
        });
    }
    spec_template(spec);
}

pub(crate) fn cron_job(obj: &mut Map<String, Value>) {
    if let Some(spec) = obj_at(obj, "spec") {
        default_str(spec, "concurrencyPolicy", "Allow");
        default_nil(spec, "suspend", json!(false));
        default_nil(spec, "successfulJobsHistoryLimit", json!(3));
        default_nil(spec, "failedJobsHistoryLimit", json!(1));
        if let Some(jt) = obj_at(spec, "jobTemplate") {
            // SetDefaults_Job is for Jobs only: the JobSpec of a template
            // gets just its pod template defaulted.
            template_metadata(jt);
            if let Some(js) = obj_at(jt, "spec") {
                spec_template(js);
            }
        }
    }
    default_nil(obj, "status", json!({}));
}
