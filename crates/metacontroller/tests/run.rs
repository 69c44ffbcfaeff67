//! `metacontroller run` against an API server: it connects, lists the controller kinds and
//! logs what it found (the reconcilers arrive with the runtime issue).
//!
//! Uses the embedded API server, or the cluster named by `METACONTROLLER_E2E_KUBECONFIG`
//! (which must have the Metacontroller CRDs installed; the test creates and deletes one
//! CompositeController with a unique name there).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, PostParams};
use metacontroller_api::composite::CompositeController;
use metacontroller_testkit::{ControllerProcess, TestCluster};

/// A client for the cluster of kubeconfig file `path`.
async fn client_for(path: &Path) -> kube::Client {
    TestCluster::real(path.to_path_buf()).await.client()
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

    let mut child = ControllerProcess::run(
        env!("CARGO_BIN_EXE_metacontroller"),
        &kubeconfig,
        &["--log-format", "json", "--target-label-selector", "team=a"],
    );
    let is_found = |line: &str| {
        serde_json::from_str::<serde_json::Value>(line).is_ok_and(|entry| {
            entry["message"] == "found controllers" && entry["kind"] == "CompositeController"
        })
    };
    let line = child.wait_for_line("'found controllers' log", Duration::from_secs(60), is_found);
    let found: serde_json::Value = serde_json::from_str(&line).unwrap();
    for line in child.logs().lines() {
        assert!(
            serde_json::from_str::<serde_json::Value>(line).is_ok(),
            "--log-format json printed a non-JSON line: {line}"
        );
    }
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
