//! The hello-world sync hook (the same children and status as `examples/hello-world/sync.py`)
//! as a WASI preview 1 command: the controller writes the request JSON to stdin and reads the
//! response JSON from stdout. A request it cannot answer ends with a message on stderr and exit
//! status 1, which the controller reports as a hook error.
//!
//! Build: `cargo build --target wasm32-wasip1 --release -p hello-world-wasm`.

use std::io::{self, Read, Write};
use std::process::ExitCode;

use serde_json::{json, Value};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("hello-world-wasm: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Reads the request from stdin and writes the response to stdout.
fn run() -> Result<(), String> {
    let mut input = Vec::new();
    io::stdin()
        .read_to_end(&mut input)
        .map_err(|err| format!("can't read the request: {err}"))?;
    let request: Value =
        serde_json::from_slice(&input).map_err(|err| format!("request is not JSON: {err}"))?;
    let response = sync(&request)?;
    let mut stdout = io::stdout().lock();
    serde_json::to_writer(&mut stdout, &response)
        .map_err(|err| format!("can't write the response: {err}"))?;
    stdout
        .flush()
        .map_err(|err| format!("can't write the response: {err}"))
}

/// The sync hook: one ConfigMap named after the parent with its greeting, and the number of
/// ConfigMaps the parent owns as its status.
fn sync(request: &Value) -> Result<Value, String> {
    let parent = request.get("parent").ok_or("the request has no parent")?;
    let name = parent
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .ok_or("the parent has no metadata.name")?;
    // sync.py formats whatever `who` holds; a string goes in without its JSON quotes.
    let who = match parent.pointer("/spec/who") {
        None => "World".to_string(),
        Some(Value::String(who)) => who.clone(),
        Some(other) => other.to_string(),
    };
    let observed = request
        .get("children")
        .and_then(|children| children.get("ConfigMap.v1"))
        .and_then(Value::as_object)
        .map_or(0, serde_json::Map::len);
    Ok(json!({
        "status": {"greetings": observed},
        "children": [{
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name},
            "data": {"greeting": format!("Hello, {who}!")},
        }],
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greets_who_and_counts_owned_config_maps() {
        let request = json!({
            "parent": {"metadata": {"name": "hello"}, "spec": {"who": "Kubernetes"}},
            "children": {"ConfigMap.v1": {"hello": {}}},
        });
        let response = sync(&request).unwrap();
        assert_eq!(response["status"]["greetings"], 1);
        assert_eq!(response["children"][0]["metadata"]["name"], "hello");
        assert_eq!(
            response["children"][0]["data"]["greeting"],
            "Hello, Kubernetes!"
        );
    }

    #[test]
    fn defaults_to_world_without_children() {
        let request = json!({"parent": {"metadata": {"name": "hi"}}, "children": {}});
        let response = sync(&request).unwrap();
        assert_eq!(response["status"]["greetings"], 0);
        assert_eq!(response["children"][0]["data"]["greeting"], "Hello, World!");
    }

    #[test]
    fn a_parent_without_name_is_an_error() {
        let request = json!({"parent": {"metadata": {}}, "children": {}});
        assert_eq!(
            sync(&request).unwrap_err(),
            "the parent has no metadata.name"
        );
    }
}
