//! The Job controller: `parallelism` pods at a time until `completions` succeed (NonIndexed),
//! or one success per index (Indexed, with `completedIndexes`), failed pods replaced until
//! `backoffLimit`, `suspend`, and the status and conditions (SuccessCriteriaMet + Complete,
//! FailureTarget + Failed) of Kubernetes 1.32.

use super::util::{self, int_at, CONTROLLER_MANAGER};
use super::Sim;
use crate::store::{meta_str, State};
use crate::time::now_rfc3339;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::Arc;

const INDEX: &str = "batch.kubernetes.io/job-completion-index";
const SOURCE: &str = "job-controller";

fn finished(job: &Value) -> bool {
    ["Complete", "Failed"].iter().any(|t| {
        util::condition(job, t)
            .and_then(|c| c.get("status"))
            .and_then(Value::as_str)
            == Some("True")
    })
}

fn index_of(pod: &Value) -> Option<i64> {
    util::annotation(pod, INDEX).and_then(|i| i.parse().ok())
}

/// `0,2-4` from a set of indexes.
fn ranges(set: &BTreeSet<i64>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut iter = set.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    out.join(",")
}

fn parse_ranges(s: &str) -> BTreeSet<i64> {
    let mut out = BTreeSet::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let mut bounds = part.splitn(2, '-').map(|b| b.parse::<i64>().ok());
        if let Some(Some(a)) = bounds.next() {
            let b = bounds.next().flatten().unwrap_or(a);
            out.extend(a..=b.min(a + 100_000));
        }
    }
    out
}

pub(super) fn reconcile(_sim: &mut Sim, st: &mut State, ns: &str, name: &str) {
    let Some(job) = util::get(st, "batch", "jobs", ns, name) else {
        return;
    };
    if util::is_deleting(&job) || finished(&job) {
        return;
    }
    let indexed = job.pointer("/spec/completionMode").and_then(Value::as_str) == Some("Indexed");
    let completions = job.pointer("/spec/completions").and_then(Value::as_i64);
    let parallelism = int_at(&job, "/spec/parallelism", 1).max(0);
    let backoff = int_at(&job, "/spec/backoffLimit", 6);
    let suspended = job.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true);
    let pods = util::owned(st, meta_str(&job, "uid"), "", "pods");
    let active: Vec<&Arc<Value>> = pods.iter().filter(|p| util::is_active(p)).collect();
    let terminating = pods
        .iter()
        .filter(|p| util::is_deleting(p) && !matches!(util::phase(p), "Succeeded" | "Failed"))
        .count() as i64;
    let succeeded_pods: Vec<&Arc<Value>> = pods
        .iter()
        .filter(|p| util::phase(p) == "Succeeded")
        .collect();
    let failed = (pods.iter().filter(|p| util::phase(p) == "Failed").count() as i64).max(int_at(
        &job,
        "/status/failed",
        0,
    ));
    let mut done_indexes: BTreeSet<i64> = job
        .pointer("/status/completedIndexes")
        .and_then(Value::as_str)
        .map(parse_ranges)
        .unwrap_or_default();
    if indexed {
        let limit = completions.unwrap_or(0);
        done_indexes.extend(
            succeeded_pods
                .iter()
                .filter_map(|p| index_of(p))
                .filter(|i| *i < limit),
        );
    }
    let succeeded = if indexed {
        done_indexes.len() as i64
    } else {
        (succeeded_pods.len() as i64).max(int_at(&job, "/status/succeeded", 0))
    };

    let mut conds: Vec<Value> = job
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let now = now_rfc3339();
    let complete = match completions {
        Some(c) => succeeded >= c,
        None => succeeded > 0 && active.is_empty(),
    };
    let failing = failed > backoff;
    let mut completion_time = None;
    if failing {
        for p in &active {
            delete_pod(st, &job, p);
        }
        let reason = json!({"reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"});
        add_condition(&mut conds, "FailureTarget", &reason, &now);
        if active.is_empty() && terminating == 0 {
            add_condition(&mut conds, "Failed", &reason, &now);
            util::event(
                st,
                &job,
                "Warning",
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
                SOURCE,
            );
        }
    } else if complete {
        for p in &active {
            delete_pod(st, &job, p);
        }
        let reason = json!({"reason": "CompletionsReached", "message": "Reached expected number of succeeded pods"});
        add_condition(&mut conds, "SuccessCriteriaMet", &reason, &now);
        if active.is_empty() && terminating == 0 {
            add_condition(&mut conds, "Complete", &reason, &now);
            completion_time = Some(now.clone());
            util::event(st, &job, "Normal", "Completed", "Job completed", SOURCE);
        }
    } else if suspended {
        for p in &active {
            delete_pod(st, &job, p);
        }
    } else if indexed {
        let limit = completions.unwrap_or(0);
        let running: BTreeSet<i64> = active.iter().filter_map(|p| index_of(p)).collect();
        let room = (parallelism - active.len() as i64).max(0) as usize;
        let missing: Vec<i64> = (0..limit)
            .filter(|i| !done_indexes.contains(i) && !running.contains(i))
            .take(room)
            .collect();
        for i in missing {
            create_pod(st, &job, Some(i));
        }
    } else {
        let want = match completions {
            Some(c) => parallelism.min(c - succeeded),
            None if succeeded > 0 => 0,
            None => parallelism,
        };
        for _ in active.len() as i64..want {
            create_pod(st, &job, None);
        }
    }

    let mut status = json!({
        "ready": active.iter().filter(|p| util::is_ready(p)).count(),
        "terminating": terminating,
        "uncountedTerminatedPods": {},
    });
    match job.pointer("/status/startTime") {
        Some(t) => status["startTime"] = t.clone(),
        None if !suspended => status["startTime"] = json!(now),
        None => {}
    }
    let still_active = if failing || complete || suspended {
        0
    } else {
        active.len() as i64
    };
    for (k, v) in [
        ("active", still_active),
        ("succeeded", succeeded),
        ("failed", failed),
    ] {
        if v > 0 {
            status[k] = json!(v);
        }
    }
    if indexed && !done_indexes.is_empty() {
        status["completedIndexes"] = json!(ranges(&done_indexes));
    }
    if let Some(t) = completion_time {
        status["completionTime"] = json!(t);
    }
    if !conds.is_empty() {
        status["conditions"] = json!(conds);
    }
    util::set_status(st, "batch", "jobs", &job, status, CONTROLLER_MANAGER);
}

fn add_condition(conds: &mut Vec<Value>, type_: &str, why: &Value, now: &str) {
    if conds
        .iter()
        .any(|c| c.get("type").and_then(Value::as_str) == Some(type_))
    {
        return;
    }
    conds.push(json!({
        "type": type_, "status": "True", "reason": why["reason"], "message": why["message"],
        "lastProbeTime": now, "lastTransitionTime": now,
    }));
}

fn create_pod(st: &mut State, job: &Value, index: Option<i64>) {
    let name = meta_str(job, "name");
    let template = job.pointer("/spec/template").cloned().unwrap_or(json!({}));
    let extra: Vec<(&str, String)> = index.map(|i| (INDEX, i.to_string())).into_iter().collect();
    let mut pod = util::pod_from_template(job, &template, &extra);
    match index {
        Some(i) => {
            pod["metadata"]["generateName"] = json!(format!("{name}-{i}-"));
            if !pod["metadata"]["annotations"].is_object() {
                pod["metadata"]["annotations"] = json!({});
            }
            pod["metadata"]["annotations"][INDEX] = json!(i.to_string());
            pod["spec"]["hostname"] = json!(format!("{name}-{i}"));
            if let Some(containers) = pod["spec"]["containers"].as_array_mut() {
                for c in containers {
                    let mut env = c["env"].as_array().cloned().unwrap_or_default();
                    env.push(
                        json!({"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
                            "apiVersion": "v1",
                            "fieldPath": format!("metadata.labels['{INDEX}']"),
                        }}}),
                    );
                    c["env"] = json!(env);
                }
            }
        }
        None => pod["metadata"]["generateName"] = json!(format!("{name}-")),
    }
    let ns = meta_str(job, "namespace").to_string();
    if let Some(created) = util::create(st, "", "pods", &ns, pod, CONTROLLER_MANAGER) {
        let msg = format!("Created pod: {}", meta_str(&created, "name"));
        util::event(st, job, "Normal", "SuccessfulCreate", &msg, SOURCE);
    }
}

fn delete_pod(st: &mut State, job: &Value, pod: &Value) {
    let pod_name = meta_str(pod, "name").to_string();
    if util::delete(st, "", "pods", meta_str(pod, "namespace"), &pod_name) {
        let msg = format!("Deleted pod: {pod_name}");
        util::event(st, job, "Normal", "SuccessfulDelete", &msg, SOURCE);
    }
}
