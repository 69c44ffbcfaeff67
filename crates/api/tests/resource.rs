//! The three kinds are kube resources: kube::Api can be built for them and the
//! names kube derives match the CRDs.

use kube::Resource;
use metacontroller_api::{CompositeController, ControllerRevision, DecoratorController};

#[test]
fn kube_resource_names_match_the_crds() {
    assert_eq!(CompositeController::plural(&()), "compositecontrollers");
    assert_eq!(CompositeController::kind(&()), "CompositeController");
    assert_eq!(
        CompositeController::api_version(&()),
        "metacontroller.k8s.io/v1alpha1"
    );
    assert_eq!(DecoratorController::plural(&()), "decoratorcontrollers");
    assert_eq!(ControllerRevision::plural(&()), "controllerrevisions");
    assert_eq!(ControllerRevision::group(&()), "metacontroller.k8s.io");
    let cc = CompositeController::new("demo", Default::default());
    assert_eq!(cc.meta().name.as_deref(), Some("demo"));
    assert_eq!(
        cc.finalizer_name(),
        "metacontroller.io/compositecontroller-demo"
    );
    let json = serde_json::to_value(&cc).unwrap();
    assert_eq!(json["apiVersion"], "metacontroller.k8s.io/v1alpha1");
    assert_eq!(json["kind"], "CompositeController");
}

/// Compiles only if the types satisfy kube::Api's bounds with the right scopes.
#[allow(dead_code)]
fn apis(client: kube::Client) {
    let _: kube::Api<CompositeController> = kube::Api::all(client.clone());
    let _: kube::Api<DecoratorController> = kube::Api::all(client.clone());
    let _: kube::Api<ControllerRevision> = kube::Api::namespaced(client, "default");
}
