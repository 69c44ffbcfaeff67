//! examples/configmap-propagation as its README runs it: a cluster-scoped parent, a customize
//! hook selecting Namespaces by label and the source ConfigMap by name (v2 hooks), and the
//! copies following labels and the source. Skipped without kubectl or python3.

use metacontroller_testkit::example::{
    all_installed, example_file, start_python_hook, ExampleCluster, Kubectl,
};
use metacontroller_testkit::unique_name;

const EXAMPLE: &str = "configmap-propagation";
const LABEL: &str = "propagate.example.com/settings";

/// The source namespace with ConfigMap `settings` (`color=blue`), the example's CRD and
/// controller (hook on `port`), and a ConfigMapPropagation of the source; returns kubectl
/// bound to the source namespace and the parent's name.
fn deploy(cluster: &ExampleCluster, port: u16) -> (Kubectl, String) {
    let source = cluster.namespace("cmp-source");
    source.ok(&[
        "create",
        "configmap",
        "settings",
        "--from-literal=color=blue",
    ]);
    let k = &cluster.kubectl;
    k.install_crd(
        &example_file(EXAMPLE, "crd.yaml"),
        "configmappropagations.example.com",
    );
    cluster.apply_controller(k, EXAMPLE, port);
    let parent = unique_name("settings");
    k.apply(&cluster.rewrite(
        EXAMPLE,
        "propagation.yaml",
        &[
            (
                "namespace: cmp-source",
                &format!("namespace: {}", source.ns()),
            ),
            ("name: settings\nspec", &format!("name: {parent}\nspec")),
        ],
    ));
    (source, parent)
}

/// Labeling `team_a` brings it a copy owned by the parent; unlabeled `team_b` gets none.
fn labeling_brings_a_copy(k: &Kubectl, parent: &str, team_a: &Kubectl, team_b: &Kubectl) {
    k.ok(&["label", "namespace", team_a.ns(), &format!("{LABEL}=yes")]);
    team_a.until_jsonpath(&["configmap", "settings"], "{.data.color}", "blue");
    k.until_jsonpath(&["configmappropagation", parent], "{.status.copies}", "1");
    assert_eq!(
        team_a.jsonpath(
            &["configmap", "settings"],
            "{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}"
        ),
        format!("ConfigMapPropagation/{parent}")
    );
    assert_eq!(
        team_b.jsonpath(&["configmap", "settings"], "{.data.color}"),
        "",
        "an unlabeled namespace got a copy"
    );
}

/// With `team_b` labeled too, a change of the source reaches both copies.
fn source_change_reaches_every_copy(
    k: &Kubectl,
    parent: &str,
    source: &Kubectl,
    teams: [&Kubectl; 2],
) {
    k.ok(&["label", "namespace", teams[1].ns(), &format!("{LABEL}=yes")]);
    teams[1].until_jsonpath(&["configmap", "settings"], "{.data.color}", "blue");
    source.merge_patch("configmap", "settings", r#"{"data":{"color":"green"}}"#);
    for team in teams {
        team.until_jsonpath(&["configmap", "settings"], "{.data.color}", "green");
    }
    k.until_jsonpath(&["configmappropagation", parent], "{.status.copies}", "2");
}

#[test]
fn configmap_propagation_follows_namespace_labels_and_the_source() {
    if !all_installed(&["kubectl", "python3"]) {
        return;
    }
    let cluster = ExampleCluster::start(env!("CARGO_BIN_EXE_metacontroller"));
    let (_hook, port) = start_python_hook(EXAMPLE, "hooks.py");
    let (source, parent) = deploy(&cluster, port);
    let k = &cluster.kubectl;
    // Before any namespace is labeled the parent reports no copies.
    k.until_jsonpath(
        &["configmappropagation", &parent],
        "{.status.sourceFound} {.status.copies}",
        "true 0",
    );
    let team_a = cluster.namespace("team-a");
    let team_b = cluster.namespace("team-b");
    labeling_brings_a_copy(k, &parent, &team_a, &team_b);
    source_change_reaches_every_copy(k, &parent, &source, [&team_a, &team_b]);

    // Unlabeling removes that namespace's copy only.
    k.ok(&["label", "namespace", team_a.ns(), &format!("{LABEL}-")]);
    team_a.until_gone(&["configmap", "settings"]);
    k.until_jsonpath(
        &["configmappropagation", &parent],
        "{.status.copies} {.status.namespaces[0]}",
        &format!("1 {}", team_b.ns()),
    );
    assert_eq!(
        team_b.jsonpath(&["configmap", "settings"], "{.data.color}"),
        "green"
    );
    // The source itself is never touched.
    assert_eq!(
        source.jsonpath(&["configmap", "settings"], "{.metadata.ownerReferences}"),
        ""
    );

    // Deleting the parent deletes the remaining copies.
    k.ok(&["delete", "configmappropagation", &parent, "--wait=true"]);
    team_b.until_gone(&["configmap", "settings"]);
    assert_eq!(
        source.jsonpath(&["configmap", "settings"], "{.data.color}"),
        "green"
    );
    cluster.clean_up(&[&source, &team_a, &team_b]);
}
