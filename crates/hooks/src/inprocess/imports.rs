//! Which ConfigMap keys a Jsonnet hook reads: its entry and, transitively, every file it
//! imports. Jsonnet imports take string literals only (no computed paths), so a scan of the
//! source finds them all. The scan skips comments and strings; where it can't tell (an
//! import followed by something other than a plain or verbatim string), it answers "every
//! key", which is never wrong, only less precise.

use std::collections::BTreeSet;

use metacontroller_api::hook::{Hook, HookRuntime};

use crate::sources::{CodeChange, CodeObject, CodeSource};

/// Whether `change` touches the code of `hook`: its ConfigMap, and of it a key the hook
/// uses (WebAssembly: its key; Jsonnet: its entry and the files it imports, transitively,
/// as the ConfigMap is now). When that can't be told, it does.
pub(crate) async fn change_affects(
    source: Option<&dyn CodeSource>,
    hook: &Hook,
    change: &CodeChange,
) -> bool {
    match hook.runtime() {
        Some(HookRuntime::Wasm(wasm)) => match &wasm.config_map_ref {
            Some(r) if change.is_of(&r.namespace, &r.name) => {
                change.touches(wasm.key.as_deref().unwrap_or_default())
            }
            _ => false,
        },
        Some(HookRuntime::Jsonnet(jsonnet)) => {
            let r = &jsonnet.config_map_ref;
            if !change.is_of(&r.namespace, &r.name) {
                return false;
            }
            let (Some(changed), Some(source)) = (&change.keys, source) else {
                return true;
            };
            let Ok(Some(object)) = source.get(&r.namespace, &r.name).await else {
                return true;
            };
            jsonnet_keys(&object, &jsonnet.key)
                .is_none_or(|used| used.iter().any(|key| changed.contains(key)))
        }
        _ => false,
    }
}

/// The keys of `object` the Jsonnet program starting at `entry` reads, the entry included;
/// `None` when that can't be told (then every key counts).
pub(crate) fn jsonnet_keys(object: &CodeObject, entry: &str) -> Option<BTreeSet<String>> {
    let mut keys = BTreeSet::new();
    let mut pending = vec![entry.to_owned()];
    while let Some(key) = pending.pop() {
        if !keys.insert(key.clone()) {
            continue;
        }
        // A missing key is still "used": its appearing is a change that matters.
        let Some(text) = object.data.get(&key) else {
            continue;
        };
        for import in imports(text)? {
            let (kind, path) = import;
            let path = path.strip_prefix("./").unwrap_or(&path).to_owned();
            if kind == Kind::Code {
                pending.push(path);
            } else {
                keys.insert(path);
            }
        }
    }
    Some(keys)
}

/// What an import reads: code (`import`, scanned further) or data (`importstr`,
/// `importbin`).
#[derive(Debug, PartialEq, Eq)]
enum Kind {
    Code,
    Data,
}

/// The imports of `source`; `None` when one of them can't be read.
fn imports(source: &str) -> Option<Vec<(Kind, String)>> {
    let bytes = source.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'#' => i = line_end(bytes, i),
            b'/' if bytes.get(i + 1) == Some(&b'/') => i = line_end(bytes, i),
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i = find(bytes, i + 2, b"*/").map_or(bytes.len(), |end| end + 2)
            }
            b'"' | b'\'' => i = string_end(bytes, i)?,
            b'@' if matches!(bytes.get(i + 1), Some(b'"' | b'\'')) => i = verbatim(bytes, i + 1)?.1,
            b'|' if bytes[i..].starts_with(b"|||") => {
                i = text_block_end(bytes, i + 3)?;
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                let kind = match &source[start..i] {
                    "import" => Kind::Code,
                    "importstr" | "importbin" => Kind::Data,
                    _ => continue,
                };
                let (path, next) = literal(bytes, skip_blank(bytes, i)?)?;
                found.push((kind, path));
                i = next;
            }
            _ => i += 1,
        }
    }
    Some(found)
}

/// The string literal at `i` (plain or verbatim) and the index after it; `None` for
/// anything else (a text block, an escape we don't decode).
fn literal(bytes: &[u8], i: usize) -> Option<(String, usize)> {
    match bytes.get(i)? {
        b'"' | b'\'' => {
            let end = string_end(bytes, i)?;
            let inner = &bytes[i + 1..end - 1];
            if inner.contains(&b'\\') {
                return None;
            }
            Some((String::from_utf8(inner.to_vec()).ok()?, end))
        }
        b'@' => verbatim(bytes, i + 1),
        _ => None,
    }
}

/// Index after the plain string starting with the quote at `i`.
fn string_end(bytes: &[u8], i: usize) -> Option<usize> {
    let quote = bytes[i];
    let mut j = i + 1;
    while j < bytes.len() {
        match bytes[j] {
            b'\\' => j += 2,
            c if c == quote => return Some(j + 1),
            _ => j += 1,
        }
    }
    None
}

/// The verbatim string whose quote is at `i` (a doubled quote stands for one) and the
/// index after it.
fn verbatim(bytes: &[u8], i: usize) -> Option<(String, usize)> {
    let quote = bytes[i];
    let mut text = Vec::new();
    let mut j = i + 1;
    while j < bytes.len() {
        if bytes[j] == quote {
            if bytes.get(j + 1) == Some(&quote) {
                text.push(quote);
                j += 2;
                continue;
            }
            return Some((String::from_utf8(text).ok()?, j + 1));
        }
        text.push(bytes[j]);
        j += 1;
    }
    None
}

/// Index after the `|||` closing the text block whose opening ends at `i`: the first line
/// whose content, after its indentation, starts with `|||`.
fn text_block_end(bytes: &[u8], i: usize) -> Option<usize> {
    let mut j = i;
    loop {
        j = find(bytes, j, b"\n")? + 1;
        let content = j + bytes[j..]
            .iter()
            .take_while(|b| **b == b' ' || **b == b'\t')
            .count();
        if bytes[content..].starts_with(b"|||") {
            return Some(content + 3);
        }
    }
}

/// Index of the first non-blank, non-comment byte from `i`.
fn skip_blank(bytes: &[u8], mut i: usize) -> Option<usize> {
    loop {
        match bytes.get(i)? {
            b' ' | b'\t' | b'\n' | b'\r' => i += 1,
            b'#' => i = line_end(bytes, i),
            b'/' if bytes.get(i + 1) == Some(&b'/') => i = line_end(bytes, i),
            b'/' if bytes.get(i + 1) == Some(&b'*') => i = find(bytes, i + 2, b"*/")? + 2,
            _ => return Some(i),
        }
    }
}

fn line_end(bytes: &[u8], i: usize) -> usize {
    find(bytes, i, b"\n").unwrap_or(bytes.len())
}

fn find(bytes: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    bytes
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(files: &[(&str, &str)], entry: &str) -> Option<Vec<String>> {
        jsonnet_keys(&CodeObject::from_text(files), entry).map(|k| k.into_iter().collect())
    }

    #[test]
    fn imports_are_followed_transitively_and_comments_and_strings_skipped() {
        let files = [
            ("main.jsonnet", "// import 'commented.libsonnet'\n# import 'hashed'\n/* import 'block' */\nlocal s = \"import 'in-a-string'\";\nlocal lib = import './lib.libsonnet';\nlocal t = importstr @'tmpl.txt';\nfunction(request) lib + t"),
            ("lib.libsonnet", "{ x: importbin \"data.bin\", y: import 'deep.libsonnet' }"),
            ("deep.libsonnet", "|||\n  import 'not-really'\n|||"),
            ("unrelated.libsonnet", "{}"),
        ];
        assert_eq!(
            keys(&files, "main.jsonnet").unwrap(),
            [
                "data.bin",
                "deep.libsonnet",
                "lib.libsonnet",
                "main.jsonnet",
                "tmpl.txt"
            ]
        );
    }

    #[test]
    fn an_import_that_cant_be_read_means_every_key() {
        let files = [("main.jsonnet", "import |||\n  x\n|||")];
        assert_eq!(keys(&files, "main.jsonnet"), None);
        let files = [("main.jsonnet", "import 'a\\u0062'")];
        assert_eq!(keys(&files, "main.jsonnet"), None);
    }

    #[test]
    fn cycles_and_missing_keys_end() {
        let files = [("a", "import 'b'"), ("b", "import 'a' + import 'gone'")];
        assert_eq!(keys(&files, "a").unwrap(), ["a", "b", "gone"]);
    }

    #[test]
    fn identifiers_containing_import_are_not_imports() {
        let files = [("main", "local importer = 1; local my_import = 2; importer")];
        assert_eq!(keys(&files, "main").unwrap(), ["main"]);
    }
}
