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
