//! The router over real HTTP (127.0.0.1:0), fed the golden hook requests that the
//! controller's own tests pin down (crates/metacontroller/tests/golden/hooks).

use std::path::PathBuf;

use metacontroller_hook::{
    serve, CompositeHookRequest, CompositeHookResponse, CustomizableController,
    CustomizeHookRequest, CustomizeHookResponse, DecoratorHookRequest, DecoratorHookResponse,
    Error, Hooks, RelatedResourceRule,
};
use serde_json::{json, Value};
use tokio::sync::oneshot;

fn golden(version: &str, file: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../metacontroller/tests/golden/hooks")
        .join(version)
        .join(file);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        // The fixtures mask volatile values; a real request carries a timestamp there.
        .replace("<timestamp>", "2026-01-01T00:00:00Z")
}

struct Server {
    base: String,
    stop: Option<oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    async fn start(hooks: Hooks) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let done = tokio::spawn(serve(listener, hooks, async {
            let _ = stopped.await;
        }));
        Self {
            base,
            stop: Some(stop),
            done,
        }
    }

    async fn post(&self, path: &str, body: impl Into<reqwest::Body>) -> (u16, String) {
        // Workspace builds of reqwest carry no rustls provider of their own (the hooks crate
        // installs one); plain HTTP still needs one installed to build a Client.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let resp = reqwest::Client::new()
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        (status, resp.text().await.unwrap())
    }

    async fn shutdown(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(std::time::Duration::from_secs(10), self.done)
            .await
            .expect("serve returns after the shutdown future")
            .unwrap()
            .unwrap();
    }
}

fn composite_hooks() -> Hooks {
    Hooks::new()
        .sync(|req: CompositeHookRequest| async move {
            assert!(!req.finalizing);
            let mut status = serde_json::Map::new();
            status.insert("children".into(), json!(req.children.objects().count()));
            status.insert("parent".into(), req.parent["metadata"]["name"].clone());
            Ok::<_, Error>(CompositeHookResponse {
                status: Some(status),
                children: vec![
                    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
                ],
                ..Default::default()
            })
        })
        .finalize(|req: CompositeHookRequest| async move {
            Ok::<_, Error>(CompositeHookResponse {
                finalized: req.finalizing,
                ..Default::default()
            })
        })
        .customize(|req: CustomizeHookRequest| async move {
            let kind = match req.controller {
                CustomizableController::Composite(_) => "configmaps",
                CustomizableController::Decorator(_) => "secrets",
            };
            Ok::<_, Error>(CustomizeHookResponse {
                related_resource_rules: vec![RelatedResourceRule {
                    api_version: "v1".into(),
                    resource: kind.into(),
                    ..Default::default()
                }],
            })
        })
}

#[tokio::test]
async fn composite_golden_requests_of_both_versions_are_served() {
    let server = Server::start(composite_hooks()).await;
    for version in ["v1", "v2"] {
        let (status, body) = server
            .post("/sync", golden(version, "composite-sync-request.json"))
            .await;
        assert_eq!(status, 200, "{version}: {body}");
        let resp: CompositeHookResponse = serde_json::from_str(&body).unwrap();
        let status = resp.status.unwrap();
        assert_eq!(status["parent"], "golden");
        let request: Value =
            serde_json::from_str(&golden(version, "composite-sync-request.json")).unwrap();
        let observed: usize = request["children"]
            .as_object()
            .unwrap()
            .values()
            .map(|g| g.as_object().unwrap().len())
            .sum();
        assert_eq!(status["children"], json!(observed), "{version}");
        assert_eq!(resp.children.len(), 1);

        let (status, body) = server
            .post(
                "/finalize",
                golden(version, "composite-finalize-request.json"),
            )
            .await;
        assert_eq!(status, 200, "{version}: {body}");
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["finalized"], true, "{version}: {body}");

        for (file, resource) in [
            ("customize-request-composite.json", "configmaps"),
            ("customize-request-decorator.json", "secrets"),
        ] {
            let (status, body) = server.post("/customize", golden(version, file)).await;
            assert_eq!(status, 200, "{version} {file}: {body}");
            let body: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(body["relatedResources"][0]["resource"], resource);
        }
    }
    server.shutdown().await;
}

#[tokio::test]
async fn decorator_golden_requests_are_served() {
    let hooks = Hooks::new()
        .sync(|req: DecoratorHookRequest| async move {
            let mut labels = std::collections::BTreeMap::new();
            labels.insert(
                "attachments".to_string(),
                Some(req.attachments.objects().count().to_string()),
            );
            Ok::<_, Error>(DecoratorHookResponse {
                labels: Some(labels),
                ..Default::default()
            })
        })
        .finalize(|_: DecoratorHookRequest| async {
            Ok::<_, Error>(DecoratorHookResponse {
                finalized: true,
                ..Default::default()
            })
        });
    let server = Server::start(hooks).await;
    for version in ["v1", "v2"] {
        let (status, body) = server
            .post("/sync", golden(version, "decorator-sync-request.json"))
            .await;
        assert_eq!(status, 200, "{version}: {body}");
        let body: Value = serde_json::from_str(&body).unwrap();
        assert!(body["labels"]["attachments"].is_string(), "{body}");
        let (status, body) = server
            .post(
                "/finalize",
                golden(version, "decorator-finalize-request.json"),
            )
            .await;
        assert_eq!(status, 200, "{version}: {body}");
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap()["finalized"],
            true
        );
    }
    server.shutdown().await;
}

#[tokio::test]
async fn malformed_requests_get_400_with_a_json_message() {
    let server = Server::start(composite_hooks()).await;
    let (status, body) = server.post("/sync", "{not json").await;
    assert_eq!(status, 400, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("cannot decode the /sync request"),
        "{body}"
    );
    // Valid JSON of the wrong shape: the decoder names what is missing.
    let (status, body) = server.post("/sync", r#"{"parent": {}}"#).await;
    assert_eq!(status, 400, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert!(
        body["message"].as_str().unwrap().contains("controller"),
        "{body}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn oversize_requests_get_413() {
    let server = Server::start(composite_hooks().body_limit(1024)).await;
    let big = golden("v2", "composite-sync-request.json");
    assert!(big.len() > 1024);
    let (status, _) = server.post("/sync", big).await;
    assert_eq!(status, 413);
    // Under the limit the same route answers.
    let server2 = Server::start(composite_hooks().body_limit(1 << 20)).await;
    let (status, body) = server2
        .post("/sync", golden("v2", "composite-sync-request.json"))
        .await;
    assert_eq!(status, 200, "{body}");
    server.shutdown().await;
    server2.shutdown().await;
}

#[tokio::test]
async fn handler_errors_are_500_with_a_json_message() {
    let hooks = Hooks::new()
        .sync(|_: CompositeHookRequest| async {
            // Any std error converts with `?`.
            let n: u32 = "not a number".parse()?;
            Ok::<_, Error>(CompositeHookResponse {
                resync_after_seconds: n.into(),
                ..Default::default()
            })
        })
        .finalize(|_: CompositeHookRequest| async {
            Err::<CompositeHookResponse, _>(Error::msg("the database is down"))
        });
    let server = Server::start(hooks).await;
    let (status, body) = server
        .post("/sync", golden("v1", "composite-sync-request.json"))
        .await;
    assert_eq!(status, 500);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["message"], "invalid digit found in string");
    let (status, body) = server
        .post("/finalize", golden("v1", "composite-finalize-request.json"))
        .await;
    assert_eq!(status, 500);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({"message": "the database is down"})
    );
    // Unknown hook paths are 404, as axum answers them.
    let (status, _) = server.post("/customize", "{}").await;
    assert_eq!(status, 404);
    server.shutdown().await;
}
