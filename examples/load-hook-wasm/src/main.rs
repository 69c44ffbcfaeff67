//! The sync hook of `crates/testkit/examples/composite_load.rs` as a WASI preview 1 command,
//! so `composite_load --hook wasm` runs the same hook inside the controller: per parent
//! `LOAD_CHILDREN` ConfigMaps `<parent>-<i>` carrying `spec.value` and their index, and a
//! status `{"children": <observed ConfigMaps>}` (or the desired count). The harness patches
//! the two settings in the module's data (see [`SETTINGS`]) instead of passing them: a module
//! gets no arguments or environment in the controller's sandbox.
//!
//! Build: `cargo build --target wasm32-wasip1 --release -p load-hook-wasm`.

use std::io::{self, Read, Write};
use std::process::ExitCode;

use serde_json::{json, Value};

/// `children=NNN status=X`: the ConfigMaps per parent (3 digits) and where the status count
/// comes from (`o`bserved or `d`esired). The harness rewrites these bytes in the module.
const SETTINGS: &str = "LOAD-HOOK-SETTINGS children=003 status=o";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("load-hook-wasm: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The settings baked into [`SETTINGS`]: children per parent and whether the status counts
/// the observed children. `black_box` keeps the compiler from folding the string away.
fn settings() -> Result<(usize, bool), String> {
    let text = std::hint::black_box(SETTINGS);
    let children = text
        .split("children=")
        .nth(1)
        .and_then(|rest| rest.get(..3))
        .and_then(|digits| digits.parse().ok())
        .ok_or("bad children setting")?;
    let observed = !text.ends_with("status=d");
    Ok((children, observed))
}

/// Reads the request from stdin and writes the response to stdout.
fn run() -> Result<(), String> {
    let mut input = Vec::new();
    io::stdin()
        .read_to_end(&mut input)
        .map_err(|err| format!("can't read the request: {err}"))?;
    let request: Value =
        serde_json::from_slice(&input).map_err(|err| format!("request is not JSON: {err}"))?;
    let (children, observed) = settings()?;
    let response = sync(&request, children, observed);
    let mut stdout = io::stdout().lock();
    serde_json::to_writer(&mut stdout, &response)
        .map_err(|err| format!("can't write the response: {err}"))?;
    stdout
        .flush()
        .map_err(|err| format!("can't write the response: {err}"))
}

/// What composite_load's `sync_reply` answers.
fn sync(request: &Value, children: usize, status_observed: bool) -> Value {
    let parent = &request["parent"];
    let name = parent["metadata"]["name"].as_str().unwrap_or_default();
    let value = &parent["spec"]["value"];
    let desired: Vec<Value> = (0..children)
        .map(|i| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": format!("{name}-{i}")},
                   "data": {"value": value, "index": i.to_string()}})
        })
        .collect();
    let count = if status_observed {
        request["children"]["ConfigMap.v1"]
            .as_object()
            .map_or(0, serde_json::Map::len)
    } else {
        children
    };
    json!({"children": desired, "status": {"children": count}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_settings_are_three_observed() {
        assert_eq!(settings().unwrap(), (3, true));
    }

    #[test]
    fn children_carry_the_value_and_status_counts_observed() {
        let request = json!({
            "parent": {"metadata": {"name": "p"}, "spec": {"value": "v1"}},
            "children": {"ConfigMap.v1": {"p-0": {}, "p-1": {}}},
        });
        let response = sync(&request, 3, true);
        assert_eq!(response["status"]["children"], 2);
        assert_eq!(response["children"][2]["metadata"]["name"], "p-2");
        assert_eq!(response["children"][2]["data"]["value"], "v1");
        assert_eq!(response["children"][2]["data"]["index"], "2");
        assert_eq!(sync(&request, 3, false)["status"]["children"], 3);
    }
}
