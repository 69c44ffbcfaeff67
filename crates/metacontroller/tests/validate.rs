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
