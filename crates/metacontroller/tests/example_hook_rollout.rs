//! examples/hook-rollout as its README runs it (dev mode, or `run` against
//! METACONTROLLER_E2E_KUBECONFIG): the code in a ConfigMap, four Greetings, a code change
//! reaching them in the steps 1, 2, 4 (seen through `metacontroller rollout status`), then
//! `rollout undo` returning every Greeting to the first code. Skipped without kubectl.

use std::process::Command;
use std::time::Duration;

use metacontroller_testkit::example::{
    all_installed, example_file, wait_for, ExampleCluster, Kubectl,
};

const EXAMPLE: &str = "hook-rollout";
const BIN: &str = env!("CARGO_BIN_EXE_metacontroller");
const WAIT: Duration = Duration::from_secs(120);
const GREETINGS: [&str; 4] = ["alice", "bob", "carol", "dave"];

/// `kubectl create configmap greeting-code --from-file=sync.jsonnet=FILE`, applied so it
/// also updates (the README's `--dry-run=client -o yaml | kubectl apply -f -`).
fn apply_code(cluster: &ExampleCluster, k: &Kubectl, file: &str) {
    let from = format!(
        "--from-file=sync.jsonnet={}",
        example_file(EXAMPLE, file).display()
    );
    let yaml = k.ok(&[
        "create",
        "configmap",
        "greeting-code",
        "--dry-run=client",
        "-o",
        "yaml",
        &from,
    ]);
    let path = cluster.dir.path().join("code.yaml");
    std::fs::write(&path, yaml).expect("writing the code ConfigMap");
    k.apply(&path);
}

/// `metacontroller rollout ACTION greeting-controller`: exit code and output.
fn rollout(k: &Kubectl, action: &str) -> (i32, String) {
    let output = Command::new(BIN)
        .args(["rollout", action, "greeting-controller", "--kubeconfig"])
        .arg(&k.kubeconfig)
        .env_remove("KUBECONFIG")
        .output()
        .expect("run the metacontroller binary");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code().unwrap_or(-1), text)
}

/// How many Greetings' ConfigMaps start with `prefix`.
fn greeted(k: &Kubectl, prefix: &str) -> usize {
    GREETINGS
        .iter()
        .filter(|g| {
            let (ok, text) = k.run(&["get", "configmap", g, "-o", "jsonpath={.data.greeting}"]);
            ok && text.starts_with(prefix)
        })
        .count()
}

#[test]
fn hook_rollout_example_runs_as_documented() {
    if !all_installed(&["kubectl"]) {
        return;
    }
    let cluster = ExampleCluster::start(BIN);
    let k = cluster.namespace("hook-rollout");
    apply_code(&cluster, &k, "sync-v1.jsonnet");
    k.install_crd(&example_file(EXAMPLE, "crd.yaml"), "greetings.example.com");
    let ns = format!("namespace: {}", k.ns());
    k.apply(&cluster.rewrite(EXAMPLE, "controller.yaml", &[("namespace: default", &ns)]));
    k.apply(&example_file(EXAMPLE, "greetings.yaml"));
    wait_for(
        "every Greeting says Hello and the rollout is Complete",
        WAIT,
        || {
            let (code, text) = rollout(&k, "status");
            (code == 0 && text.contains("Complete") && greeted(&k, "Hello, ") == 4).then_some(())
        },
    );

    // The new code reaches 1, then 2, then 4 Greetings, never more than its step allows.
    apply_code(&cluster, &k, "sync-v2.jsonnet");
    let mut seen = std::collections::BTreeSet::new();
    wait_for("every Greeting says Hi", WAIT, || {
        let hi = greeted(&k, "Hi, ");
        let (code, text) = rollout(&k, "status");
        assert_eq!(code, 0, "{text}");
        for (step, allowed) in [("step 1:", 1), ("step 2:", 2)] {
            if text.contains("Progressing") && text.contains(step) {
                assert!(hi <= allowed, "{hi} Greetings on v2 at {step} {text}");
                seen.insert(step);
            }
        }
        (text.contains("Complete") && hi == 4).then_some(())
    });
    assert!(
        seen.contains("step 1:"),
        "the rollout was seen at step 1: {seen:?}"
    );

    // Undo: every Greeting back on v1 at once.
    let (code, text) = rollout(&k, "undo");
    assert_eq!(code, 0, "{text}");
    wait_for("every Greeting says Hello again", WAIT, || {
        let (_, text) = rollout(&k, "status");
        (text.contains("undone") && greeted(&k, "Hello, ") == 4).then_some(())
    });

    cluster
        .kubectl
        .ok(&["delete", "compositecontroller", "greeting-controller"]);
    cluster.clean_up(&[&k]);
}
