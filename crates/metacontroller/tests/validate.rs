//! `metacontroller validate -f FILE...` as a user runs it: exit codes and field paths.

use std::process::Command;

fn validate(files: &[&std::path::Path]) -> (i32, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_metacontroller"));
    command.arg("validate");
    for file in files {
        command.arg("-f").arg(file);
    }
    let output = command.output().expect("run the metacontroller binary");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code().unwrap_or(-1), text)
}

#[test]
fn hello_world_example_is_valid() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/hello-world");
    let (code, text) = validate(&[&dir.join("controller.yaml"), &dir.join("crd.yaml")]);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("CompositeController/hello-controller: ok"),
        "{text}"
    );
}

#[test]
fn errors_name_field_paths_and_fail() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        r#"apiVersion: v1
kind: ConfigMap
metadata: {name: skipped}
---
apiVersion: metacontroller.k8s.io/v1alpha1
kind: CompositeController
metadata: {name: wrong-type}
spec:
  generateSelector: "yes"
---
apiVersion: metacontroller.k8s.io/v1alpha1
kind: DecoratorController
metadata: {name: no-hook}
spec:
  resources:
  - apiVersion: v1
    resource: pods
  attachments:
  - apiVersion: v1
    resource: configmaps
    updateStrategy: {method: Sideways}
  hooks: {}
"#,
    )
    .expect("write manifest");
    let (code, text) = validate(&[&bad]);
    assert_eq!(code, 1, "{text}");
    assert!(!text.contains("skipped"), "{text}");
    assert!(
        text.contains("CompositeController/wrong-type: error: spec.generateSelector:"),
        "{text}"
    );
    assert!(
        text.contains("DecoratorController/no-hook: error: spec."),
        "{text}"
    );
    assert!(text.contains("error(s) in 2 controller(s)"), "{text}");
}

#[test]
fn no_controller_in_files_is_an_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("cm.yaml");
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
    )
    .expect("write");
    let (code, text) = validate(&[&file]);
    assert_eq!(code, 1, "{text}");
}

/// `validate --kubeconfig`: every resource a controller names must be served by the
/// cluster under its plural name; a kind or singular name points at the plural.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeconfig_checks_that_named_resources_are_served() {
    use metacontroller_testkit::{crd, unique_name, TestCluster};

    let cluster = TestCluster::start().await;
    let parent = crd(
        &format!("{}.example.com", unique_name("validate")),
        "v1",
        "Widget",
        "widgets",
    );
    cluster.install_crd(&parent.build()).await;
    let group = parent.api_version().split('/').next().unwrap().to_string();
    let dir = tempfile::tempdir().expect("temp dir");
    let write = |name: &str, text: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write manifest");
        path
    };
    let good = write(
        "good.yaml",
        format!(
            r#"apiVersion: metacontroller.k8s.io/v1alpha1
kind: CompositeController
metadata: {{name: widgets}}
spec:
  parentResource: {{apiVersion: {api}, resource: widgets}}
  childResources:
  - {{apiVersion: v1, resource: configmaps}}
  - {{apiVersion: apps/v1, resource: deployments}}
  hooks:
    sync: {{webhook: {{url: "http://hook/sync"}}}}
---
apiVersion: metacontroller.k8s.io/v1alpha1
kind: DecoratorController
metadata: {{name: deco}}
spec:
  resources:
  - {{apiVersion: {api}, resource: widgets}}
  attachments:
  - {{apiVersion: v1, resource: services}}
  hooks:
    sync: {{webhook: {{url: "http://hook/sync"}}}}
"#,
            api = parent.api_version()
        ),
    );
    let bad = write(
        "bad.yaml",
        format!(
            r#"apiVersion: metacontroller.k8s.io/v1alpha1
kind: CompositeController
metadata: {{name: bad}}
spec:
  parentResource: {{apiVersion: {group}/v9, resource: widgets}}
  childResources:
  - {{apiVersion: v1, resource: configmaps}}
  - {{apiVersion: v1, resource: configmap}}
  - {{apiVersion: apps/v1, resource: Deployment}}
  - {{apiVersion: v1, resource: gizmos}}
  hooks:
    sync: {{webhook: {{url: "http://hook/sync"}}}}
---
apiVersion: metacontroller.k8s.io/v1alpha1
kind: DecoratorController
metadata: {{name: deco-bad}}
spec:
  resources:
  - {{apiVersion: {api}, resource: widget}}
  attachments:
  - {{apiVersion: v1, resource: services}}
  hooks:
    sync: {{webhook: {{url: "http://hook/sync"}}}}
"#,
            api = parent.api_version()
        ),
    );
    let kubeconfig = cluster.kubeconfig_path().to_path_buf();
    let run = move |file: std::path::PathBuf, how: &'static str| {
        let kubeconfig = kubeconfig.clone();
        tokio::task::spawn_blocking(move || {
            let mut command = Command::new(env!("CARGO_BIN_EXE_metacontroller"));
            command.arg("validate").arg("-f").arg(&file);
            match how {
                "flag" => {
                    command.arg("--kubeconfig").arg(&kubeconfig);
                }
                // `--live` finds the cluster as `run` does without --kubeconfig.
                _ => {
                    command.arg("--live").env("KUBECONFIG", &kubeconfig);
                }
            }
            let output = command.output().expect("run the metacontroller binary");
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            (output.status.code().unwrap_or(-1), text)
        })
    };

    for how in ["flag", "live"] {
        let (code, text) = run(good.clone(), how).await.unwrap();
        assert_eq!(code, 0, "{how}: {text}");
        assert!(text.contains("CompositeController/widgets: ok"), "{text}");
        assert!(text.contains("DecoratorController/deco: ok"), "{text}");

        let (code, text) = run(bad.clone(), how).await.unwrap();
        assert_eq!(code, 1, "{how}: {text}");
        let line = |needle: &str| {
            text.lines()
                .find(|l| l.contains(needle))
                .unwrap_or_else(|| panic!("no line with {needle:?} in:\n{text}"))
                .to_string()
        };
        let parent_line = line("spec.parentResource.apiVersion");
        assert!(
            parent_line.contains(&format!("apiVersion {group}/v9 is not served"))
                && parent_line.contains(&parent.api_version()),
            "{parent_line}"
        );
        assert!(!text.contains("spec.childResources[0]"), "{text}");
        let singular = line("spec.childResources[1].resource");
        assert!(
            singular.contains("error") && singular.contains("\"configmaps\""),
            "{singular}"
        );
        let kind = line("spec.childResources[2].resource");
        assert!(kind.contains("\"deployments\""), "{kind}");
        let unknown = line("spec.childResources[3].resource");
        assert!(
            unknown.contains("\"gizmos\" is not served in v1"),
            "{unknown}"
        );
        let deco = line("DecoratorController/deco-bad: error: spec.resources[0].resource");
        assert!(deco.contains("\"widgets\""), "{deco}");
        assert!(!text.contains("spec.attachments[0]"), "{text}");
    }

    // Offline (no cluster flag) the same file passes: the names are only known to a cluster.
    let (code, text) = validate(&[&bad]);
    assert_eq!(code, 0, "{text}");
}
