//! What the hello-world example tests share, whatever runs the hook (Python, Jsonnet or
//! WASM): the parent `hello` at work, its deletion, the in-process variants' setup, and
//! `metacontroller render` of an example offline.

use std::ffi::OsStr;
use std::process::Command;

use crate::example::{example_file, ExampleCluster, Kubectl};

/// Parent `hello` (of `kind`) at work: its ConfigMap `hello` greets the world, its status
/// counts one greeting, and a new `spec.who` reaches the greeting.
pub fn hello_greets(k: &Kubectl, kind: &str) {
    k.until_jsonpath(&["configmap", "hello"], "{.data.greeting}", "Hello, World!");
    k.until_jsonpath(&[kind, "hello"], "{.status.greetings}", "1");
    k.merge_patch(kind, "hello", r#"{"spec":{"who":"Kubernetes"}}"#);
    k.until_jsonpath(
        &["configmap", "hello"],
        "{.data.greeting}",
        "Hello, Kubernetes!",
    );
}

/// Deletes parent `hello` (of `kind`), waiting for it, and then for its ConfigMap to go.
pub fn delete_hello(k: &Kubectl, kind: &str) {
    k.ok(&["delete", kind, "hello", "--wait=true"]);
    k.until_gone(&["configmap", "hello"]);
}

impl ExampleCluster {
    /// The README steps of an example whose hook code is in a ConfigMap of `k`'s namespace
    /// (created already): its `crd.yaml` (CRD `crd_name`), its controller.yaml with the
    /// code's namespace moved from `default` to `k`'s, and its hello.yaml.
    pub fn apply_code_example(&self, k: &Kubectl, example: &str, crd_name: &str) {
        k.install_crd(&example_file(example, "crd.yaml"), crd_name);
        let namespace = format!("namespace: {}", k.ns());
        k.apply(&self.rewrite(
            example,
            "controller.yaml",
            &[("namespace: default", &namespace)],
        ));
        k.apply(&example_file(example, "hello.yaml"));
    }

    /// Deletes the CompositeController `name` without waiting: it is cluster-scoped, so on a
    /// real cluster it would outlive the test's namespaces.
    pub fn delete_composite_controller(&self, name: &str) {
        self.kubectl
            .ok(&["delete", "compositecontroller", name, "--wait=false"]);
    }
}

/// `binary render` (pass `env!("CARGO_BIN_EXE_metacontroller")`) of
/// `examples/<example>`'s controller.yaml, crd.yaml and hello.yaml with the hook given by
/// `hook_args` (e.g. `--jsonnet <file>`); asserts that it succeeds and that the hook greets
/// the world.
pub fn render_hello_offline(binary: &str, example: &str, hook_args: &[&OsStr]) {
    let output = Command::new(binary)
        .arg("render")
        .arg("--controller")
        .arg(example_file(example, "controller.yaml"))
        .arg("--crd")
        .arg(example_file(example, "crd.yaml"))
        .arg("--parent")
        .arg(example_file(example, "hello.yaml"))
        .args(hook_args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("Hello, World!"), "{stdout}");
}
