//! `metacontroller validate -f FILE...`: offline checks of CompositeController and
//! DecoratorController manifests, for CI and pre-commit hooks.
//!
//! Each document is decoded into the controller's own types (what the CRD schema allows,
//! with the field path of a wrong value) and then checked with the same rules the
//! controller applies before it starts a controller (`metacontroller_api::validation`).
//! With `--kubeconfig PATH` (or `--live`) the resources they name are also looked up in
//! the cluster's API discovery ([`crate::validate_served`]).

use std::path::Path;

use anyhow::Context;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use metacontroller_api::validation::{
    validate_composite_controller, validate_decorator_controller, ValidationError,
};
use metacontroller_api::{CompositeController, DecoratorController};

use crate::cli::ValidateArgs;

const GROUP_VERSION: &str = "metacontroller.k8s.io/v1alpha1";

/// Checks every document of every file; prints one line per problem and fails if any.
pub async fn run(args: &ValidateArgs) -> anyhow::Result<()> {
    let mut documents = Vec::new();
    for file in &args.files {
        documents.push((file, read_documents(file)?));
    }
    let served = if args.online() {
        let config = crate::client::config(args.kubeconfig.as_deref()).await?;
        let client = kube::Client::try_from(config).context("building the Kubernetes client")?;
        let (map, warnings) = crate::validate_served::discover(&client).await?;
        for warning in warnings {
            println!("warning: {warning}");
        }
        Some((map, client))
    } else {
        None
    };
    let mut errors = 0usize;
    let mut checked = 0usize;
    for (file, docs) in documents {
        for (index, doc) in docs.into_iter().enumerate() {
            let cluster = match &served {
                Some((map, client)) => {
                    let (mut errors, warnings) = crate::validate_served::check(&doc, map);
                    errors.extend(crate::validate_code::check(client, &doc).await);
                    Some((errors, warnings))
                }
                None => None,
            };
            let scope = crate::validate_scope::warnings(&doc, &args.watch_namespaces);
            let Some(mut report) = check_document(doc) else {
                continue;
            };
            report.warnings.extend(scope);
            if let Some((cluster_errors, cluster_warnings)) = cluster {
                report.errors.extend(cluster_errors);
                report.warnings.extend(cluster_warnings);
            }
            checked += 1;
            let label = format!(
                "{} (document {}) {}",
                file.display(),
                index + 1,
                report.name
            );
            for warning in &report.warnings {
                println!("{label}: warning: {warning}");
            }
            if report.errors.is_empty() {
                println!("{label}: ok");
            }
            for error in &report.errors {
                println!("{label}: error: {error}");
            }
            errors += report.errors.len();
        }
    }
    if checked == 0 {
        anyhow::bail!("no CompositeController or DecoratorController found in the given files");
    }
    if errors > 0 {
        anyhow::bail!("{errors} error(s) in {checked} controller(s)");
    }
    Ok(())
}

/// The outcome for one controller document.
struct Report {
    name: String,
    errors: Vec<ValidationError>,
    warnings: Vec<String>,
}

/// `None` for documents that are not Metacontroller controllers (CRDs, Deployments, ...):
/// a manifest file usually carries them side by side.
/// `spec.hookRollout` rolls out in-process hook code only; on a controller whose hooks are
/// all webhooks it does nothing, and users must not believe otherwise.
const HOOK_ROLLOUT_WITHOUT_CODE: &str = "spec.hookRollout: applies to in-process (jsonnet:, wasm:) hook code only, and this controller has none: a change of its webhooks still reaches every parent at once";

/// Whether a controller document has a hook whose code is in-process (`jsonnet:`, `wasm:`).
fn has_in_process_hook(doc: &Value) -> bool {
    doc.pointer("/spec/hooks")
        .and_then(Value::as_object)
        .is_some_and(|hooks| {
            hooks
                .values()
                .any(|h| h.get("jsonnet").is_some() || h.get("wasm").is_some())
        })
}

fn check_document(doc: Value) -> Option<Report> {
    let api_version = doc.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = doc
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let name = doc
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let label = format!("{kind}/{name}");
    let mut report = Report {
        name: label,
        errors: Vec::new(),
        warnings: Vec::new(),
    };
    if !api_version.starts_with("metacontroller.k8s.io/") {
        return None;
    }
    if api_version != GROUP_VERSION {
        report.errors.push(error(
            "apiVersion",
            format!("must be {GROUP_VERSION}, got {api_version}"),
        ));
        return Some(report);
    }
    if name.is_empty() {
        report
            .errors
            .push(error("metadata.name", "must not be empty".to_string()));
    }
    if doc.pointer("/spec/hookRollout").is_some() && !has_in_process_hook(&doc) {
        report.warnings.push(HOOK_ROLLOUT_WITHOUT_CODE.to_string());
    }
    let outcome = match kind.as_str() {
        "CompositeController" => decode::<CompositeController>(doc, &mut report.warnings)
            .and_then(|cc| validate_composite_controller(&cc).map_err(|e| e.0)),
        "DecoratorController" => decode::<DecoratorController>(doc, &mut report.warnings)
            .and_then(|dc| validate_decorator_controller(&dc).map_err(|e| e.0)),
        // ControllerRevisions and other kinds of the group are not checked here.
        _ => return None,
    };
    if let Err(errors) = outcome {
        report.errors.extend(errors);
    }
    Some(report)
}

/// Decodes with the field path of a wrong value; unknown fields become warnings (the API
/// server prunes them, so they are usually typos that silently do nothing).
fn decode<T: DeserializeOwned>(
    doc: Value,
    warnings: &mut Vec<String>,
) -> Result<T, Vec<ValidationError>> {
    let mut unknown = Vec::new();
    let mut record = |path: serde_ignored::Path<'_>| unknown.push(clean_path(&path.to_string()));
    let ignored = serde_ignored::Deserializer::new(doc, &mut record);
    let decoded: Result<T, _> = serde_path_to_error::deserialize(ignored);
    for path in unknown {
        // `status` is written by the API server, not part of what users declare.
        if path != "status" && !path.starts_with("status.") {
            warnings.push(format!("{path}: unknown field (the API server drops it)"));
        }
    }
    decoded.map_err(|err| {
        let path = err.path().to_string();
        vec![error(&path, err.into_inner().to_string())]
    })
}

fn error(path: &str, message: String) -> ValidationError {
    ValidationError {
        path: path.to_string(),
        message,
    }
}

/// serde_ignored marks `Option` layers with `?`; they are not part of the field path.
fn clean_path(path: &str) -> String {
    path.split('.')
        .filter(|segment| *segment != "?")
        .collect::<Vec<_>>()
        .join(".")
}

/// All YAML (or JSON) documents of a file (`-`: standard input), empty documents skipped.
pub(crate) fn read_documents(path: &Path) -> anyhow::Result<Vec<Value>> {
    let text = if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).context("cannot read standard input")?
    } else {
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?
    };
    let mut docs = Vec::new();
    for (index, document) in serde_yaml::Deserializer::from_str(&text).enumerate() {
        let value = Value::deserialize(document).with_context(|| {
            format!(
                "{} document {} is not valid YAML",
                path.display(),
                index + 1
            )
        })?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
}
