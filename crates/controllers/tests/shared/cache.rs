//! A positive signal for negative checks, shared by the test support modules: the
//! reconciler's informer has caught up with the API server.

use std::sync::Arc;

use kube::api::Api;
use kube::core::DynamicObject;
use metacontroller_dynamic::{ApiResource, Informers, NamespacedName};
use metacontroller_testkit::{dynamic_api, eventually};

/// Waits until the informer of `res` from `informers` (the factory the reconciler uses, so
/// the same informer) holds object `name` as the API server has it now: every watch event
/// for it up to here has been handed to the reconciler's event handlers.
pub async fn wait_informer_caught_up(
    informers: &Informers,
    client: kube::Client,
    res: &Arc<ApiResource>,
    namespace: Option<&str>,
    name: &str,
) {
    let informer = informers.lease(res);
    let api: Api<DynamicObject> =
        dynamic_api(client, &res.api_version, &res.kind, &res.name, namespace);
    let key = NamespacedName::new(namespace.unwrap_or_default().to_string(), name.to_string());
    eventually("the reconciler's cache to catch up", || async {
        let live = api.get_opt(name).await.ok().flatten();
        let live_rv = live.and_then(|o| o.metadata.resource_version);
        let cached = informer.get(&key);
        let cached_rv = cached.and_then(|o| o.metadata.resource_version.clone());
        live_rv.is_some() && live_rv == cached_rv
    })
    .await;
}
