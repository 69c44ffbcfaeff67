//! Reading render's input files: the controller, objects, CRDs and replayed requests.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use metacontroller_api::{CompositeController, DecoratorController};
use serde_json::Value;

/// The controller a render runs.
pub enum Controller {
    /// A CompositeController.
    Composite(Box<CompositeController>),
    /// A DecoratorController.
    Decorator(Box<DecoratorController>),
}

impl Controller {
    /// `CompositeController` or `DecoratorController`.
    pub fn kind(&self) -> &'static str {
        match self {
            Controller::Composite(_) => "CompositeController",
            Controller::Decorator(_) => "DecoratorController",
        }
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        match self {
            Controller::Composite(c) => c.metadata.name.as_deref(),
            Controller::Decorator(c) => c.metadata.name.as_deref(),
        }
        .unwrap_or_default()
    }
}

/// Every object in `path`: YAML or JSON documents, `kind: *List` unwrapped.
pub fn objects(path: &Path) -> anyhow::Result<Vec<Value>> {
    let mut out = Vec::new();
    for doc in crate::validate_cmd::read_documents(path)? {
        let is_list = doc
            .get("kind")
            .and_then(Value::as_str)
            .is_some_and(|k| k.ends_with("List"))
            && doc.get("items").is_some_and(Value::is_array);
        if is_list {
            if let Some(items) = doc.get("items").and_then(Value::as_array) {
                out.extend(items.iter().cloned());
            }
        } else {
            out.push(doc);
        }
    }
    Ok(out)
}

/// Every object of every file in `paths`.
pub fn all_objects(paths: &[PathBuf]) -> anyhow::Result<Vec<Value>> {
    let mut out = Vec::new();
    for path in paths {
        out.extend(objects(path)?);
    }
    Ok(out)
}

/// The one object of `path` (the parent).
pub fn single_object(path: &Path) -> anyhow::Result<Value> {
    let mut objects = objects(path)?;
    match objects.len() {
        1 => Ok(objects.remove(0)),
        n => bail!("{} holds {n} objects; expected exactly one", path.display()),
    }
}

/// The controller of `path` (the first CompositeController or DecoratorController in it),
/// checked with the rules the controller applies before it starts one.
pub fn controller(path: &Path) -> anyhow::Result<Controller> {
    for doc in objects(path)? {
        let kind = doc
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let what = || format!("{} in {}", kind, path.display());
        match kind.as_str() {
            "CompositeController" => {
                let cc: CompositeController = serde_path_to_error::deserialize(doc)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", what()))?;
                cc.validate()
                    .map_err(|e| anyhow::anyhow!("{}: {e}", what()))?;
                return Ok(Controller::Composite(Box::new(cc)));
            }
            "DecoratorController" => {
                let dc: DecoratorController = serde_path_to_error::deserialize(doc)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", what()))?;
                dc.validate()
                    .map_err(|e| anyhow::anyhow!("{}: {e}", what()))?;
                return Ok(Controller::Decorator(Box::new(dc)));
            }
            _ => {}
        }
    }
    bail!(
        "{}: no CompositeController or DecoratorController found",
        path.display()
    )
}

/// The CustomResourceDefinitions among the objects of `paths`.
pub fn crds(paths: &[PathBuf]) -> anyhow::Result<Vec<Value>> {
    Ok(all_objects(paths)?
        .into_iter()
        .filter(|o| o.get("kind").and_then(Value::as_str) == Some("CustomResourceDefinition"))
        .collect())
}

/// A request to replay.
pub struct Replay {
    /// The hook (`sync`, `finalize`, `customize`) a recording names.
    pub hook: Option<String>,
    /// The controller kind a recording names.
    pub controller_kind: Option<String>,
    /// The request body, exactly as it was sent.
    pub body: Value,
}

/// Reads `path`: either a bare hook request body, or a `--record-hooks` file
/// (`{"controller": {"kind", "name"}, "hook", "request": {...}, "response": ..., ...}`).
pub fn replay(path: &Path) -> anyhow::Result<Replay> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let value: Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a JSON document", path.display()))?;
    let recorded = value.get("request").is_some_and(Value::is_object)
        && value.get("controller").is_some_and(Value::is_object);
    if !recorded {
        return Ok(Replay {
            hook: None,
            controller_kind: None,
            body: value,
        });
    }
    let text_at = |p: &str| value.pointer(p).and_then(Value::as_str).map(str::to_owned);
    Ok(Replay {
        hook: text_at("/hook"),
        controller_kind: text_at("/controller/kind"),
        body: value.get("request").cloned().unwrap_or_default(),
    })
}
