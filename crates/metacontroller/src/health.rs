//! `/healthz` and `/readyz` on `--health-probe-bind-address`, answered as
//! controller-runtime's probe server answers them (what the upstream Deployment's probes
//! and existing tooling expect):
//!
//! * all checks pass: 200, body `ok` (with `?verbose`: one `[+]<check> ok` line per check
//!   and `healthz check passed`);
//! * a check fails: 500 for `/healthz`, 503 for `/readyz` (controller-runtime answers 500
//!   for both), body `[+]<check> ok` / `[-]<check> failed: reason withheld` lines and
//!   `healthz check failed` (the reason goes to the debug log, not to the caller);
//! * `?exclude=<check>` skips a check; `/healthz/<check>` and `/readyz/<check>` run one.
//!
//! Checks: `/healthz` — `healthz` (the async runtime still schedules new tasks);
//! `/readyz` — `readyz` (the process serves, upstream's only check) and `informer-sync`
//! (both controller kinds were listed and every informer in use finished its first list).
//! A standby replica under leader election keeps its caches warm, so it is ready too.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use futures::future::BoxFuture;
use metacontroller_dynamic::Informers;

/// How long the runtime may take to run a fresh task before `/healthz` fails.
const SCHEDULE_TIMEOUT: Duration = Duration::from_secs(5);

/// The controller kinds whose initial list gates readiness.
const CONTROLLER_KINDS: [&str; 2] = ["CompositeController", "DecoratorController"];

/// What readiness waits for; cheap to clone, filled in as the process starts.
#[derive(Clone, Default)]
pub struct Readiness {
    inner: Arc<ReadinessInner>,
}

#[derive(Default)]
struct ReadinessInner {
    listed: Mutex<BTreeSet<String>>,
    informers: OnceLock<Informers>,
}

impl Readiness {
    /// The informers whose sync gates readiness (set once).
    pub fn set_informers(&self, informers: Informers) {
        let _ = self.inner.informers.set(informers);
    }

    /// Records that the initial list of controller objects of `kind` completed.
    pub fn controllers_listed(&self, kind: &str) {
        self.inner
            .listed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(kind.to_owned());
    }

    /// `Ok` once every controller kind was listed and every informer synced; else why not.
    pub fn check(&self) -> Result<(), String> {
        let listed = self.inner.listed.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(kind) = CONTROLLER_KINDS.iter().find(|k| !listed.contains(**k)) {
            return Err(format!("{kind} objects not listed yet"));
        }
        drop(listed);
        let Some(informers) = self.inner.informers.get() else {
            return Err("informers not started".into());
        };
        let waiting: Vec<String> = informers
            .cache_stats()
            .into_iter()
            .filter(|stats| !stats.synced)
            .map(|stats| {
                let id = &stats.key.resource;
                match &stats.key.label_selector {
                    None => format!("{}/{}", id.api_version, id.resource),
                    Some(s) => format!("{}/{} ({s})", id.api_version, id.resource),
                }
            })
            .collect();
        if waiting.is_empty() {
            Ok(())
        } else {
            Err(format!("informers not synced: {}", waiting.join(", ")))
        }
    }
}

type CheckFn = Arc<dyn Fn() -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// A named check.
#[derive(Clone)]
struct Check {
    name: &'static str,
    run: CheckFn,
}

#[derive(Clone)]
struct Checks {
    healthz: Vec<Check>,
    readyz: Vec<Check>,
}

/// The probe router for `readiness`.
pub fn router(readiness: Readiness) -> Router {
    let schedules = Check {
        name: "healthz",
        run: Arc::new(|| {
            Box::pin(async {
                match tokio::time::timeout(SCHEDULE_TIMEOUT, tokio::spawn(async {})).await {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(format!("probe task failed: {e}")),
                    Err(_) => Err(format!(
                        "runtime did not run a task in {SCHEDULE_TIMEOUT:?}"
                    )),
                }
            })
        }),
    };
    let ping = Check {
        name: "readyz",
        run: Arc::new(|| Box::pin(async { Ok(()) })),
    };
    let synced = Check {
        name: "informer-sync",
        run: Arc::new(move || {
            let result = readiness.check();
            Box::pin(async move { result })
        }),
    };
    let checks = Checks {
        healthz: vec![schedules],
        readyz: vec![ping, synced],
    };
    Router::new()
        .route("/healthz", get(|s, q| all(s, q, Probe::Healthz)))
        .route("/readyz", get(|s, q| all(s, q, Probe::Readyz)))
        .route("/healthz/{check}", get(|s, p| one(s, p, Probe::Healthz)))
        .route("/readyz/{check}", get(|s, p| one(s, p, Probe::Readyz)))
        .with_state(checks)
}

#[derive(Clone, Copy)]
enum Probe {
    Healthz,
    Readyz,
}

impl Probe {
    /// The status of a failing probe. controller-runtime answers 500 for both; a failing
    /// `/readyz` answers 503 Service Unavailable here ("not ready yet, ask again"), which
    /// every probe client treats the same way and which says what it means.
    fn failure_status(self) -> StatusCode {
        match self {
            Probe::Healthz => StatusCode::INTERNAL_SERVER_ERROR,
            Probe::Readyz => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

impl Checks {
    fn of(&self, probe: Probe) -> &[Check] {
        match probe {
            Probe::Healthz => &self.healthz,
            Probe::Readyz => &self.readyz,
        }
    }
}

fn text(status: StatusCode, body: String) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}

/// Runs every check of `probe` (minus `?exclude=`), in controller-runtime's format.
async fn all(
    State(checks): State<Checks>,
    Query(query): Query<Vec<(String, String)>>,
    probe: Probe,
) -> Response {
    let mut excluded: BTreeSet<String> = query
        .iter()
        .filter(|(k, _)| k == "exclude")
        .map(|(_, v)| v.clone())
        .collect();
    let verbose = query.iter().any(|(k, _)| k == "verbose");
    let mut out = String::new();
    let mut failed = false;
    for check in checks.of(probe) {
        if excluded.remove(check.name) {
            out.push_str(&format!("[+]{} excluded: ok\n", check.name));
            continue;
        }
        match (check.run)().await {
            Ok(()) => out.push_str(&format!("[+]{} ok\n", check.name)),
            Err(reason) => {
                tracing::debug!(check = check.name, %reason, "health check failed");
                out.push_str(&format!("[-]{} failed: reason withheld\n", check.name));
                failed = true;
            }
        }
    }
    if !excluded.is_empty() {
        let names: Vec<String> = excluded.iter().map(|n| format!("{n:?}")).collect();
        out.push_str(&format!(
            "warn: some health checks cannot be excluded: no matches for {}\n",
            names.join(",")
        ));
    }
    if failed {
        // Go's http.Error appends a newline.
        return text(
            probe.failure_status(),
            format!("{out}healthz check failed\n"),
        );
    }
    if verbose {
        text(StatusCode::OK, format!("{out}healthz check passed\n"))
    } else {
        text(StatusCode::OK, "ok".into())
    }
}

/// Runs the single check named in the path.
async fn one(State(checks): State<Checks>, Path(name): Path<String>, probe: Probe) -> Response {
    let Some(check) = checks.of(probe).iter().find(|c| c.name == name) else {
        return text(StatusCode::NOT_FOUND, "404 page not found\n".into());
    };
    match (check.run)().await {
        Ok(()) => text(StatusCode::OK, "ok".into()),
        Err(reason) => text(
            probe.failure_status(),
            format!("internal server error: {reason}\n"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    async fn get(router: &Router, uri: &str) -> (StatusCode, String) {
        let response = router
            .clone()
            .oneshot(Request::get(uri).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn answers_in_controller_runtime_format() {
        let readiness = Readiness::default();
        let router = router(readiness.clone());
        assert_eq!(
            get(&router, "/healthz").await,
            (StatusCode::OK, "ok".into())
        );
        assert_eq!(
            get(&router, "/healthz?verbose").await,
            (
                StatusCode::OK,
                "[+]healthz ok\nhealthz check passed\n".into()
            )
        );
        assert_eq!(
            get(&router, "/readyz").await,
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "[+]readyz ok\n[-]informer-sync failed: reason withheld\nhealthz check failed\n"
                    .into()
            )
        );
        assert_eq!(
            get(&router, "/readyz?exclude=informer-sync&exclude=nope").await,
            (StatusCode::OK, "ok".into())
        );
        let (status, body) = get(&router, "/readyz/informer-sync").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            body.contains("CompositeController objects not listed"),
            "{body}"
        );
        assert_eq!(get(&router, "/readyz/nope").await.0, StatusCode::NOT_FOUND);

        readiness.controllers_listed("CompositeController");
        readiness.controllers_listed("DecoratorController");
        let (_, body) = get(&router, "/readyz/informer-sync").await;
        assert!(body.contains("informers not started"), "{body}");
    }
}
