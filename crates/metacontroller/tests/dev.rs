//! `metacontroller dev` as a user runs it: the process starts, prints where its kubeconfig
//! is, and kubectl (when installed) sees the three Metacontroller CRDs.
//!
//! Dev mode is by definition the embedded API server, so this test ignores
//! `METACONTROLLER_E2E_KUBECONFIG`.

use std::process::Command;
use std::time::Duration;

use metacontroller_testkit::ControllerProcess;

const CRDS: [&str; 3] = [
    "compositecontrollers.metacontroller.k8s.io",
    "controllerrevisions.metacontroller.k8s.io",
    "decoratorcontrollers.metacontroller.k8s.io",
];

#[test]
fn dev_mode_serves_the_crds_to_kubectl() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("dev").join("kubeconfig");
    let mut command = Command::new(env!("CARGO_BIN_EXE_metacontroller"));
    command
        .args(["dev", "--port", "0", "--dev-kubeconfig"])
        .arg(&kubeconfig)
        .args(["--metrics-address", "0", "--health-probe-bind-address", "0"])
        .env_remove("KUBECONFIG");
    let mut child = ControllerProcess::spawn(command);
    child.wait_for_line("dev mode ready", Duration::from_secs(60), |l| {
        l.contains("press Ctrl-C")
    });
    let printed = child.logs();
    assert!(
        printed.contains(&kubeconfig.display().to_string()),
        "{printed}"
    );
    assert!(kubeconfig.exists());

    // The CRDs through kube-rs, which every machine has...
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let names = runtime.block_on(async {
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&kubeconfig).unwrap(),
            &Default::default(),
        )
        .await
        .unwrap();
        let client = kube::Client::try_from(config).unwrap();
        let api: kube::Api<
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        > = kube::Api::all(client);
        let list = api.list(&Default::default()).await.unwrap();
        let mut names: Vec<String> = list.items.into_iter().filter_map(|crd| crd.metadata.name).collect();
        names.sort();
        names
    });
    assert_eq!(names, CRDS);

    // ...and through kubectl, as the README tells users to.
    match Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["get", "crd", "-o", "name"])
        .output()
    {
        Ok(output) => {
            assert!(output.status.success(), "kubectl failed: {output:?}");
            let listed = String::from_utf8_lossy(&output.stdout);
            for crd in CRDS {
                assert!(
                    listed.contains(&format!(
                        "customresourcedefinition.apiextensions.k8s.io/{crd}"
                    )),
                    "{listed}"
                );
            }
        }
        Err(err) => metacontroller_testkit::missing_tool(
            "kubectl",
            &format!("{err}; checked through kube-rs only"),
        ),
    }
    drop(child);
}
