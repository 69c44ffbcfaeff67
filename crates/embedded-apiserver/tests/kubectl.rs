//! The server through the real kubectl (skipped when kubectl is not installed).

mod common;

use common::*;
use embedded_apiserver::{ApiServer, ApiServerHandle, Config};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

struct Kubectl {
    _dir: tempfile::TempDir,
    kubeconfig: PathBuf,
    dir: PathBuf,
}

impl Kubectl {
    fn new(server: &ApiServerHandle) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        server.write_kubeconfig(&kubeconfig).unwrap();
        let p = dir.path().to_path_buf();
        Kubectl {
            _dir: dir,
            kubeconfig,
            dir: p,
        }
    }

    fn file(&self, name: &str, content: &str) -> PathBuf {
        let p = self.dir.join(name);
        std::fs::write(&p, content).unwrap();
        p
    }

    /// Runs kubectl with a 30s bound; returns (success, stdout, stderr).
    async fn run(&self, args: &[&str]) -> (bool, String, String) {
        let mut cmd = tokio::process::Command::new("kubectl");
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .env_remove("KUBECONFIG")
            .kill_on_drop(true);
        let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
            .await
            .expect("kubectl timed out")
            .expect("run kubectl");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    async fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.run(args).await;
        assert!(ok, "kubectl {args:?} failed: {err}{out}");
        out
    }

    async fn json(&self, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.extend(["-o", "json"]);
        serde_json::from_str(&self.ok(&a).await).unwrap()
    }
}

fn have_kubectl() -> bool {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| Path::new(&d).join("kubectl").exists()))
        .unwrap_or(false);
    if !found {
        // CI installs every tool a test needs: there a missing one fails the test.
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "kubectl is not on PATH, and CI=true: CI must install it (see .ci/run)"
        );
        eprintln!("SKIPPED: kubectl is not on PATH");
    }
    found
}

async fn setup() -> Option<(ApiServerHandle, Kubectl)> {
    if !have_kubectl() {
        return None;
    }
    let server = ApiServer::start(Config::default()).await.unwrap();
    let k = Kubectl::new(&server);
    Some((server, k))
}

const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm1\n  labels: {app: demo}\ndata:\n  a: b\n";

#[tokio::test]
async fn kubectl_create_get_patch_label_delete() {
    let Some((_s, k)) = setup().await else { return };
    within(120, async {
        let f = k.file("cm.yaml", CM);
        let out = k.ok(&["create", "-f", f.to_str().unwrap()]).await;
        assert_eq!(out.trim(), "configmap/cm1 created");
        let table = k.ok(&["get", "configmaps"]).await;
        assert!(
            table.starts_with("NAME") && table.contains("AGE") && table.contains("cm1"),
            "{table}"
        );
        let y = k.ok(&["get", "cm", "cm1", "-o", "yaml"]).await;
        assert!(
            y.contains("name: cm1") && y.contains("resourceVersion:"),
            "{y}"
        );
        assert_eq!(
            k.ok(&["get", "cm", "cm1", "-o", "jsonpath={.data.a}"])
                .await,
            "b"
        );
        k.ok(&["label", "cm", "cm1", "tier=web"]).await;
        k.ok(&["annotate", "cm", "cm1", "note=hi"]).await;
        k.ok(&[
            "patch",
            "cm",
            "cm1",
            "--type",
            "merge",
            "-p",
            r#"{"data":{"m":"1"}}"#,
        ])
        .await;
        k.ok(&[
            "patch",
            "cm",
            "cm1",
            "--type",
            "json",
            "-p",
            r#"[{"op":"add","path":"/data/j","value":"2"}]"#,
        ])
        .await;
        k.ok(&[
            "patch",
            "cm",
            "cm1",
            "--type",
            "strategic",
            "-p",
            r#"{"data":{"s":"3"}}"#,
        ])
        .await;
        let v = k.json(&["get", "cm", "cm1"]).await;
        assert_eq!(v["metadata"]["labels"]["tier"], "web");
        assert_eq!(v["metadata"]["annotations"]["note"], "hi");
        assert_eq!(
            (
                v["data"]["m"].as_str(),
                v["data"]["j"].as_str(),
                v["data"]["s"].as_str()
            ),
            (Some("1"), Some("2"), Some("3"))
        );
        let listed = k
            .ok(&["get", "cm", "-l", "tier in (web)", "-o", "name"])
            .await;
        assert_eq!(listed.trim(), "configmap/cm1");
        let out = k.ok(&["delete", "cm", "cm1"]).await;
        assert_eq!(out.trim(), "configmap \"cm1\" deleted");
        let (ok, _, err) = k.run(&["get", "cm", "cm1"]).await;
        assert!(!ok && err.contains("NotFound"), "{err}");
    })
    .await;
}

#[tokio::test]
async fn kubectl_apply_client_and_server_side() {
    let Some((_s, k)) = setup().await else { return };
    within(120, async {
        let f = k.file("cm.yaml", CM);
        assert_eq!(
            k.ok(&["apply", "-f", f.to_str().unwrap()]).await.trim(),
            "configmap/cm1 created"
        );
        assert_eq!(
            k.ok(&["apply", "-f", f.to_str().unwrap()]).await.trim(),
            "configmap/cm1 unchanged"
        );
        let f2 = k.file("cm2.yaml", &CM.replace("a: b", "a: c"));
        assert_eq!(
            k.ok(&["apply", "-f", f2.to_str().unwrap()]).await.trim(),
            "configmap/cm1 configured"
        );
        let v = k.json(&["get", "cm", "cm1"]).await;
        assert_eq!(v["data"]["a"], "c");
        assert!(
            v["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
                .is_string()
        );

        let ss = k.file(
            "ss.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  x: hello\n",
        );
        let out = k
            .ok(&["apply", "--server-side", "-f", ss.to_str().unwrap()])
            .await;
        assert_eq!(out.trim(), "configmap/ssa serverside-applied");
        assert_eq!(
            k.ok(&["get", "cm", "ssa", "-o", "jsonpath={.data.x}"])
                .await,
            "hello"
        );
    })
    .await;
}

const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}
          status: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

#[tokio::test]
async fn kubectl_custom_resources_wait_and_cascade() {
    let Some((_s, k)) = setup().await else { return };
    within(120, async {
        let crd = k.file("crd.yaml", CRD);
        k.ok(&["apply", "-f", crd.to_str().unwrap()]).await;
        k.ok(&[
            "wait",
            "--for=condition=Established",
            "crd/widgets.example.com",
            "--timeout=20s",
        ])
        .await;
        let crds = k.ok(&["get", "crd"]).await;
        assert!(crds.contains("widgets.example.com"), "{crds}");
        // Like kube-apiserver: the CREATED AT column holds the RFC 3339 timestamp, not an age.
        let header = crds.lines().next().unwrap_or_default();
        assert!(header.contains("CREATED AT"), "{crds}");
        let row = crds
            .lines()
            .find(|l| l.contains("widgets.example.com"))
            .unwrap();
        let created = row.split_whitespace().nth(1).unwrap_or_default();
        assert!(
            created.len() == 20 && created.ends_with('Z') && created.contains('T'),
            "{crds}"
        );
        let w = k.file(
            "w.yaml",
            "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  size: 3\n",
        );
        k.ok(&["apply", "-f", w.to_str().unwrap()]).await;
        let table = k.ok(&["get", "wd"]).await;
        assert!(
            table.contains("SIZE") && table.contains("w1") && table.contains('3'),
            "{table}"
        );
        let w4 = k.file(
            "w4.yaml",
            "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  size: 4\n",
        );
        assert_eq!(
            k.ok(&["apply", "-f", w4.to_str().unwrap()]).await.trim(),
            "widget.example.com/w1 configured"
        );
        assert_eq!(
            k.ok(&[
                "get",
                "widget",
                "w1",
                "-o",
                "jsonpath={.spec.size}/{.metadata.generation}"
            ])
            .await,
            "4/2"
        );
        let (ok, _, err) = k
            .run(&[
                "patch",
                "wd",
                "w1",
                "--type",
                "strategic",
                "-p",
                r#"{"spec":{"size":5}}"#,
            ])
            .await;
        assert!(
            !ok && err.contains("UnsupportedMediaType") || err.contains("not supported"),
            "{err}"
        );
        // Foreground cascade through kubectl, then wait for deletion.
        k.ok(&[
            "delete",
            "widget",
            "w1",
            "--cascade=foreground",
            "--wait=false",
        ])
        .await;
        k.ok(&["wait", "--for=delete", "widget/w1", "--timeout=20s"])
            .await;
        let api_res = k.ok(&["api-resources"]).await;
        assert!(
            api_res.contains("widgets") && api_res.contains("deployments"),
            "{api_res}"
        );
        k.ok(&["delete", "-f", crd.to_str().unwrap()]).await;
        let (ok, _, _) = k.run(&["get", "widgets"]).await;
        assert!(!ok, "widgets no longer served");
    })
    .await;
}

#[tokio::test]
async fn kubectl_get_watch_streams_changes() {
    let Some((s, k)) = setup().await else { return };
    within(120, async {
        let f = k.file("cm.yaml", CM);
        k.ok(&["create", "-f", f.to_str().unwrap()]).await;
        let client = client_for(&s, None);
        let mut cmd = tokio::process::Command::new("kubectl");
        cmd.arg("--kubeconfig")
            .arg(&k.kubeconfig)
            .args(["get", "cm", "-w", "--request-timeout=20s"])
            .env_remove("KUBECONFIG")
            .kill_on_drop(true);
        cmd.stdout(std::process::Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        eventually(10, || async { s.control().open_watches() > 0 }).await;
        let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
            kube::Api::namespaced(client, "default");
        api.create(
            &Default::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "late"}})).unwrap(),
        )
        .await
        .unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let mut buf = Vec::new();
        use tokio::io::AsyncReadExt;
        let mut chunk = [0u8; 4096];
        while !String::from_utf8_lossy(&buf).contains("late") {
            let n = stdout.read(&mut chunk).await.unwrap();
            assert!(
                n > 0,
                "kubectl -w ended early: {}",
                String::from_utf8_lossy(&buf)
            );
            buf.extend_from_slice(&chunk[..n]);
        }
        let _ = child.kill().await;
        let text = String::from_utf8_lossy(&buf);
        assert!(text.contains("cm1") && text.contains("late"), "{text}");
    })
    .await;
}

#[tokio::test]
async fn kubectl_imperative_create_commands() {
    let Some((_s, k)) = setup().await else { return };
    within(120, async {
        // These go through kubectl's typed clients, which send protobuf bodies.
        assert_eq!(
            k.ok(&["create", "namespace", "team"]).await.trim(),
            "namespace/team created"
        );
        k.ok(&[
            "create",
            "configmap",
            "settings",
            "-n",
            "team",
            "--from-literal=mode=fast",
        ])
        .await;
        k.ok(&[
            "create",
            "secret",
            "generic",
            "creds",
            "-n",
            "team",
            "--from-literal=user=admin",
        ])
        .await;
        k.ok(&["create", "serviceaccount", "robot", "-n", "team"])
            .await;
        assert_eq!(
            k.ok(&[
                "get",
                "cm",
                "settings",
                "-n",
                "team",
                "-o",
                "jsonpath={.data.mode}"
            ])
            .await,
            "fast"
        );
        assert_eq!(
            k.ok(&[
                "get",
                "secret",
                "creds",
                "-n",
                "team",
                "-o",
                "jsonpath={.data.user}"
            ])
            .await,
            "YWRtaW4="
        );
        k.ok(&["get", "sa", "robot", "-n", "team"]).await;
        k.ok(&["delete", "namespace", "team", "--timeout=20s"])
            .await;
        let (ok, _, _) = k.run(&["get", "namespace", "team"]).await;
        assert!(!ok, "namespace removed after its contents");
    })
    .await;
}

#[tokio::test]
async fn kubectl_refuses_unknown_fields_of_built_in_kinds() {
    let Some((_s, k)) = setup().await else { return };
    within(120, async {
        let f = k.file(
            "typo.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: typo\ndatta:\n  a: b\n",
        );
        // kubectl sends fieldValidation=Strict: the typo fails the create, naming the field.
        let (ok, _, err) = k.run(&["create", "-f", f.to_str().unwrap()]).await;
        assert!(!ok);
        assert!(err.contains("unknown field \"datta\""), "{err}");
        // --validate=false sends Ignore: created, and the field is gone as with a real server.
        k.ok(&["create", "--validate=false", "-f", f.to_str().unwrap()])
            .await;
        let v = k.json(&["get", "cm", "typo"]).await;
        assert!(v.get("datta").is_none(), "{v}");
    })
    .await;
}

async fn setup_simulated() -> Option<(ApiServerHandle, Kubectl)> {
    if !have_kubectl() {
        return None;
    }
    let server = ApiServer::start(Config {
        simulation: Some(embedded_apiserver::SimulationConfig {
            nodes: 1,
            pod_ready_after: Duration::from_millis(100),
            pod_succeed_after: Duration::from_millis(200),
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    let k = Kubectl::new(&server);
    Some((server, k))
}

const DEPLOYMENT: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 3\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - name: web\n        image: nginx:1.27\n";

#[tokio::test]
async fn kubectl_rollout_status_and_events_with_simulation() {
    let Some((_s, k)) = setup_simulated().await else {
        return;
    };
    within(120, async {
        let f = k.file("deploy.yaml", DEPLOYMENT);
        k.ok(&["apply", "-f", f.to_str().unwrap()]).await;
        let out = k
            .ok(&["rollout", "status", "deployment/web", "--timeout=60s"])
            .await;
        assert!(out.contains("successfully rolled out"), "{out}");
        let table = k.ok(&["get", "deployment", "web"]).await;
        assert!(table.contains("3/3"), "{table}");
        let pods = k.ok(&["get", "pods", "-l", "app=web"]).await;
        assert_eq!(pods.matches("Running").count(), 3, "{pods}");

        // A template change rolls out too.
        k.ok(&["set", "image", "deployment/web", "web=nginx:1.28"])
            .await;
        let out = k
            .ok(&["rollout", "status", "deployment/web", "--timeout=60s"])
            .await;
        assert!(out.contains("successfully rolled out"), "{out}");

        let events = k.ok(&["get", "events"]).await;
        let header: Vec<&str> = events
            .lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        assert_eq!(
            header,
            ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
            "{events}"
        );
        assert!(
            events.contains("ScalingReplicaSet") && events.contains("deployment/web"),
            "{events}"
        );
        assert!(
            events.contains("Scheduled") && events.contains("pod/web-"),
            "{events}"
        );
        let wide = k.ok(&["get", "events", "-o", "wide"]).await;
        assert!(
            wide.lines().next().unwrap_or("").contains("SOURCE")
                && wide.contains("deployment-controller"),
            "{wide}"
        );
    })
    .await;
}

#[tokio::test]
async fn kubectl_sees_the_objects_every_cluster_has() {
    let Some((_s, k)) = setup_simulated().await else {
        return;
    };
    within(60, async {
        k.ok(&["create", "namespace", "team"]).await;
        for ns in ["default", "team"] {
            eventually(10, || async {
                k.run(&["get", "configmap", "kube-root-ca.crt", "-n", ns])
                    .await
                    .0
                    && k.run(&["get", "serviceaccount", "default", "-n", ns])
                        .await
                        .0
            })
            .await;
        }
        let svc = k
            .json(&["get", "service", "kubernetes", "-n", "default"])
            .await;
        assert_eq!(svc["spec"]["clusterIP"], "10.96.0.1");
        assert_eq!(svc["spec"]["ports"][0]["port"], 443);
    })
    .await;
}

/// `kubectl create deployment`, `kubectl run`, `kubectl expose` and `kubectl create job` send
/// protobuf bodies of apps/v1, core/v1 and batch/v1 kinds through kubectl's typed clients.
#[tokio::test]
async fn kubectl_create_run_expose_send_protobuf_bodies() {
    let Some((_s, k)) = setup_simulated().await else {
        return;
    };
    within(120, async {
        let out = k
            .ok(&[
                "create",
                "deployment",
                "shop",
                "--image=nginx:1.27",
                "--replicas=2",
                "--port=8080",
            ])
            .await;
        assert_eq!(out.trim(), "deployment.apps/shop created");
        let d = k.json(&["get", "deployment", "shop", "-o", "json"]).await;
        assert_eq!(d["spec"]["replicas"], 2, "{d}");
        assert_eq!(d["spec"]["selector"]["matchLabels"]["app"], "shop", "{d}");
        let c = &d["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["image"], "nginx:1.27", "{d}");
        assert_eq!(c["ports"][0]["containerPort"], 8080, "{d}");
        // Defaulted by the server as for a JSON body: the decode dropped nothing it needs.
        assert_eq!(c["imagePullPolicy"], "IfNotPresent", "{d}");
        assert_eq!(c["ports"][0]["protocol"], "TCP", "{d}");
        assert_eq!(d["spec"]["strategy"]["type"], "RollingUpdate", "{d}");
        let out = k
            .ok(&["rollout", "status", "deployment/shop", "--timeout=60s"])
            .await;
        assert!(out.contains("successfully rolled out"), "{out}");

        let out = k
            .ok(&[
                "expose",
                "deployment",
                "shop",
                "--port=80",
                "--target-port=8080",
            ])
            .await;
        assert_eq!(out.trim(), "service/shop exposed");
        let svc = k.json(&["get", "service", "shop", "-o", "json"]).await;
        assert_eq!(svc["spec"]["ports"][0]["port"], 80, "{svc}");
        assert_eq!(svc["spec"]["ports"][0]["targetPort"], 8080, "{svc}");
        assert_eq!(svc["spec"]["selector"]["app"], "shop", "{svc}");
        // The Service's EndpointSlice lists both ready pods.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let slices = k
                .json(&[
                    "get",
                    "endpointslices",
                    "-l",
                    "kubernetes.io/service-name=shop",
                    "-o",
                    "json",
                ])
                .await;
            let ready = slices["items"][0]["endpoints"]
                .as_array()
                .map(|e| {
                    e.iter()
                        .filter(|e| e["conditions"]["ready"] == true)
                        .count()
                })
                .unwrap_or(0);
            if ready == 2 {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{slices}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }

        let out = k
            .ok(&[
                "run",
                "tool",
                "--image=busybox:1.36",
                "--labels=role=tool",
                "--env=MODE=debug",
                "--",
                "sleep",
                "3600",
            ])
            .await;
        assert_eq!(out.trim(), "pod/tool created");
        let out = k
            .ok(&["wait", "--for=condition=Ready", "pod/tool", "--timeout=30s"])
            .await;
        assert!(out.contains("condition met"), "{out}");
        let pod = k.json(&["get", "pod", "tool", "-o", "json"]).await;
        let c = &pod["spec"]["containers"][0];
        assert_eq!(c["args"], serde_json::json!(["sleep", "3600"]), "{pod}");
        assert_eq!(
            c["env"][0],
            serde_json::json!({"name": "MODE", "value": "debug"}),
            "{pod}"
        );
        assert_eq!(pod["metadata"]["labels"]["role"], "tool", "{pod}");

        let out = k
            .ok(&[
                "create",
                "job",
                "once",
                "--image=busybox:1.36",
                "--",
                "true",
            ])
            .await;
        assert_eq!(out.trim(), "job.batch/once created");
        let out = k
            .ok(&[
                "wait",
                "--for=condition=Complete",
                "job/once",
                "--timeout=30s",
            ])
            .await;
        assert!(out.contains("condition met"), "{out}");
    })
    .await;
}

/// `kubectl explain` reads the OpenAPI v3 documents: built-in kinds with the API reference's
/// descriptions, custom resources with their CRD schema's.
#[tokio::test]
async fn kubectl_explain_built_in_and_custom_kinds() {
    let Some((_s, k)) = setup().await else { return };
    within(120, async {
        let out = k.ok(&["explain", "deployment.spec.replicas"]).await;
        assert!(out.contains("KIND:") && out.contains("Deployment"), "{out}");
        assert!(out.contains("Number of desired pods"), "{out}");
        let out = k.ok(&["explain", "pods.spec.containers.ports"]).await;
        assert!(out.contains("containerPort"), "{out}");
        let out = k.ok(&["explain", "configmap", "--recursive"]).await;
        assert!(out.contains("binaryData") && out.contains("immutable"), "{out}");
        let (ok, _, err) = k.run(&["explain", "deployment.spec.nosuchfield"]).await;
        assert!(!ok && err.contains("nosuchfield"), "{err}");

        let crd = CRD.replace(
            "spec: {type: object, properties: {size: {type: integer}}}",
            "spec: {type: object, properties: {size: {type: integer, description: How many widgets to make.}}}",
        );
        let f = k.file("described-crd.yaml", &crd);
        k.ok(&["apply", "-f", f.to_str().unwrap()]).await;
        k.ok(&[
            "wait",
            "--for=condition=Established",
            "crd/widgets.example.com",
            "--timeout=20s",
        ])
        .await;
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let (ok, out, err) = k.run(&["explain", "widgets.spec.size"]).await;
            if ok && out.contains("How many widgets to make.") {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{out}{err}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
}
