//! Code pinned for the calls of one future: a progressive rollout of hook code
//! (`spec.hookRollout`) runs a parent's hooks with the code of its assignment, which may be
//! an older version of a ConfigMap than the one the code source holds now. The sync of that
//! parent runs inside [`with_pinned_code`]; in-process hooks then read the pinned ConfigMap
//! objects instead of the live ones, everything else (admission, limits, metrics) unchanged.
//! Webhook hooks are not affected.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use crate::sources::CodeObject;

tokio::task_local! {
    static PINNED: Arc<PinnedCode>;
}

/// ConfigMap contents to use instead of the live ones, by namespace and name.
#[derive(Debug, Clone, Default)]
pub struct PinnedCode {
    objects: HashMap<(String, String), Arc<CodeObject>>,
}

impl PinnedCode {
    /// Uses `object` as ConfigMap `namespace/name`.
    pub fn pin(&mut self, namespace: &str, name: &str, object: Arc<CodeObject>) {
        self.objects
            .insert((namespace.to_string(), name.to_string()), object);
    }

    /// Whether nothing is pinned.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}

/// Runs `future` with `pinned` replacing the ConfigMaps it names for every in-process hook
/// call made inside it (not in tasks it spawns).
pub async fn with_pinned_code<F: Future>(pinned: Arc<PinnedCode>, future: F) -> F::Output {
    PINNED.scope(pinned, future).await
}

/// The pinned object for ConfigMap `namespace/name` in the current call, if any.
pub(crate) fn pinned(namespace: &str, name: &str) -> Option<Arc<CodeObject>> {
    PINNED
        .try_with(|p| {
            p.objects
                .get(&(namespace.to_string(), name.to_string()))
                .cloned()
        })
        .ok()
        .flatten()
}

/// The SHA-256 (lower-case hex) of a ConfigMap's code: every key of `data` and `binaryData`
/// with its length and bytes, in key order, so two objects have the same digest exactly
/// when they hold the same code. A rollout names its versions by it.
pub fn code_digest(object: &CodeObject) -> String {
    let mut bytes = Vec::new();
    let text = object.data.iter().map(|(k, v)| ("d", k, v.as_bytes()));
    let binary = object
        .binary_data
        .iter()
        .map(|(k, v)| ("b", k, v.as_slice()));
    for (section, key, value) in text.chain(binary) {
        for part in [section.as_bytes(), key.as_bytes(), value] {
            bytes.extend_from_slice(&(part.len() as u64).to_be_bytes());
            bytes.extend_from_slice(part);
        }
    }
    crate::inprocess::code_hex_sha256(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_differ_exactly_when_code_does() {
        let a = CodeObject::from_text(&[("a.jsonnet", "1"), ("b.jsonnet", "2")]);
        let same = CodeObject::from_text(&[("b.jsonnet", "2"), ("a.jsonnet", "1")]);
        let shifted = CodeObject::from_text(&[("a.jsonnet", "12"), ("b.jsonnet", "")]);
        assert_eq!(code_digest(&a), code_digest(&same));
        assert_ne!(code_digest(&a), code_digest(&shifted));
        assert_eq!(code_digest(&a).len(), 64);
    }

    #[tokio::test]
    async fn pins_apply_inside_the_scope_only() {
        let mut pins = PinnedCode::default();
        pins.pin(
            "hooks",
            "code",
            Arc::new(CodeObject::from_text(&[("k", "old")])),
        );
        let inside = with_pinned_code(Arc::new(pins), async { pinned("hooks", "code") }).await;
        assert_eq!(inside.map(|o| o.data["k"].clone()).as_deref(), Some("old"));
        assert!(pinned("hooks", "code").is_none());
    }
}
