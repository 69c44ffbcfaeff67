//! examples/hello-world-helm: the hello-world hook as a Helm chart. Helm's own engine (the
//! helm-python-sdk package, as tests/helm_chart.rs uses it) lints the chart strictly and
//! renders it; the in-cluster render must hold the Deployment, Service and ConfigMap with
//! sync.py and a controller calling the Service; then the README's dev-mode steps run: the
//! render with `hook.url` applied by kubectl, the hook started locally, a HelloWorld greeted.
//! Skipped without kubectl, python3 or helm-python-sdk.

use std::process::{Command, Stdio};

use metacontroller_testkit::example::{
    all_installed, example_file, start_python_hook, ExampleCluster,
};
use serde_json::Value;

const EXAMPLE: &str = "hello-world-helm";

/// Lints (`lint`) or renders (`render <values-json>`) the chart with Helm's engine; a render
/// prints the objects as a `v1` List.
const HELM: &str = r##"
import json, sys
import helm_python as helm
chart, cmd = sys.argv[1], sys.argv[2]
values = json.loads(sys.argv[3]) if len(sys.argv) > 3 else None
if cmd == "lint":
    report = helm.lint(chart, values, strict=True, namespace="hello")
    bad = [m for m in report["messages"] if m["severity"] >= 2] + report.get("errors", [])
    if bad:
        sys.exit(f"helm lint --strict: {bad}")
    print("lint ok")
else:
    with helm.Chart.load(chart) as c:
        rendered = c.render(values, name="hello", namespace="hello", is_install=True)
    items = []
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            continue
        for doc in text.split("\n---"):
            if any(l.strip() and not l.lstrip().startswith("#") for l in doc.splitlines()):
                items.append(helm.values_from_yaml(doc))
    print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
"##;

fn helm_sdk() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import helm_python"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        metacontroller_testkit::missing_tool(
            "helm-python-sdk==0.2.2",
            "python3 cannot import helm_python; pip install it",
        );
    }
    ok
}

fn helm(args: &[&str]) -> String {
    let out = Command::new("python3")
        .args(["-c", HELM])
        .arg(example_file(EXAMPLE, "chart"))
        .args(args)
        .output()
        .expect("running python3");
    assert!(
        out.status.success(),
        "helm {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn find<'a>(list: &'a Value, kind: &str) -> &'a Value {
    list["items"]
        .as_array()
        .and_then(|items| items.iter().find(|o| o["kind"] == kind))
        .unwrap_or_else(|| panic!("the render has no {kind}: {list}"))
}

#[test]
fn hello_world_chart_lints_renders_and_runs_in_dev_mode() {
    if !all_installed(&["kubectl", "python3"]) || !helm_sdk() {
        return;
    }
    // The chart packages the hello-world example's own files.
    for (chart_file, original) in [
        ("chart/files/sync.py", "sync.py"),
        ("chart/crds/helloworlds.yaml", "crd.yaml"),
    ] {
        assert_eq!(
            std::fs::read_to_string(example_file(EXAMPLE, chart_file)).unwrap(),
            std::fs::read_to_string(example_file("hello-world", original)).unwrap(),
            "{chart_file} differs from examples/hello-world/{original}"
        );
    }
    assert!(helm(&["lint"]).contains("lint ok"));

    // In a cluster: the controller calls the Service, which selects the Deployment's pods,
    // which run the ConfigMap's sync.py.
    let cluster_render: Value = serde_json::from_str(&helm(&["render"])).unwrap();
    let webhook = &find(&cluster_render, "CompositeController")["spec"]["hooks"]["sync"]["webhook"];
    assert_eq!(webhook["service"]["name"], "hello-hook");
    assert_eq!(webhook["service"]["namespace"], "hello");
    assert_eq!(webhook["path"], "/sync");
    assert!(webhook.get("url").is_none(), "{webhook}");
    let code = find(&cluster_render, "ConfigMap")["data"]["sync.py"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(
        code.trim_end(),
        std::fs::read_to_string(example_file("hello-world", "sync.py"))
            .unwrap()
            .trim_end()
    );
    let deployment = find(&cluster_render, "Deployment");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["command"][1], "/hook/sync.py");
    assert!(container["command"].to_string().contains("0.0.0.0"));
    assert_eq!(
        find(&cluster_render, "Service")["spec"]["ports"][0]["port"],
        80
    );

    // Dev mode: the same chart with hook.url pointing at a hook run locally.
    let cluster = ExampleCluster::start(env!("CARGO_BIN_EXE_metacontroller"));
    let (_hook, port) = start_python_hook(EXAMPLE, "chart/files/sync.py");

    let k = cluster.namespace("hello-helm");
    k.install_crd(
        &example_file(EXAMPLE, "chart/crds/helloworlds.yaml"),
        "helloworlds.example.com",
    );
    let values = format!(r#"{{"hook":{{"url":"http://127.0.0.1:{port}/sync"}}}}"#);
    let mut dev_render: Value = serde_json::from_str(&helm(&["render", &values])).unwrap();
    // Namespaced objects go where this run's kubectl points (the chart leaves them unset).
    for item in dev_render["items"].as_array_mut().unwrap() {
        if item["kind"] != "CompositeController" {
            item["metadata"]["namespace"] = Value::String(k.ns().to_string());
        }
    }
    let rendered = cluster.dir.path().join("rendered.json");
    std::fs::write(&rendered, dev_render.to_string()).unwrap();
    k.apply(&rendered);
    // The simulated kubelet makes the hook's Deployment available (nothing runs in it).
    k.until_jsonpath(
        &["deployment", "hello-hook"],
        "{.status.availableReplicas}",
        "1",
    );

    k.apply(&example_file(EXAMPLE, "hello.yaml"));
    k.until_jsonpath(&["configmap", "hello"], "{.data.greeting}", "Hello, World!");
    k.ok(&["delete", "helloworld", "hello", "--wait=true"]);
    k.until_gone(&["configmap", "hello"]);
    k.ok(&["delete", "compositecontroller", "hello-hello-controller"]);
    cluster.clean_up(&[&k]);
}
