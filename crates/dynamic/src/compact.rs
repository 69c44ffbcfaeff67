//! The form informers cache objects in: the object's JSON plus the few metadata strings the
//! store's indexes read, in one immutable allocation.
//!
//! # Memory
//!
//! A decoded `kube::core::DynamicObject` costs about seven times its JSON: `ObjectMeta` is
//! a struct of optional strings, maps and vectors, every other field is a
//! `serde_json::Value` tree (a 32-byte node per value, a map per object) and each
//! `managedFields` entry carries a tree of its own. A [`CompactObject`] is the object's JSON
//! plus the metadata strings the store's indexes read (namespace, name, uid, resourceVersion,
//! controller owner uid) in one allocation, about a fifth to a sixth of the decoded object
//! (`cargo run -p metacontroller-dynamic --example cache_bytes` prints the heap bytes of
//! each; figures: docs/src/benchmarks.md, "Cached object size").
//!
//! The price is a decode on every read (`Informer::get`, `controlled_by`, ...) and an encode
//! on every watch event: tens of microseconds at most per object, paid per sync for the parent
//! and its children, small beside the hook call and the API writes of a sync.
//!
//! The decoded object is exactly the one the watch delivered: `decode(encode(o)) == o` for
//! every `DynamicObject`, managedFields included, so hooks receive what they always did. This
//! needs serde_json's `float_roundtrip` (exact float parsing), which this crate enables.

use kube::core::DynamicObject;

use crate::object::{ControllerOwner, ControllerRef, ObjectMetaAccess, Versioned};

/// Metadata strings kept beside the JSON, in this order.
const NAMESPACE: usize = 0;
const NAME: usize = 1;
const UID: usize = 2;
const RESOURCE_VERSION: usize = 3;
const CONTROLLER_UID: usize = 4;
const CONTROLLER_API_VERSION: usize = 5;
const CONTROLLER_KIND: usize = 6;
/// The controller owner's name; for a child tracked by label (no controller owner, so no
/// owner apiVersion or kind either) the parent key of its annotation
/// ([`ControllerOwner::tracking_parent`]): one slot serves both, as an object has at most
/// one of them, and the object stays its size.
const CONTROLLER_NAME: usize = 7;
const FIELDS: usize = 8;

/// An immutable cached object: its JSON and its index metadata. Build it with
/// [`CompactObject::encode`], read it back with [`CompactObject::decode`].
#[derive(Clone, PartialEq, Eq)]
pub struct CompactObject {
    /// The JSON followed by the metadata strings.
    text: Box<str>,
    /// End of the JSON in `text`.
    json_end: u32,
    /// End of each metadata string in `text` (each starts where the previous one ended).
    ends: [u32; FIELDS],
    /// Bit `i` set: metadata string `i` is present (an absent one is empty in `text`).
    present: u8,
}

impl std::fmt::Debug for CompactObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompactObject")
            .field("namespace", &self.namespace())
            .field("name", &self.name())
            .field("resource_version", &self.resource_version())
            .field("json_bytes", &self.json().len())
            .finish_non_exhaustive()
    }
}

/// An object whose JSON cannot be kept compactly (more than 4 GiB) or could not be written.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    /// serde_json failed (not expected for a `DynamicObject`).
    #[error("cannot encode object: {0}")]
    Json(#[from] serde_json::Error),
    /// The text does not fit 32-bit offsets.
    #[error("object too large to cache ({0} bytes)")]
    TooLarge(usize),
}

impl CompactObject {
    /// The compact form of `obj`.
    pub fn encode(obj: &DynamicObject) -> Result<Self, EncodeError> {
        let mut text = serde_json::to_string(obj)?;
        let json_end = text.len();
        let owner = obj.controller_ref();
        let fields: [Option<&str>; FIELDS] = [
            obj.metadata.namespace.as_deref(),
            obj.metadata.name.as_deref(),
            obj.metadata.uid.as_deref(),
            obj.metadata.resource_version.as_deref(),
            obj.controller_uid(),
            owner.map(|o| o.api_version),
            owner.map(|o| o.kind),
            owner.map(|o| o.name).or_else(|| obj.tracking_parent()),
        ];
        let extra: usize = fields.iter().flatten().map(|s| s.len()).sum();
        text.reserve_exact(extra);
        let mut ends = [0u32; FIELDS];
        let mut present = 0u8;
        let offset = |n: usize| u32::try_from(n).map_err(|_| EncodeError::TooLarge(n));
        for (i, field) in fields.iter().enumerate() {
            if let Some(s) = field {
                text.push_str(s);
                present |= 1 << i;
            }
            ends[i] = offset(text.len())?;
        }
        Ok(CompactObject {
            text: text.into_boxed_str(),
            json_end: offset(json_end)?,
            ends,
            present,
        })
    }

    /// The object as the watch delivered it.
    pub fn decode(&self) -> Result<DynamicObject, serde_json::Error> {
        serde_json::from_str(self.json())
    }

    /// The object's JSON.
    pub(crate) fn json(&self) -> &str {
        &self.text[..self.json_end as usize]
    }

    fn field(&self, i: usize) -> Option<&str> {
        if self.present & (1 << i) == 0 {
            return None;
        }
        let start = if i == 0 {
            self.json_end
        } else {
            self.ends[i - 1]
        };
        // Offsets were taken at `str` boundaries when the text was built.
        self.text.get(start as usize..self.ends[i] as usize)
    }
}

impl Versioned for CompactObject {
    fn resource_version(&self) -> Option<&str> {
        self.field(RESOURCE_VERSION)
    }
}

impl ControllerOwner for CompactObject {
    fn controller_ref(&self) -> Option<ControllerRef<'_>> {
        Some(ControllerRef {
            api_version: self.field(CONTROLLER_API_VERSION)?,
            kind: self.field(CONTROLLER_KIND)?,
            name: self.field(CONTROLLER_NAME)?,
        })
    }

    fn tracking_parent(&self) -> Option<&str> {
        if self.field(CONTROLLER_KIND).is_some() {
            return None;
        }
        self.field(CONTROLLER_NAME)
    }
}

impl ObjectMetaAccess for CompactObject {
    fn namespace(&self) -> Option<&str> {
        self.field(NAMESPACE).filter(|ns| !ns.is_empty())
    }
    fn name(&self) -> Option<&str> {
        self.field(NAME)
    }
    fn uid(&self) -> Option<&str> {
        self.field(UID)
    }
    fn controller_uid(&self) -> Option<&str> {
        self.field(CONTROLLER_UID)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    fn dynamic(v: Value) -> DynamicObject {
        serde_json::from_value(v).unwrap()
    }

    fn round_trip(v: Value) {
        let obj = dynamic(v);
        let compact = CompactObject::encode(&obj).unwrap();
        assert_eq!(compact.decode().unwrap(), obj);
        assert_eq!(compact.name(), obj.name());
        assert_eq!(compact.namespace(), ObjectMetaAccess::namespace(&obj));
        assert_eq!(compact.uid(), obj.uid());
        assert_eq!(compact.resource_version(), obj.resource_version());
        assert_eq!(compact.controller_uid(), obj.controller_uid());
        assert_eq!(compact.controller_ref(), obj.controller_ref());
        assert_eq!(compact.tracking_parent(), obj.tracking_parent());
    }

    #[test]
    fn decodes_to_the_object_it_was_built_from() {
        round_trip(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": "c", "namespace": "ns", "uid": "u1", "resourceVersion": "9",
                "generation": 3, "creationTimestamp": "2026-11-23T14:00:00Z",
                "labels": {}, "annotations": {"a": "é\"\\\n"}, "finalizers": [],
                "ownerReferences": [
                    {"apiVersion": "x/v1", "kind": "A", "name": "a", "uid": "not-controller"},
                    {"apiVersion": "x/v1", "kind": "B", "name": "b", "uid": "owner", "controller": true}
                ],
                "managedFields": [{"manager": "m", "operation": "Update", "apiVersion": "v1",
                    "time": "2026-11-23T14:00:00Z", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:data": {".": {}, "f:x": {}}}}]
            },
            "data": {"x": "1", "y": ""},
            "spec": {"f": 1.5e300, "i": -9223372036854775808i64, "u": 18446744073709551615u64,
                     "n": null, "l": [[], {}, true]}
        }));
        // List items come without apiVersion/kind; cluster-scoped objects without namespace.
        round_trip(json!({"metadata": {"name": "x"}}));
        round_trip(json!({"kind": "OnlyKind", "metadata": {"name": "x", "namespace": ""}}));
        round_trip(json!({"apiVersion": "v1", "metadata": {}, "status": {}}));
        // A child tracked by label, whose parent is named by an annotation (extension).
        let tracked = |annotation: &str| {
            json!({"metadata": {"name": "t", "namespace": "other",
                "labels": {crate::PARENT_UID_LABEL: "u1"},
                "annotations": {crate::PARENT_ANNOTATION: annotation}}})
        };
        round_trip(tracked("team/p"));
        round_trip(tracked("not-a-key"));
        let c = CompactObject::encode(&dynamic(tracked("team/p"))).unwrap();
        assert_eq!(c.tracking_parent(), Some("team/p"));
        assert_eq!(c.controller_ref(), None);
        assert_eq!(c.controller_uid(), Some("u1"));
    }

    #[test]
    fn absent_and_empty_metadata_differ() {
        let c =
            CompactObject::encode(&dynamic(json!({"metadata": {"name": "", "uid": "u"}}))).unwrap();
        assert_eq!(c.name(), Some(""));
        assert_eq!(c.uid(), Some("u"));
        assert_eq!(c.namespace(), None);
        assert_eq!(c.resource_version(), None);
        assert_eq!(c.controller_uid(), None);
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            ".*".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                proptest::collection::btree_map("[a-z.:]{0,6}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Whatever the watch decoded, the cache hands back the same object.
        #[test]
        fn any_object_round_trips(
            name in "[a-z0-9.-]{1,12}",
            ns in proptest::option::of("[a-z0-9-]{0,8}"),
            labels in proptest::collection::btree_map("[a-z/.]{1,8}", ".{0,6}", 0..3),
            spec in arb_json(),
            fields in arb_json(),
        ) {
            let mut v = json!({
                "apiVersion": "example.com/v1", "kind": "Thing",
                "metadata": {"name": name, "labels": labels, "resourceVersion": "1",
                    "managedFields": [{"manager": "m", "fieldsType": "FieldsV1", "fieldsV1": fields}]},
                "spec": spec,
            });
            if let Some(ns) = ns {
                v["metadata"]["namespace"] = json!(ns);
            }
            let obj = dynamic(v);
            let compact = CompactObject::encode(&obj).unwrap();
            prop_assert_eq!(compact.decode().unwrap(), obj);
        }
    }
}
