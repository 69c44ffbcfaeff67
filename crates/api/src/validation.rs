//! Checks the CRD schema cannot express. Every error names the field path
//! (`spec.hooks.sync.webhook.authorization`) so users can fix their manifests.
//!
//! The controllers call [`validate_composite_controller`] / [`validate_decorator_controller`]
//! before starting a controller, and [`validate_related_rules`] on customize responses.

use std::collections::HashSet;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

use crate::composite::CompositeController;
use crate::decorator::DecoratorController;
use crate::duration::parse_go_duration;
use crate::hook::{
    Authorization, BasicAuth, CaBundle, ClientTls, EndpointConfig, Hook, HookRuntime, Webhook,
};
use crate::related::RelatedResourceRule;
use crate::selector::{AnnotationSelector, LabelSelector};
use crate::update::ChildUpdateMethod;

/// One problem at one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationError {
    /// Dotted field path, with list indexes in brackets: `spec.childResources[1].resource`.
    pub path: String,
    /// What is wrong and what is accepted.
    pub message: String,
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// All problems found in one object (never empty when returned as an error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationErrors(pub Vec<ValidationError>);

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ValidationErrors {}

impl ValidationErrors {
    /// True if some error is at exactly `path`.
    pub fn has_path(&self, path: &str) -> bool {
        self.0.iter().any(|e| e.path == path)
    }
}

#[derive(Default)]
pub(crate) struct Collector(Vec<ValidationError>);

impl Collector {
    pub(crate) fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(ValidationError {
            path: path.into(),
            message: message.into(),
        });
    }

    fn finish(self) -> Result<(), ValidationErrors> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(ValidationErrors(self.0))
        }
    }

    pub(crate) fn require(&mut self, path: String, value: &str) {
        if value.trim().is_empty() {
            self.push(path, "must not be empty");
        }
    }

    #[cfg(test)]
    pub(crate) fn into_errors(self) -> Vec<ValidationError> {
        self.0
    }
}

/// Validates a CompositeController.
pub fn validate_composite_controller(cc: &CompositeController) -> Result<(), ValidationErrors> {
    let mut c = Collector::default();
    let spec = &cc.spec;
    let parent = &spec.parent_resource;
    c.require("spec.parentResource.apiVersion".into(), &parent.api_version);
    c.require("spec.parentResource.resource".into(), &parent.resource);
    if let Some(selector) = &parent.label_selector {
        label_selector(&mut c, "spec.parentResource.labelSelector", selector);
    }
    if let Some(history) = &parent.revision_history {
        for (i, field_path) in history.field_paths.iter().enumerate() {
            c.require(
                format!("spec.parentResource.revisionHistory.fieldPaths[{i}]"),
                field_path,
            );
        }
    }
    for (i, child) in spec.child_resources.iter().enumerate() {
        let path = format!("spec.childResources[{i}]");
        c.require(format!("{path}.apiVersion"), &child.api_version);
        c.require(format!("{path}.resource"), &child.resource);
        child_namespaces(&mut c, &format!("{path}.namespaces"), &child.namespaces);
        let Some(strategy) = &child.update_strategy else {
            continue;
        };
        if let Some(method) = &strategy.method {
            update_method(
                &mut c,
                &format!("{path}.updateStrategy.method"),
                method,
                &ChildUpdateMethod::ALL,
            );
        }
        if let Some(checks) = &strategy.status_checks {
            for (j, cond) in checks.conditions.iter().enumerate() {
                c.require(
                    format!("{path}.updateStrategy.statusChecks.conditions[{j}].type"),
                    &cond.type_,
                );
            }
        }
    }
    if let Some(hooks) = &spec.hooks {
        for (name, hook) in [
            ("sync", &hooks.sync),
            ("finalize", &hooks.finalize),
            ("customize", &hooks.customize),
            ("preUpdateChild", &hooks.pre_update_child),
            ("postUpdateChild", &hooks.post_update_child),
        ] {
            if let Some(hook) = hook {
                validate_hook_into(&mut c, &format!("spec.hooks.{name}"), hook);
            }
        }
    }
    endpoint_configs(&mut c, "spec.endpointConfigs", &spec.endpoint_configs);
    endpoint_configs(&mut c, "spec.connections", &spec.connections);
    if let Some(rollout) = &spec.hook_rollout {
        crate::rollout::validate_hook_rollout(&mut c, "spec.hookRollout", rollout);
    }
    c.finish()
}

/// Validates a DecoratorController.
pub fn validate_decorator_controller(dc: &DecoratorController) -> Result<(), ValidationErrors> {
    let mut c = Collector::default();
    let spec = &dc.spec;
    for (i, rule) in spec.resources.iter().enumerate() {
        let path = format!("spec.resources[{i}]");
        c.require(format!("{path}.apiVersion"), &rule.api_version);
        c.require(format!("{path}.resource"), &rule.resource);
        if let Some(selector) = &rule.label_selector {
            label_selector(&mut c, &format!("{path}.labelSelector"), selector);
        }
        if let Some(selector) = &rule.annotation_selector {
            annotation_selector(&mut c, &format!("{path}.annotationSelector"), selector);
        }
    }
    for (i, rule) in spec.attachments.iter().enumerate() {
        let path = format!("spec.attachments[{i}]");
        c.require(format!("{path}.apiVersion"), &rule.api_version);
        c.require(format!("{path}.resource"), &rule.resource);
        if let Some(method) = rule
            .update_strategy
            .as_ref()
            .and_then(|s| s.method.as_ref())
        {
            update_method(
                &mut c,
                &format!("{path}.updateStrategy.method"),
                method,
                // Upstream accepts the rolling methods on attachments too and treats them
                // as their non-rolling counterparts.
                &ChildUpdateMethod::ALL,
            );
        }
    }
    if let Some(hooks) = &spec.hooks {
        for (name, hook) in [
            ("sync", &hooks.sync),
            ("finalize", &hooks.finalize),
            ("customize", &hooks.customize),
        ] {
            if let Some(hook) = hook {
                validate_hook_into(&mut c, &format!("spec.hooks.{name}"), hook);
            }
        }
    }
    endpoint_configs(&mut c, "spec.endpointConfigs", &spec.endpoint_configs);
    endpoint_configs(&mut c, "spec.connections", &spec.connections);
    if let Some(rollout) = &spec.hook_rollout {
        crate::rollout::validate_hook_rollout(&mut c, "spec.hookRollout", rollout);
    }
    c.finish()
}

/// Validates one hook; `path` is where it sits (`spec.hooks.sync`).
pub fn validate_hook(path: &str, hook: &Hook) -> Result<(), ValidationErrors> {
    let mut c = Collector::default();
    validate_hook_into(&mut c, path, hook);
    c.finish()
}

/// Validates the `relatedResources` of a customize hook response.
pub fn validate_related_rules(rules: &[RelatedResourceRule]) -> Result<(), ValidationErrors> {
    let mut c = Collector::default();
    for (i, rule) in rules.iter().enumerate() {
        related_rule(&mut c, &format!("relatedResources[{i}]"), rule);
    }
    c.finish()
}

fn related_rule(c: &mut Collector, path: &str, rule: &RelatedResourceRule) {
    c.require(format!("{path}.apiVersion"), &rule.api_version);
    c.require(format!("{path}.resource"), &rule.resource);
    let has_names = rule.names.as_ref().is_some_and(|n| !n.is_empty());
    let has_namespace = rule.namespace.as_deref().is_some_and(|n| !n.is_empty());
    if rule.label_selector.is_some() && (has_names || has_namespace) {
        c.push(
            path,
            "labelSelector cannot be combined with namespace/names: select either by labels or by namespace and names",
        );
    }
    if rule.namespace_selector.is_some() && has_namespace {
        c.push(path, "namespaceSelector cannot be combined with namespace");
    }
    if let Some(names) = &rule.names {
        for (i, name) in names.iter().enumerate() {
            c.require(format!("{path}.names[{i}]"), name);
        }
    }
    if let Some(selector) = &rule.label_selector {
        label_selector(c, &format!("{path}.labelSelector"), selector);
    }
    if let Some(selector) = &rule.namespace_selector {
        label_selector(c, &format!("{path}.namespaceSelector"), selector);
    }
}

/// `childResources[].namespaces`: namespace names (DNS-1123 labels), each once, or `"*"` alone.
fn child_namespaces(c: &mut Collector, path: &str, namespaces: &[String]) {
    let mut seen = HashSet::new();
    for (i, ns) in namespaces.iter().enumerate() {
        let at = format!("{path}[{i}]");
        if ns == crate::composite::ANY_NAMESPACE {
            if namespaces.len() > 1 {
                c.push(at, "\"*\" (any namespace) must be the only entry");
            }
        } else if !is_dns1123_label(ns) {
            c.push(
                at,
                format!("{ns:?} is not a namespace name (lower-case letters, digits and '-', at most 63 characters) or \"*\""),
            );
        } else if !seen.insert(ns.as_str()) {
            c.push(at, format!("namespace {ns:?} is listed more than once"));
        }
    }
}

/// A Kubernetes namespace name: an RFC 1123 label.
fn is_dns1123_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

fn update_method(
    c: &mut Collector,
    path: &str,
    method: &ChildUpdateMethod,
    accepted: &[ChildUpdateMethod],
) {
    let effective = method.effective();
    if !accepted.contains(&effective) {
        let list: Vec<&str> = accepted.iter().map(ChildUpdateMethod::as_str).collect();
        c.push(
            path,
            format!(
                "unsupported update method {:?} (accepted: {})",
                method.as_str(),
                list.join(", ")
            ),
        );
    }
}

fn validate_hook_into(c: &mut Collector, path: &str, hook: &Hook) {
    let set: Vec<&str> = [
        ("webhook", hook.webhook.is_some()),
        ("jsonnet", hook.jsonnet.is_some()),
        ("wasm", hook.wasm.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, present)| present.then_some(name))
    .collect();
    if set.len() > 1 {
        c.push(
            path,
            format!(
                "exactly one of webhook, jsonnet or wasm may be set, found {}",
                set.join(" and ")
            ),
        );
    }
    match hook.runtime() {
        Some(HookRuntime::Webhook(webhook)) => {
            validate_webhook(c, &format!("{path}.webhook"), webhook)
        }
        Some(HookRuntime::Jsonnet(jsonnet)) => {
            crate::inprocess::validate_jsonnet(c, &format!("{path}.jsonnet"), jsonnet)
        }
        Some(HookRuntime::Wasm(wasm)) => {
            crate::inprocess::validate_wasm(c, &format!("{path}.wasm"), wasm)
        }
        None => c.push(
            format!("{path}.webhook"),
            "a hook needs a webhook (or jsonnet or wasm)",
        ),
    }
}

/// A Go duration that must be positive (hook timeouts).
pub(crate) fn positive_duration(c: &mut Collector, path: String, text: &str) {
    match parse_go_duration(text) {
        Ok(d) if d.is_zero() => c.push(path, "must be a positive duration"),
        Ok(_) => {}
        Err(e) => c.push(path, e.to_string()),
    }
}

fn validate_webhook(c: &mut Collector, path: &str, webhook: &Webhook) {
    match (&webhook.url, &webhook.service) {
        (Some(url), _) => {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                c.push(
                    format!("{path}.url"),
                    format!("{url:?} is not an http:// or https:// URL"),
                );
            }
        }
        (None, Some(service)) => {
            c.require(format!("{path}.service.name"), &service.name);
            c.require(format!("{path}.service.namespace"), &service.namespace);
            if service.port.is_some_and(|p| !(1..=65535).contains(&p)) {
                c.push(
                    format!("{path}.service.port"),
                    "must be between 1 and 65535",
                );
            }
            if let Some(protocol) = &service.protocol {
                if protocol != "http" && protocol != "https" {
                    c.push(
                        format!("{path}.service.protocol"),
                        format!("{protocol:?} is not http or https"),
                    );
                }
            }
            if webhook.path.is_none() {
                c.push(
                    format!("{path}.path"),
                    "is required when the hook is reached through service (or set url)",
                );
            }
        }
        (None, None) => c.push(path, "either url or service (with path) must be set"),
    }
    if let Some(timeout) = &webhook.timeout {
        positive_duration(c, format!("{path}.timeout"), timeout);
    }
    if let Some(etag) = &webhook.etag {
        for (field, value) in [
            ("cacheTimeoutSeconds", etag.cache_timeout_seconds),
            ("cacheCleanupSeconds", etag.cache_cleanup_seconds),
        ] {
            if value.is_some_and(|v| v < 0) {
                c.push(format!("{path}.etag.{field}"), "must not be negative");
            }
        }
    }
    connection_settings(
        c,
        path,
        webhook.ca_bundle.as_ref(),
        webhook.authorization.as_ref(),
        webhook.basic_auth.as_ref(),
        webhook.client_tls.as_ref(),
    );
}

fn endpoint_configs(c: &mut Collector, path: &str, configs: &[EndpointConfig]) {
    let mut hosts = HashSet::new();
    for (i, config) in configs.iter().enumerate() {
        let path = format!("{path}[{i}]");
        c.require(format!("{path}.host"), &config.host);
        if !config.host.is_empty() && !hosts.insert(config.host.to_ascii_lowercase()) {
            c.push(
                format!("{path}.host"),
                format!("host {:?} is listed more than once", config.host),
            );
        }
        connection_settings(
            c,
            &path,
            config.ca_bundle.as_ref(),
            config.authorization.as_ref(),
            config.basic_auth.as_ref(),
            config.client_tls.as_ref(),
        );
    }
}

fn connection_settings(
    c: &mut Collector,
    path: &str,
    ca_bundle: Option<&CaBundle>,
    authorization: Option<&Authorization>,
    basic_auth: Option<&BasicAuth>,
    client_tls: Option<&ClientTls>,
) {
    if authorization.is_some() && basic_auth.is_some() {
        c.push(
            path,
            "authorization and basicAuth are mutually exclusive: set only one",
        );
    }
    if let Some(auth) = authorization {
        let path = format!("{path}.authorization");
        if auth.effective_type().eq_ignore_ascii_case("basic") {
            c.push(
                format!("{path}.type"),
                "\"Basic\" is not allowed here: use basicAuth",
            );
        }
        c.require(format!("{path}.secretRef.name"), &auth.secret_ref.name);
        if auth.secret_ref.key.as_deref().is_none_or(str::is_empty) {
            c.push(
                format!("{path}.secretRef.key"),
                "is required (the Secret key holding the credential)",
            );
        }
    }
    if let Some(basic) = basic_auth {
        c.require(
            format!("{path}.basicAuth.secretRef.name"),
            &basic.secret_ref.name,
        );
    }
    if let Some(tls) = client_tls {
        c.require(
            format!("{path}.clientTLS.secretRef.name"),
            &tls.secret_ref.name,
        );
    }
    if let Some(ca) = ca_bundle {
        let path = format!("{path}.caBundle");
        let sources = [
            ca.inline.is_some(),
            ca.secret_ref.is_some(),
            ca.config_map_ref.is_some(),
        ]
        .iter()
        .filter(|set| **set)
        .count();
        if sources != 1 {
            c.push(
                &path,
                "exactly one of inline, secretRef or configMapRef must be set",
            );
        }
        if let Some(r) = &ca.secret_ref {
            c.require(format!("{path}.secretRef.name"), &r.name);
        }
        if let Some(r) = &ca.config_map_ref {
            c.require(format!("{path}.configMapRef.name"), &r.name);
        }
    }
}

fn label_selector(c: &mut Collector, path: &str, selector: &LabelSelector) {
    if let Some(exprs) = &selector.match_expressions {
        requirements(c, &format!("{path}.matchExpressions"), exprs);
    }
}

fn annotation_selector(c: &mut Collector, path: &str, selector: &AnnotationSelector) {
    if let Some(exprs) = &selector.match_expressions {
        requirements(c, &format!("{path}.matchExpressions"), exprs);
    }
}

fn requirements(c: &mut Collector, path: &str, exprs: &[LabelSelectorRequirement]) {
    for (i, req) in exprs.iter().enumerate() {
        let path = format!("{path}[{i}]");
        c.require(format!("{path}.key"), &req.key);
        let values = req.values.as_deref().unwrap_or_default();
        match req.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                c.push(
                    format!("{path}.values"),
                    format!("must be non-empty for operator {}", req.operator),
                );
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                c.push(
                    format!("{path}.values"),
                    format!("must be empty for operator {}", req.operator),
                );
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => c.push(
                format!("{path}.operator"),
                format!("unknown operator {other:?} (accepted: In, NotIn, Exists, DoesNotExist)"),
            ),
        }
    }
}
