//! `metacontroller validate --kubeconfig PATH` (or `--live`): the code of every in-process
//! hook (`jsonnet`, `wasm` with `configMapRef`) is read from its ConfigMap as the controller
//! reads it, and checked as a call would check it: the ConfigMap and key exist, the Jsonnet
//! entry parses (and loads), the WebAssembly module compiles.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};
use serde_json::Value;

use metacontroller_api::hook::{Hook, HookRuntime};
use metacontroller_api::validation::ValidationError;

/// The problems of the in-process hooks of a CompositeController or DecoratorController
/// document (hooks that do not decode are reported by the offline checks).
pub async fn check(client: &Client, doc: &Value) -> Vec<ValidationError> {
    let mut errors = Vec::new();
    let Some(hooks) = doc.pointer("/spec/hooks").and_then(Value::as_object) else {
        return errors;
    };
    for (name, hook) in hooks {
        let Ok(hook) = serde_json::from_value::<Hook>(hook.clone()) else {
            continue;
        };
        let Some((path, runtime)) = in_process(&hook, name) else {
            continue;
        };
        if let Err(message) = check_one(client, &runtime).await {
            errors.push(ValidationError { path, message });
        }
    }
    errors
}

/// The field path and runtime of `hook` when its code comes from a ConfigMap.
fn in_process<'a>(hook: &'a Hook, name: &str) -> Option<(String, HookRuntime<'a>)> {
    if let Some(j) = &hook.jsonnet {
        return Some((
            format!("spec.hooks.{name}.jsonnet"),
            HookRuntime::Jsonnet(j),
        ));
    }
    let wasm = hook.wasm.as_ref()?;
    wasm.config_map_ref.as_ref()?;
    Some((format!("spec.hooks.{name}.wasm"), HookRuntime::Wasm(wasm)))
}

async fn check_one(client: &Client, runtime: &HookRuntime<'_>) -> Result<(), String> {
    let reference = match runtime {
        HookRuntime::Jsonnet(j) => &j.config_map_ref,
        HookRuntime::Wasm(w) => match &w.config_map_ref {
            Some(r) => r,
            None => return Ok(()),
        },
        HookRuntime::Webhook(_) => return Ok(()),
    };
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &reference.namespace);
    let found = api.get_opt(&reference.name).await.map_err(|e| {
        format!(
            "reading ConfigMap {}/{}: {e}",
            reference.namespace, reference.name
        )
    })?;
    let Some(cm) = found else {
        return Err(format!(
            "ConfigMap {}/{} not found",
            reference.namespace, reference.name
        ));
    };
    let object = Arc::new(crate::code_source::code_object(cm));
    // A one-shot CLI: compiling here, on the async thread, holds up nothing else.
    metacontroller_hooks::inprocess::check_code(runtime, object)
}
