//! examples/rolling-pods as its README runs it: numbered Pods with updateStrategy
//! RollingRecreate and ControllerRevisions. A template change replaces the pods one at a
//! time (never more than one unavailable, and every intermediate count of replaced pods is
//! seen), the parent's status follows pod readiness, and scaling does not roll.
//! Skipped without kubectl or python3.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use metacontroller_testkit::example::{example_file, ExampleCluster, Kubectl, STEP_TIMEOUT};

const EXAMPLE: &str = "rolling-pods";
const OLD: &str = "nginxinc/nginx-unprivileged:1.26";
const NEW: &str = "nginxinc/nginx-unprivileged:1.27";

/// One pod as `kubectl get` shows it.
#[derive(Debug)]
struct Pod {
    name: String,
    uid: String,
    image: String,
    ready: bool,
    deleting: bool,
}

fn pods(k: &Kubectl) -> Vec<Pod> {
    let out = k.ok(&[
        "get",
        "pods",
        "-l",
        "app=web",
        "-o",
        r#"jsonpath={range .items[*]}{.metadata.name},{.metadata.uid},{.spec.containers[0].image},{.status.conditions[?(@.type=="Ready")].status},{.metadata.deletionTimestamp}{"\n"}{end}"#,
    ]);
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            Pod {
                name: f[0].to_string(),
                uid: f[1].to_string(),
                image: f[2].to_string(),
                ready: f[3] == "True",
                deleting: !f[4].is_empty(),
            }
        })
        .collect()
}

fn revisions(k: &Kubectl) -> Vec<String> {
    k.names(&["controllerrevisions.metacontroller.k8s.io"])
}

/// Watches the rollout after a template change until all three pods run the new image:
/// never more than one of them unavailable, the number of replaced pods never goes down, and
/// each of 1, 2, 3 is seen on the way.
fn watch_one_at_a_time(k: &Kubectl) {
    let mut seen_replaced = BTreeSet::new();
    let mut last_replaced = 0;
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        let now = pods(k);
        let available = now.iter().filter(|p| p.ready && !p.deleting).count();
        assert!(available >= 2, "more than one pod unavailable: {now:?}");
        let replaced = now.iter().filter(|p| p.image == NEW && !p.deleting).count();
        assert!(
            replaced >= last_replaced,
            "replaced pods went from {last_replaced} to {replaced}: {now:?}"
        );
        last_replaced = replaced;
        seen_replaced.insert(replaced);
        if replaced == 3 && available == 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the rollout did not finish: {now:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        seen_replaced.contains(&1) && seen_replaced.contains(&2),
        "the pods were not replaced one at a time: saw {seen_replaced:?} pods replaced"
    );
}

/// After the rollout the parent is on its latest revision, and the newest
/// ControllerRevision claims every pod.
fn newest_revision_claims_every_pod(k: &Kubectl) {
    k.until_jsonpath(
        &["rollingpodset", "web"],
        r#"{.status.readyReplicas} {.status.conditions[?(@.type=="Updated")].reason}"#,
        "3 OnLatestRevision",
    );
    let revs = revisions(k);
    assert!(!revs.is_empty() && revs.len() <= 2, "{revs:?}");
    let claimed: Vec<String> = revs
        .iter()
        .map(|r| {
            k.jsonpath(
                &["controllerrevisions.metacontroller.k8s.io", r],
                "{.children[0].names}",
            )
        })
        .collect();
    assert!(
        claimed
            .iter()
            .any(|c| c.contains("web-0") && c.contains("web-1") && c.contains("web-2")),
        "{revs:?}: {claimed:?}"
    );
}

/// Scaling to 4 is not a new revision: web-3 comes with the new template, none of the
/// pods in `before` moves.
fn scaling_does_not_roll(k: &Kubectl, before: &[Pod]) {
    k.merge_patch("rollingpodset", "web", r#"{"spec":{"replicas":4}}"#);
    k.until_jsonpath(&["rollingpodset", "web"], "{.status.readyReplicas}", "4");
    let scaled = pods(k);
    assert_eq!(scaled.len(), 4);
    assert_eq!(scaled[3].image, NEW);
    for (before, now) in before.iter().zip(&scaled) {
        assert_eq!(before.uid, now.uid, "{} was replaced by scaling", now.name);
    }
}

#[test]
fn rolling_pods_replace_one_pod_at_a_time_on_a_template_change() {
    let Some((cluster, _hook, k)) = ExampleCluster::start_python_example(
        env!("CARGO_BIN_EXE_metacontroller"),
        EXAMPLE,
        "rolling",
        "rollingpodsets.example.com",
    ) else {
        return;
    };
    k.apply(&example_file(EXAMPLE, "web.yaml"));

    // Status from pod readiness; one revision.
    k.until_jsonpath(
        &["rollingpodset", "web"],
        "{.status.replicas} {.status.readyReplicas}",
        "3 3",
    );
    let first = pods(&k);
    let names: Vec<&str> = first.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["web-0", "web-1", "web-2"]);
    assert!(first.iter().all(|p| p.image == OLD && p.ready), "{first:?}");
    assert_eq!(revisions(&k).len(), 1);

    k.ok(&[
        "patch",
        "rollingpodset",
        "web",
        "--type",
        "json",
        "-p",
        &format!(
            r#"[{{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"{NEW}"}}]"#
        ),
    ]);
    watch_one_at_a_time(&k);
    let after = pods(&k);
    for (old, new) in first.iter().zip(&after) {
        assert_eq!(old.name, new.name);
        assert_ne!(old.uid, new.uid, "{} was not recreated", new.name);
    }
    newest_revision_claims_every_pod(&k);
    scaling_does_not_roll(&k, &after);

    k.ok(&["delete", "rollingpodset", "web", "--wait=true"]);
    k.until(
        "the pods to be garbage collected",
        &["get", "pods", "-l", "app=web", "-o", "name"],
        |ok, out| ok && out.trim().is_empty(),
    );
    cluster.clean_up(&[&k]);
}
