//! Child/attachment update strategies shared by both controller kinds.

use std::borrow::Cow;
use std::fmt;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// How existing children (or attachments) that differ from the desired state are
/// updated. Unknown strings are kept (rather than failing to decode the whole
/// controller object) so validation can report them with their field path.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub enum ChildUpdateMethod {
    /// Never update existing objects; only recreate them after someone deletes them.
    #[default]
    OnDelete,
    /// Delete differing objects at once and create them again.
    Recreate,
    /// Update differing objects in place at once.
    InPlace,
    /// Delete and recreate differing children one at a time, gated by status checks.
    RollingRecreate,
    /// Update differing children in place one at a time, gated by status checks.
    RollingInPlace,
    /// A value this version does not know (kept verbatim; rejected by validation,
    /// except the empty string, which upstream treats as `OnDelete`).
    Unknown(String),
}

impl ChildUpdateMethod {
    /// Every method upstream defines, in upstream order.
    pub const ALL: [ChildUpdateMethod; 5] = [
        ChildUpdateMethod::OnDelete,
        ChildUpdateMethod::Recreate,
        ChildUpdateMethod::InPlace,
        ChildUpdateMethod::RollingRecreate,
        ChildUpdateMethod::RollingInPlace,
    ];

    /// The wire spelling.
    pub fn as_str(&self) -> &str {
        match self {
            Self::OnDelete => "OnDelete",
            Self::Recreate => "Recreate",
            Self::InPlace => "InPlace",
            Self::RollingRecreate => "RollingRecreate",
            Self::RollingInPlace => "RollingInPlace",
            Self::Unknown(s) => s,
        }
    }

    /// Parses the wire spelling; anything unknown becomes [`ChildUpdateMethod::Unknown`].
    pub fn parse(s: &str) -> Self {
        match s {
            "OnDelete" => Self::OnDelete,
            "Recreate" => Self::Recreate,
            "InPlace" => Self::InPlace,
            "RollingRecreate" => Self::RollingRecreate,
            "RollingInPlace" => Self::RollingInPlace,
            other => Self::Unknown(other.to_string()),
        }
    }

    /// The method to act on: the empty string means `OnDelete`, as upstream.
    pub fn effective(&self) -> Cow<'_, ChildUpdateMethod> {
        match self {
            Self::Unknown(s) if s.is_empty() => Cow::Owned(Self::OnDelete),
            other => Cow::Borrowed(other),
        }
    }

    /// True for the two rolling methods.
    pub fn is_rolling(&self) -> bool {
        matches!(self, Self::RollingRecreate | Self::RollingInPlace)
    }
}

impl fmt::Display for ChildUpdateMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ChildUpdateMethod {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ChildUpdateMethod {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = Cow::<'de, str>::deserialize(deserializer)?;
        Ok(Self::parse(&s))
    }
}

impl JsonSchema for ChildUpdateMethod {
    fn schema_name() -> Cow<'static, str> {
        "ChildUpdateMethod".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        // Upstream's CRD lists all five for both kinds (the type is shared); the
        // decorator restriction is enforced by validation.
        json_schema!({
            "type": "string",
            "enum": ["OnDelete", "Recreate", "InPlace", "RollingRecreate", "RollingInPlace"]
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_and_unknown_methods_round_trip() {
        for m in ChildUpdateMethod::ALL {
            let json = serde_json::to_value(&m).unwrap();
            assert_eq!(json, serde_json::json!(m.as_str()));
            assert_eq!(
                serde_json::from_value::<ChildUpdateMethod>(json).unwrap(),
                m
            );
        }
        let odd: ChildUpdateMethod = serde_json::from_str("\"Sideways\"").unwrap();
        assert_eq!(odd, ChildUpdateMethod::Unknown("Sideways".into()));
        assert_eq!(serde_json::to_string(&odd).unwrap(), "\"Sideways\"");
    }

    #[test]
    fn empty_method_means_on_delete() {
        let empty = ChildUpdateMethod::parse("");
        assert_eq!(*empty.effective(), ChildUpdateMethod::OnDelete);
        assert!(ChildUpdateMethod::RollingInPlace.is_rolling());
        assert!(!ChildUpdateMethod::InPlace.is_rolling());
    }
}
