//! `--record-hooks DIR` as a user runs it: `metacontroller run` against a test cluster with
//! a Python hook, and `metacontroller dev` with `--record-hooks-max-files`. Each recording
//! must hold the request the hook server really received, with Secret data redacted while
//! the hook got the real data.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, PostParams};
use kube::core::DynamicObject;
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::example::{installed, start_python_json_hook};
use metacontroller_testkit::{
    crd, create_object, eventually_within, unique_name, ControllerProcess, CrdBuilder, HookReply,
    HookServer, TestCluster,
};
use serde_json::{json, Value};

/// base64("hunter2"): the Secret value the hook asks for.
const SECRET_B64: &str = "aHVudGVyMg==";

/// The answers of a Python hook server (`testkit::example::start_python_json_hook`, with the
/// log directory as its second argument): logs every request body it receives (one file
/// each, written before it answers) and answers sync with a Secret child, finalize with
/// `finalized`, customize with no related resources.
const PYTHON_HOOK: &str = r#"
import os, threading

log_dir = sys.argv[2]
lock, count = threading.Lock(), [0]

def answer(hook, body):
    with lock:
        count[0] += 1
        n = count[0]
    tmp = os.path.join(log_dir, ".%d.tmp" % n)
    with open(tmp, "wb") as f:
        f.write(body)
    os.rename(tmp, os.path.join(log_dir, "%06d-%s.json" % (n, hook)))
    req = json.loads(body)
    name = req["parent"]["metadata"]["name"]
    if hook == "finalize":
        return {"finalized": True, "children": []}
    if hook == "customize":
        return {"relatedResources": []}
    return {"status": {"secrets": len(req["children"].get("Secret.v1", {}))},
            "children": [{"apiVersion": "v1", "kind": "Secret",
                          "metadata": {"name": name + "-secret"},
                          "data": {"password": "aHVudGVyMg=="}}]}
"#;

/// `metacontroller run` for the controllers selected by `selector`, recording hook exchanges
/// into `recordings`, without metrics or probe listeners.
fn run_recording(
    cluster: &TestCluster,
    selector: &str,
    recordings: &Path,
    extra: &[&str],
) -> ControllerProcess {
    let recordings = recordings.to_str().unwrap();
    let mut args = vec![
        "--target-label-selector",
        selector,
        "--metrics-address",
        "0",
        "--health-probe-bind-address",
        "0",
        "--record-hooks",
        recordings,
    ];
    args.extend_from_slice(extra);
    ControllerProcess::run(
        env!("CARGO_BIN_EXE_metacontroller"),
        cluster.kubeconfig_path(),
        &args,
    )
}

/// A cluster with the Metacontroller CRDs, a fresh namespace and a `Parent` CRD in a fresh
/// group, all named after `name`.
async fn cluster_with_parent(name: &str) -> (TestCluster, String, CrdBuilder) {
    let cluster = TestCluster::start().await;
    cluster.install_metacontroller_crds().await;
    let ns = cluster.create_namespace(name).await;
    let parent = cluster.install_parent_crd(name).await;
    (cluster, ns, parent)
}

/// The JSON files of `dir` (recordings or hook logs), sorted by name.
fn json_files(dir: &Path) -> Vec<(String, Value)> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".json") && !n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
        .into_iter()
        .filter_map(|name| {
            // Pruned (--record-hooks-max-files) between the listing and the read.
            let text = std::fs::read_to_string(dir.join(&name)).ok()?;
            let value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{name} is not complete JSON ({e}): {text}"));
            Some((name, value))
        })
        .collect()
}

/// `value` without Secret data (and without Secrets' last-applied annotations), so a
/// recording and the request the hook received compare equal.
fn without_secret_data(value: &Value) -> Value {
    let mut value = value.clone();
    strip(&mut value);
    value
}

fn strip(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if map.get("kind").and_then(Value::as_str) == Some("Secret") {
                map.remove("data");
                map.remove("stringData");
                if let Some(annotations) = map
                    .get_mut("metadata")
                    .and_then(|m| m.get_mut("annotations"))
                    .and_then(Value::as_object_mut)
                {
                    annotations.retain(|k, _| !k.ends_with("last-applied-configuration"));
                }
            }
            map.values_mut().for_each(strip);
        }
        Value::Array(items) => items.iter_mut().for_each(strip),
        _ => {}
    }
}

/// Every recorded request of `hook` matches a request the hook server logged (Secret data
/// aside), and every recording of a Secret shows `REDACTED` instead of the value.
fn assert_recordings_match(recordings: &[(String, Value)], received: &[Value], hook: &str) {
    let received: Vec<Value> = received.iter().map(without_secret_data).collect();
    let mut matched = 0;
    for (name, record) in recordings.iter().filter(|(_, r)| r["hook"] == hook) {
        let request = without_secret_data(&record["request"]);
        assert!(
            received.contains(&request),
            "{name}: the recorded request is not one the hook received:\n{record:#}"
        );
        matched += 1;
    }
    assert!(matched > 0, "no {hook} recording");
}

/// The Python hook server of [`PYTHON_HOOK`], logging what it receives into a directory.
struct PythonHook {
    _process: ControllerProcess,
    port: u16,
    /// Where it logs each request body it received.
    log: PathBuf,
}

impl PythonHook {
    /// Starts it with its script and log directory under `work`.
    fn start(work: &Path) -> Self {
        let log = work.join("received");
        std::fs::create_dir_all(&log).unwrap();
        let (process, port) = start_python_json_hook(work, "hook", PYTHON_HOOK, &[log.as_os_str()]);
        PythonHook {
            _process: process,
            port,
            log,
        }
    }

    /// `http://127.0.0.1:<port>/<hook>`.
    fn url(&self, hook: &str) -> String {
        format!("http://127.0.0.1:{}/{hook}", self.port)
    }
}

/// The request bodies for `hook` among `received` (the Python hook's log files).
fn requests_for(received: &[(String, Value)], hook: &str) -> Vec<Value> {
    received
        .iter()
        .filter(|(n, _)| n.ends_with(&format!("-{hook}.json")))
        .map(|(_, v)| v.clone())
        .collect()
}

/// Creates a CompositeController named `name` (label `team=<label>`) whose parents want a
/// Secret child (InPlace), with sync, finalize and customize hooks on `hook`.
async fn create_recorded_controller(
    cluster: &TestCluster,
    parent: &CrdBuilder,
    hook: &PythonHook,
    name: &str,
    label: &str,
) -> CompositeController {
    cluster
        .create_controller(
            name,
            label,
            json!({
                "parentResource": {"apiVersion": parent.api_version(), "resource": parent.plural()},
                "generateSelector": true,
                "childResources": [{"apiVersion": "v1", "resource": "secrets",
                                    "updateStrategy": {"method": "InPlace"}}],
                "hooks": {
                    "sync": {"webhook": {"url": hook.url("sync")}},
                    "finalize": {"webhook": {"url": hook.url("finalize")}},
                    "customize": {"webhook": {"url": hook.url("customize")}},
                },
            }),
        )
        .await
}

/// Creates parent `p`, waits for a recorded sync that saw its Secret child and checks the
/// child got the real data; then deletes `p` and waits for a recorded finalize and for `p`
/// to be gone.
async fn sync_and_finalize_p(
    cluster: &TestCluster,
    ns: &str,
    parent: &CrdBuilder,
    recordings: &Path,
) {
    let parents = parent.api(cluster.client(), Some(ns));
    let p =
        json!({"apiVersion": parent.api_version(), "kind": "Parent", "metadata": {"name": "p"}});
    create_object(&parents, p).await;
    let recorded = |hook: &str, check: fn(&Value) -> bool| {
        json_files(recordings)
            .iter()
            .any(|(_, r)| r["hook"] == hook && check(r))
    };
    // The second sync sees the Secret child (with its data) as observed.
    eventually_within(
        "a recorded sync whose request holds the observed Secret",
        Duration::from_secs(60),
        || async {
            recorded("sync", |r| {
                r["request"]["children"]["Secret.v1"]["p-secret"].is_object()
            })
        },
    )
    .await;
    let secret = Api::<Secret>::namespaced(cluster.client(), ns)
        .get("p-secret")
        .await
        .unwrap();
    assert_eq!(
        secret.data.unwrap()["password"].0,
        b"hunter2",
        "the child got the real data"
    );

    parents.delete("p", &DeleteParams::default()).await.unwrap();
    eventually_within("a recorded finalize", Duration::from_secs(60), || async {
        recorded("finalize", |_| true)
    })
    .await;
    eventually_within("parent gone", Duration::from_secs(60), || async {
        parents.get_opt("p").await.unwrap().is_none()
    })
    .await;
}

/// Every recording file holds no Secret data nor credentials, and names the controller,
/// the hook, its URL and the parent `<ns>/p`, with a successful response.
fn assert_recording_files(
    recordings: &Path,
    records: &[(String, Value)],
    hook: &PythonHook,
    name: &str,
    ns: &str,
) {
    for (file, record) in records {
        let text = std::fs::read_to_string(recordings.join(file)).unwrap();
        assert!(
            !text.contains(SECRET_B64),
            "{file} leaks Secret data:\n{text}"
        );
        assert!(
            !text.to_ascii_lowercase().contains("authorization"),
            "{text}"
        );
        assert_eq!(record["controller"]["kind"], "CompositeController");
        assert_eq!(record["controller"]["name"], name);
        assert_eq!(record["response"]["status"], 200, "{file}");
        assert!(
            record["startedAt"].as_str().unwrap().ends_with('Z'),
            "{file}"
        );
        assert!(record["durationMs"].is_u64(), "{file}");
        assert!(record.get("error").is_none(), "{file}");
        let kind = record["hook"].as_str().unwrap();
        assert_eq!(record["url"], hook.url(kind));
        assert!(
            file.contains(&format!("-{}-{kind}-{ns}-p.json", sanitized(name))),
            "{file}"
        );
    }
}

/// The recordings show the observed and the desired Secret redacted, and the finalize
/// response.
fn assert_redacted(records: &[(String, Value)]) {
    let observed = records
        .iter()
        .find_map(|(_, r)| {
            let secret = &r["request"]["children"]["Secret.v1"]["p-secret"];
            secret.is_object().then(|| secret.clone())
        })
        .unwrap();
    assert_eq!(observed["data"]["password"], "REDACTED", "{observed:#}");
    assert_eq!(observed["metadata"]["name"], "p-secret");
    let desired = &records.iter().find(|(_, r)| r["hook"] == "sync").unwrap().1["response"]["body"]
        ["children"][0];
    assert_eq!(desired["data"]["password"], "REDACTED", "{desired:#}");
    let finalize = records
        .iter()
        .rev()
        .find(|(_, r)| r["hook"] == "finalize")
        .unwrap();
    assert_eq!(finalize.1["response"]["body"]["finalized"], true);
}

/// `render --request <recording>` with `controller` and `parent`'s CRD against the sync
/// hook answers the Secret child.
fn assert_replays(
    work: &Path,
    controller: &CompositeController,
    parent: &CrdBuilder,
    recording: &Path,
    hook: &PythonHook,
) {
    let controller_file = work.join("controller.json");
    std::fs::write(&controller_file, serde_json::to_vec(controller).unwrap()).unwrap();
    let crd_file = work.join("crd.json");
    std::fs::write(&crd_file, serde_json::to_vec(&parent.build()).unwrap()).unwrap();
    let replay = Command::new(env!("CARGO_BIN_EXE_metacontroller"))
        .arg("render")
        .arg("--controller")
        .arg(&controller_file)
        .arg("--crd")
        .arg(&crd_file)
        .arg("--request")
        .arg(recording)
        .arg("--hook-url")
        .arg(hook.url("sync"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&replay.stdout);
    assert!(
        replay.status.success(),
        "render --request {}: {}\n{stdout}",
        recording.display(),
        String::from_utf8_lossy(&replay.stderr)
    );
    let rendered: Value = serde_yaml::from_str(&stdout).unwrap();
    assert_eq!(rendered["children"][0]["kind"], "Secret", "{stdout}");
    assert_eq!(
        rendered["children"][0]["metadata"]["name"], "p-secret",
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_records_sync_finalize_and_customize_exchanges_with_secrets_redacted() {
    if !installed("python3") {
        return;
    }
    let (cluster, ns, parent) = cluster_with_parent("record").await;
    let work = tempfile::tempdir().unwrap();
    let recordings = work.path().join("recordings").join("nested");
    let hook = PythonHook::start(work.path());
    let label = unique_name("team");
    let name = unique_name("record");
    let controller = create_recorded_controller(&cluster, &parent, &hook, &name, &label).await;
    let selector = format!("team={label}");
    let process = run_recording(
        &cluster,
        &selector,
        &recordings,
        &["--discovery-interval", "500ms"],
    );
    sync_and_finalize_p(&cluster, &ns, &parent, &recordings).await;

    let received = json_files(&hook.log);
    let records = json_files(&recordings);
    // The hook got the real data; the recordings hold none of it.
    let received_text = serde_json::to_string(&requests_for(&received, "sync")).unwrap();
    assert!(received_text.contains(SECRET_B64), "{received_text}");
    assert_recording_files(&recordings, &records, &hook, &name, &ns);
    for kind in ["sync", "finalize", "customize"] {
        assert_recordings_match(&records, &requests_for(&received, kind), kind);
    }
    assert_redacted(&records);
    // Every exchange the hook received was recorded (the writer may lag the hook).
    eventually_within(
        "one recording per received request",
        Duration::from_secs(10),
        || async { json_files(&recordings).len() >= json_files(&hook.log).len() },
    )
    .await;
    // A recorded exchange replays through `render --request` against the same hook.
    let (file, _) = records
        .iter()
        .find(|(_, r)| r["hook"] == "sync")
        .expect("a recorded sync");
    assert_replays(
        work.path(),
        &controller,
        &parent,
        &recordings.join(file),
        &hook,
    );
    assert!(
        process.logs().contains("recording hook exchanges"),
        "{}",
        process.logs()
    );
}

fn sanitized(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `metacontroller dev --record-hooks <recordings> --record-hooks-max-files 3` with its
/// kubeconfig written to `kubeconfig`, once ready.
fn start_dev_recording(kubeconfig: &Path, recordings: &Path) -> ControllerProcess {
    let mut command = Command::new(env!("CARGO_BIN_EXE_metacontroller"));
    command
        .args(["dev", "--port", "0", "--simulate=false", "--dev-kubeconfig"])
        .arg(kubeconfig)
        .args(["--metrics-address", "0", "--health-probe-bind-address", "0"])
        .arg("--record-hooks")
        .arg(recordings)
        .args(["--record-hooks-max-files", "3"])
        .env_remove("KUBECONFIG");
    let mut process = ControllerProcess::spawn(command);
    process.wait_for_line("dev mode ready", Duration::from_secs(60), |l| {
        l.contains("press Ctrl-C")
    });
    assert!(
        process.logs().contains("recording hook exchanges to"),
        "{}",
        process.logs()
    );
    process
}

/// Installs a `Parent` CRD and a CompositeController `dev-record` (resync every second,
/// sync hook at `sync_url`) through `client`, then creates parent `default/p` (`spec.n: 7`)
/// once the CRD is served.
async fn create_resyncing_parent(client: kube::Client, sync_url: &str) {
    let parent = crd("dev-record.example.com", "v1", "Parent", "parents");
    let crd_object: CustomResourceDefinition = serde_json::from_value(parent.build()).unwrap();
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &crd_object)
        .await
        .unwrap();
    let controller: CompositeController = serde_json::from_value(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": "dev-record"},
        "spec": {
            "parentResource": {"apiVersion": parent.api_version(), "resource": "parents"},
            "generateSelector": true,
            "resyncPeriodSeconds": 1,
            "hooks": {"sync": {"webhook": {"url": sync_url}}},
        }
    }))
    .unwrap();
    Api::<CompositeController>::all(client.clone())
        .create(&PostParams::default(), &controller)
        .await
        .unwrap();
    let parents = parent.api(client, Some("default"));
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": parent.api_version(), "kind": "Parent",
        "metadata": {"name": "p"}, "spec": {"n": 7},
    }))
    .unwrap();
    eventually_within(
        "parent created (CRD served)",
        Duration::from_secs(30),
        || async { parents.create(&PostParams::default(), &obj).await.is_ok() },
    )
    .await;
}

/// The sequence number of a recording file (`<time>-<seq>-…`; 0 when it has none).
fn seq(name: &str) -> u64 {
    name.split('-')
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// `metacontroller dev --record-hooks DIR --record-hooks-max-files 3`: recordings appear,
/// match what the hook server got, and the directory never keeps more than 3.
/// Dev mode is by definition the embedded API server, so this test ignores
/// `METACONTROLLER_E2E_KUBECONFIG`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_records_hooks_and_keeps_at_most_max_files() {
    let hook = HookServer::start(|_, req| {
        HookReply::json(
            json!({"status": {"n": req["parent"]["spec"]["n"].clone()}, "children": []}),
        )
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let recordings: PathBuf = dir.path().join("rec");
    std::fs::create_dir_all(&recordings).unwrap();
    // A stale recording from an earlier run counts towards the bound and goes first.
    let stale = recordings.join("0000000000001-000001-old-sync-_-x.json");
    std::fs::write(&stale, "{}").unwrap();
    let process = start_dev_recording(&kubeconfig, &recordings);
    let client = TestCluster::real(kubeconfig.clone()).await.client();
    create_resyncing_parent(client, &hook.url("/sync")).await;

    // resyncPeriodSeconds keeps syncs coming: many more than 3 calls.
    eventually_within("six sync calls", Duration::from_secs(60), || async {
        hook.calls("/sync") >= 6
    })
    .await;
    // The hook counts a call when the request arrives; its recording is written after the
    // response, off the sync path: wait for the sixth recording itself.
    eventually_within(
        "six recordings, the directory bounded to the 3 newest",
        Duration::from_secs(20),
        || async {
            let files = json_files(&recordings);
            files.len() == 3
                && !stale.exists()
                && files.iter().map(|(name, _)| seq(name)).max() >= Some(6)
        },
    )
    .await;
    let files = json_files(&recordings);
    // A write lands just before its prune: momentarily one more.
    assert!((3..=4).contains(&files.len()), "{files:?}");
    let received = hook.requests("/sync");
    for (name, record) in &files {
        assert!(name.ends_with("-dev-record-sync-default-p.json"), "{name}");
        assert!(received.contains(&record["request"]), "{name}: {record:#}");
        assert_eq!(record["response"]["body"]["status"]["n"], 7, "{name}");
    }
    // The oldest went first: of at least 6 recordings, the first 3 are gone, and the
    // survivors are consecutive.
    let mut seqs: Vec<u64> = files.iter().map(|(name, _)| seq(name)).collect();
    seqs.sort();
    assert!(seqs[0] > 3, "{seqs:?}");
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    drop(process);
}

/// SIGTERM while syncs are running: shutdown lets them finish and then waits for their
/// recordings, so every exchange the hook answered is on disk when the process has exited.
/// Large parents make each file slow enough to write that exiting without waiting loses
/// the last ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_keeps_the_recordings_of_the_last_syncs() {
    let hook = HookServer::start(|_, _| {
        HookReply::json(json!({"status": {"ok": true}, "children": []}))
            .delayed(Duration::from_millis(300))
    })
    .await;
    let (cluster, ns, parent) = cluster_with_parent("recterm").await;
    let label = unique_name("team");
    let _: CompositeController = cluster
        .create_controller(
            &unique_name("recterm"),
            &label,
            json!({
                "parentResource": {"apiVersion": parent.api_version(), "resource": parent.plural()},
                "generateSelector": true,
                "hooks": {"sync": {"webhook": {"url": hook.url("/sync")}}},
            }),
        )
        .await;
    let parents = parent.api(cluster.client(), Some(&ns));
    let blob = "x".repeat(256 << 10);
    for i in 0..8 {
        let p = json!({
            "apiVersion": parent.api_version(), "kind": "Parent",
            "metadata": {"name": format!("p{i}")}, "spec": {"blob": blob},
        });
        create_object(&parents, p).await;
    }

    let work = tempfile::tempdir().unwrap();
    let recordings = work.path().join("rec");
    let selector = format!("team={label}");
    let mut process = run_recording(&cluster, &selector, &recordings, &[]);
    // The first syncs have reached the hook (which answers after 300 ms): stop now.
    eventually_within("syncs in flight", Duration::from_secs(60), || async {
        hook.calls("/sync") >= 1
    })
    .await;
    process.terminate();
    let status = process
        .wait_exit(Duration::from_secs(30))
        .expect("exited after SIGTERM");
    assert!(status.success(), "{status:?}\n{}", process.logs());
    let answered = hook.calls("/sync");
    let files = json_files(&recordings);
    assert_eq!(
        files.len(),
        answered,
        "{answered} hook calls answered, recordings {:?}",
        files.iter().map(|(n, _)| n).collect::<Vec<_>>()
    );
    assert!(files.iter().all(|(_, r)| r["response"]["status"] == 200));
}
