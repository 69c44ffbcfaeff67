//! examples/indexed-job as its README runs it: numbered Pods (restartPolicy Never), at most
//! `parallelism` at a time, condition Complete when all succeed; a job whose pods fail ends
//! Failed. In dev mode the pods finish through the simulated kubelet's phase annotation.
//! Skipped without kubectl or python3.

use std::time::{Duration, Instant};

use metacontroller_testkit::example::{example_file, ExampleCluster, Kubectl, STEP_TIMEOUT};

const EXAMPLE: &str = "indexed-job";

/// `(name, phase)` of the job's pods.
fn pods(k: &Kubectl, app: &str) -> Vec<(String, String)> {
    let out = k.ok(&[
        "get",
        "pods",
        "-l",
        &format!("app={app}"),
        "-o",
        r#"jsonpath={range .items[*]}{.metadata.name} {.status.phase}{"\n"}{end}"#,
    ]);
    out.lines()
        .filter_map(|l| {
            let (name, phase) = l.split_once(' ')?;
            Some((name.to_string(), phase.to_string()))
        })
        .collect()
}

/// Watches job `print-index` until its three pods finished: never more than parallelism (2)
/// unfinished at once, and all three indexes run.
fn watch_parallelism(k: &Kubectl) {
    let deadline = Instant::now() + STEP_TIMEOUT;
    let mut max_seen = 0;
    loop {
        let now = pods(k, "print-index");
        let running = now
            .iter()
            .filter(|(_, phase)| phase != "Succeeded" && phase != "Failed")
            .count();
        assert!(running <= 2, "more than parallelism pods running: {now:?}");
        max_seen = max_seen.max(now.len());
        if now.len() == 3 && running == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the job's pods did not all finish: {now:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(max_seen, 3);
}

/// Job `print-index` is Complete with every index succeeded once, each pod numbered.
fn completed_every_index(k: &Kubectl) {
    k.ok(&[
        "wait",
        "--for",
        "condition=Complete",
        "indexedjob/print-index",
        "--timeout=60s",
    ]);
    assert_eq!(
        k.jsonpath(
            &["indexedjob", "print-index"],
            "{.status.succeeded} {.status.active} {.status.failed} {.status.completedIndexes}"
        ),
        "3 0 0 0,1,2"
    );
    for i in 0..3 {
        let pod = format!("print-index-{i}");
        assert_eq!(
            k.jsonpath(
                &["pod", &pod],
                "{.spec.restartPolicy} {.spec.containers[0].env[?(@.name==\"JOB_COMPLETION_INDEX\")].value} {.metadata.labels.example\\.com/completion-index}"
            ),
            format!("Never {i} {i}")
        );
    }
}

/// A job (`fails`) whose pods fail stops with condition Failed and is not Complete.
fn failing_job_fails(cluster: &ExampleCluster, k: &Kubectl) {
    let failing = cluster.rewrite(
        EXAMPLE,
        "job.yaml",
        &[
            ("name: print-index", "name: fails"),
            ("app: print-index", "app: fails"),
            ("phase: Succeeded", "phase: Failed"),
            // So that a real cluster's container fails too.
            ("echo processing index $JOB_COMPLETION_INDEX", "exit 1"),
        ],
    );
    k.apply(&failing);
    k.ok(&[
        "wait",
        "--for",
        "condition=Failed",
        "indexedjob/fails",
        "--timeout=60s",
    ]);
    assert_eq!(
        k.jsonpath(
            &["indexedjob", "fails"],
            r#"{.status.conditions[?(@.type=="Complete")].status}"#
        ),
        ""
    );
}

#[test]
fn indexed_job_runs_each_index_once_within_parallelism_and_completes() {
    let Some((cluster, _hook, k)) = ExampleCluster::start_python_example(
        env!("CARGO_BIN_EXE_metacontroller"),
        EXAMPLE,
        "ijob",
        "indexedjobs.example.com",
    ) else {
        return;
    };
    k.apply(&example_file(EXAMPLE, "job.yaml"));
    watch_parallelism(&k);
    completed_every_index(&k);
    failing_job_fails(&cluster, &k);

    k.ok(&[
        "delete",
        "indexedjob",
        "print-index",
        "fails",
        "--wait=true",
    ]);
    k.until(
        "the pods to be garbage collected",
        &["get", "pods", "-o", "name"],
        |ok, out| ok && out.trim().is_empty(),
    );
    cluster.clean_up(&[&k]);
}
