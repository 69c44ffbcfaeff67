//! `--watch-namespaces` (env `WATCH_NAMESPACE`): the process works inside some namespaces
//! with Roles there, and needs cluster-wide rights only to read its controller objects.
//!
//! Two optional cluster-wide reads feed the merge schemas (`--apply-schema=auto`): list/watch
//! on CustomResourceDefinitions and `GET /openapi/v3`. They are asked for once at start with
//! SelfSubjectAccessReviews (which every authenticated user may create), so a missing grant
//! turns its feature off with one log line instead of a stream of refused requests.

use std::sync::Arc;

use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use metacontroller_dynamic::WatchScope;

const CRD_GROUP: &str = "apiextensions.k8s.io";
const CRD_RESOURCE: &str = "customresourcedefinitions";

/// The scope of a namespaced install and what its credentials allow besides.
#[derive(Debug, Clone)]
pub(crate) struct Namespaced {
    /// The namespaces, plus the cluster-scoped resources the informers may still watch.
    pub scope: Arc<WatchScope>,
    /// Whether merge schemas can be read at all (`GET /openapi/v3` allowed).
    pub openapi: bool,
}

/// The namespaced install asked for by `namespaces` (`None`: every namespace), with the
/// optional cluster-wide reads probed through `client`.
pub(crate) async fn probe(client: &kube::Client, namespaces: &[String]) -> Option<Namespaced> {
    let mut scope = WatchScope::new(namespaces)?;
    let crds = allowed(client, resource_review(CRD_GROUP, CRD_RESOURCE, "list")).await
        && allowed(client, resource_review(CRD_GROUP, CRD_RESOURCE, "watch")).await;
    if crds {
        scope = scope.allow_cluster_wide(CRD_GROUP, CRD_RESOURCE);
    } else {
        tracing::warn!("no list/watch on customresourcedefinitions cluster-wide: custom resources merge by the API server's OpenAPI v3 schema (or by conventions) instead of their CRD's");
    }
    let openapi = allowed(client, path_review("/openapi/v3")).await;
    if !openapi {
        tracing::warn!("no GET on /openapi/v3: --apply-schema=auto is off; lists merge by upstream's conventional keys only");
    }
    tracing::info!(namespaces = %scope, "limited to --watch-namespaces: parents, children and related objects outside them are not watched, and cluster-scoped parent, child, target and attachment types are refused");
    Some(Namespaced {
        scope: Arc::new(scope),
        openapi,
    })
}

fn resource_review(group: &str, resource: &str, verb: &str) -> SelfSubjectAccessReviewSpec {
    SelfSubjectAccessReviewSpec {
        resource_attributes: Some(ResourceAttributes {
            group: Some(group.to_string()),
            resource: Some(resource.to_string()),
            verb: Some(verb.to_string()),
            ..ResourceAttributes::default()
        }),
        ..SelfSubjectAccessReviewSpec::default()
    }
}

fn path_review(path: &str) -> SelfSubjectAccessReviewSpec {
    SelfSubjectAccessReviewSpec {
        non_resource_attributes: Some(NonResourceAttributes {
            path: Some(path.to_string()),
            verb: Some("get".to_string()),
        }),
        ..SelfSubjectAccessReviewSpec::default()
    }
}

/// Whether the API server allows what `spec` asks. A server that cannot answer (no
/// authorization API, an error) is taken to allow it: the request itself will tell.
async fn allowed(client: &kube::Client, spec: SelfSubjectAccessReviewSpec) -> bool {
    let review = SelfSubjectAccessReview {
        spec,
        ..SelfSubjectAccessReview::default()
    };
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    match api.create(&PostParams::default(), &review).await {
        Ok(answer) => answer.status.is_some_and(|s| s.allowed),
        Err(err) => {
            tracing::debug!(error = %err, "SelfSubjectAccessReview not answered; assuming allowed");
            true
        }
    }
}
