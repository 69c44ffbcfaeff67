//! Code versions of a hook rollout, kept in the API: each version is one `apps/v1`
//! ControllerRevision owned by the controller object, named by the version's digest and
//! holding every key of every ConfigMap the controller's in-process hooks read. So the old
//! code survives the edit of its ConfigMap and a restart of the controller, and every
//! replica reads the same bytes for a digest.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use k8s_openapi::ByteString;
use kube::api::PostParams;
use kube::Api;
use metacontroller_hooks::{code_digest, CodeObject, PinnedCode};
use serde::{Deserialize, Serialize};

/// Label on every code-version ControllerRevision (value `"true"`), so they can be listed.
pub(crate) const CODE_LABEL: &str = "metacontroller.k8s.io/hook-code";

/// One version of a controller's hook code: the ConfigMaps by `(namespace, name)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CodeVersion {
    /// [`version_digest`] of `objects`.
    pub(crate) digest: String,
    /// The code, by ConfigMap namespace and name.
    pub(crate) objects: BTreeMap<(String, String), Arc<CodeObject>>,
}

impl CodeVersion {
    /// The version made of `objects`.
    pub(crate) fn new(objects: BTreeMap<(String, String), Arc<CodeObject>>) -> Self {
        CodeVersion {
            digest: version_digest(&objects),
            objects,
        }
    }

    /// These ConfigMaps pinned for the hook calls of one sync.
    pub(crate) fn pinned(&self) -> PinnedCode {
        let mut pins = PinnedCode::default();
        for ((namespace, name), object) in &self.objects {
            pins.pin(namespace, name, object.clone());
        }
        pins
    }
}

/// The digest naming a version: SHA-256 over each ConfigMap's namespace, name and
/// [`code_digest`], in order (a ConfigMap absent from the map is absent from the digest).
pub(crate) fn version_digest(objects: &BTreeMap<(String, String), Arc<CodeObject>>) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for ((namespace, name), object) in objects {
        for part in [namespace.as_str(), name.as_str(), &code_digest(object)] {
            ctx.update(&(part.len() as u64).to_be_bytes());
            ctx.update(part.as_bytes());
        }
    }
    ctx.finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The controller object owning the versions.
#[derive(Debug, Clone)]
pub(crate) struct Owner {
    /// `CompositeController` or `DecoratorController`.
    pub(crate) kind: &'static str,
    /// Its name.
    pub(crate) name: String,
    /// Its UID (the owner reference; garbage collection removes the versions with it).
    pub(crate) uid: String,
}

impl Owner {
    /// The owner reference of objects kept for the controller (versions, reports).
    pub(crate) fn reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: metacontroller_api::API_VERSION.to_string(),
            kind: self.kind.to_string(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            controller: Some(false),
            block_owner_deletion: Some(false),
        }
    }

    /// The ControllerRevision name of version `digest`: the controller's name, its kind
    /// (a Composite- and a DecoratorController may share a name) and 16 hex digits of the
    /// digest, hashed as a whole when that would exceed a name's 253 characters.
    pub(crate) fn revision_name(&self, digest: &str) -> String {
        let short: String = digest.chars().take(16).collect();
        let name = format!("{}-code-{short}", self.prefix());
        if name.len() <= 253 {
            return name;
        }
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        ctx.update(name.as_bytes());
        let hashed: String = ctx.finish().as_ref()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("hook-code-{hashed}")
    }
}

impl Owner {
    /// `<name>-cc` or `<name>-dc`: the start of the names of the objects kept for the
    /// controller (a Composite- and a DecoratorController may share a name).
    pub(crate) fn prefix(&self) -> String {
        let kind = if self.kind == "DecoratorController" {
            "dc"
        } else {
            "cc"
        };
        format!("{}-{kind}", self.name)
    }
}

/// The JSON in a version's `data`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoredVersion {
    digest: String,
    config_maps: Vec<StoredConfigMap>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoredConfigMap {
    namespace: String,
    name: String,
    #[serde(default)]
    data: BTreeMap<String, String>,
    #[serde(default)]
    binary_data: BTreeMap<String, ByteString>,
}

/// The ControllerRevision holding `version`, in `namespace`, owned by `owner`.
pub(crate) fn to_revision(
    version: &CodeVersion,
    owner: &Owner,
    namespace: &str,
) -> ControllerRevision {
    let stored = StoredVersion {
        digest: version.digest.clone(),
        config_maps: version
            .objects
            .iter()
            .map(|((ns, name), object)| StoredConfigMap {
                namespace: ns.clone(),
                name: name.clone(),
                data: object.data.clone(),
                binary_data: object
                    .binary_data
                    .iter()
                    .map(|(k, v)| (k.clone(), ByteString(v.clone())))
                    .collect(),
            })
            .collect(),
    };
    ControllerRevision {
        metadata: ObjectMeta {
            name: Some(owner.revision_name(&version.digest)),
            namespace: Some(namespace.to_string()),
            labels: Some([(CODE_LABEL.to_string(), "true".to_string())].into()),
            owner_references: Some(vec![owner.reference()]),
            ..ObjectMeta::default()
        },
        data: RawExtension(serde_json::to_value(&stored).unwrap_or(serde_json::Value::Null)),
        revision: Some(1),
    }
}

/// The version a ControllerRevision holds; an error (never a panic) when it is not one, or
/// its content does not match its digest (edited by hand).
pub(crate) fn from_revision(revision: &ControllerRevision) -> Result<CodeVersion, String> {
    let stored: StoredVersion = serde_json::from_value(revision.data.0.clone())
        .map_err(|e| format!("the revision's data is not a code version: {e}"))?;
    let objects = stored
        .config_maps
        .into_iter()
        .map(|cm| {
            let object = CodeObject {
                data: cm.data,
                binary_data: cm.binary_data.into_iter().map(|(k, v)| (k, v.0)).collect(),
            };
            ((cm.namespace, cm.name), Arc::new(object))
        })
        .collect();
    let version = CodeVersion::new(objects);
    if version.digest != stored.digest {
        return Err(format!(
            "the revision's code has digest {}, not the {} it names",
            version.digest, stored.digest
        ));
    }
    Ok(version)
}

/// Stores `version` (creating it; one already there holds the same code, its name says so).
pub(crate) async fn store(
    client: &kube::Client,
    owner: &Owner,
    namespace: &str,
    version: &CodeVersion,
) -> Result<(), kube::Error> {
    let api: Api<ControllerRevision> = Api::namespaced(client.clone(), namespace);
    match api
        .create(
            &PostParams::default(),
            &to_revision(version, owner, namespace),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Loads version `digest`; `Ok(None)` when it was never stored (or was deleted).
pub(crate) async fn load(
    client: &kube::Client,
    owner: &Owner,
    namespace: &str,
    digest: &str,
) -> Result<Option<CodeVersion>, String> {
    let api: Api<ControllerRevision> = Api::namespaced(client.clone(), namespace);
    let name = owner.revision_name(digest);
    let revision = api
        .get_opt(&name)
        .await
        .map_err(|e| format!("reading ControllerRevision {namespace}/{name}: {e}"))?;
    let Some(revision) = revision else {
        return Ok(None);
    };
    let version = from_revision(&revision)
        .map_err(|e| format!("ControllerRevision {namespace}/{name}: {e}"))?;
    if version.digest != digest {
        return Err(format!(
            "ControllerRevision {namespace}/{name} holds code {}, not {digest}",
            version.digest
        ));
    }
    Ok(Some(version))
}

#[cfg(test)]
mod tests {
    use super::*;
    use metacontroller_testkit::TestCluster;

    fn version(text: &str) -> CodeVersion {
        let mut object = CodeObject::from_text(&[("sync.jsonnet", text)]);
        object
            .binary_data
            .insert("m.wasm".into(), vec![0, 97, 115, 109]);
        CodeVersion::new([(("hooks".into(), "code".into()), Arc::new(object))].into())
    }

    #[test]
    fn digests_name_the_code_and_round_trip() {
        let a = version("{a: 1}");
        let b = version("{a: 2}");
        assert_ne!(a.digest, b.digest);
        let owner = Owner {
            kind: "CompositeController",
            name: "c".into(),
            uid: "u".into(),
        };
        let rev = to_revision(&a, &owner, "hooks");
        assert_eq!(from_revision(&rev), Ok(a.clone()));
        assert!(owner.revision_name(&a.digest).starts_with("c-cc-code-"));
        let mut edited = rev.clone();
        edited.data.0["configMaps"][0]["data"]["sync.jsonnet"] = "{a: 3}".into();
        assert!(from_revision(&edited).unwrap_err().contains("not the"));
        edited.data = RawExtension(serde_json::json!({"nope": 1}));
        assert!(from_revision(&edited).is_err());
    }

    #[test]
    fn long_names_are_hashed() {
        let owner = Owner {
            kind: "DecoratorController",
            name: "x".repeat(250),
            uid: "u".into(),
        };
        let name = owner.revision_name(&"a".repeat(64));
        assert!(
            name.len() <= 253 && name.starts_with("hook-code-"),
            "{name}"
        );
    }

    /// Stored through a real API server (the embedded one, or the one of
    /// METACONTROLLER_E2E_KUBECONFIG), a version reads back byte for byte. The owner is a
    /// real controller object: a real garbage collector deletes revisions of a missing one.
    #[tokio::test]
    async fn versions_survive_the_api_server() {
        let cluster = TestCluster::start().await;
        cluster.install_metacontroller_crds().await;
        let ns = cluster.create_namespace("hook-code").await;
        let name = format!("store-{ns}");
        let spec = serde_json::json!({"parentResource": {"apiVersion": "v1", "resource": "configmaps"},
            "hooks": {"sync": {"webhook": {"url": "http://127.0.0.1:9/sync"}}}});
        let cc: metacontroller_api::composite::CompositeController =
            cluster.create_controller(&name, "nobody", spec).await;
        let owner = Owner {
            kind: "CompositeController",
            name,
            uid: cc.metadata.uid.unwrap_or_default(),
        };
        let client = cluster.client();
        let a = version("{a: 1}");
        assert_eq!(load(&client, &owner, &ns, &a.digest).await, Ok(None));
        store(&client, &owner, &ns, &a).await.unwrap();
        store(&client, &owner, &ns, &a).await.unwrap();
        assert_eq!(load(&client, &owner, &ns, &a.digest).await, Ok(Some(a)));
    }
}
