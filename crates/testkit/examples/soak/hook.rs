//! The soak's sync hook: answers by the current fault mode and records calls of one parent
//! that overlap (two processes syncing it at once).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use serde_json::{json, Value};

/// The hook timeout the controller is given (`timeout: 2s`).
pub const HOOK_TIMEOUT: Duration = Duration::from_secs(2);
/// A call this old may already be abandoned by its client (whose clock started a little
/// before the call arrived here), and then retried at once: not an overlap.
const GIVEN_UP: Duration = Duration::from_millis(1750);

/// How the hook answers while a hook fault is active.
#[derive(Clone, Copy, PartialEq)]
pub enum HookMode {
    Ok,
    Error,
    Garbage,
    Slow,
    Timeout,
}

/// A deliberately broken answer (`--break`), to show the checks can fail.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Break {
    /// Replicas run with neither sharding nor leader election: every one syncs every parent.
    Overlap,
    /// Parent `p-0` is answered with no children: its child is deleted.
    Lost,
    /// Parent `p-0` is answered with a second child.
    Duplicate,
}

/// A hook call in flight for one parent: call id, start, the calling replica.
type InFlight = (u64, Instant, String);

/// Shared state of the hook server.
pub struct HookState {
    pub mode: Mutex<Option<HookMode>>,
    /// Every answer takes at least this long, so that two processes reacting to the same
    /// change of one parent are in flight together (and seen as an overlap).
    pub delay: Duration,
    pub broken: Option<Break>,
    in_flight: Mutex<HashMap<String, Vec<InFlight>>>,
    next_id: Mutex<u64>,
    pub calls: Mutex<u64>,
    pub overlaps: Mutex<Vec<String>>,
}

impl HookState {
    pub fn new(delay: Duration, broken: Option<Break>) -> Self {
        HookState {
            mode: Mutex::new(None),
            delay,
            broken,
            in_flight: Mutex::new(HashMap::new()),
            next_id: Mutex::new(0),
            calls: Mutex::new(0),
            overlaps: Mutex::new(Vec::new()),
        }
    }

    pub fn set_mode(&self, mode: Option<HookMode>) {
        *self.mode.lock().unwrap() = mode;
    }

    /// Registers a call of parent `key`; records an overlap if a call the client has not
    /// given up on yet is in flight.
    fn enter(&self, key: &str, replica: &str) -> u64 {
        let id = {
            let mut n = self.next_id.lock().unwrap();
            *n += 1;
            *n
        };
        *self.calls.lock().unwrap() += 1;
        let mut in_flight = self.in_flight.lock().unwrap();
        let calls = in_flight.entry(key.to_string()).or_default();
        if let Some((_, _, other)) = calls.iter().find(|(_, t, _)| t.elapsed() < GIVEN_UP) {
            self.overlaps
                .lock()
                .unwrap()
                .push(format!("{key} (replicas {other} and {replica})"));
        }
        calls.push((id, Instant::now(), replica.to_string()));
        id
    }

    fn leave(&self, key: &str, id: u64) {
        if let Some(calls) = self.in_flight.lock().unwrap().get_mut(key) {
            calls.retain(|(i, _, _)| *i != id);
        }
    }
}

async fn hook(
    state: axum::extract::State<Arc<HookState>>,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let parent = &req["parent"];
    let key = format!(
        "{}/{}",
        parent["metadata"]["namespace"].as_str().unwrap_or_default(),
        parent["metadata"]["name"].as_str().unwrap_or_default()
    );
    let replica = headers
        .get("x-metacontroller-replica")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-");
    let id = state.enter(&key, replica);
    let mode = state.mode.lock().unwrap().unwrap_or(HookMode::Ok);
    let pause = match mode {
        HookMode::Slow => Duration::from_millis(1500),
        HookMode::Timeout => HOOK_TIMEOUT + Duration::from_secs(1),
        _ => state.delay,
    };
    tokio::time::sleep(pause).await;
    state.leave(&key, id);
    let name = parent["metadata"]["name"].as_str().unwrap_or_default();
    let v = parent["spec"]["v"].as_str().unwrap_or_default();
    match mode {
        HookMode::Error => (StatusCode::INTERNAL_SERVER_ERROR, "injected").into_response(),
        HookMode::Garbage => (StatusCode::OK, "{not json").into_response(),
        _ => axum::Json(json!({ "children": children(name, v, state.broken) })).into_response(),
    }
}

/// One ConfigMap carrying `v`, or a broken answer for `p-0` under `--break`.
fn children(name: &str, v: &str, broken: Option<Break>) -> Value {
    let cm = |n: String| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": n}, "data": {"v": v}})
    };
    match (broken, name) {
        (Some(Break::Lost), "p-0") => json!([]),
        (Some(Break::Duplicate), "p-0") => {
            json!([cm(format!("{name}-cm")), cm(format!("{name}-extra"))])
        }
        _ => json!([cm(format!("{name}-cm"))]),
    }
}

/// Serves the hook on a free loopback port; returns its URL.
pub async fn start_hook(state: Arc<HookState>) -> String {
    let app = axum::Router::new()
        .route("/sync", axum::routing::post(hook))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/sync")
}
