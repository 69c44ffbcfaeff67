//! The chart's alerting rules through Prometheus' own tools: the PrometheusRule rendered by
//! Helm's engine (`hack/helm_chart.py`) with `tests/prometheus/values.yaml` passes
//! `promtool check rules`, and the unit tests in `tests/prometheus/rules_test.yaml` (each
//! alert once firing, once not) pass `promtool test rules`. Every alert's `runbook_url`
//! points at a section of docs/src/troubleshooting.md.
//!
//! promtool comes from Debian's `prometheus` package (`.ci/run` installs it); without it,
//! or without the Helm SDK, these tests skip outside CI and fail in CI (`CI=true`).

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

mod helm;
mod prometheus;
use helm::{helm_chart, helm_sdk_available, repo_root};
use prometheus::{promtool_available, run_promtool};

/// The rule groups of the chart's PrometheusRule rendered with `values` (a file under the
/// repository root), as JSON.
async fn rendered_rules(values: &str) -> Value {
    let values = repo_root().join(values);
    let out = helm_chart(&["render", "--values", &values.display().to_string()])
        .await
        .expect_ok("rendering the chart with the alerting rules");
    let objects: Vec<Value> = serde_json::from_str(&out).expect("JSON objects");
    let rule = objects
        .iter()
        .find(|o| o["kind"] == "PrometheusRule")
        .expect("the render has a PrometheusRule");
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    rule["spec"].clone()
}

/// The names of the alerts in `spec.groups`.
fn alert_names(spec: &Value) -> BTreeSet<String> {
    spec["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules").iter())
        .filter_map(|r| r["alert"].as_str().map(str::to_owned))
        .collect()
}

/// Writes the groups (JSON is YAML) and the unit tests side by side in `dir`.
fn write_rule_files(dir: &Path, spec: &Value) {
    std::fs::write(dir.join("rules.yaml"), spec.to_string()).expect("writing rules.yaml");
    std::fs::copy(
        repo_root().join("crates/metacontroller/tests/prometheus/rules_test.yaml"),
        dir.join("rules_test.yaml"),
    )
    .expect("copying rules_test.yaml");
}

/// GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[tokio::test]
async fn rendered_rules_pass_promtool_check_and_unit_tests() {
    if !helm_sdk_available() || !promtool_available() {
        return;
    }
    let spec = rendered_rules("crates/metacontroller/tests/prometheus/values.yaml").await;
    let alerts = alert_names(&spec);
    assert_eq!(
        alerts.len(),
        13,
        "every alert renders with the test values: {alerts:?}"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    write_rule_files(dir.path(), &spec);

    let check = run_promtool(dir.path(), &["check", "rules", "rules.yaml"]).await;
    assert!(check.ok, "promtool check rules:\n{}", check.output);
    assert!(
        check.output.contains("SUCCESS: 13 rules found"),
        "{}",
        check.output
    );

    let test = run_promtool(dir.path(), &["test", "rules", "rules_test.yaml"]).await;
    assert!(test.ok, "promtool test rules:\n{}", test.output);
    assert!(test.output.contains("SUCCESS"), "{}", test.output);
}

#[tokio::test]
async fn a_broken_threshold_fails_the_unit_tests() {
    // The unit tests can fail: with the sync error ratio raised above what the firing case
    // produces (60 %), MetacontrollerSyncErrors no longer fires and promtool says so.
    if !helm_sdk_available() || !promtool_available() {
        return;
    }
    let values = tempfile::NamedTempFile::new().expect("values file");
    let mut base: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(
            repo_root().join("crates/metacontroller/tests/prometheus/values.yaml"),
        )
        .expect("values.yaml"),
    )
    .expect("values YAML");
    base["prometheusRule"]["alerts"] =
        serde_yaml::from_str("{syncErrors: {ratio: 0.7}}").expect("override");
    std::fs::write(values.path(), serde_yaml::to_string(&base).expect("YAML")).expect("write");
    let relative = values.path().display().to_string();
    let spec = rendered_rules(&relative).await;
    let dir = tempfile::tempdir().expect("temp dir");
    write_rule_files(dir.path(), &spec);
    let test = run_promtool(dir.path(), &["test", "rules", "rules_test.yaml"]).await;
    assert!(
        !test.ok,
        "the unit tests passed a broken rule:\n{}",
        test.output
    );
    assert!(
        test.output.contains("alertname: MetacontrollerSyncErrors"),
        "{}",
        test.output
    );
}

#[tokio::test]
async fn every_alert_is_unit_tested_and_links_its_troubleshooting_section() {
    if !helm_sdk_available() {
        return;
    }
    let spec = rendered_rules("crates/metacontroller/tests/prometheus/values.yaml").await;
    let tests = std::fs::read_to_string(
        repo_root().join("crates/metacontroller/tests/prometheus/rules_test.yaml"),
    )
    .expect("rules_test.yaml");
    let tests: serde_yaml::Value = serde_yaml::from_str(&tests).expect("rules_test.yaml YAML");
    // alert name -> (a case expecting no alert, a case expecting one)
    let mut cases: std::collections::BTreeMap<String, (bool, bool)> = Default::default();
    for test in tests["tests"].as_sequence().expect("tests") {
        for case in test["alert_rule_test"].as_sequence().expect("cases") {
            let name = case["alertname"].as_str().expect("alertname").to_owned();
            let firing = case["exp_alerts"]
                .as_sequence()
                .is_some_and(|a| !a.is_empty());
            let entry = cases.entry(name).or_default();
            if firing {
                entry.1 = true;
            } else {
                entry.0 = true;
            }
        }
    }
    let troubleshooting =
        std::fs::read_to_string(repo_root().join("docs/src/troubleshooting.md")).expect("doc");
    let anchors: BTreeSet<String> = troubleshooting
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|l| slug(l.trim_start_matches('#')))
        .collect();
    let mut problems = Vec::new();
    for group in spec["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            let Some(name) = rule["alert"].as_str() else {
                continue;
            };
            if cases.get(name) != Some(&(true, true)) {
                problems.push(format!("{name}: needs a firing and a not-firing unit test"));
            }
            let url = rule["annotations"]["runbook_url"].as_str().unwrap_or("");
            let anchor = url
                .strip_prefix("https://github.com/metacontroller-rs/metacontroller-rs/blob/main/docs/src/troubleshooting.md#")
                .unwrap_or("");
            if !anchors.contains(anchor) {
                problems.push(format!(
                    "{name}: runbook_url {url:?} is no section of troubleshooting.md"
                ));
            }
            for key in ["summary", "description"] {
                if rule["annotations"][key].as_str().is_none_or(str::is_empty) {
                    problems.push(format!("{name}: no {key}"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
