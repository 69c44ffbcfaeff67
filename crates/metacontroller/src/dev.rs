//! `metacontroller dev`: a self-contained playground. Starts the embedded API server,
//! installs the Metacontroller CRDs, writes a kubeconfig for kubectl, and runs the
//! controller against it until Ctrl-C.

use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};

use crate::cli::DevArgs;
use crate::{embedded, run};

/// Runs dev mode until Ctrl-C.
pub async fn dev(args: DevArgs) -> anyhow::Result<()> {
    let simulation = args.simulate.then(|| embedded::Simulation {
        nodes: usize::from(args.nodes),
        pod_ready_after: args.pod_ready_after,
        pod_succeed_after: args.pod_succeed_after,
    });
    let server = embedded::start(args.port, simulation.clone())
        .await
        .context("starting the embedded API server")?;
    let kubeconfig = args.kubeconfig_out.clone();
    if let Some(dir) = kubeconfig
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
    {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    server
        .write_kubeconfig(&kubeconfig)
        .with_context(|| format!("writing {}", kubeconfig.display()))?;

    let mut controller = args.controller.clone();
    controller.kubeconfig = Some(kubeconfig.clone());
    // A registry of its own: this client only installs the CRDs.
    let client = crate::client::client(&controller, &prometheus::Registry::new()).await?;
    install_crds(&client).await?;

    println!(
        "metacontroller dev: API server listening at {}",
        server.url()
    );
    println!(
        "metacontroller dev: kubeconfig written to {}",
        kubeconfig.display()
    );
    println!(
        "metacontroller dev: try `kubectl --kubeconfig {} get crd`",
        kubeconfig.display()
    );
    match &simulation {
        Some(sim) => println!(
            "metacontroller dev: simulating {} node(s), kubelets and the Deployment, ReplicaSet, \
             StatefulSet, DaemonSet, Job and EndpointSlice controllers: pods become Ready after {:?} \
             (no containers run, no networking); turn off with --simulate=false",
            sim.nodes, sim.pod_ready_after
        ),
        None => println!(
            "metacontroller dev: simulation off (--simulate=false): pods stay Pending, workloads do not move"
        ),
    }
    if let Some(dir) = &controller.record_hooks {
        println!(
            "metacontroller dev: recording hook exchanges to {} (replay one with `metacontroller render --request FILE`)",
            dir.display()
        );
    }
    println!("metacontroller dev: press Ctrl-C to stop");

    let result = Box::pin(run::run(controller)).await;
    server.shutdown().await;
    result
}

/// Creates the three Metacontroller CRDs (idempotently) and waits until they are served.
async fn install_crds(client: &kube::Client) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crds = metacontroller_api::crds::all_typed().context("generating the CRDs")?;
    // A named field manager: a later Helm install or server-side apply of the same CRDs
    // shares the fields instead of meeting an anonymous owner.
    let params = PostParams {
        field_manager: Some("metacontroller-dev".into()),
        ..Default::default()
    };
    for crd in &crds {
        match api.create(&params, crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(err) => return Err(err).context("installing the Metacontroller CRDs"),
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    for crd in &crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        loop {
            let current = api
                .get(&name)
                .await
                .with_context(|| format!("reading CRD {name}"))?;
            if is_established(&current) {
                break;
            }
            if Instant::now() > deadline {
                anyhow::bail!("CRD {name} was not Established within 30s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    tracing::info!(count = crds.len(), "installed the Metacontroller CRDs");
    Ok(())
}

fn is_established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}
