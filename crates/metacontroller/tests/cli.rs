//! The binary's command-line contract, exercised as a user would: as a process.

use std::process::Command;

fn metacontroller(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_metacontroller"))
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .expect("run the metacontroller binary")
}

#[test]
fn help_lists_upstream_flag_names() {
    let output = metacontroller(&["--help"]);
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for flag in [
        "--discovery-interval",
        "--cache-flush-interval",
        "--workers",
        "--client-go-qps",
        "--client-go-burst",
        "--metrics-address",
        "--health-probe-bind-address",
        "--leader-election",
        "--leader-election-resource-lock",
        "--leader-election-namespace",
        "--leader-election-id",
        "--target-label-selector",
        "--apply-strategy",
        "--apply-strategy-ssa-field-manager",
        "--events-qps",
        "--events-burst",
        "--pprof-address",
        "--kubeconfig",
        "--zap-log-level",
        "--log-level",
        "--log-format",
    ] {
        assert!(help.contains(flag), "--help does not list {flag}");
    }
}

#[test]
fn run_splits_parents_into_60_shards_by_default() {
    // 60 divides evenly over 2, 3, 4, 5, 6, 10 or 12 replicas; the chart's default is the same.
    let output = metacontroller(&["run", "--help"]);
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    let shards = help
        .split("--shards <N>")
        .nth(1)
        .and_then(|rest| rest.split("--shard-lease-duration").next())
        .unwrap_or_default();
    assert!(shards.contains("[default: 60]"), "{help}");
}

#[test]
fn invalid_flag_value_exits_2_with_one_line() {
    let output = metacontroller(&["--discovery-interval", "soon"]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr:?}");
    assert!(stderr.contains("--discovery-interval"), "{stderr:?}");
    assert!(stderr.contains("Go duration"), "{stderr:?}");
}

#[test]
fn unknown_flag_exits_2_with_one_line() {
    let output = metacontroller(&["--no-such-flag"]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr:?}");
    assert!(stderr.contains("--no-such-flag"), "{stderr:?}");
}

#[test]
fn unreadable_kubeconfig_fails_cleanly() {
    let output = metacontroller(&["run", "--kubeconfig", "/nonexistent/kubeconfig"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("/nonexistent/kubeconfig"), "{stderr:?}");
    assert!(!stderr.contains("panicked"), "{stderr:?}");
}

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn merge_keeps_foreign_fields_and_reports_update() {
    let dir = tempfile::tempdir().unwrap();
    // A Deployment as the cluster has it: a sidecar injected by someone else.
    let observed = write(
        &dir,
        "observed.yaml",
        r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
  resourceVersion: "42"
  annotations:
    metacontroller.k8s.io/last-applied-configuration: '{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"default"},"spec":{"template":{"spec":{"containers":[{"name":"app","image":"app:1"}]}}}}'
spec:
  template:
    spec:
      containers:
      - name: app
        image: app:1
      - name: sidecar
        image: proxy:1
"#,
    );
    let desired = write(
        &dir,
        "desired.json",
        r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"default"},
            "spec":{"template":{"spec":{"containers":[{"name":"app","image":"app:2"}]}}}}"#,
    );
    let output = metacontroller(&["merge", "--observed", &observed, "--desired", &desired]);
    assert!(output.status.success(), "{output:?}");
    let merged: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let containers = &merged["spec"]["template"]["spec"]["containers"];
    assert_eq!(containers[0]["image"], "app:2");
    assert_eq!(containers[1]["name"], "sidecar");
    assert_eq!(
        String::from_utf8_lossy(&output.stderr).trim(),
        "update: yes"
    );

    // Merging the result again changes nothing.
    let again = write(
        &dir,
        "merged.json",
        &String::from_utf8_lossy(&output.stdout),
    );
    let output = metacontroller(&["merge", "--observed", &again, "--desired", &desired]);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stderr).trim(), "update: no");
}

#[test]
fn merge_rejects_invalid_input_with_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let observed = write(&dir, "observed.json", "{\"spec\": {\"a\": 1}}");
    let broken = write(&dir, "broken.json", "{not json");
    let output = metacontroller(&["merge", "--observed", &observed, "--desired", &broken]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("broken.json"), "{stderr:?}");

    let scalar = write(&dir, "scalar.json", "[1, 2]");
    let output = metacontroller(&["merge", "--observed", &observed, "--desired", &scalar]);
    assert_eq!(output.status.code(), Some(1));
    assert!(!String::from_utf8_lossy(&output.stderr).contains("panicked"));

    let missing = dir.path().join("missing.json");
    let output = metacontroller(&[
        "merge",
        "--observed",
        &observed,
        "--desired",
        missing.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1));
}
