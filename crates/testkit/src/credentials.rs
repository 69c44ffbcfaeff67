//! Credentials other than the admin's, for tests that run the binary as a ServiceAccount on
//! a real cluster (where RBAC is enforced).

use std::path::Path;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::TestCluster;

/// A token of ServiceAccount `namespace/name`, valid for an hour (the TokenRequest API, as
/// `kubectl create token`).
///
/// # Panics
/// When the server issues no token.
pub async fn service_account_token(cluster: &TestCluster, namespace: &str, name: &str) -> String {
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    Api::<ServiceAccount>::namespaced(cluster.client(), namespace)
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .expect("TokenRequest")
        .status
        .and_then(|status| status.token)
        .expect("a token")
}

/// Writes to `dest` a kubeconfig for the cluster of the `admin` kubeconfig (server, CA)
/// that authenticates with `token` only.
///
/// # Panics
/// When `admin` cannot be read or `dest` written.
pub fn write_token_kubeconfig(admin: &Path, token: &str, dest: &Path) {
    let admin = kube::config::Kubeconfig::read_from(admin).expect("admin kubeconfig");
    let cluster = admin.clusters.first().expect("a cluster");
    let cluster = serde_json::to_value(cluster).expect("cluster entry");
    let name = cluster["name"].clone();
    // JSON is YAML.
    let config = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": name, "user": "sa"}}],
        "current-context": "sa",
    });
    std::fs::write(dest, config.to_string()).expect("writing the kubeconfig");
}
