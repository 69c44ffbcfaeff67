//! The object shape both controller kinds share: `apiVersion`, `kind`, metadata, a spec, a
//! free-form status, and the `k8s_openapi` impls that make `kube::Api<T>` work.

/// Declares a cluster-scoped controller kind of `metacontroller.k8s.io/v1alpha1` with spec
/// type `$spec`: the struct, `KIND`/`PLURAL`, `new`, `finalizer_name` (upstream's
/// `metacontroller.io/<plural without "s">-<name>`), `validate` (through `$validate`) and the
/// `k8s_openapi` impls. `$default_kind` names the struct's `default_kind` function for serde.
macro_rules! controller_object {
    (
        $(#[$doc:meta])*
        $name:ident {
            spec: $spec:ty,
            spec_doc: $spec_doc:literal,
            kind: $kind:literal,
            list_kind: $list_kind:literal,
            plural: $plural:literal,
            finalizer_prefix: $finalizer_prefix:literal,
            default_kind: $default_kind:literal,
            validate: $validate:path,
        }
    ) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
        #[serde(rename_all = "camelCase")]
        pub struct $name {
            /// Always `metacontroller.k8s.io/v1alpha1`.
            #[serde(default = "crate::default_api_version")]
            pub api_version: String,
            #[doc = concat!("Always `", $kind, "`.")]
            #[serde(default = $default_kind)]
            pub kind: String,
            /// Standard object metadata.
            #[serde(default)]
            #[schemars(with = "serde_json::Map<String, serde_json::Value>")]
            pub metadata: ObjectMeta,
            #[doc = $spec_doc]
            pub spec: $spec,
            /// Free-form status (upstream defines no fields). Serialized as `{}` when unset, as
            /// upstream's Go type does (its empty status struct is never omitted), so hook
            /// requests carry `controller.status` like upstream's.
            #[serde(default, serialize_with = "crate::serialize_status")]
            pub status: Option<serde_json::Value>,
        }

        impl $name {
            /// `kind` of this type.
            pub const KIND: &'static str = $kind;
            /// Plural resource name.
            pub const PLURAL: &'static str = $plural;

            fn default_kind() -> String {
                Self::KIND.to_string()
            }

            /// A controller with the given name and spec (apiVersion and kind filled in).
            pub fn new(name: &str, spec: $spec) -> Self {
                Self {
                    api_version: crate::API_VERSION.to_string(),
                    kind: Self::KIND.to_string(),
                    metadata: ObjectMeta {
                        name: Some(name.to_string()),
                        ..ObjectMeta::default()
                    },
                    spec,
                    status: None,
                }
            }

            /// Checks what the CRD schema cannot (see [`crate::validation`]).
            pub fn validate(&self) -> Result<(), crate::validation::ValidationErrors> {
                $validate(self)
            }

            /// The finalizer Metacontroller puts on the objects it syncs when a finalize
            /// hook is set.
            pub fn finalizer_name(&self) -> String {
                format!(
                    "{}{}",
                    $finalizer_prefix,
                    self.metadata.name.as_deref().unwrap_or_default()
                )
            }
        }

        impl k8s_openapi::Resource for $name {
            const API_VERSION: &'static str = crate::API_VERSION;
            const GROUP: &'static str = crate::GROUP;
            const KIND: &'static str = Self::KIND;
            const VERSION: &'static str = crate::VERSION;
            const URL_PATH_SEGMENT: &'static str = Self::PLURAL;
            type Scope = k8s_openapi::ClusterResourceScope;
        }

        impl k8s_openapi::ListableResource for $name {
            const LIST_KIND: &'static str = $list_kind;
        }

        impl k8s_openapi::Metadata for $name {
            type Ty = ObjectMeta;

            fn metadata(&self) -> &ObjectMeta {
                &self.metadata
            }

            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

pub(crate) use controller_object;
