//! `spec.hookRollout` steered through the real `metacontroller rollout` CLI while the binary
//! rolls out Jsonnet code to 50 parents (issue 52): `undo` of a running and of a complete
//! rollout, `pause`/`resume` of a running one, and the `healthy.condition` gate (a step
//! waits for its parents' `Ready=True`; a parent never Ready by the deadline rolls back).
//! Each parent's child ConfigMap holds the version of the code that wrote it.
//! Passes on the embedded server and on a real one (`METACONTROLLER_E2E_KUBECONFIG`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use metacontroller_api::composite::CompositeController;
use metacontroller_api::decorator::DecoratorController;
use metacontroller_api::rollout::{HookRolloutStatus, RolloutPhase, UNDO_ANNOTATION};
use metacontroller_testkit::{
    eventually_within, unique_name, until_event, ControllerProcess, TestCluster,
};
use serde_json::json;

mod rollout_support;
use rollout_support::{create_parents, set_code, versions};

const WAIT: Duration = Duration::from_secs(120);
const PARENTS: usize = 50;

/// The hook: one child per parent holding `version`. With `gate`, the parent reports
/// `Ready=True` only once its child exists and the parent is labelled `ready: "yes"`.
fn code(version: &str, gate: bool) -> String {
    let status = if gate {
        "status: {conditions: [{type: 'Ready', status: \
         if std.length(std.objectFields(request.children['ConfigMap.v1'])) > 0 \
         && std.get(std.get(request.parent.metadata, 'labels', {}), 'ready', '') == 'yes' \
         then 'True' else 'False'}]},"
    } else {
        ""
    };
    format!(
        "function(request) local name = request.parent.metadata.name;\n\
         {{{status} children: [{{apiVersion: 'v1', kind: 'ConfigMap', \
         metadata: {{name: name + '-child'}}, data: {{version: '{version}'}}}}]}}"
    )
}

/// [`code`] for a DecoratorController: the parent is the request's `object`, the child an
/// attachment.
fn decorator_code(version: &str) -> String {
    code(version, false)
        .replacen(" children: [", " attachments: [", 1)
        .replace("request.parent", "request.object")
}

/// `metacontroller rollout ARGS --kubeconfig KUBECONFIG`: exit code and output (off the
/// test's thread, which serves the embedded API server).
async fn rollout_cli(kubeconfig: PathBuf, args: &[&str]) -> (i32, String) {
    let args: Vec<String> = args.iter().map(ToString::to_string).collect();
    tokio::task::spawn_blocking(move || {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_metacontroller"))
            .arg("rollout")
            .args(&args)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .output()
            .expect("run the metacontroller binary");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (output.status.code().unwrap_or(-1), text)
    })
    .await
    .expect("rollout command")
}

/// 50 parents on v1 code, a CompositeController (or a DecoratorController of the parents)
/// with `rollout`, the binary running it.
struct Fixture {
    cluster: TestCluster,
    ns: String,
    config_maps: Api<ConfigMap>,
    /// The controller objects of the controller's kind.
    ccs: Api<DynamicObject>,
    name: String,
    /// Parent names in the rollout's order (step 1 is the first).
    order: Vec<String>,
    parents: Api<DynamicObject>,
    controller: ControllerProcess,
}

impl Fixture {
    async fn start(prefix: &str, rollout: serde_json::Value) -> Self {
        Self::start_kind(prefix, rollout, false).await
    }

    async fn start_kind(prefix: &str, rollout: serde_json::Value, decorator: bool) -> Self {
        let (cluster, ns, parent) = TestCluster::start_with_parent(prefix).await;
        cluster.install_metacontroller_crds().await;
        let config_maps: Api<ConfigMap> = Api::namespaced(cluster.client(), &ns);
        let v1 = if decorator {
            decorator_code("v1")
        } else {
            code("v1", false)
        };
        set_code(&config_maps, &v1).await;
        let parents = parent.api(cluster.client(), Some(&ns));
        let parent_type = (parent.api_version(), parent.kind().to_string());
        let keys = create_parents(&parents, (&parent_type.0, &parent_type.1), &ns, PARENTS).await;
        let order = keys.into_iter().map(|(_, name)| name).collect();
        let label = unique_name("team");
        let mut spec = parent.composite_spec("http://unused.invalid/");
        spec["hooks"] = json!({"sync": {"jsonnet": {
            "configMapRef": {"namespace": ns, "name": "code"}, "key": "sync.jsonnet"}}});
        spec["generateSelector"] = json!(true);
        spec["hookRollout"] = rollout;
        let name = unique_name("rollout");
        let kind = if decorator {
            let spec = json!({
                "resources": [{"apiVersion": parent.api_version(), "resource": parent.plural()}],
                "attachments": [{"apiVersion": "v1", "resource": "configmaps",
                    "updateStrategy": {"method": "InPlace"}}],
                "hooks": spec["hooks"], "hookRollout": spec["hookRollout"]});
            let _: DecoratorController = cluster.create_controller(&name, &label, spec).await;
            "DecoratorController"
        } else {
            let _: CompositeController = cluster.create_controller(&name, &label, spec).await;
            "CompositeController"
        };
        let gvk =
            GroupVersionKind::gvk(metacontroller_api::GROUP, metacontroller_api::VERSION, kind);
        let selector = format!("team={label}");
        let controller = ControllerProcess::run(
            env!("CARGO_BIN_EXE_metacontroller"),
            cluster.kubeconfig_path(),
            &[
                "--target-label-selector",
                &selector,
                "--metrics-address",
                "127.0.0.1:0",
                "--health-probe-bind-address",
                "0",
            ],
        );
        let f = Fixture {
            ns,
            config_maps,
            ccs: Api::all_with(cluster.client(), &ApiResource::from_gvk(&gvk)),
            cluster,
            name,
            order,
            parents,
            controller,
        };
        f.until("every child on v1, rollout Complete", |s, v| {
            s.phase == RolloutPhase::Complete && v.len() == PARENTS && on(v, "v1") == PARENTS
        })
        .await;
        f
    }

    async fn status(&self) -> HookRolloutStatus {
        let cc = self
            .ccs
            .get(&self.name)
            .await
            .expect("reading the controller");
        HookRolloutStatus::from_status(cc.data.get("status")).unwrap_or_default()
    }

    /// Waits until `done(status, versions)` (status read after the children).
    async fn until(
        &self,
        what: &str,
        done: impl Fn(&HookRolloutStatus, &BTreeMap<String, String>) -> bool,
    ) -> (HookRolloutStatus, BTreeMap<String, String>) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let v = versions(&self.config_maps).await;
            let s = self.status().await;
            if done(&s, &v) {
                return (s, v);
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: not within {WAIT:?}: {s:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn cli(&self, args: &[&str]) -> (i32, String) {
        rollout_cli(self.cluster.kubeconfig_path().to_path_buf(), args).await
    }

    async fn label_ready(&self, name: &str) {
        let patch = json!({"metadata": {"labels": {"ready": "yes"}}});
        self.parents
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("labelling a parent");
    }
}

impl Fixture {
    /// The sample of `family` for this controller whose labels include `label` (or the
    /// only one with an empty `label`); `None` when `/metrics` shows none.
    async fn metric(&self, family: &str, label: &str) -> Option<f64> {
        let text = self.controller.scrape_metrics().await;
        let name = format!("controller_name=\"{}\"", self.name);
        text.lines()
            .filter(|l| l.starts_with(&format!("{family}{{")))
            .filter(|l| l.contains(&name) && l.contains(label))
            .find_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
    }
}

/// `metacontroller render --live` of parent `name` with `extra` flags: exit code, stdout
/// and stderr (off the test's thread).
async fn render(f: &Fixture, name: &str, extra: &[&str]) -> (i32, String, String) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let cc = f.ccs.get(&f.name).await.expect("reading the controller");
    let controller = dir.path().join("controller.json");
    std::fs::write(&controller, serde_json::to_vec(&cc).expect("JSON")).expect("writing");
    let parent = f.parents.get(name).await.expect("reading the parent");
    let parent_file = dir.path().join("parent.json");
    std::fs::write(&parent_file, serde_json::to_vec(&parent).expect("JSON")).expect("writing");
    let mut args: Vec<std::ffi::OsString> = vec![
        "render".into(),
        "--controller".into(),
        controller.into(),
        "--parent".into(),
        parent_file.into(),
        "--kubeconfig".into(),
        f.cluster.kubeconfig_path().into(),
    ];
    args.extend(extra.iter().map(Into::into));
    tokio::task::spawn_blocking(move || {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_metacontroller"))
            .args(&args)
            .output()
            .expect("run the metacontroller binary");
        drop(dir);
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    })
    .await
    .expect("render command")
}

fn on(versions: &BTreeMap<String, String>, version: &str) -> usize {
    versions.values().filter(|v| *v == version).count()
}

/// `render` runs any parent with either stored version (`v1` is the digest of the first);
/// without `--code`, the live one (v2); an unknown digest is an error.
async fn renders_either_version(f: &Fixture, v1: &str) {
    // render runs any parent with either stored version; without --code, the live one.
    for (parent, flags, version) in [
        (&f.order[0], &["--code", "from"][..], "v1"),
        (&f.order[0], &["--code", "to"][..], "v2"),
        (&f.order[9], &["--code", "to"][..], "v2"),
        (&f.order[9], &["--code", &v1[..12]][..], "v1"),
        (&f.order[9], &[][..], "v2"),
    ] {
        let (code, out, err) = render(f, parent, flags).await;
        assert_eq!(code, 0, "{flags:?}: {out}{err}");
        let wanted = format!("version: {version}");
        assert!(
            out.contains(&wanted),
            "{flags:?}: {version} expected:\n{out}{err}"
        );
        if !flags.is_empty() {
            assert!(err.contains("running stored code version"), "{err}");
        }
    }
    let (code, _, err) = render(f, &f.order[9], &["--code", "0123456789ab"]).await;
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("is not stored"), "{err}");
}

/// The metrics of a rollout held at step 1: one parent updated and healthy, Progressing.
async fn held_step_metrics(f: &Fixture) {
    let m = |family: &'static str, label: &'static str| f.metric(family, label);
    assert_eq!(m("metacontroller_hook_rollout_step", "").await, Some(1.0));
    for state in ["updated", "healthy"] {
        let label = format!("state=\"{state}\"");
        let value = f
            .metric("metacontroller_hook_rollout_parents", &label)
            .await;
        assert_eq!(value, Some(1.0), "{state}");
    }
    let failed = m("metacontroller_hook_rollout_parents", "state=\"failed\"").await;
    assert_eq!(failed, Some(0.0));
    let phase = |p: &'static str| m("metacontroller_hook_rollout_phase", p);
    assert_eq!(phase("phase=\"Progressing\"").await, Some(1.0));
    assert_eq!(phase("phase=\"RolledBack\"").await, Some(0.0));
}

/// `rollout undo` in mid-rollout (held at step 1 by a long pause): RolledBack, the step's
/// parent back on v1, the Event names the annotation, which the driver removed; `status`
/// then exits 1 and a second `undo` is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undo_in_mid_rollout_rolls_back() {
    let f = Fixture::start(
        "rcli-undo",
        json!({"steps": [1, "100%"], "pauseSeconds": 3600}),
    )
    .await;
    let v1 = f.status().await.to;
    set_code(&f.config_maps, &code("v2", false)).await;
    let (held, _) = f
        .until("step 1 healthy and pausing", |s, v| {
            s.healthy == 1 && s.message.contains("pausing") && on(v, "v2") == 1
        })
        .await;
    renders_either_version(&f, &v1).await;
    held_step_metrics(&f).await;
    let (code, text) = f.cli(&["undo", &f.name]).await;
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("rolled back"), "{text}");
    let (status, _) = f
        .until("rolled back, every child on v1", |s, v| {
            s.phase == RolloutPhase::RolledBack && on(v, "v1") == PARENTS
        })
        .await;
    assert_eq!((&status.from, &status.to), (&v1, &held.to));
    let event = until_event(
        &f.cluster,
        ("default", &f.name),
        "RolloutUndone",
        UNDO_ANNOTATION,
        WAIT,
    )
    .await;
    assert_eq!(event.type_.as_deref(), Some("Normal"));
    eventually_within("the undo annotation removed", WAIT, || async {
        let cc = f.ccs.get(&f.name).await.expect("reading the controller");
        !cc.metadata
            .annotations
            .is_some_and(|a| a.contains_key(UNDO_ANNOTATION))
    })
    .await;
    let (code, text) = f.cli(&["status", &f.name]).await;
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("RolledBack"), "{text}");
    let (code, text) = f.cli(&["undo", &f.name]).await;
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("already rolled back"), "{text}");
    assert_eq!(f.status().await.phase, RolloutPhase::RolledBack);
    let m = |family: &'static str, label: &'static str| f.metric(family, label);
    let rollbacks = "metacontroller_hook_rollout_rollbacks_total";
    assert_eq!(m(rollbacks, "cause=\"undo\"").await, Some(1.0));
    assert_eq!(m(rollbacks, "cause=\"failure\"").await, Some(0.0));
    eventually_within("the phase gauge says RolledBack", WAIT, || async {
        m("metacontroller_hook_rollout_phase", "phase=\"RolledBack\"").await == Some(1.0)
    })
    .await;
}

/// `rollout undo` of a complete rollout returns every parent to the code before it at
/// once (one step, `Complete` with `from` and `to` swapped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undo_of_a_complete_rollout_returns_every_parent() {
    let f = Fixture::start("rcli-undone", json!({"steps": [1, "100%"]})).await;
    let v1 = f.status().await.to;
    set_code(&f.config_maps, &code("v2", false)).await;
    let (done, _) = f
        .until("every parent on v2", |s, v| {
            s.phase == RolloutPhase::Complete && s.to != v1 && on(v, "v2") == PARENTS
        })
        .await;
    let (code, text) = f.cli(&["undo", &format!("cc/{}", f.name)]).await;
    assert_eq!(code, 0, "{text}");
    let (status, _) = f
        .until("every parent back on v1", |s, v| {
            s.to == v1 && on(v, "v1") == PARENTS
        })
        .await;
    assert_eq!(
        (status.phase, &status.from),
        (RolloutPhase::Complete, &done.to)
    );
    until_event(
        &f.cluster,
        ("default", &f.name),
        "RolloutUndone",
        "every parent back on",
        WAIT,
    )
    .await;
    let (code, text) = f.cli(&["status", &f.name]).await;
    assert_eq!(code, 0, "{text}");
}

/// `rollout pause` holds a running rollout: no further parent gets v2 while paused (checked
/// over several of its one-second pauses); `resume` continues to Complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_holds_a_running_rollout_and_resume_completes_it() {
    let f = Fixture::start(
        "rcli-pause",
        json!({"steps": [1, "10%", "100%"], "pauseSeconds": 1}),
    )
    .await;
    set_code(&f.config_maps, &code("v2", false)).await;
    f.until("step 1 started", |s, v| s.updated >= 1 && on(v, "v2") >= 1)
        .await;
    let (code, text) = f.cli(&["pause", &f.name]).await;
    assert_eq!(code, 0, "{text}");
    let (paused, _) = f
        .until("Paused", |s, _| s.phase == RolloutPhase::Paused)
        .await;
    assert!(paused.step < 2, "paused before the last step: {paused:?}");
    let allowed = [1, 5][paused.step as usize];
    // Ten pauses' worth of evaluations: the step and the parents on v2 stay put.
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < until {
        let v = versions(&f.config_maps).await;
        let s = f.status().await;
        assert!(
            on(&v, "v2") <= allowed,
            "{} on v2 while paused: {s:?}",
            on(&v, "v2")
        );
        assert_eq!(
            (s.phase, s.step),
            (RolloutPhase::Paused, paused.step),
            "{s:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (code, text) = f.cli(&["status", &f.name]).await;
    assert!(code == 0 && text.contains("Paused"), "{text}");
    let (code, text) = f.cli(&["resume", &f.name]).await;
    assert_eq!(code, 0, "{text}");
    f.until("every parent on v2", |s, v| {
        s.phase == RolloutPhase::Complete && on(v, "v2") == PARENTS
    })
    .await;
}

/// `healthy.condition`: a step waits until its parent reports `Ready=True` (the hook says
/// Ready once the parent has a child and the test has labelled it), then the rollout goes
/// on; parents of the next step that never become Ready fail it by `deadlineSeconds` and the
/// rollout rolls back naming one of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ready_gate_holds_a_step_and_its_deadline_rolls_back() {
    let f = Fixture::start(
        "rcli-ready",
        // maxFailures 1: a sync that fails once for another reason (an API conflict while
        // the test labels the parent) is tolerated; the two stuck parents are not.
        json!({"steps": [1, "10%", "100%"], "maxFailures": 1,
            "healthy": {"condition": {"type": "Ready"}, "deadlineSeconds": 15}}),
    )
    .await;
    set_code(&f.config_maps, &code("v2", true)).await;
    let (waiting, _) = f
        .until("step 1's parent synced on v2, not Ready", |s, v| {
            on(v, "v2") == 1 && s.updated == 1 && s.message.contains("0 of 1")
        })
        .await;
    assert_eq!((waiting.step, waiting.healthy), (0, 0), "{waiting:?}");
    assert_eq!(waiting.phase, RolloutPhase::Progressing);
    f.label_ready(&f.order[0]).await;
    // Step 2's five parents: three become Ready; the last two never do.
    for name in &f.order[1..3] {
        f.label_ready(name).await;
    }
    let (status, _) = f
        .until("rolled back at step 2", |s, v| {
            s.phase == RolloutPhase::RolledBack && on(v, "v1") == PARENTS
        })
        .await;
    assert_eq!((status.step, status.failed), (1, 2), "{status:?}");
    let stuck = [3, 4].map(|i| format!("{}/{}", f.ns, f.order[i]));
    let failed = status.failed_parent.clone().unwrap_or_default();
    assert!(stuck.contains(&failed), "{status:?}");
    until_event(
        &f.cluster,
        ("default", &f.name),
        "RolloutRolledBack",
        &failed,
        WAIT,
    )
    .await;
}

/// A DecoratorController's rollout: a good change reaches the 50 decorated parents in the
/// steps (1, 5, 50), never ahead of its step, and completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decorator_controller_rolls_out_in_steps() {
    let f = Fixture::start_kind(
        "rcli-dc",
        json!({"steps": [1, "10%", "100%"], "pauseSeconds": 1}),
        true,
    )
    .await;
    let v1 = f.status().await.to;
    set_code(&f.config_maps, &decorator_code("v2")).await;
    let allowed = [1, 5, PARENTS];
    f.until("every parent on v2", |s, v| {
        if s.to != v1 && s.phase != RolloutPhase::Complete {
            let step = (s.step as usize).min(2);
            assert!(
                on(v, "v2") <= allowed[step],
                "{} on v2 at step {step}: {s:?}",
                on(v, "v2")
            );
            assert_ne!(s.phase, RolloutPhase::RolledBack, "{s:?}");
        }
        s.phase == RolloutPhase::Complete && s.to != v1 && on(v, "v2") == PARENTS
    })
    .await;
    for needle in ["step 2: 5 of 50", "step 3: 50 of 50"] {
        until_event(
            &f.cluster,
            ("default", &f.name),
            "RolloutStep",
            needle,
            WAIT,
        )
        .await;
    }
    until_event(
        &f.cluster,
        ("default", &f.name),
        "RolloutComplete",
        "every parent (50)",
        WAIT,
    )
    .await;
    let (code, text) = f.cli(&["status", &format!("dc/{}", f.name)]).await;
    assert!(code == 0 && text.contains("Complete"), "{text}");
}
