//! Where in the entry file an error without a source location happened. jrsonnet reports
//! some runtime errors (indexing null, a missing field) with no location, only the output
//! fields being evaluated ("field <status> evaluation"); the innermost of those fields is
//! found in the entry file by its path, so the message can name `<key>:<line>:<column>`.

/// The output field path of an error's trace, outermost first: the names in frames
/// `field <name> evaluation` / `field <name> manifestification`, given innermost first.
pub(crate) fn field_path<'a>(descriptions: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut path: Vec<String> = descriptions
        .filter_map(|desc| {
            let name = desc.strip_prefix("field <")?;
            let (name, rest) = name.split_once('>')?;
            (rest.contains("evaluation") || rest.contains("manifestification"))
                .then(|| name.to_owned())
        })
        .collect();
    path.dedup();
    path.reverse();
    path
}

/// Line and column (1-based) of the last field of `path` in `source`, each field looked for
/// after the previous one: `name:`, `name::`, `name+:` or the name quoted.
pub(crate) fn find_field(source: &str, path: &[String]) -> Option<(usize, usize)> {
    let mut from = 0;
    for name in path {
        from = from + field_definition(&source[from..], name)?;
    }
    if path.is_empty() {
        return None;
    }
    let before = &source[..from];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    Some((line, column))
}

/// The byte offset of the first definition of field `name` in `text`.
fn field_definition(text: &str, name: &str) -> Option<usize> {
    let forms = [name.to_owned(), format!("'{name}'"), format!("\"{name}\"")];
    let mut best: Option<usize> = None;
    for form in &forms {
        let mut start = 0;
        while let Some(found) = text[start..].find(form.as_str()) {
            let at = start + found;
            let before_ok = text[..at]
                .chars()
                .next_back()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
            let after = text[at + form.len()..].trim_start();
            let after_ok = after.starts_with(':') || after.starts_with("+:");
            if before_ok && after_ok {
                best = Some(best.map_or(at, |b| b.min(at)));
                break;
            }
            start = at + form.len();
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_innermost_field_by_its_path() {
        let source = "function(request) {\n  status: {\n    replicas: request.x.y,\n  },\n}";
        let path =
            field_path(["field <replicas> evaluation", "field <status> evaluation"].into_iter());
        assert_eq!(path, ["status", "replicas"]);
        assert_eq!(find_field(source, &path), Some((3, 5)));
        assert_eq!(find_field(source, &["nothing".into()]), None);
        assert_eq!(find_field("{ 'a-b'+: 1 }", &["a-b".into()]), Some((1, 3)));
    }
}
