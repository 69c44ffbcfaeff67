//! Checking an in-process hook's code without running it (`metacontroller validate
//! --kubeconfig`): the ConfigMap key is there, the Jsonnet entry loads, the WebAssembly module
//! compiles, with the messages a call would fail with.

use std::sync::Arc;

use metacontroller_api::hook::HookRuntime;

use super::code::{check_jsonnet_entry, module_from_config_map};
use crate::sources::CodeObject;
use crate::wasm::WasmRuntime;

/// Checks the code of `runtime` as found in its ConfigMap, `object`. A webhook, or a
/// WebAssembly module from a URL, has nothing to check here (`Ok`).
///
/// # Errors
///
/// What a call would report: a missing key, bad base64 or gzip, a Jsonnet syntax error
/// (file:line), a module that does not compile or link.
pub fn check_code(runtime: &HookRuntime<'_>, object: Arc<CodeObject>) -> Result<(), String> {
    match runtime {
        HookRuntime::Webhook(_) => Ok(()),
        HookRuntime::Jsonnet(j) => {
            check_jsonnet_entry(&object, &j.config_map_ref, &j.key)?;
            super::jsonnet::load_entry(object, &j.key)
        }
        HookRuntime::Wasm(w) => {
            let (Some(reference), Some(key)) = (&w.config_map_ref, &w.key) else {
                return Ok(());
            };
            let bytes = module_from_config_map(&object, reference, key)?;
            WasmRuntime::new()
                .compile(&bytes)
                .map(drop)
                .map_err(|e| e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metacontroller_api::hook::{CodeConfigMapReference, JsonnetHook, WasmHook};

    fn jsonnet(key: &str) -> JsonnetHook {
        JsonnetHook {
            config_map_ref: CodeConfigMapReference {
                namespace: "ns".into(),
                name: "code".into(),
            },
            key: key.into(),
            ..JsonnetHook::default()
        }
    }

    #[test]
    fn jsonnet_entry_must_exist_and_parse() {
        let files = Arc::new(CodeObject::from_text(&[
            ("good.jsonnet", "function(request) {children: []}"),
            ("bad.jsonnet", "function(request) {children: [}"),
        ]));
        let check = |key: &str| check_code(&HookRuntime::Jsonnet(&jsonnet(key)), files.clone());
        assert_eq!(check("good.jsonnet"), Ok(()));
        let missing = check("none.jsonnet").unwrap_err();
        assert!(missing.contains("has no key \"none.jsonnet\""), "{missing}");
        let syntax = check("bad.jsonnet").unwrap_err();
        assert!(syntax.contains("bad.jsonnet"), "{syntax}");
    }

    #[test]
    fn wasm_module_must_compile() {
        let files = Arc::new(CodeObject::from_text(&[("m.wasm", "AGFzbQEAAAA=")]));
        let hook = WasmHook {
            config_map_ref: Some(CodeConfigMapReference {
                namespace: "ns".into(),
                name: "code".into(),
            }),
            key: Some("m.wasm".into()),
            ..WasmHook::default()
        };
        let err = check_code(&HookRuntime::Wasm(&hook), files).unwrap_err();
        assert!(!err.is_empty());
    }
}
