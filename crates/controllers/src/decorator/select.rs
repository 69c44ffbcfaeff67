//! Which objects a DecoratorController targets: one label + annotation selector per
//! `resources` rule, looked up by API group and kind (the version is ignored, as upstream
//! does, so a target read through another served version still matches).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use metacontroller_api::decorator::DecoratorControllerResourceRule;
use metacontroller_dynamic::{ObjectSelector, SelectorError};
use serde_json::Value;

pub(crate) use crate::meta::api_group;

/// A compiled `resources` rule.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TargetRule {
    /// API group of the targeted resource.
    pub group: String,
    /// Kind of the targeted resource.
    pub kind: String,
    /// Labels and annotations a target must match.
    pub selector: ObjectSelector,
    /// Status-only updates of targets do not trigger a sync.
    pub ignore_status_changes: bool,
}

/// A `resources` rule that could not be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("spec.resources[{index}]: {source}")]
pub(crate) struct RuleError {
    /// Index of the rule.
    pub index: usize,
    /// What is wrong with its selectors.
    pub source: SelectorError,
}

/// The selectors of all `resources` rules of one DecoratorController.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TargetSelector {
    rules: Vec<TargetRule>,
}

impl TargetSelector {
    /// Compiles the rules; `resolved` gives, per rule in spec order, the group and kind
    /// discovery found for it. When two rules name the same group and kind the later one's
    /// selectors win, as in upstream, and `ignoreStatusChanges` holds if any of them sets it
    /// (upstream ORs the flags).
    pub(crate) fn new<'a>(
        rules: impl IntoIterator<Item = (&'a str, &'a str, &'a DecoratorControllerResourceRule)>,
    ) -> Result<TargetSelector, RuleError> {
        let mut out: Vec<TargetRule> = Vec::new();
        for (index, (group, kind, rule)) in rules.into_iter().enumerate() {
            let annotations = rule.annotation_selector.as_ref();
            let selector = ObjectSelector::for_decorator(
                rule.label_selector.as_ref(),
                annotations.and_then(|a| a.match_annotations.as_ref()),
                annotations.and_then(|a| a.match_expressions.as_deref()),
            )
            .map_err(|source| RuleError { index, source })?;
            let mut compiled = TargetRule {
                group: group.to_string(),
                kind: kind.to_string(),
                selector,
                ignore_status_changes: rule.ignore_status_changes == Some(true),
            };
            match out.iter_mut().find(|r| r.group == group && r.kind == kind) {
                Some(existing) => {
                    compiled.ignore_status_changes |= existing.ignore_status_changes;
                    *existing = compiled;
                }
                None => out.push(compiled),
            }
        }
        Ok(TargetSelector { rules: out })
    }

    /// The rule for objects of this apiVersion and kind, if the type is targeted at all.
    pub(crate) fn rule(&self, api_version: &str, kind: &str) -> Option<&TargetRule> {
        let group = api_group(api_version);
        self.rules
            .iter()
            .find(|r| r.group == group && r.kind == kind)
    }

    /// Whether an object of this type with this metadata is a target.
    pub(crate) fn matches_meta(&self, api_version: &str, kind: &str, meta: &ObjectMeta) -> bool {
        let empty = std::collections::BTreeMap::new();
        self.rule(api_version, kind).is_some_and(|r| {
            r.selector.matches(
                meta.labels.as_ref().unwrap_or(&empty),
                meta.annotations.as_ref().unwrap_or(&empty),
            )
        })
    }

    /// Whether an object (JSON with apiVersion and kind) is a target.
    pub fn matches(&self, object: &Value) -> bool {
        let field = |name: &str| object.get(name).and_then(Value::as_str).unwrap_or_default();
        self.rule(field("apiVersion"), field("kind"))
            .is_some_and(|r| r.selector.matches_object(object))
    }
}

/// Upstream's `ignoreStatusChanges` filter for an update of a target: true when the
/// generation, labels and annotations are all unchanged (only status or other
/// non-generation fields moved), so the update need not trigger a sync.
pub(crate) fn is_status_only_update(old: &ObjectMeta, new: &ObjectMeta) -> bool {
    let labels = |m: &ObjectMeta| m.labels.clone().unwrap_or_default();
    let annotations = |m: &ObjectMeta| m.annotations.clone().unwrap_or_default();
    old.generation == new.generation
        && labels(old) == labels(new)
        && annotations(old) == annotations(new)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use metacontroller_api::selector::{AnnotationSelector, LabelSelector};
    use serde_json::json;

    use super::*;

    fn rule(
        labels: Option<&[(&str, &str)]>,
        annotations: Option<Value>,
    ) -> DecoratorControllerResourceRule {
        DecoratorControllerResourceRule {
            api_version: "apps/v1".into(),
            resource: "statefulsets".into(),
            label_selector: labels.map(|l| LabelSelector {
                match_labels: Some(
                    l.iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                match_expressions: None,
            }),
            annotation_selector: annotations
                .map(|a| serde_json::from_value::<AnnotationSelector>(a).unwrap()),
            ignore_status_changes: None,
        }
    }

    fn sts(api_version: &str, labels: Value, annotations: Value) -> Value {
        json!({"apiVersion": api_version, "kind": "StatefulSet",
               "metadata": {"name": "s", "labels": labels, "annotations": annotations}})
    }

    #[test]
    fn absent_selectors_select_every_object_of_the_type() {
        let r = rule(None, None);
        let s = TargetSelector::new([("apps", "StatefulSet", &r)]).unwrap();
        assert!(s.matches(&sts("apps/v1", json!({}), json!({}))));
        // Version ignored, group and kind not.
        assert!(s.matches(&sts("apps/v1beta2", json!({}), json!({}))));
        assert!(!s.matches(&sts("other.io/v1", json!({}), json!({}))));
        let mut pod = sts("v1", json!({}), json!({}));
        pod["kind"] = json!("Pod");
        assert!(!s.matches(&pod));
    }

    #[test]
    fn labels_and_annotations_must_both_match() {
        let r = rule(
            Some(&[("app", "db")]),
            Some(json!({
                "matchAnnotations": {"team": "a"},
                "matchExpressions": [{"key": "service-per-pod-ports", "operator": "Exists"}]
            })),
        );
        let s = TargetSelector::new([("apps", "StatefulSet", &r)]).unwrap();
        let both = sts(
            "apps/v1",
            json!({"app": "db"}),
            json!({"team": "a", "service-per-pod-ports": "80"}),
        );
        assert!(s.matches(&both));
        let mut no_expr = both.clone();
        no_expr["metadata"]["annotations"] = json!({"team": "a"});
        assert!(!s.matches(&no_expr));
        let mut wrong_label = both.clone();
        wrong_label["metadata"]["labels"] = json!({"app": "web"});
        assert!(!s.matches(&wrong_label));
        let mut wrong_annotation = both;
        wrong_annotation["metadata"]["annotations"]["team"] = json!("b");
        assert!(!s.matches(&wrong_annotation));
    }

    #[test]
    fn matches_meta_agrees_with_json() {
        let r = rule(
            None,
            Some(json!({"matchExpressions": [
            {"key": "opt-in", "operator": "In", "values": ["yes"]}]})),
        );
        let s = TargetSelector::new([("apps", "StatefulSet", &r)]).unwrap();
        let mut meta = ObjectMeta {
            annotations: Some(BTreeMap::from([("opt-in".to_string(), "yes".to_string())])),
            ..ObjectMeta::default()
        };
        assert!(s.matches_meta("apps/v1", "StatefulSet", &meta));
        meta.annotations = None;
        assert!(!s.matches_meta("apps/v1", "StatefulSet", &meta));
        assert!(!s.matches_meta("v1", "Pod", &meta));
    }

    #[test]
    fn later_rule_for_the_same_kind_wins_and_bad_selectors_are_errors() {
        let first = rule(Some(&[("a", "1")]), None);
        let second = rule(Some(&[("b", "2")]), None);
        let s = TargetSelector::new([
            ("apps", "StatefulSet", &first),
            ("apps", "StatefulSet", &second),
        ])
        .unwrap();
        assert!(!s.matches(&sts("apps/v1", json!({"a": "1"}), json!({}))));
        assert!(s.matches(&sts("apps/v1", json!({"b": "2"}), json!({}))));

        let bad = rule(
            None,
            Some(json!({"matchExpressions": [{"key": "k", "operator": "Bogus"}]})),
        );
        let err = TargetSelector::new([
            ("apps", "StatefulSet", &first),
            ("apps", "StatefulSet", &bad),
        ])
        .unwrap_err();
        assert_eq!(err.index, 1);
    }

    #[test]
    fn ignore_status_changes_of_rules_for_the_same_kind_are_ored() {
        let mut ignoring = rule(None, None);
        ignoring.ignore_status_changes = Some(true);
        let plain = rule(None, None);
        for order in [[&ignoring, &plain], [&plain, &ignoring]] {
            let s = TargetSelector::new(order.map(|r| ("apps", "StatefulSet", r))).unwrap();
            assert!(
                s.rule("apps/v1", "StatefulSet")
                    .unwrap()
                    .ignore_status_changes
            );
        }
        let s = TargetSelector::new([("apps", "StatefulSet", &plain)]).unwrap();
        assert!(
            !s.rule("apps/v1", "StatefulSet")
                .unwrap()
                .ignore_status_changes
        );
    }

    #[test]
    fn status_only_updates() {
        let old = ObjectMeta {
            generation: Some(1),
            labels: Some(BTreeMap::from([("a".to_string(), "1".to_string())])),
            resource_version: Some("1".into()),
            ..ObjectMeta::default()
        };
        let mut new = old.clone();
        new.resource_version = Some("2".into());
        assert!(is_status_only_update(&old, &new));
        new.generation = Some(2);
        assert!(!is_status_only_update(&old, &new));
        new.generation = Some(1);
        new.annotations = Some(BTreeMap::from([("x".to_string(), "y".to_string())]));
        assert!(!is_status_only_update(&old, &new));
        new.annotations = None;
        new.labels = None;
        assert!(!is_status_only_update(&old, &new));
    }

    #[test]
    fn core_group_is_empty() {
        assert_eq!(api_group("v1"), "");
        assert_eq!(api_group("apps/v1"), "apps");
    }
}
