//! Deleting a controller object releases its finalizers (issue 51, upstream #1062): a
//! DecoratorController's targets and a CompositeController's parents (both with a finalize
//! hook, so they carry `metacontroller.io/decoratorcontroller-<name>` /
//! `compositecontroller-<name>`) lose the finalizer once the controller object is deleted,
//! and deleting one of them afterwards completes. Also when the binary is killed with
//! SIGKILL before the controller objects are deleted: a new binary finishes the job from
//! what the API holds. Passes on the embedded server and on a real one
//! (`METACONTROLLER_E2E_KUBECONFIG`).

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, DynamicObject};
use kube::ResourceExt;
use metacontroller_api::composite::CompositeController;
use metacontroller_api::decorator::DecoratorController;
use metacontroller_testkit::{
    create_object, eventually_within, unique_name, ControllerProcess, CrdBuilder, HookReply,
    HookServer, TestCluster,
};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(90);
const OBJECTS: usize = 3;

/// Both controllers, their objects and the hook.
struct Setup {
    cluster: TestCluster,
    ns: String,
    label: String,
    composite: String,
    decorator: String,
    parent_crd: CrdBuilder,
    _hook: HookServer,
}

impl Setup {
    async fn start() -> Setup {
        let cluster = TestCluster::start().await;
        cluster.install_metacontroller_crds().await;
        let ns = cluster.create_namespace("ctrl-deleted").await;
        let parent_crd = cluster.install_parent_crd("ctrldeleted").await;
        // Sync: nothing to add. Finalize: done (never called here: nothing is deleted while
        // the controllers run).
        let hook = HookServer::start(|path, _| match path {
            "/finalize" => HookReply::json(json!({"finalized": true})),
            "/decorate" => HookReply::json(json!({"labels": {}})),
            _ => HookReply::json(json!({"status": {}, "children": []})),
        })
        .await;
        let hooks = |sync: &str| {
            json!({"sync": {"webhook": {"url": hook.url(sync)}},
                   "finalize": {"webhook": {"url": hook.url("/finalize")}}})
        };
        let label = unique_name("team");
        let mut spec = parent_crd.composite_spec(&hook.url("/sync"));
        spec["childResources"] = json!([]);
        spec["hooks"] = hooks("/sync");
        let composite = unique_name("cc");
        let _: CompositeController = cluster.create_controller(&composite, &label, spec).await;
        let decorator = unique_name("dc");
        let spec = json!({"resources": [{"apiVersion": "v1", "resource": "configmaps",
                "labelSelector": {"matchLabels": {"decorated": decorator}}}],
            "hooks": hooks("/decorate")});
        let _: DecoratorController = cluster.create_controller(&decorator, &label, spec).await;
        let setup = Setup {
            cluster,
            ns,
            label,
            composite,
            decorator,
            parent_crd,
            _hook: hook,
        };
        for i in 0..OBJECTS {
            create_object(
                &setup.parents(),
                json!({"apiVersion": setup.parent_crd.api_version(), "kind": "Parent",
                       "metadata": {"name": format!("p{i}")},
                       "spec": {"selector": {"matchLabels": {"parent": format!("p{i}")}}}}),
            )
            .await;
            let cm: ConfigMap = serde_json::from_value(json!({"metadata": {
                "name": format!("t{i}"), "labels": {"decorated": setup.decorator}}}))
            .expect("configmap");
            setup
                .configmaps()
                .create(&Default::default(), &cm)
                .await
                .expect("creating a target");
        }
        setup
    }

    fn run(&self) -> ControllerProcess {
        ControllerProcess::run_team(
            env!("CARGO_BIN_EXE_metacontroller"),
            self.cluster.kubeconfig_path(),
            &self.label,
            &[],
        )
    }

    fn parents(&self) -> Api<DynamicObject> {
        self.parent_crd.api(self.cluster.client(), Some(&self.ns))
    }

    fn configmaps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.cluster.client(), &self.ns)
    }

    fn composite_finalizer(&self) -> String {
        format!("metacontroller.io/compositecontroller-{}", self.composite)
    }

    fn decorator_finalizer(&self) -> String {
        format!("metacontroller.io/decoratorcontroller-{}", self.decorator)
    }

    /// How many parents and targets carry their controller's finalizer.
    async fn finalized(&self) -> (usize, usize) {
        let parents = self.parents().list(&Default::default()).await;
        let parents = parents.map_or(0, |l| {
            l.items
                .iter()
                .filter(|o| o.finalizers().contains(&self.composite_finalizer()))
                .count()
        });
        let targets = self.configmaps().list(&Default::default()).await;
        let targets = targets.map_or(0, |l| {
            l.items
                .iter()
                .filter(|o| o.finalizers().contains(&self.decorator_finalizer()))
                .count()
        });
        (parents, targets)
    }

    async fn wait_finalized(
        &self,
        want: (usize, usize),
        what: &str,
        process: Option<&ControllerProcess>,
    ) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let now = self.finalized().await;
            if now == want {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: (parents, targets) with the finalizer = {now:?}, want {want:?}; logs:\n{}",
                process.map(ControllerProcess::logs).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn delete_controllers(&self) {
        let dp = DeleteParams::default();
        Api::<CompositeController>::all(self.cluster.client())
            .delete(&self.composite, &dp)
            .await
            .expect("deleting the CompositeController");
        Api::<DecoratorController>::all(self.cluster.client())
            .delete(&self.decorator, &dp)
            .await
            .expect("deleting the DecoratorController");
        let client = self.cluster.client();
        eventually_within("the controller objects are gone", WAIT, || async {
            let cc = Api::<CompositeController>::all(client.clone())
                .get_opt(&self.composite)
                .await;
            let dc = Api::<DecoratorController>::all(client.clone())
                .get_opt(&self.decorator)
                .await;
            matches!((cc, dc), (Ok(None), Ok(None)))
        })
        .await;
    }

    /// Deleting a parent and a target completes (nothing holds them any more).
    async fn delete_one_of_each(&self) {
        let dp = DeleteParams::default();
        self.parents().delete("p0", &dp).await.expect("deleting p0");
        self.configmaps()
            .delete("t0", &dp)
            .await
            .expect("deleting t0");
        eventually_within("the deleted parent and target are gone", WAIT, || async {
            matches!(
                (
                    self.parents().get_opt("p0").await,
                    self.configmaps().get_opt("t0").await
                ),
                (Ok(None), Ok(None))
            )
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_controllers_releases_their_finalizers() {
    let setup = Setup::start().await;
    let process = setup.run();
    setup
        .wait_finalized((OBJECTS, OBJECTS), "finalizers added", Some(&process))
        .await;
    setup.delete_controllers().await;
    setup
        .wait_finalized((0, 0), "finalizers released", Some(&process))
        .await;
    setup.delete_one_of_each().await;
    // The targets still there keep everything but the finalizer.
    let t1 = setup.configmaps().get("t1").await.expect("reading t1");
    assert_eq!(
        t1.labels().get("decorated"),
        Some(&setup.decorator),
        "{t1:?}"
    );
    assert!(t1.finalizers().is_empty(), "{t1:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_binary_releases_finalizers_of_controllers_deleted_meanwhile() {
    let setup = Setup::start().await;
    let mut first = setup.run();
    setup
        .wait_finalized((OBJECTS, OBJECTS), "finalizers added", Some(&first))
        .await;
    first.kill9();
    setup.delete_controllers().await;
    // Nothing runs: the finalizers are still there, the only record of the job left.
    assert_eq!(setup.finalized().await, (OBJECTS, OBJECTS));
    let second = setup.run();
    setup
        .wait_finalized((0, 0), "finalizers released after restart", Some(&second))
        .await;
    setup.delete_one_of_each().await;
}
