//! `x-kubernetes-validations`: the CEL rules of a CRD schema node, parsed and compiled once
//! when the CRD's schema is loaded (see [`super::rules_eval`] for running them on a write).
//!
//! The rules are compiled with the `cel` crate (cel-rust) and its standard library plus its
//! `strings`, `lists` and `math` extensions. Kubernetes type-checks every rule when the CRD is
//! written; this server does not. A rule that does not compile here, or that calls something
//! the crate does not have (Kubernetes' `url()`, `quantity()`, `isSorted()`, regex `find`, ...),
//! is *skipped* with one WARN log line instead of refusing objects Kubernetes accepts: dev mode
//! may accept what a real server refuses for such a rule, never the other way round.

use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};

/// The CEL environment every rule compiles and runs in.
static ENV: LazyLock<Arc<cel::Env>> = LazyLock::new(|| {
    let mut env = cel::Env::stdlib();
    for (name, ext) in [
        (
            "strings",
            cel::extensions::strings as fn(&mut cel::Env) -> _,
        ),
        ("lists", cel::extensions::lists),
        ("math", cel::extensions::math),
    ] {
        if let Err(e) = env.add_extension(ext) {
            tracing::warn!(extension = name, error = %e, "CEL extension not loaded");
        }
    }
    Arc::new(env)
});

/// The shared CEL environment.
pub(crate) fn env() -> Arc<cel::Env> {
    ENV.clone()
}

/// The field-error kind a failing rule reports (`reason` of the rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleReason {
    /// `FieldValueInvalid` (the default).
    Invalid,
    /// `FieldValueForbidden`.
    Forbidden,
    /// `FieldValueRequired`.
    Required,
    /// `FieldValueDuplicate`.
    Duplicate,
}

/// One entry of `x-kubernetes-validations`.
#[derive(Debug, Clone)]
pub struct Rule {
    /// The CEL source of `rule`.
    pub rule: String,
    /// The compiled rule; `None` when it did not compile (the rule is skipped).
    pub program: Option<Arc<cel::Program>>,
    /// `message`.
    pub message: Option<String>,
    /// The compiled `messageExpression`, if any.
    pub message_expression: Option<Arc<cel::Program>>,
    /// `reason`.
    pub reason: RuleReason,
    /// `fieldPath`, without its leading dot (`testMap.foo`).
    pub field_path: Option<String>,
    /// Whether the rule reads `oldSelf` (a transition rule: evaluated on updates only, where
    /// an old value exists).
    pub transition: bool,
    /// Set once the rule was skipped and logged, so a skipped rule logs once, not per write.
    pub(crate) skip_logged: Arc<AtomicBool>,
}

impl Rule {
    /// What Kubernetes names a rule in errors: its message, else its source.
    pub fn error_string(&self) -> &str {
        match &self.message {
            Some(m) if !m.trim().is_empty() => m.trim(),
            _ => self.rule.trim(),
        }
    }

    /// The message of a failed rule without `messageExpression`: `message`, else
    /// `failed rule: <rule>`.
    pub fn message_or_default(&self) -> String {
        match &self.message {
            Some(m) if !m.trim().is_empty() => m.trim().to_string(),
            _ => format!("failed rule: {}", self.rule.trim()),
        }
    }

    /// Logs (once per rule) that this embedded server does not check the rule.
    pub(crate) fn log_skipped(&self, why: &str) {
        if !self.skip_logged.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                rule = %self.rule,
                reason = why,
                "embedded API server: x-kubernetes-validations rule not checked (unsupported here; a real API server checks it)"
            );
        }
    }
}

/// Parses the `x-kubernetes-validations` of one schema node. Entries without a string
/// `rule` are ignored (the real server refuses such a CRD; this one stays lenient).
pub(crate) fn parse_rules(node: &serde_json::Map<String, Value>) -> Vec<Rule> {
    let Some(Value::Array(list)) = node.get("x-kubernetes-validations") else {
        return Vec::new();
    };
    list.iter().filter_map(parse_rule).collect()
}

fn parse_rule(v: &Value) -> Option<Rule> {
    let rule = v.get("rule")?.as_str()?.to_string();
    let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    let program = compile(&rule);
    let transition = program
        .as_ref()
        .is_some_and(|p| p.references().has_variable("oldSelf"));
    let message_expression = text("messageExpression").and_then(|m| compile(&m));
    let reason = match text("reason").as_deref() {
        Some("FieldValueForbidden") => RuleReason::Forbidden,
        Some("FieldValueRequired") => RuleReason::Required,
        Some("FieldValueDuplicate") => RuleReason::Duplicate,
        _ => RuleReason::Invalid,
    };
    let field_path = text("fieldPath")
        .map(|p| p.trim_start_matches('.').to_string())
        .filter(|p| !p.is_empty());
    Some(Rule {
        rule,
        program,
        message: text("message"),
        message_expression,
        reason,
        field_path,
        transition,
        skip_logged: Arc::new(AtomicBool::new(false)),
    })
}

fn compile(source: &str) -> Option<Arc<cel::Program>> {
    match ENV.compile(source) {
        Ok(p) => Some(Arc::new(p)),
        Err(e) => {
            tracing::warn!(rule = source, error = %e,
                "embedded API server: CEL expression does not compile here; not checked");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rules(v: Value) -> Vec<Rule> {
        parse_rules(v.as_object().unwrap())
    }

    #[test]
    fn parses_fields_and_spots_transition_rules() {
        let r = rules(json!({"x-kubernetes-validations": [
            {"rule": "self == oldSelf", "message": " immutable ", "reason": "FieldValueForbidden",
             "fieldPath": ".a.b"},
            {"rule": "size(self) > 1", "messageExpression": "'x' + self"},
            {"message": "no rule: ignored"}
        ]}));
        assert_eq!(r.len(), 2);
        assert!(r[0].transition && !r[1].transition);
        assert_eq!(r[0].reason, RuleReason::Forbidden);
        assert_eq!(r[0].field_path.as_deref(), Some("a.b"));
        assert_eq!(r[0].message_or_default(), "immutable");
        assert_eq!(r[1].message_or_default(), "failed rule: size(self) > 1");
        assert!(r[1].message_expression.is_some());
    }

    #[test]
    fn a_rule_that_does_not_compile_is_kept_without_a_program() {
        let r = rules(json!({"x-kubernetes-validations": [{"rule": "self.(("}]}));
        assert_eq!(r.len(), 1);
        assert!(r[0].program.is_none());
    }
}
