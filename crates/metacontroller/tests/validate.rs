//! `metacontroller validate -f FILE...` as a user runs it: exit codes and field paths.

use std::path::{Path, PathBuf};
use std::process::Command;

fn validate(files: &[&Path]) -> (i32, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_metacontroller"));
    command.arg("validate");
    for file in files {
        command.arg("-f").arg(file);
    }
    exit_code_and_output(&mut command)
}

/// Runs `command`: its exit code and its stdout followed by its stderr.
fn exit_code_and_output(command: &mut Command) -> (i32, String) {
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

/// The `childResources[].namespaces` extension: names or a lone `"*"`, errors at their index.
#[test]
fn child_namespaces_are_checked() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("teamspaces.yaml");
    std::fs::write(
        &file,
        r#"apiVersion: metacontroller.k8s.io/v1alpha1
kind: CompositeController
metadata: {name: anywhere}
spec:
  parentResource: {apiVersion: example.com/v1, resource: teamspaces}
  childResources:
  - {apiVersion: v1, resource: namespaces, namespaces: ["*"]}
  - {apiVersion: v1, resource: configmaps, namespaces: [shared, team-a]}
  hooks: {sync: {webhook: {url: "http://127.0.0.1:1/sync"}}}
---
apiVersion: metacontroller.k8s.io/v1alpha1
kind: CompositeController
metadata: {name: bad-namespaces}
spec:
  parentResource: {apiVersion: example.com/v1, resource: teamspaces}
  childResources:
  - {apiVersion: v1, resource: configmaps, namespaces: ["*", shared]}
  - {apiVersion: v1, resource: secrets, namespaces: [Not_A_Namespace]}
  hooks: {sync: {webhook: {url: "http://127.0.0.1:1/sync"}}}
"#,
    )
    .expect("write manifest");
    let (code, text) = validate(&[&file]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("CompositeController/anywhere: ok"), "{text}");
    assert!(
        text.contains(
            "spec.childResources[0].namespaces[0]: \"*\" (any namespace) must be the only entry"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "spec.childResources[1].namespaces[0]: \"Not_A_Namespace\" is not a namespace name"
        ),
        "{text}"
    );
    assert!(text.contains("2 error(s) in 2 controller(s)"), "{text}");

    // For a namespaced install: warnings (no errors) for what it cannot reach.
    let mut command = Command::new(env!("CARGO_BIN_EXE_metacontroller"));
    command
        .args(["validate", "--watch-namespaces", "team-a,team-b", "-f"])
        .arg(&file);
    let (code, text) = exit_code_and_output(&mut command);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("CompositeController/anywhere: warning: spec.childResources[0].namespaces[0]: \"*\" under --watch-namespaces team-a,team-b"),
        "{text}"
    );
    assert!(
        text.contains("CompositeController/anywhere: warning: spec.childResources[1].namespaces[0]: namespace \"shared\" is not watched (--watch-namespaces team-a,team-b)"),
        "{text}"
    );
    assert!(
        !text.contains("namespaces[1]: namespace \"team-a\""),
        "{text}"
    );
    assert!(text.contains("CompositeController/anywhere: ok"), "{text}");
}

/// A CompositeController `name` (parents `parent_ref`, `children`) and a DecoratorController
/// `decorator` (targets `target_ref`, Service attachments), as YAML.
fn controllers_yaml(
    name: &str,
    parent_ref: &str,
    children: &[&str],
    decorator: &str,
    target_ref: &str,
) -> String {
    let children: String = children.iter().map(|c| format!("  - {c}\n")).collect();
    format!(
        r#"apiVersion: metacontroller.k8s.io/v1alpha1
kind: CompositeController
metadata: {{name: {name}}}
spec:
  parentResource: {parent_ref}
  childResources:
{children}  hooks:
    sync: {{webhook: {{url: "http://hook/sync"}}}}
---
apiVersion: metacontroller.k8s.io/v1alpha1
kind: DecoratorController
metadata: {{name: {decorator}}}
spec:
  resources:
  - {target_ref}
  attachments:
  - {{apiVersion: v1, resource: services}}
  hooks:
    sync: {{webhook: {{url: "http://hook/sync"}}}}
"#
    )
}

/// `metacontroller validate -f file` against the cluster of `kubeconfig`, found through
/// `--kubeconfig` (`how` "flag") or, with `--live`, through `KUBECONFIG` as `run` finds it.
async fn validate_against(kubeconfig: PathBuf, file: PathBuf, how: &'static str) -> (i32, String) {
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
        exit_code_and_output(&mut command)
    })
    .await
    .unwrap()
}

/// What validate reports about the bad manifest: the unserved parent version (naming the
/// served one), the singular, the kind and the unknown child resource, and the decorator's
/// singular; nothing about the good entries.
fn assert_bad_names_reported(text: &str, group: &str, api_version: &str) {
    let line = |needle: &str| {
        text.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle:?} in:\n{text}"))
            .to_string()
    };
    let parent_line = line("spec.parentResource.apiVersion");
    assert!(
        parent_line.contains(&format!("apiVersion {group}/v9 is not served"))
            && parent_line.contains(api_version),
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

/// `validate --kubeconfig`: every resource a controller names must be served by the
/// cluster under its plural name; a kind or singular name points at the plural.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeconfig_checks_that_named_resources_are_served() {
    use metacontroller_testkit::{unique_crd, TestCluster};

    let cluster = TestCluster::start().await;
    let parent = unique_crd("validate", "Widget", "widgets");
    cluster.install_crd(&parent.build()).await;
    let api = parent.api_version();
    let group = api.split('/').next().unwrap().to_string();
    let dir = tempfile::tempdir().expect("temp dir");
    let write = |name: &str, text: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write manifest");
        path
    };
    let good = write(
        "good.yaml",
        controllers_yaml(
            "widgets",
            &format!("{{apiVersion: {api}, resource: widgets}}"),
            &[
                "{apiVersion: v1, resource: configmaps}",
                "{apiVersion: apps/v1, resource: deployments}",
            ],
            "deco",
            &format!("{{apiVersion: {api}, resource: widgets}}"),
        ),
    );
    let bad = write(
        "bad.yaml",
        controllers_yaml(
            "bad",
            &format!("{{apiVersion: {group}/v9, resource: widgets}}"),
            &[
                "{apiVersion: v1, resource: configmaps}",
                "{apiVersion: v1, resource: configmap}",
                "{apiVersion: apps/v1, resource: Deployment}",
                "{apiVersion: v1, resource: gizmos}",
            ],
            "deco-bad",
            &format!("{{apiVersion: {api}, resource: widget}}"),
        ),
    );
    let kubeconfig = cluster.kubeconfig_path().to_path_buf();
    for how in ["flag", "live"] {
        let (code, text) = validate_against(kubeconfig.clone(), good.clone(), how).await;
        assert_eq!(code, 0, "{how}: {text}");
        assert!(text.contains("CompositeController/widgets: ok"), "{text}");
        assert!(text.contains("DecoratorController/deco: ok"), "{text}");

        let (code, text) = validate_against(kubeconfig.clone(), bad.clone(), how).await;
        assert_eq!(code, 1, "{how}: {text}");
        assert_bad_names_reported(&text, &group, &api);
    }

    // Offline (no cluster flag) the same file passes: the names are only known to a cluster.
    let (code, text) = validate(&[&bad]);
    assert_eq!(code, 0, "{text}");
}

/// `validate -f -` reads the manifest from standard input.
#[test]
fn dash_reads_standard_input() {
    use std::io::Write;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/hello-world");
    let manifest = std::fs::read(dir.join("controller.yaml")).expect("read the example");
    let mut child = Command::new(env!("CARGO_BIN_EXE_metacontroller"))
        .args(["validate", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the metacontroller binary");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&manifest)
        .expect("write stdin");
    let output = child.wait_with_output().expect("wait for validate");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    assert!(
        text.contains("- (document 1) CompositeController/hello-controller: ok"),
        "{text}"
    );
}

/// A CompositeController named `name` whose sync hook is `hook` (YAML flow mapping).
fn code_controller(name: &str, hook: &str) -> String {
    format!(
        "apiVersion: metacontroller.k8s.io/v1alpha1\nkind: CompositeController\n\
         metadata: {{name: {name}}}\nspec:\n  parentResource: {{apiVersion: v1, resource: configmaps}}\n\
         \x20 hooks:\n    sync: {hook}\n---\n"
    )
}

/// `validate --kubeconfig`: the code of in-process hooks is read from its ConfigMap and
/// checked as a call would: the ConfigMap and key exist, Jsonnet parses, WASM compiles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeconfig_checks_in_process_hook_code() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams};
    use metacontroller_testkit::TestCluster;

    let cluster = TestCluster::start().await;
    let ns = cluster.create_namespace("validate-code").await;
    let code: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "code"},
        "data": {
            "good.jsonnet": "function(request) {children: []}",
            "bad.jsonnet": "function(request) {children: [}",
            "bad.wasm": "AGFzbQEAAAA=",
        }
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(cluster.client(), &ns)
        .create(&PostParams::default(), &code)
        .await
        .expect("create the code ConfigMap");
    let jsonnet = |name: &str, key: &str| {
        format!("{{jsonnet: {{configMapRef: {{namespace: {ns}, name: {name}}}, key: {key}}}}}")
    };
    let manifest = [
        code_controller("good", &jsonnet("code", "good.jsonnet")),
        code_controller("no-configmap", &jsonnet("nope", "good.jsonnet")),
        code_controller("no-key", &jsonnet("code", "none.jsonnet")),
        code_controller("syntax", &jsonnet("code", "bad.jsonnet")),
        code_controller(
            "wasm",
            &format!("{{wasm: {{configMapRef: {{namespace: {ns}, name: code}}, key: bad.wasm}}}}"),
        ),
    ]
    .concat();
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("code.yaml");
    std::fs::write(&file, manifest).expect("write manifest");
    let kubeconfig = cluster.kubeconfig_path().to_path_buf();
    let (code, text) = validate_against(kubeconfig, file.clone(), "flag").await;
    assert_eq!(code, 1, "{text}");
    let line = |name: &str| {
        text.lines()
            .find(|l| l.contains(&format!("CompositeController/{name}: error")))
            .unwrap_or_else(|| panic!("no error for {name} in:\n{text}"))
            .to_string()
    };
    assert!(text.contains("CompositeController/good: ok"), "{text}");
    assert!(
        line("no-configmap").contains(&format!(
            "error: spec.hooks.sync.jsonnet: ConfigMap {ns}/nope not found"
        )),
        "{text}"
    );
    assert!(
        line("no-key").contains("has no key \"none.jsonnet\""),
        "{text}"
    );
    assert!(
        line("syntax").contains("error: spec.hooks.sync.jsonnet:"),
        "{text}"
    );
    assert!(text.contains("bad.jsonnet:1"), "{text}");
    assert!(
        line("wasm").contains("error: spec.hooks.sync.wasm:"),
        "{text}"
    );
    assert!(text.contains("error(s) in 5 controller(s)"), "{text}");

    // Offline, the code is not looked at.
    let (code, text) = validate(&[&file]);
    assert_eq!(code, 0, "{text}");
}

#[test]
fn hook_rollout_is_checked_and_flagged_without_in_process_code() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("rollout.yaml");
    std::fs::write(
        &file,
        r#"apiVersion: metacontroller.k8s.io/v1alpha1
kind: DecoratorController
metadata: {name: good}
spec:
  resources: [{apiVersion: v1, resource: configmaps}]
  hooks: {sync: {webhook: {url: "http://127.0.0.1:9/sync"}}}
  hookRollout: {steps: [1, "10%", "100%"], pauseSeconds: 5}
---
apiVersion: metacontroller.k8s.io/v1alpha1
kind: DecoratorController
metadata: {name: bad}
spec:
  resources: [{apiVersion: v1, resource: configmaps}]
  hooks: {sync: {webhook: {url: "http://127.0.0.1:9/sync"}}}
  hookRollout: {steps: ["50%", "ten%"], maxFailures: -1}
"#,
    )
    .expect("write manifest");
    let (code, text) = validate(&[&file]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("DecoratorController/good: ok"), "{text}");
    assert!(
        text.contains(
            "spec.hookRollout: applies to in-process (jsonnet:, wasm:) hook code only, and this controller has none"
        ),
        "{text}"
    );
    assert!(
        text.contains("spec.hookRollout.steps[1]: \"ten%\" is not a count or a percentage"),
        "{text}"
    );
    assert!(
        text.contains("spec.hookRollout.maxFailures: must not be negative, got -1"),
        "{text}"
    );
}
