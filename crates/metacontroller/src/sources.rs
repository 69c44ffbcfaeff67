//! Secrets and ConfigMaps for hook credentials (`caBundle`, `clientTLS`, `authorization`,
//! `basicAuth`, per hook or in `endpointConfigs`), read from the API server with one GET
//! per hook call that references them. Controllers without credentials cost nothing and
//! the process needs no cluster-wide watch on Secrets; a rotated Secret is used by the
//! next call. RBAC: `get` on `secrets` and `configmaps` in the namespaces referenced.

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, Client};
use metacontroller_hooks::{ConfigMapSource, ObjectData, SecretSource, SourceError};

/// Reads Secrets and ConfigMaps through the process's client.
#[derive(Clone)]
pub struct ApiSources {
    client: Client,
}

impl ApiSources {
    /// Reads through `client`.
    pub fn new(client: Client) -> Self {
        Self { client }
    }
}

fn read_error(kind: &str, err: kube::Error) -> SourceError {
    match &err {
        kube::Error::Api(status) if status.code == 403 => SourceError(format!(
            "forbidden: the controller's service account needs `get` on {kind} ({})",
            status.message
        )),
        _ => SourceError(err.to_string()),
    }
}

#[async_trait]
impl SecretSource for ApiSources {
    async fn get(&self, namespace: &str, name: &str) -> Result<Option<ObjectData>, SourceError> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let secret = api
            .get_opt(name)
            .await
            .map_err(|err| read_error("secrets", err))?;
        Ok(secret.map(|secret| {
            secret
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(key, value)| (key, value.0))
                .collect()
        }))
    }
}

#[async_trait]
impl ConfigMapSource for ApiSources {
    async fn get(&self, namespace: &str, name: &str) -> Result<Option<ObjectData>, SourceError> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        let config_map = api
            .get_opt(name)
            .await
            .map_err(|err| read_error("configmaps", err))?;
        Ok(config_map.map(|cm| {
            let mut data: ObjectData = cm
                .binary_data
                .unwrap_or_default()
                .into_iter()
                .map(|(key, value)| (key, value.0))
                .collect();
            for (key, value) in cm.data.unwrap_or_default() {
                data.insert(key, value.into_bytes());
            }
            data
        }))
    }
}
