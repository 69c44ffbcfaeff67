//! examples/configmap-propagation as its README runs it: a cluster-scoped parent, a customize
//! hook selecting Namespaces by label and the source ConfigMap by name (v2 hooks), and the
//! copies following labels and the source. Skipped without kubectl or python3.

use metacontroller_testkit::example::{
    all_installed, example_file, start_python_hook, ExampleCluster,
};
use metacontroller_testkit::unique_name;

const EXAMPLE: &str = "configmap-propagation";
const LABEL: &str = "propagate.example.com/settings";

#[test]
fn configmap_propagation_follows_namespace_labels_and_the_source() {
    if !all_installed(&["kubectl", "python3"]) {
        return;
    }
    let cluster = ExampleCluster::start(env!("CARGO_BIN_EXE_metacontroller"));
    let (_hook, port) = start_python_hook(EXAMPLE, "hooks.py");

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
    let url = format!("127.0.0.1:{port}");
    k.apply(&cluster.rewrite(EXAMPLE, "controller.yaml", &[("127.0.0.1:8080", &url)]));
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
    // Before any namespace is labeled the parent reports no copies.
    k.until_jsonpath(
        &["configmappropagation", &parent],
        "{.status.sourceFound} {.status.copies}",
        "true 0",
    );

    // Labeling a namespace brings a copy (and an unlabeled one gets none).
    let team_a = cluster.namespace("team-a");
    let team_b = cluster.namespace("team-b");
    k.ok(&["label", "namespace", team_a.ns(), &format!("{LABEL}=yes")]);
    team_a.until_jsonpath(&["configmap", "settings"], "{.data.color}", "blue");
    k.until_jsonpath(&["configmappropagation", &parent], "{.status.copies}", "1");
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

    // A source change reaches every copy.
    k.ok(&["label", "namespace", team_b.ns(), &format!("{LABEL}=yes")]);
    team_b.until_jsonpath(&["configmap", "settings"], "{.data.color}", "blue");
    source.ok(&[
        "patch",
        "configmap",
        "settings",
        "--type",
        "merge",
        "-p",
        r#"{"data":{"color":"green"}}"#,
    ]);
    team_a.until_jsonpath(&["configmap", "settings"], "{.data.color}", "green");
    team_b.until_jsonpath(&["configmap", "settings"], "{.data.color}", "green");
    k.until_jsonpath(&["configmappropagation", &parent], "{.status.copies}", "2");

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
    if cluster.is_real() {
        for ns in [&source, &team_a, &team_b] {
            k.ok(&["delete", "namespace", ns.ns(), "--wait=false"]);
        }
    }
}
