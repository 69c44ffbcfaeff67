//! The exit status a simulated container ends with. Nothing runs, so this reads the command:
//! `false`, or the first `exit N` / `false` of an `sh -c` script, fails; anything else
//! succeeds. The same rule as the fake kubelet used with a real control plane in tests, so a
//! pod ends the same way in dev mode and there.

use serde_json::Value;

/// The exit status of `container` (a pod spec's container object).
pub(super) fn of_container(container: &Value) -> i64 {
    let words: Vec<&str> = ["command", "args"]
        .iter()
        .filter_map(|field| container.get(field).and_then(Value::as_array))
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let Some(first) = words.first() else {
        return 0;
    };
    if program(first) == "false" {
        return 1;
    }
    let is_shell = matches!(program(first), "sh" | "bash" | "ash");
    match (is_shell, words.get(1), words.get(2)) {
        (true, Some(&"-c"), Some(script)) => of_script(script),
        _ => 0,
    }
}

/// The first non-zero exit status among the pod's containers, or 0.
pub(super) fn of_pod(pod: &Value) -> i64 {
    pod.pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(of_container)
        .find(|code| *code != 0)
        .unwrap_or(0)
}

fn program(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Steps of a simple script (separated by `;`, `&&` or newlines) up to the first that ends it.
fn of_script(script: &str) -> i64 {
    for step in script.split(['\n', ';']).flat_map(|s| s.split("&&")) {
        let mut words = step.split_whitespace().map(|w| w.trim_matches(['"', '\'']));
        match words.next() {
            Some("exit") => {
                return words
                    .next()
                    .map_or(0, |n| n.parse::<i64>().map_or(1, |n| n & 0xff))
            }
            Some("false") => return 1,
            _ => {}
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn code(command: Value) -> i64 {
        of_container(&json!({"name": "c", "image": "busybox", "command": command}))
    }

    #[test]
    fn plain_commands_succeed_and_false_fails() {
        assert_eq!(code(json!(["echo", "hi"])), 0);
        assert_eq!(code(json!(["/bin/false"])), 1);
        assert_eq!(of_container(&json!({"name": "c", "image": "i"})), 0);
        assert_eq!(
            of_container(&json!({"name": "c", "image": "i", "args": ["false"]})),
            1
        );
    }

    #[test]
    fn a_script_ends_with_its_first_exit() {
        assert_eq!(code(json!(["sh", "-c", "echo start; exit 3"])), 3);
        assert_eq!(code(json!(["sh", "-c", "sleep 1 && false && exit 0"])), 1);
        assert_eq!(
            code(json!(["/bin/bash", "-c", "echo a\nexit 0\nexit 2"])),
            0
        );
        assert_eq!(code(json!(["sh", "-c", "exit nonsense"])), 1);
        assert_eq!(code(json!(["sh", "-c", "echo no exit"])), 0);
        assert_eq!(code(json!(["sh", "script.sh"])), 0);
    }

    #[test]
    fn a_pod_fails_with_its_first_failing_container() {
        let pod = json!({"spec": {"containers": [
            {"name": "a", "image": "i", "command": ["true"]},
            {"name": "b", "image": "i", "command": ["sh", "-c", "exit 7"]},
        ]}});
        assert_eq!(of_pod(&pod), 7);
    }
}
