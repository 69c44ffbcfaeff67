//! The documentation keeps working: every YAML and JSON example in `docs/` and `README.md`
//! parses, every CompositeController/DecoratorController example decodes into our API types
//! and passes their validation, every relative link (and `#anchor`) resolves, and every
//! chapter of the book is listed in `docs/src/SUMMARY.md`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use metacontroller_api::validation::{
    validate_composite_controller, validate_decorator_controller,
};
use metacontroller_api::{CompositeController, DecoratorController};
use serde::Deserialize;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// README.md and every Markdown file of the book.
fn documents() -> Vec<PathBuf> {
    let mut out = vec![repo().join("README.md")];
    let mut book = Vec::new();
    let mut dirs = vec![repo().join("docs/src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("a docs directory").flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|x| x == "md") {
                book.push(path);
            }
        }
    }
    book.sort();
    out.extend(book);
    out
}

/// Fenced code blocks of `lang` in a Markdown text: (first line number, body).
fn code_blocks(text: &str, lang: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    let mut fence_lang = String::new();
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix("```") {
            match current.take() {
                Some(block) => {
                    if fence_lang == lang {
                        out.push(block);
                    }
                }
                None => {
                    fence_lang = rest.trim().to_string();
                    current = Some((n + 2, String::new()));
                }
            }
            continue;
        }
        if let Some((_, body)) = current.as_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    out
}

/// GitHub's (and mdBook's) anchor of a heading: lower case, punctuation dropped, spaces → `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    let mut in_code = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        }
        if !in_code && line.starts_with('#') {
            out.insert(slug(line.trim_start_matches('#')));
        }
    }
    out
}

/// Relative link targets of a Markdown text, outside code blocks and code spans.
fn links(text: &str) -> Vec<String> {
    let mut in_code = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        // Drop code spans: a `[x](y)` inside backticks is not a link.
        let mut plain = String::new();
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 0 {
                plain.push_str(part);
            }
        }
        let mut rest = plain.as_str();
        while let Some(start) = rest.find("](") {
            let after = &rest[start + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].trim();
            if !target.contains("://") && !target.starts_with("mailto:") {
                out.push(target.to_string());
            }
            rest = &after[end..];
        }
    }
    out
}

/// Problems with the links of `doc` (its text given), each naming the link.
fn broken_links(doc: &Path, text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for link in links(text) {
        let (path, anchor) = match link.split_once('#') {
            Some((p, a)) => (p, Some(a)),
            None => (link.as_str(), None),
        };
        let target = if path.is_empty() {
            doc.to_path_buf()
        } else {
            doc.parent().unwrap_or(Path::new(".")).join(path)
        };
        if !target.exists() {
            problems.push(format!("{}: link to {link}: no such file", doc.display()));
            continue;
        }
        if let Some(anchor) = anchor {
            let target_text = std::fs::read_to_string(&target).unwrap_or_default();
            if !anchors(&target_text).contains(anchor) {
                problems.push(format!(
                    "{}: link to {link}: no such heading",
                    doc.display()
                ));
            }
        }
    }
    problems
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut problems = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).expect("readable doc");
        problems.extend(broken_links(&doc, &text));
    }
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_link_check_finds_a_broken_link_and_a_missing_anchor() {
    let doc = repo().join("docs/src/introduction.md");
    let text = "[ok](concepts.md) [gone](no-such-page.md) [bad anchor](concepts.md#nowhere) \
                [fine anchor](concepts.md#the-sync-loop) `[code](span.md)` [web](https://example.com)";
    let problems = broken_links(&doc, text);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].contains("no-such-page.md"));
    assert!(problems[1].contains("#nowhere"));
}

#[test]
fn every_chapter_is_in_the_summary() {
    let summary = std::fs::read_to_string(repo().join("docs/src/SUMMARY.md")).expect("SUMMARY");
    let listed: BTreeSet<String> = links(&summary).into_iter().collect();
    let src = repo().join("docs/src");
    for doc in documents().into_iter().skip(1) {
        let name = doc
            .strip_prefix(&src)
            .expect("a book page")
            .to_string_lossy()
            .to_string();
        if name != "SUMMARY.md" {
            assert!(listed.contains(&name), "{name} is not in SUMMARY.md");
        }
    }
}

#[test]
fn every_yaml_and_json_example_parses_and_controllers_validate() {
    let mut controllers = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).expect("readable doc");
        for (line, body) in code_blocks(&text, "yaml") {
            let at = format!("{}:{line}", doc.display());
            for document in serde_yaml::Deserializer::from_str(&body) {
                let value = serde_yaml::Value::deserialize(document)
                    .unwrap_or_else(|e| panic!("{at}: YAML does not parse: {e}"));
                let json = serde_json::to_value(&value).expect("YAML as JSON");
                match json.get("kind").and_then(|k| k.as_str()) {
                    Some("CompositeController") => {
                        let cc: CompositeController = serde_json::from_value(json)
                            .unwrap_or_else(|e| panic!("{at}: not a CompositeController: {e}"));
                        validate_composite_controller(&cc)
                            .unwrap_or_else(|e| panic!("{at}: invalid: {e}"));
                        controllers += 1;
                    }
                    Some("DecoratorController") => {
                        let dc: DecoratorController = serde_json::from_value(json)
                            .unwrap_or_else(|e| panic!("{at}: not a DecoratorController: {e}"));
                        validate_decorator_controller(&dc)
                            .unwrap_or_else(|e| panic!("{at}: invalid: {e}"));
                        controllers += 1;
                    }
                    _ => {}
                }
            }
        }
        for (line, body) in code_blocks(&text, "json") {
            serde_json::from_str::<serde_json::Value>(&body)
                .unwrap_or_else(|e| panic!("{}:{line}: JSON does not parse: {e}", doc.display()));
        }
    }
    assert!(
        controllers >= 2,
        "the references show a controller of each kind"
    );
}
