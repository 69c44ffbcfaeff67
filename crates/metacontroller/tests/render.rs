//! `metacontroller render` as a hook author runs it: the real binary, hooks written in
//! Python (an http.server script) and as shell commands (jq, python3 -c), offline and
//! against a cluster. The `--diff` test checks the plan against what `metacontroller run`
//! then really does to the same objects. Skipped pieces need python3 / jq.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::DynamicObject;
use metacontroller_testkit::example::{
    example_file, free_port, installed, start_hook, start_python_json_hook,
};
use metacontroller_testkit::{
    crd, create_object, dynamic_api, eventually_within, unique_name, ControllerProcess, TestCluster,
};
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_metacontroller");
const WAIT: Duration = Duration::from_secs(60);

/// Runs `metacontroller render ARGS`: (exit code, stdout, stderr).
fn render(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(BIN)
        .arg("render")
        .args(args)
        .output()
        .expect("run the metacontroller binary");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn path(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

fn write(dir: &Path, name: &str, value: &Value) -> PathBuf {
    let file = dir.join(name);
    std::fs::write(&file, serde_json::to_string_pretty(value).unwrap()).unwrap();
    file
}

/// The hello-world hook as a jq program: what examples/hello-world/sync.py answers.
const HELLO_JQ: &str = r#"jq '{children: [{apiVersion: "v1", kind: "ConfigMap", metadata: {name: .parent.metadata.name}, data: {greeting: ("Hello, " + (.parent.spec.who // "World") + "!")}}], status: {greetings: (.children["ConfigMap.v1"] | length)}}'"#;

fn hello(file: &str) -> String {
    path(&example_file("hello-world", file)).to_string()
}

/// `metacontroller render` of the hello-world example's controller, CRD and parent, with
/// `extra` flags: (exit code, stdout, stderr).
fn render_hello(extra: &[&str]) -> (i32, String, String) {
    let (controller, crd, parent) = (
        hello("controller.yaml"),
        hello("crd.yaml"),
        hello("hello.yaml"),
    );
    let common = [
        "--controller",
        controller.as_str(),
        "--crd",
        &crd,
        "--parent",
        &parent,
    ];
    render(&[&common[..], extra].concat())
}

#[test]
fn hello_world_offline_with_the_python_hook_server_and_a_jq_command() {
    if !installed("python3") || !installed("jq") {
        return;
    }
    let port = free_port();
    let mut server = Command::new("python3");
    server
        .arg(hello("sync.py"))
        .args(["--port", &port.to_string()]);
    let _server = start_hook(server, port);
    let url = format!("http://127.0.0.1:{port}/sync");
    let (code, out_url, err) = render_hello(&["--hook-url", &url]);
    assert_eq!(code, 0, "{err}");
    let (code, out_cmd, err) = render_hello(&["--hook-command", HELLO_JQ]);
    assert_eq!(code, 0, "{err}");
    for out in [&out_url, &out_cmd] {
        let doc: Value = serde_yaml::from_str(out).expect("YAML output");
        let child = &doc["children"][0];
        assert_eq!(child["kind"], "ConfigMap", "{out}");
        assert_eq!(child["data"]["greeting"], "Hello, World!", "{out}");
        // Defaulted as the controller does: the parent's namespace, the generated
        // selector's label.
        assert_eq!(child["metadata"]["namespace"], "default", "{out}");
        assert!(
            child["metadata"]["labels"]["controller-uid"].is_string(),
            "{out}"
        );
        assert_eq!(doc["status"]["greetings"], 0, "{out}");
        assert_eq!(doc["status"]["observedGeneration"], 1, "{out}");
    }
}

/// A controller object of `kind` named `name` with `spec`.
fn controller_object(kind: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    })
}

/// A two-type controller whose hooks are v1 or v2, offline.
fn controller(dir: &Path, version: &str) -> PathBuf {
    let never = json!({"version": version, "webhook": {"url": "http://127.0.0.1:1/never"}});
    let spec = json!({
        "parentResource": {"apiVersion": "example.com/v1", "resource": "helloworlds"},
        "childResources": [
            {"apiVersion": "v1", "resource": "configmaps"},
            {"apiVersion": "v1", "resource": "secrets"},
        ],
        "hooks": {"sync": never, "finalize": never},
    });
    write(
        dir,
        &format!("controller-{version}.json"),
        &controller_object("CompositeController", "render-test", spec),
    )
}

fn parent(dir: &Path) -> PathBuf {
    write(
        dir,
        "parent.json",
        &json!({
            "apiVersion": "example.com/v1", "kind": "HelloWorld",
            "metadata": {"name": "p", "namespace": "team-a", "uid": "uid-p",
                         "generation": 3, "labels": {"app": "p"}},
            "spec": {"selector": {"matchLabels": {"app": "p"}}, "who": "v"},
        }),
    )
}

fn observed_child(dir: &Path) -> PathBuf {
    write(
        dir,
        "children.json",
        &json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "c1", "namespace": "team-a", "labels": {"app": "p"}},
             "data": {"k": "v"}},
        ]}),
    )
}

/// An upstream-shaped request of tests/golden/hooks (see hook_golden.rs).
fn golden(version: &str, file: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/hooks")
        .join(version)
        .join(file);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The keys of a JSON object, sorted.
fn keys(v: &Value) -> Vec<String> {
    let mut keys: Vec<String> = v.as_object().expect("an object").keys().cloned().collect();
    keys.sort();
    keys
}

/// The golden file's keys of `map[group]`, with its placeholder names replaced by ours.
fn golden_keys(map: &Value, group: &str, subs: &[(&str, &str)]) -> Vec<String> {
    keys(&map[group])
        .into_iter()
        .map(|k| subs.iter().fold(k, |k, (from, to)| k.replace(from, to)))
        .collect()
}

/// Captures the request on the way (`tee`) and answers with nothing.
fn capture(file: &Path) -> String {
    format!("tee {} >/dev/null; echo '{{}}'", file.display())
}

/// The request render builds, compared with the upstream shapes the hook golden files hold
/// (tests/golden/hooks): every declared type has a `children` entry, keyed `<name>` in v1
/// and `<namespace>/<name>` in v2; `related` from --related; the controller's finalizer
/// on the parent before a hook runs; `finalizing` with --finalizing.
#[test]
fn requests_are_the_controllers_v1_and_v2() {
    if !installed("jq") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let crd = PathBuf::from(hello("crd.yaml"));
    let related = write(
        dir.path(),
        "related.json",
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "settings", "namespace": "team-a"}, "data": {}}),
    );
    for (version, key) in [("v1", "c1"), ("v2", "team-a/c1")] {
        let captured = dir.path().join(format!("request-{version}.json"));
        let (code, _, err) = render(&[
            "--controller",
            path(&controller(dir.path(), version)),
            "--crd",
            path(&crd),
            "--parent",
            path(&parent(dir.path())),
            "--children",
            path(&observed_child(dir.path())),
            "--related",
            path(&related),
            "--finalizing",
            "--hook-command",
            &capture(&captured),
        ]);
        assert_eq!(code, 0, "{err}");
        assert_finalize_request(&read_json(&captured), version, key);
    }
}

/// The finalize request render built for `version` has the golden request's shape, the
/// child keyed `key`, the related ConfigMap, and the parent as the controller sends it.
fn assert_finalize_request(request: &Value, version: &str, key: &str) {
    // The golden request's shape: its fields, and its map keys with its names
    // replaced by ours.
    let expected = golden(version, "composite-finalize-request.json");
    assert_eq!(keys(request), keys(&expected));
    let subs = [
        ("${NS}", "team-a"),
        ("golden-child", "c1"),
        ("golden-related", "settings"),
    ];
    assert_eq!(
        keys(&request["children"]["ConfigMap.v1"]),
        golden_keys(&expected["children"], "ConfigMap.v1", &subs),
        "{version}"
    );
    assert_eq!(
        keys(&request["related"]["ConfigMap.v1"]),
        golden_keys(&expected["related"], "ConfigMap.v1", &subs),
        "{version}"
    );
    assert_eq!(request["finalizing"], true);
    assert_eq!(request["controller"]["metadata"]["name"], "render-test");
    assert_eq!(
        request["children"],
        json!({
            "ConfigMap.v1": {key: {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c1", "namespace": "team-a", "labels": {"app": "p"}},
                "data": {"k": "v"}}},
            "Secret.v1": {},
        }),
        "{version}"
    );
    let related_key = if version == "v1" {
        "settings"
    } else {
        "team-a/settings"
    };
    assert!(
        request["related"]["ConfigMap.v1"][related_key].is_object(),
        "{version}: {}",
        request["related"]
    );
    let meta = &request["parent"]["metadata"];
    assert_eq!(meta["uid"], "uid-p");
    assert_eq!(
        meta["finalizers"],
        json!(["metacontroller.io/compositecontroller-render-test"])
    );
    assert!(meta["deletionTimestamp"].is_string(), "{meta}");
}

/// The JSON in `file`.
fn read_json(file: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap()
}

#[test]
fn refused_responses_exit_1_with_the_controllers_message() {
    if !installed("python3") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let refused = [
        // An undeclared child type.
        (
            r#"python3 -c 'import json; print(json.dumps({"children": [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}]}))'"#,
            &["invalid sync hook response: children[0]: Secret.v1 is not a declared child resource"][..],
        ),
        // Another namespace than the parent's.
        (
            r#"python3 -c 'import json; print(json.dumps({"children": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "other"}}]}))'"#,
            &["namespace \"other\" is not allowed: children must be in the parent's namespace"],
        ),
        // A hook command that fails: its stderr is reported.
        (
            "echo 'boom from the hook' >&2; exit 3",
            &[
                "sync hook failed for HelloWorld default/hello",
                "boom from the hook",
            ],
        ),
    ];
    for (hook, messages) in refused {
        let (code, _, err) = render_hello(&["--hook-command", hook]);
        assert_eq!(code, 1, "{err}");
        for message in messages {
            assert!(err.contains(message), "{err}");
        }
    }
    // Usage errors exit 2.
    let (code, _, err) = render(&["--controller", &hello("controller.yaml")]);
    assert_eq!(code, 2, "{err}");
    let _ = dir;
}

/// `--request` replays a bare body and a `--record-hooks` file; the response is checked
/// against the controller given.
#[test]
fn recorded_requests_are_replayed() {
    if !installed("jq") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let captured = dir.path().join("request.json");
    let common = [
        "--controller",
        &hello("controller.yaml"),
        "--crd",
        &hello("crd.yaml"),
    ];
    let (code, _, err) = render(
        &[
            &common[..],
            &[
                "--parent",
                &hello("hello.yaml"),
                "--hook-command",
                &capture(&captured),
            ],
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{err}");
    let body = read_json(&captured);
    let recorded = write(
        dir.path(),
        "recorded.json",
        &json!({
            "controller": {"kind": "CompositeController", "name": "hello-controller"},
            "hook": "sync", "url": "http://127.0.0.1:8080/sync",
            "startedAt": "2026-01-01T00:00:00Z", "durationMs": 3,
            "request": body,
            "response": {"status": 200, "body": {}},
        }),
    );
    for file in [&captured, &recorded] {
        let replayed = dir.path().join("replayed.json");
        let hook = format!("tee {} | {HELLO_JQ}", replayed.display());
        let (code, out, err) = render(
            &[
                &common[..],
                &["--request", path(file), "--hook-command", &hook],
            ]
            .concat(),
        );
        assert_eq!(code, 0, "{err}");
        let sent = read_json(&replayed);
        assert_eq!(sent, body, "the request is replayed as recorded");
        let doc: Value = serde_yaml::from_str(&out).unwrap();
        assert_eq!(doc["children"][0]["data"]["greeting"], "Hello, World!");
    }
    // A recording of the other controller kind is refused.
    let wrong = write(
        dir.path(),
        "wrong.json",
        &json!({"controller": {"kind": "DecoratorController", "name": "x"}, "hook": "sync",
                "request": body}),
    );
    let (code, _, err) = render(
        &[
            &common[..],
            &["--request", path(&wrong), "--hook-command", "cat"],
        ]
        .concat(),
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("recorded for a DecoratorController"), "{err}");
}

/// The hooks of the --diff test: sync makes one ConfigMap per entry of `spec.items` and a
/// status counting the observed ConfigMaps and naming the related ones; customize relates
/// the ConfigMaps labelled `render-related: "yes"`.
const ITEMS_HOOK: &str = r#"
def sync(request):
    items = request["parent"].get("spec", {}).get("items", {})
    children = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                 "data": {"v": value}} for name, value in sorted(items.items())]
    observed = request["children"]["ConfigMap.v1"]
    related = sorted(request["related"].get("ConfigMap.v1", {}).keys())
    return {"children": children, "status": {"count": len(observed), "related": related}}

def customize(request):
    return {"relatedResources": [{"apiVersion": "v1", "resource": "configmaps",
            "labelSelector": {"matchLabels": {"render-related": "yes"}}}]}

def answer(hook, body):
    request = json.loads(body)
    return customize(request) if hook == "customize" else sync(request)
"#;

/// What the --diff test works on: the items hook, a cluster with the controller object
/// (also written to a file) and parent `p` with its file, and a related ConfigMap.
struct ItemsScenario {
    _hook: ControllerProcess,
    port: u16,
    cluster: TestCluster,
    ns: String,
    /// The controller object's name (and its `team` label).
    name: String,
    controllers: Api<DynamicObject>,
    controller_file: PathBuf,
    parents: Api<DynamicObject>,
    parent_file: PathBuf,
    cms: Api<ConfigMap>,
}

impl ItemsScenario {
    /// Starts the items hook (python3), a cluster with the controller object and parent
    /// `p` (items a, b, c), and the ConfigMap `settings` its customize hook relates.
    async fn start(dir: &Path) -> Self {
        let (hook, port) = start_python_json_hook(dir, "items_hook", ITEMS_HOOK, &[]);

        let cluster = TestCluster::start().await;
        cluster.install_metacontroller_crds().await;
        let group = format!("{}.example.com", unique_name("render"));
        cluster
            .install_crd(&crd(&group, "v1", "Items", "items").build())
            .await;
        let ns = cluster.create_namespace("render").await;
        let name = unique_name("render-ctl");
        let (controllers, controller_file) =
            create_items_controller(&cluster, dir, &name, &group, port).await;
        let parents = dynamic_api(
            cluster.client(),
            &format!("{group}/v1"),
            "Items",
            "items",
            Some(&ns),
        );
        let parent = json!({
            "apiVersion": format!("{group}/v1"), "kind": "Items",
            "metadata": {"name": "p", "namespace": ns},
            "spec": {"items": {"a": "1", "b": "1", "c": "1"}},
        });
        let parent_file = write(dir, "parent.json", &parent);
        create_object(&parents, parent).await;
        let cms: Api<ConfigMap> = Api::namespaced(cluster.client(), &ns);
        let settings: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "settings", "labels": {"render-related": "yes"}}}))
        .unwrap();
        cms.create(&PostParams::default(), &settings).await.unwrap();
        ItemsScenario {
            _hook: hook,
            port,
            cluster,
            ns,
            name,
            controllers,
            controller_file,
            parents,
            parent_file,
            cms,
        }
    }

    /// `metacontroller run` for this scenario's controller.
    fn run(&self) -> ControllerProcess {
        let selector = format!("team={}", self.name);
        let run_args = [
            "--discovery-interval",
            "500ms",
            "--target-label-selector",
            &selector,
        ];
        ControllerProcess::run(BIN, self.cluster.kubeconfig_path(), &run_args)
    }

    /// Runs the controller until it converged on children a, b, c (status count 3), stops
    /// it, and changes the parent: b changes, c goes, d comes.
    async fn converge_then_change_the_parent(&self) {
        let mut process = self.run();
        let (cms, parents) = (&self.cms, &self.parents);
        eventually_within("children a, b, c and status count 3", WAIT, || async move {
            for n in ["a", "b", "c"] {
                if configmap_value(cms, n).await.as_deref() != Some("1") {
                    return false;
                }
            }
            parents
                .get("p")
                .await
                .is_ok_and(|p| p.data.pointer("/status/count") == Some(&json!(3)))
        })
        .await;
        process.terminate();
        assert!(
            process.wait_exit(Duration::from_secs(30)).is_some(),
            "the controller did not stop:\n{}",
            process.logs()
        );
        self.parents
            .patch(
                "p",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"items": {"b": "2", "c": null, "d": "1"}}})),
            )
            .await
            .unwrap();
    }

    /// `metacontroller render` of parent `p` against the cluster, with `extra` flags; must
    /// exit 0. Returns its output.
    fn render(&self, extra: &[&str]) -> String {
        let url = format!("http://127.0.0.1:{}/sync", self.port);
        let args = [
            "--controller",
            path(&self.controller_file),
            "--parent",
            path(&self.parent_file),
            "--kubeconfig",
            path(self.cluster.kubeconfig_path()),
            "--hook-url",
            &url,
        ];
        let (code, out, err) = render(&[&args[..], extra].concat());
        assert_eq!(code, 0, "{err}\n{out}");
        out
    }
}

/// Creates the --diff test's CompositeController `name` (parents `items` of `group`, InPlace
/// ConfigMap children, the items hook on `port`) and writes it to a file. Returns the
/// controllers' API and the file.
async fn create_items_controller(
    cluster: &TestCluster,
    dir: &Path,
    name: &str,
    group: &str,
    port: u16,
) -> (Api<DynamicObject>, PathBuf) {
    let mut controller = controller_object(
        "CompositeController",
        name,
        json!({
            "generateSelector": true,
            "parentResource": {"apiVersion": format!("{group}/v1"), "resource": "items"},
            "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                                "updateStrategy": {"method": "InPlace"}}],
            "hooks": {
                "sync": {"webhook": {"url": format!("http://127.0.0.1:{port}/sync")}},
                "customize": {"webhook": {"url": format!("http://127.0.0.1:{port}/customize")}},
            },
        }),
    );
    controller["metadata"]["labels"] = json!({"team": name});
    let controller_file = write(dir, "controller.json", &controller);
    let controllers = dynamic_api(
        cluster.client(),
        "metacontroller.k8s.io/v1alpha1",
        "CompositeController",
        "compositecontrollers",
        None,
    );
    create_object(&controllers, controller).await;
    (controllers, controller_file)
}

/// `data.v` of ConfigMap `name` (`None` when it or the key is missing).
async fn configmap_value(cms: &Api<ConfigMap>, name: &str) -> Option<String> {
    let cm = cms.get_opt(name).await.ok().flatten()?;
    cm.data?.get("v").cloned()
}

/// The --diff plan: a unchanged, b updated, c deleted, d created, the status updated.
fn assert_diff_plan(out: &str, ns: &str) {
    for line in [
        format!("unchanged ConfigMap.v1 {ns}/a"),
        format!("update ConfigMap.v1 {ns}/b"),
        format!("delete ConfigMap.v1 {ns}/c"),
        format!("create ConfigMap.v1 {ns}/d"),
        "status: update".to_string(),
    ] {
        assert!(out.lines().any(|l| l == line), "no {line:?} in:\n{out}");
    }
    assert!(out.contains("-  v: '1'\n+  v: '2'"), "b's diff:\n{out}");
    assert!(
        out.contains("-observedGeneration: 1\n+observedGeneration: 2"),
        "{out}"
    );
}

/// The desired state rendered without --diff: children a, b, d, and the related ConfigMap
/// the customize hook selects in the status.
fn assert_desired_state(out: &str) {
    let doc: Value = serde_yaml::from_str(out).unwrap();
    assert_eq!(doc["status"]["related"], json!(["settings"]), "{out}");
    let names: Vec<&str> = doc["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b", "d"]);
}

/// `render --diff --kubeconfig` against objects a controller made, then changed: one child
/// to create, one to update, one to delete, one untouched. Then `metacontroller run` syncs
/// and the cluster changes exactly as rendered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diff_agrees_with_what_the_controller_then_does() {
    if !installed("python3") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let scenario = ItemsScenario::start(dir.path()).await;
    // The controller converges on a, b, c; then it stops and the parent changes.
    scenario.converge_then_change_the_parent().await;
    let cms = &scenario.cms;
    let a_before = cms.get("a").await.unwrap().metadata.resource_version;

    assert_diff_plan(&scenario.render(&["--diff"]), &scenario.ns);
    // Without --diff: the desired state, with the related objects the customize hook
    // selects read from the cluster as the controller reads them.
    assert_desired_state(&scenario.render(&[]));
    // Nothing was written by render.
    assert!(cms.get_opt("d").await.unwrap().is_none());
    assert!(cms.get_opt("c").await.unwrap().is_some());

    // The controller does exactly that.
    let _process = scenario.run();
    let parents = &scenario.parents;
    eventually_within(
        "d created, b updated, c deleted, status written",
        WAIT,
        || async move {
            configmap_value(cms, "d").await.as_deref() == Some("1")
                && configmap_value(cms, "b").await.as_deref() == Some("2")
                && cms.get_opt("c").await.is_ok_and(|c| c.is_none())
                && parents.get("p").await.is_ok_and(|p| {
                    p.data.pointer("/status/observedGeneration") == Some(&json!(2))
                        && p.data.pointer("/status/related") == Some(&json!(["settings"]))
                })
        },
    )
    .await;
    let a_after = cms.get("a").await.unwrap().metadata.resource_version;
    assert_eq!(
        a_before, a_after,
        "a was rendered unchanged but was written"
    );
    // A real cluster keeps what tests leave: remove the controller object.
    let _ = scenario
        .controllers
        .delete(&scenario.name, &Default::default())
        .await;
}

/// The offline decorator test's DecoratorController (Services labelled `decorate: yes`,
/// ConfigMap attachments, a v2 sync hook), written to a file.
fn decorator(dir: &Path) -> PathBuf {
    let spec = json!({
        "resources": [{"apiVersion": "v1", "resource": "services",
                       "labelSelector": {"matchLabels": {"decorate": "yes"}}}],
        "attachments": [{"apiVersion": "v1", "resource": "configmaps"}],
        "hooks": {"sync": {"version": "v2",
                            "webhook": {"url": "http://127.0.0.1:1/never"}}},
    });
    write(
        dir,
        "decorator.json",
        &controller_object("DecoratorController", "dec", spec),
    )
}

/// `render --controller <controller> <input…> --hook-command <hook>`.
fn render_with(controller: &Path, input: &[&str], hook: &str) -> (i32, String, String) {
    render(
        &[
            &["--controller", path(controller)],
            input,
            &["--hook-command", hook],
        ]
        .concat(),
    )
}

/// The request a decorator's sync gets: the golden shape, the target as `object` (with what
/// a server adds), no attachments yet, not finalizing.
fn assert_decorator_request(request: &Value) {
    assert_eq!(
        keys(request),
        keys(&golden("v2", "decorator-sync-request.json"))
    );
    assert_eq!(request["object"]["metadata"]["name"], "web");
    // Created in the in-process API server first: it has what a server adds.
    assert!(request["object"]["metadata"]["uid"].is_string());
    assert_eq!(request["attachments"], json!({"ConfigMap.v1": {}}));
    assert_eq!(request["finalizing"], false);
}

/// A DecoratorController offline: the request carries the target as `object` and its
/// attachments; the answer's attachments get the decorator's annotation, and labels are
/// reported as the controller applies them.
#[test]
fn decorator_offline() {
    if !installed("python3") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let controller = decorator(dir.path());
    let target = write(
        dir.path(),
        "svc.json",
        &json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "web", "namespace": "shop", "labels": {"decorate": "yes"}},
                "spec": {"ports": [{"port": 80}]}}),
    );
    let captured = dir.path().join("request.json");
    let hook = format!(
        r#"tee {} >/dev/null; python3 -c 'import json; print(json.dumps({{"labels": {{"decorated": "true"}}, "attachments": [{{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {{"name": "web-info"}}, "data": {{"port": "80"}}}}]}}))'"#,
        captured.display()
    );
    let (code, out, err) = render_with(&controller, &["--parent", path(&target)], &hook);
    assert_eq!(code, 0, "{err}");
    assert_decorator_request(&read_json(&captured));
    let doc: Value = serde_yaml::from_str(&out).unwrap();
    let attachment = &doc["attachments"][0];
    assert_eq!(attachment["metadata"]["namespace"], "shop", "{out}");
    assert_eq!(
        attachment["metadata"]["annotations"]["metacontroller.k8s.io/decorator-controller"], "dec",
        "{out}"
    );
    assert_eq!(doc["labels"]["decorated"], "true", "{out}");

    // The captured request replays to the same answer; replaying it to the customize hook
    // is refused, as for a CompositeController.
    let replay = dir.path().join("replay.json");
    std::fs::copy(&captured, &replay).unwrap();
    let (code, replayed, err) = render_with(&controller, &["--request", path(&replay)], &hook);
    assert_eq!(code, 0, "{err}");
    assert_eq!(replayed, out, "a replay answers as the original render");
    let customize = ["--request", path(&replay), "--hook", "customize"];
    let (code, _, err) = render_with(&controller, &customize, "cat");
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("replaying a customize request is not supported"),
        "{err}"
    );

    // An object the decorator does not select is refused.
    let other = write(
        dir.path(),
        "other.json",
        &json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "plain", "namespace": "shop"}}),
    );
    let (code, _, err) = render_with(&controller, &["--parent", path(&other)], "cat");
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("ignores this object"), "{err}");
}

/// `--diff` offline follows the update strategies as the controller does: a differing
/// `Recreate` child is deleted (and created again by a later sync), a differing `OnDelete`
/// child is left alone.
#[test]
fn diff_follows_update_strategies() {
    if !installed("jq") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spec = json!({
        "parentResource": {"apiVersion": "example.com/v1", "resource": "helloworlds"},
        "childResources": [
            {"apiVersion": "v1", "resource": "configmaps",
             "updateStrategy": {"method": "Recreate"}},
            {"apiVersion": "v1", "resource": "secrets",
             "updateStrategy": {"method": "OnDelete"}},
        ],
        "hooks": {"sync": {"webhook": {"url": "http://127.0.0.1:1/never"}}},
    });
    let controller = write(
        dir.path(),
        "controller.json",
        &controller_object("CompositeController", "strategies", spec),
    );
    let observed = |kind: &str, field: &str| {
        json!({"apiVersion": "v1", "kind": kind,
               "metadata": {"name": "x", "namespace": "team-a", "uid": format!("uid-{kind}"),
                            "labels": {"app": "p"}},
               field: {"k": "b2xk"}})
    };
    let children = write(
        dir.path(),
        "children.json",
        &json!({"apiVersion": "v1", "kind": "List",
                "items": [observed("ConfigMap", "data"), observed("Secret", "data")]}),
    );
    let hook = r#"jq '{children: [
        {apiVersion: "v1", kind: "ConfigMap", metadata: {name: "x", labels: {app: "p"}}, data: {k: "new"}},
        {apiVersion: "v1", kind: "Secret", metadata: {name: "x", labels: {app: "p"}}, data: {k: "bmV3"}}]}'"#;
    let (code, out, err) = render(&[
        "--controller",
        path(&controller),
        "--crd",
        &hello("crd.yaml"),
        "--parent",
        path(&parent(dir.path())),
        "--children",
        path(&children),
        "--hook-command",
        hook,
        "--diff",
    ]);
    assert_eq!(code, 0, "{err}\n{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("recreate ConfigMap.v1 team-a/x")),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("unchanged Secret.v1 team-a/x (updateStrategy OnDelete")),
        "{out}"
    );
    assert!(!out.contains("update "), "{out}");
}

/// The hook's `events` are printed as the controller records them, and an entry it would
/// skip is reported with the `InvalidHookEvent` it would record instead.
#[test]
fn events_of_the_answer_are_kept_and_checked() {
    if !installed("python3") {
        return;
    }
    let hook = r#"python3 -c 'import json; print(json.dumps({"children": [], "events": [{"type": "Normal", "reason": "Greeted", "message": "said hello"}, {"type": "Loud", "reason": "Shouted", "message": "x"}]}))'"#;
    let (code, out, err) = render_hello(&["--hook-command", hook]);
    assert_eq!(code, 0, "{err}");
    let doc: Value = serde_yaml::from_str(&out).expect("YAML answer");
    assert_eq!(
        doc["events"],
        json!([{"type": "Normal", "reason": "Greeted", "message": "said hello"}]),
        "{out}"
    );
    let warning = err
        .lines()
        .find(|l| l.contains("InvalidHookEvent"))
        .unwrap_or_else(|| panic!("no InvalidHookEvent in:\n{err}"));
    assert!(warning.contains("sync hook event 1 skipped"), "{warning}");
}

/// A failing hook is reported once, not once per layer of the error.
#[test]
fn a_hook_error_is_printed_once() {
    let dir = tempfile::tempdir().unwrap();
    let code = dir.path().join("sync.jsonnet");
    std::fs::write(&code, "function(request) error 'boom once'").unwrap();
    let (status, _, err) = render_hello(&["--jsonnet", path(&code)]);
    assert_eq!(status, 1, "{err}");
    assert!(err.contains("sync hook failed for HelloWorld"), "{err}");
    assert_eq!(err.matches("boom once").count(), 1, "{err}");
}

/// Children elsewhere (extension `childResources[].namespaces`), offline: the v1 request
/// keys an observed child in another namespace `<namespace>/<name>`, and the desired
/// children elsewhere (another namespace, a Namespace) are printed with the parent-uid label
/// and parent annotations the controller writes; a child in the parent's namespace is not.
/// The controller (ConfigMaps in `shared`, Namespaces anywhere), the observed children
/// (one elsewhere) and a hook command answering three children and capturing the request
/// to `request.json`, in `dir`.
fn elsewhere_inputs(dir: &Path) -> (PathBuf, PathBuf, String) {
    let never = json!({"webhook": {"url": "http://127.0.0.1:1/never"}});
    let spec = json!({
        "parentResource": {"apiVersion": "example.com/v1", "resource": "helloworlds"},
        "childResources": [
            {"apiVersion": "v1", "resource": "configmaps", "namespaces": ["shared"]},
            {"apiVersion": "v1", "resource": "namespaces", "namespaces": ["*"]},
        ],
        "hooks": {"sync": never},
    });
    let controller = write(
        dir,
        "controller.json",
        &controller_object("CompositeController", "elsewhere", spec),
    );
    let children = write(
        dir,
        "children.json",
        &json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "c1", "namespace": "team-a", "labels": {"app": "p"}}},
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "far", "namespace": "shared",
                          "labels": {"metacontroller.k8s.io/parent-uid": "uid-p"}}},
        ]}),
    );
    let answer = json!({"children": [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c1", "labels": {"app": "p"}}},
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": "far", "namespace": "shared", "labels": {"app": "p"}}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "made", "labels": {"app": "p"}}},
    ]});
    let answer_file = write(dir, "answer.json", &answer);
    let hook = format!(
        "tee {} >/dev/null; cat {}",
        dir.join("request.json").display(),
        answer_file.display()
    );
    (controller, children, hook)
}

#[test]
fn children_elsewhere_show_their_namespace_and_parent_label() {
    let dir = tempfile::tempdir().unwrap();
    let (controller, children, hook) = elsewhere_inputs(dir.path());
    let captured = dir.path().join("request.json");
    let (code, out, err) = render(&[
        "--controller",
        path(&controller),
        "--crd",
        &hello("crd.yaml"),
        "--parent",
        path(&parent(dir.path())),
        "--children",
        path(&children),
        "--hook-command",
        &hook,
    ]);
    assert_eq!(code, 0, "{err}");
    let request = read_json(&captured);
    let cms = &request["children"]["ConfigMap.v1"];
    assert!(
        cms.get("c1").is_some() && cms.get("shared/far").is_some(),
        "{request}"
    );
    let doc: Value = serde_yaml::from_str(&out).expect("YAML output");
    let find = |kind: &str, name: &str| {
        doc["children"]
            .as_array()
            .and_then(|c| {
                c.iter()
                    .find(|c| c["kind"] == kind && c["metadata"]["name"] == name)
                    .cloned()
            })
            .unwrap_or_else(|| panic!("no {kind} {name} in\n{out}"))
    };
    for (kind, name) in [("ConfigMap", "far"), ("Namespace", "made")] {
        let meta = &find(kind, name)["metadata"];
        assert_eq!(
            meta["labels"]["metacontroller.k8s.io/parent-uid"], "uid-p",
            "{out}"
        );
        assert_eq!(
            meta["annotations"]["metacontroller.k8s.io/parent"], "team-a/p",
            "{out}"
        );
        assert_eq!(
            meta["annotations"]["metacontroller.k8s.io/parent-kind"], "HelloWorld.example.com/v1",
            "{out}"
        );
    }
    assert_eq!(find("ConfigMap", "far")["metadata"]["namespace"], "shared");
    let own = find("ConfigMap", "c1");
    assert_eq!(own["metadata"]["namespace"], "team-a", "{out}");
    assert!(
        own["metadata"]["labels"]
            .get("metacontroller.k8s.io/parent-uid")
            .is_none(),
        "{out}"
    );
}

/// Children elsewhere against a cluster (`--kubeconfig`): the request holds the parent's
/// label-tracked ConfigMap in another namespace (keyed `<namespace>/<name>`, found by the
/// parent-uid label), not an unlabelled one there. Embedded and real server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_render_reads_children_elsewhere_by_label() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = TestCluster::start().await;
    let parent_ns = cluster.create_namespace("render-else").await;
    let other = cluster.create_namespace("render-else-other").await;
    let crd = cluster.install_parent_crd("render-elsewhere").await;
    let parents = crd.api(cluster.client(), Some(&parent_ns));
    let parent = create_object(
        &parents,
        json!({"apiVersion": crd.api_version(), "kind": "Parent", "metadata": {"name": "p"},
               "spec": {"selector": {"matchLabels": {"app": "r"}}}}),
    )
    .await;
    let uid = parent.metadata.uid.clone().expect("uid");
    let cms: Api<ConfigMap> = Api::namespaced(cluster.client(), &other);
    for (name, labels) in [
        (
            "far",
            json!({"app": "r", "metacontroller.k8s.io/parent-uid": uid}),
        ),
        ("stranger", json!({"app": "r"})),
    ] {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    let never = json!({"webhook": {"url": "http://127.0.0.1:1/never"}});
    let spec = json!({
        "parentResource": {"apiVersion": crd.api_version(), "resource": crd.plural()},
        "childResources": [{"apiVersion": "v1", "resource": "configmaps", "namespaces": ["*"]}],
        "hooks": {"sync": never},
    });
    let controller = write(
        dir.path(),
        "controller.json",
        &controller_object("CompositeController", &unique_name("render-else"), spec),
    );
    let parent_file = write(
        dir.path(),
        "parent.json",
        &json!({"apiVersion": crd.api_version(), "kind": "Parent",
                "metadata": {"name": "p", "namespace": parent_ns}}),
    );
    let captured = dir.path().join("request.json");
    let (code, out, err) = render(&[
        "--controller",
        path(&controller),
        "--parent",
        path(&parent_file),
        "--kubeconfig",
        path(cluster.kubeconfig_path()),
        "--hook-command",
        &capture(&captured),
    ]);
    assert_eq!(code, 0, "{err}\n{out}");
    let request = read_json(&captured);
    let observed = &request["children"]["ConfigMap.v1"];
    assert!(
        observed.get(format!("{other}/far").as_str()).is_some(),
        "{request}"
    );
    assert!(
        observed.get(format!("{other}/stranger").as_str()).is_none(),
        "{request}"
    );
    // A real cluster outlives the test; other tests count label-tracked objects.
    let _ = cms.delete("far", &Default::default()).await;
}
