//! `metacontroller run` against an API server: it connects, lists the controller kinds and
//! logs what it found (the reconcilers arrive with the runtime issue).
//!
//! Uses the embedded API server, or the cluster named by `METACONTROLLER_E2E_KUBECONFIG`
//! (which must have the Metacontroller CRDs installed; the test creates and deletes one
//! CompositeController with a unique name there).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, PostParams};
use metacontroller_api::composite::CompositeController;

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn client_for(path: &PathBuf) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_lists_composite_controllers() {
    let dir = tempfile::tempdir().unwrap();
    let mut _server = None;
    let kubeconfig = match std::env::var_os("METACONTROLLER_E2E_KUBECONFIG") {
        Some(path) => PathBuf::from(path),
        None => {
            let server = embedded_apiserver::ApiServer::start(Default::default())
                .await
                .unwrap();
            let path = dir.path().join("kubeconfig");
            server.write_kubeconfig(&path).unwrap();
            let client = client_for(&path).await;
            let crds: Api<CustomResourceDefinition> = Api::all(client);
            for crd in metacontroller_api::crds::all_typed().unwrap() {
                crds.create(&PostParams::default(), &crd).await.unwrap();
            }
            _server = Some(server);
            path
        }
    };
    let client = client_for(&kubeconfig).await;
    let name = format!("run-test-{}", std::process::id());
    let controller: CompositeController = serde_json::from_value(serde_json::json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1",
        "kind": "CompositeController",
        "metadata": {"name": name, "labels": {"team": "a"}},
        "spec": {
            "parentResource": {"apiVersion": "example.com/v1", "resource": "things"},
            "hooks": {"sync": {"webhook": {"url": "http://127.0.0.1:1/sync"}}}
        }
    }))
    .unwrap();
    let controllers: Api<CompositeController> = Api::all(client);
    // CRDs take a moment to be served after creation.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match controllers
            .create(&PostParams::default(), &controller)
            .await
        {
            Ok(_) => break,
            Err(err) if Instant::now() < deadline => {
                eprintln!("waiting for the CRD to be served: {err}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(err) => panic!("cannot create the CompositeController: {err}"),
        }
    }

    let mut child = Command::new(env!("CARGO_BIN_EXE_metacontroller"))
        .arg("run")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--log-format", "json", "--target-label-selector", "team=a"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("start metacontroller run");
    let stderr = child.stderr.take().unwrap();
    let child = KillOnDrop(child);
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });

    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    let found = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(line) = received.recv_timeout(left) else {
            panic!("no 'found controllers' log in 60s:\n{}", seen.join("\n"));
        };
        seen.push(line.clone());
        let Ok(entry) = serde_json::from_str::<serde_json::Value>(&line) else {
            panic!("--log-format json printed a non-JSON line: {line}");
        };
        if entry["message"] == "found controllers" && entry["kind"] == "CompositeController" {
            break entry;
        }
    };
    assert!(
        found["names"].as_str().unwrap_or_default().contains(&name),
        "{found}"
    );
    drop(child);
    controllers
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
}
