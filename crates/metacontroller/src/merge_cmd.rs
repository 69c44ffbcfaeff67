//! `metacontroller merge`: shows hook authors what the apply engine makes of a desired
//! object on top of an observed one, and whether that would cause a write.

use std::path::Path;

use anyhow::Context;
use serde_json::Value;

use crate::cli::MergeArgs;

/// Reads the files, merges, prints the merged object (stdout) and `update: yes|no` (stderr).
pub fn run(args: &MergeArgs) -> anyhow::Result<()> {
    let observed = read_object(&args.observed)?;
    let desired = read_object(&args.desired)?;
    let last_applied = args.last_applied.as_deref().map(read_object).transpose()?;
    let schema = args.schema.as_deref().map(read_object).transpose()?;
    let outcome = metacontroller_apply::merge_for_cli(
        &observed,
        &desired,
        last_applied.as_ref(),
        schema.as_ref(),
    )
    .context("cannot merge")?;
    let text = serde_json::to_string_pretty(&outcome.merged).context("encoding the result")?;
    println!("{text}");
    eprintln!("update: {}", if outcome.update { "yes" } else { "no" });
    Ok(())
}

/// Parses a JSON or YAML document (YAML is a superset of JSON).
fn read_object(path: &Path) -> anyhow::Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_yaml::from_str(&text)
        .with_context(|| format!("{} is not valid JSON or YAML", path.display()))
}
