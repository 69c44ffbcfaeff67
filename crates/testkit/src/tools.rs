//! Tests that need a program besides cargo (kubectl, python3, node, jq, the Helm SDK): outside
//! CI a missing one skips the test with a line saying so; with `CI=true` it fails the test,
//! since CI installs every tool a test needs and a skip there would pass without testing.

/// Reports that `tool` is missing (`detail` says how it was noticed). With `CI=true` this
/// panics; otherwise it prints a `SKIPPED` line and the caller returns.
pub fn missing_tool(tool: &str, detail: &str) {
    if let Some(message) = missing_tool_message(tool, detail, in_ci()) {
        panic!("{message}");
    }
    eprintln!("SKIPPED: {tool} is not available ({detail})");
}

/// Whether the test runs in CI (`CI=true`, as GitHub Actions and `.ci/run` set it).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// The failure for a missing tool in CI; `None` outside CI.
fn missing_tool_message(tool: &str, detail: &str, ci: bool) -> Option<String> {
    ci.then(|| {
        format!("{tool} is not available ({detail}), and CI=true: CI must install every tool a test needs (see .ci/run)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_tool_fails_in_ci_and_skips_elsewhere() {
        let message = missing_tool_message("jq", "not on PATH", true).unwrap();
        assert!(message.contains("jq is not available (not on PATH)"));
        assert!(message.contains("CI=true"));
        assert_eq!(missing_tool_message("jq", "not on PATH", false), None);
    }
}
