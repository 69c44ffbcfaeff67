//! OpenAPI value validation reported like kube-openapi errors converted by
//! apiextensions-apiserver (`kubeOpenAPIResultToFieldErrors`): the detail
//! text is kube-openapi's (`<path> in body must be of type integer: "string"`),
//! the error type and value follow apimachinery's `field` package.

use super::errors::{go_float, go_quote, FieldError};
use super::{join_key, AdditionalProperties, Node};
use metacontroller_apply::json_equal;
use serde_json::{Number, Value};

pub(crate) fn validate(x: &Value, s: &Node) -> Vec<FieldError> {
    let mut errs = Vec::new();
    check(x, s, "", true, &mut errs);
    errs
}

/// JSON type of a decoded value as kube-openapi infers it (integral numbers
/// decode to int64 in Kubernetes, so they are `integer`).
fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::String(_) => "string",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Format kube-openapi infers for a non-string value (used in its quirky
/// "format" flavour of the type error).
fn inferred_format(v: &Value) -> &'static str {
    match v {
        Value::Number(n) if n.is_i64() || n.is_u64() => "int64",
        Value::Number(_) => "float64",
        _ => "",
    }
}

fn allowed_types(s: &Node) -> Vec<&str> {
    if s.int_or_string {
        return vec!["integer", "string"];
    }
    match &s.type_ {
        Some(t) if !t.is_empty() => vec![t.as_str()],
        _ => vec![],
    }
}

fn is_integral(n: &Number) -> bool {
    n.is_i64()
        || n.is_u64()
        || n.as_f64()
            .is_some_and(|f| f.fract() == 0.0 && f.is_finite())
}

/// Kube-openapi names paths without a leading dot; the root is "".
fn name(path: &str) -> &str {
    path
}

fn type_check(x: &Value, s: &Node, path: &str, errs: &mut Vec<FieldError>) -> bool {
    let types = allowed_types(s);
    if x.is_null() {
        if !types.is_empty() && !types.contains(&"null") && !s.nullable {
            errs.push(FieldError::type_invalid(
                path,
                Value::String("null".into()),
                format!(
                    "{} in body must be of type {}: \"null\"",
                    name(path),
                    types.join(",")
                ),
            ));
            return false;
        }
        return true;
    }
    if types.is_empty() {
        return true;
    }
    let sch = json_type(x);
    let float_int = sch == "number"
        && matches!(x, Value::Number(n) if is_integral(n))
        && types.contains(&"integer");
    let int_float = sch == "integer" && types.contains(&"number");
    let matches = types.contains(&sch) || float_int || int_float;
    if matches {
        return true;
    }
    let fmt = s.format.as_deref().unwrap_or("");
    if !matches!(x, Value::String(_) | Value::Array(_))
        && !fmt.is_empty()
        && fmt != inferred_format(x)
    {
        let got = inferred_format(x);
        errs.push(FieldError::type_invalid(
            path,
            Value::String(got.into()),
            format!(
                "{} in body must be of type {}: {}",
                name(path),
                fmt,
                go_quote(got)
            ),
        ));
        return false;
    }
    errs.push(FieldError::type_invalid(
        path,
        Value::String(sch.into()),
        format!(
            "{} in body must be of type {}: \"{}\"",
            name(path),
            types.join(","),
            sch
        ),
    ));
    false
}

fn enum_check(x: &Value, s: &Node, path: &str, errs: &mut Vec<FieldError>) {
    let Some(values) = &s.enum_ else { return };
    if values.is_empty() || values.iter().any(|v| json_equal(v, x)) {
        return;
    }
    let allowed: Vec<String> = values
        .iter()
        .map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect();
    errs.push(FieldError::not_supported(path, x.clone(), &allowed));
}

fn string_checks(v: &str, s: &Node, path: &str, errs: &mut Vec<FieldError>) {
    let len = v.chars().count() as i64;
    if let Some(max) = s.max_length {
        if len > max {
            errs.push(FieldError::too_long(path, Value::String(v.into()), max));
        }
    }
    if let Some(min) = s.min_length {
        if len < min {
            errs.push(FieldError::invalid(
                path,
                Value::String(v.into()),
                format!(
                    "{} in body should be at least {} chars long",
                    name(path),
                    min
                ),
            ));
        }
    }
    if let Some((src, re)) = &s.pattern {
        if !re.is_match(v) {
            errs.push(FieldError::invalid(
                path,
                Value::String(v.into()),
                format!("{} in body should match '{}'", name(path), src),
            ));
        }
    }
    if let Some(fmt) = s.format.as_deref() {
        if let Some(false) = check_format(fmt, v) {
            errs.push(FieldError::type_invalid(
                path,
                Value::String(v.into()),
                format!(
                    "{} in body must be of type {}: {}",
                    name(path),
                    fmt,
                    go_quote(v)
                ),
            ));
        }
    }
}

/// `Some(valid)` for formats the kube-openapi registry knows; `None` for
/// formats it ignores (including numeric ones such as int32/int64, which are
/// not range-checked by the real server either).
fn check_format(fmt: &str, v: &str) -> Option<bool> {
    use std::net::{Ipv4Addr, Ipv6Addr};
    let hex = |s: &str| s.chars().all(|c| c.is_ascii_hexdigit());
    Some(match fmt {
        "uuid" | "uuid3" | "uuid4" | "uuid5" => {
            let compact: String = v.chars().filter(|c| *c != '-').collect();
            let ok = compact.len() == 32 && hex(&compact);
            let version_ok = match fmt {
                "uuid3" => compact.as_bytes().get(12) == Some(&b'3'),
                "uuid4" => compact.as_bytes().get(12) == Some(&b'4'),
                "uuid5" => compact.as_bytes().get(12) == Some(&b'5'),
                _ => true,
            };
            ok && version_ok
        }
        "ipv4" => v.parse::<Ipv4Addr>().is_ok(),
        "ipv6" => v.parse::<Ipv6Addr>().is_ok(),
        "cidr" => match v.split_once('/') {
            Some((ip, bits)) => {
                let bits: Option<u8> = bits.parse().ok();
                match (ip.parse::<Ipv4Addr>(), ip.parse::<Ipv6Addr>(), bits) {
                    (Ok(_), _, Some(b)) => b <= 32,
                    (_, Ok(_), Some(b)) => b <= 128,
                    _ => false,
                }
            }
            None => false,
        },
        "byte" => {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.decode(v).is_ok()
        }
        "date" => is_date(v),
        "date-time" => is_date_time(v),
        "mac" => {
            let parts: Vec<&str> = v.split([':', '-']).collect();
            (parts.len() == 6 || parts.len() == 8) && parts.iter().all(|p| p.len() == 2 && hex(p))
        }
        _ => return None,
    })
}

fn is_date(v: &str) -> bool {
    let b = v.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let num = |s: &str| s.parse::<u32>().ok();
    match (num(&v[0..4]), num(&v[5..7]), num(&v[8..10])) {
        (Some(_), Some(m), Some(d)) => (1..=12).contains(&m) && (1..=31).contains(&d),
        _ => false,
    }
}

/// RFC 3339 date-time (`2006-01-02T15:04:05Z`, fractional seconds and
/// numeric offsets allowed; `t`/`z` and a space separator too, as strfmt does).
fn is_date_time(v: &str) -> bool {
    if v.len() < 20 || !v.is_char_boundary(10) || !v.is_char_boundary(11) {
        return false;
    }
    if !is_date(&v[..10]) || !matches!(&v[10..11], "T" | "t" | " ") {
        return false;
    }
    let rest = &v[11..];
    let b = rest.as_bytes();
    if b.len() < 9 || b[2] != b':' || b[5] != b':' {
        return false;
    }
    let two = |s: &[u8]| s.len() == 2 && s.iter().all(u8::is_ascii_digit);
    if !(two(&b[0..2]) && two(&b[3..5]) && two(&b[6..8])) {
        return false;
    }
    let mut i = 8;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return false;
        }
    }
    match &rest[i..] {
        "Z" | "z" => true,
        off => {
            let ob = off.as_bytes();
            ob.len() == 6
                && (ob[0] == b'+' || ob[0] == b'-')
                && two(&ob[1..3])
                && ob[3] == b':'
                && two(&ob[4..6])
        }
    }
}

fn number_checks(n: &Number, s: &Node, path: &str, errs: &mut Vec<FieldError>) {
    let Some(f) = n.as_f64() else { return };
    let value = Value::Number(n.clone());
    if let Some(m) = s.multiple_of {
        if m > 0.0 && (f / m).fract().abs() > f64::EPSILON {
            errs.push(FieldError::invalid(
                path,
                value.clone(),
                format!(
                    "{} in body should be a multiple of {}",
                    name(path),
                    go_float(m)
                ),
            ));
        }
    }
    if let Some(max) = s.maximum {
        let bad = if s.exclusive_maximum {
            f >= max
        } else {
            f > max
        };
        if bad {
            let op = if s.exclusive_maximum {
                "less than"
            } else {
                "less than or equal to"
            };
            errs.push(FieldError::invalid(
                path,
                value.clone(),
                format!("{} in body should be {} {}", name(path), op, go_float(max)),
            ));
        }
    }
    if let Some(min) = s.minimum {
        let bad = if s.exclusive_minimum {
            f <= min
        } else {
            f < min
        };
        if bad {
            let op = if s.exclusive_minimum {
                "greater than"
            } else {
                "greater than or equal to"
            };
            errs.push(FieldError::invalid(
                path,
                value,
                format!("{} in body should be {} {}", name(path), op, go_float(min)),
            ));
        }
    }
}

fn array_checks(a: &[Value], s: &Node, path: &str, errs: &mut Vec<FieldError>) {
    if let Some(items) = s.items.as_deref() {
        for (i, v) in a.iter().enumerate() {
            check(v, items, &format!("{path}[{i}]"), false, errs);
        }
    }
    let size = a.len() as i64;
    if let Some(min) = s.min_items {
        if size < min {
            errs.push(FieldError::invalid(
                path,
                Value::from(size),
                format!("{} in body should have at least {} items", name(path), min),
            ));
        }
    }
    if let Some(max) = s.max_items {
        if size > max {
            errs.push(FieldError::too_many(path, size, max));
        }
    }
    if s.unique_items {
        for (i, v) in a.iter().enumerate() {
            if a[..i].iter().any(|w| json_equal(v, w)) {
                errs.push(FieldError::invalid(
                    path,
                    Value::String(String::new()),
                    format!("{} in body shouldn't contain duplicates", name(path)),
                ));
                break;
            }
        }
    }
    match s.list_type.as_deref() {
        Some("set") => {
            for i in first_repeats(a) {
                errs.push(FieldError::duplicate(format!("{path}[{i}]"), a[i].clone()));
            }
        }
        Some("map") => list_map_checks(a, s, path, errs),
        _ => {}
    }
}

/// Indices where a value appears for the second time (later repeats are
/// not reported again), as the real list-type validation does.
fn first_repeats(a: &[Value]) -> Vec<usize> {
    let mut out = Vec::new();
    for (i, v) in a.iter().enumerate() {
        let before = a[..i].iter().filter(|w| json_equal(v, w)).count();
        if before == 1 {
            out.push(i);
        }
    }
    out
}

/// `x-kubernetes-list-type: map`: items must be objects and their key
/// fields unique.
fn list_map_checks(a: &[Value], s: &Node, path: &str, errs: &mut Vec<FieldError>) {
    for (i, x) in a.iter().enumerate() {
        if !matches!(x, Value::Object(_) | Value::Null) {
            errs.push(FieldError::invalid(
                format!("{path}[{i}]"),
                x.clone(),
                "must be an object for an array of list-type map",
            ));
            return;
        }
    }
    // Missing key fields are left out of the key (all-missing keys collide).
    let keys: Vec<Value> = a
        .iter()
        .map(|x| {
            let mut k = serde_json::Map::new();
            for f in &s.list_map_keys {
                if let Some(v) = x.get(f) {
                    k.insert(f.clone(), v.clone());
                }
            }
            Value::Object(k)
        })
        .collect();
    for i in first_repeats(&keys) {
        errs.push(FieldError::duplicate(
            format!("{path}[{i}]"),
            keys[i].clone(),
        ));
    }
}

fn object_checks(
    m: &serde_json::Map<String, Value>,
    s: &Node,
    path: &str,
    root: bool,
    errs: &mut Vec<FieldError>,
) {
    let n = m.len() as i64;
    if let Some(min) = s.min_properties {
        if n < min {
            errs.push(FieldError::invalid(
                path,
                Value::from(n),
                format!(
                    "{} in body should have at least {} properties",
                    name(path),
                    min
                ),
            ));
            return;
        }
    }
    if let Some(max) = s.max_properties {
        if n > max {
            errs.push(FieldError::too_many(path, n, max));
            return;
        }
    }
    if s.embedded_resource && !root {
        embedded_resource_checks(m, path, errs);
    }
    // Properties in sorted order so the error list is deterministic.
    for (k, prop) in &s.properties {
        if let Some(v) = m.get(k) {
            check(v, prop, &join_key(path, k), false, errs);
        }
    }
    match &s.additional_properties {
        Some(AdditionalProperties::Schema(ap)) => {
            for (k, v) in m {
                if !s.properties.contains_key(k) {
                    check(v, ap, &join_key(path, k), false, errs);
                }
            }
        }
        Some(AdditionalProperties::Bool(false)) => {
            for k in m.keys() {
                if !s.properties.contains_key(k) {
                    errs.push(FieldError::invalid(
                        join_key(path, k),
                        Value::String(k.clone()),
                        format!("{}.{} in body is a forbidden property", name(path), k),
                    ));
                }
            }
        }
        _ => {}
    }
    for r in &s.required {
        if !m.contains_key(r) {
            errs.push(FieldError::required(join_key(path, r), ""));
        }
    }
}

/// `apiVersion` and `kind` are required in embedded resources.
fn embedded_resource_checks(
    m: &serde_json::Map<String, Value>,
    path: &str,
    errs: &mut Vec<FieldError>,
) {
    for key in ["apiVersion", "kind"] {
        let p = join_key(path, key);
        match m.get(key) {
            None => errs.push(FieldError::required(p, "")),
            Some(Value::String(s)) if s.is_empty() => errs.push(FieldError::required(p, "")),
            Some(Value::String(_)) => {}
            Some(v) => errs.push(FieldError::invalid(p, v.clone(), "must be a string")),
        }
    }
}

fn composition_checks(x: &Value, s: &Node, path: &str, errs: &mut Vec<FieldError>) {
    let run = |n: &Node| {
        let mut e = Vec::new();
        check(x, n, path, false, &mut e);
        e
    };
    if !s.all_of.is_empty() {
        let mut failed = 0;
        for n in &s.all_of {
            let e = run(n);
            if !e.is_empty() {
                failed += 1;
                errs.extend(e);
            }
        }
        if failed > 0 {
            let extra = if failed == s.all_of.len() {
                ". None validated"
            } else {
                ""
            };
            errs.push(FieldError::invalid(
                path,
                Value::String(String::new()),
                format!(
                    "{} must validate all the schemas (allOf){}",
                    name(path),
                    extra
                ),
            ));
        }
    }
    if !s.any_of.is_empty() {
        let results: Vec<Vec<FieldError>> = s.any_of.iter().map(run).collect();
        if results.iter().all(|e| !e.is_empty()) {
            errs.push(FieldError::invalid(
                path,
                Value::String(String::new()),
                format!("{} must validate at least one schema (anyOf)", name(path)),
            ));
            if let Some(best) = results.into_iter().min_by_key(Vec::len) {
                errs.extend(best);
            }
        }
    }
    if !s.one_of.is_empty() {
        let results: Vec<Vec<FieldError>> = s.one_of.iter().map(run).collect();
        let valid = results.iter().filter(|e| e.is_empty()).count();
        if valid != 1 {
            let extra = if valid == 0 {
                "Found none valid".to_string()
            } else {
                format!("Found {valid} valid alternatives")
            };
            errs.push(FieldError::invalid(
                path,
                Value::String(String::new()),
                format!(
                    "{} must validate one and only one schema (oneOf). {}",
                    name(path),
                    extra
                ),
            ));
            if valid == 0 {
                if let Some(best) = results.into_iter().min_by_key(Vec::len) {
                    errs.extend(best);
                }
            }
        }
    }
    if let Some(not) = &s.not {
        if run(not).is_empty() {
            errs.push(FieldError::invalid(
                path,
                Value::String(String::new()),
                format!("{} must not validate the schema (not)", name(path)),
            ));
        }
    }
}

fn check(x: &Value, s: &Node, path: &str, root: bool, errs: &mut Vec<FieldError>) {
    let type_ok = type_check(x, s, path, errs);
    if x.is_null() {
        if type_ok {
            enum_check(x, s, path, errs);
        }
        return;
    }
    composition_checks(x, s, path, errs);
    match x {
        Value::String(v) => string_checks(v, s, path, errs),
        Value::Number(n) => number_checks(n, s, path, errs),
        Value::Array(a) => array_checks(a, s, path, errs),
        Value::Object(m) => object_checks(m, s, path, root, errs),
        _ => {}
    }
    enum_check(x, s, path, errs);
}

#[cfg(test)]
mod tests {
    use crate::schema::{test_schema as schema, FieldErrorType, StructuralSchema};
    use serde_json::json;

    fn msgs(s: &StructuralSchema, obj: serde_json::Value) -> Vec<String> {
        s.validate(&obj).iter().map(|e| e.to_string()).collect()
    }

    fn spec(props: serde_json::Value) -> StructuralSchema {
        schema(
            json!({"type": "object", "properties": {"spec": {"type": "object", "properties": props}}}),
        )
    }

    #[test]
    fn type_mismatch_message_matches_kube_apiserver() {
        let s = spec(json!({"replicas": {"type": "integer"}}));
        let errs = s.validate(&json!({"spec": {"replicas": "three"}}));
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].error_type, FieldErrorType::TypeInvalid);
        assert_eq!(errs[0].field, "spec.replicas");
        assert_eq!(
            errs[0].to_string(),
            "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""
        );
    }

    #[test]
    fn integral_float_is_an_integer_and_integer_is_a_number() {
        let s = spec(json!({"i": {"type": "integer"}, "n": {"type": "number"}}));
        assert!(s.validate(&json!({"spec": {"i": 3.0, "n": 3}})).is_empty());
        assert_eq!(
            msgs(&s, json!({"spec": {"i": 3.5}})),
            vec!["spec.i: Invalid value: \"number\": spec.i in body must be of type integer: \"number\""]
        );
    }

    #[test]
    fn required_fields_report_field_value_required() {
        let s = schema(
            json!({"type": "object", "required": ["spec"], "properties": {
            "spec": {"type": "object", "required": ["a", "b"], "properties": {"a": {"type": "string"}, "b": {"type": "string"}}}}}),
        );
        let errs = s.validate(&json!({}));
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].to_string(), "spec: Required value");
        assert_eq!(errs[0].reason(), "FieldValueRequired");
        assert_eq!(
            msgs(&s, json!({"spec": {"a": "x"}})),
            vec!["spec.b: Required value"]
        );
    }

    #[test]
    fn enum_reports_not_supported() {
        let s = spec(json!({"mode": {"type": "string", "enum": ["Fast", "Slow"]},
                            "level": {"type": "integer", "enum": [1, 2]}}));
        assert_eq!(
            msgs(&s, json!({"spec": {"mode": "Medium", "level": 3}})),
            vec![
                "spec.level: Unsupported value: 3: supported values: \"1\", \"2\"",
                "spec.mode: Unsupported value: \"Medium\": supported values: \"Fast\", \"Slow\""
            ]
        );
        let errs = s.validate(&json!({"spec": {"mode": "Medium"}}));
        assert_eq!(errs[0].reason(), "FieldValueNotSupported");
        assert!(s
            .validate(&json!({"spec": {"mode": "Fast", "level": 2}}))
            .is_empty());
    }

    #[test]
    fn numeric_bounds() {
        let s = spec(
            json!({"r": {"type": "integer", "minimum": 1, "maximum": 10},
                            "x": {"type": "number", "minimum": 0, "exclusiveMinimum": true, "multipleOf": 0.5}}),
        );
        assert_eq!(
            msgs(&s, json!({"spec": {"r": 0}})),
            vec!["spec.r: Invalid value: 0: spec.r in body should be greater than or equal to 1"]
        );
        assert_eq!(
            msgs(&s, json!({"spec": {"r": 11}})),
            vec!["spec.r: Invalid value: 11: spec.r in body should be less than or equal to 10"]
        );
        assert_eq!(
            msgs(&s, json!({"spec": {"x": 0}})),
            vec!["spec.x: Invalid value: 0: spec.x in body should be greater than 0"]
        );
        assert_eq!(
            msgs(&s, json!({"spec": {"x": 0.7}})),
            vec!["spec.x: Invalid value: 0.7: spec.x in body should be a multiple of 0.5"]
        );
        assert!(s.validate(&json!({"spec": {"r": 10, "x": 1.5}})).is_empty());
    }

    #[test]
    fn string_length_and_pattern() {
        let s = spec(
            json!({"s": {"type": "string", "minLength": 2, "maxLength": 3, "pattern": "^[a-z]+$"}}),
        );
        assert_eq!(
            msgs(&s, json!({"spec": {"s": "abcd"}})),
            vec!["spec.s: Too long: may not be longer than 3"]
        );
        let errs = s.validate(&json!({"spec": {"s": "A"}}));
        assert_eq!(
            errs.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
            vec![
                "spec.s: Invalid value: \"A\": spec.s in body should be at least 2 chars long",
                "spec.s: Invalid value: \"A\": spec.s in body should match '^[a-z]+$'"
            ]
        );
        assert_eq!(errs[0].reason(), "FieldValueInvalid");
        assert_eq!(
            s.validate(&json!({"spec": {"s": "abcd"}}))[0].reason(),
            "FieldValueTooLong"
        );
        // Length counts characters, not bytes.
        assert!(s.validate(&json!({"spec": {"s": "ab"}})).is_empty());
    }

    #[test]
    fn list_sizes_and_item_paths() {
        let s = spec(json!({"l": {"type": "array", "minItems": 1, "maxItems": 2,
            "items": {"type": "object", "properties": {"name": {"type": "string"}}}}}));
        assert_eq!(
            msgs(&s, json!({"spec": {"l": []}})),
            vec!["spec.l: Invalid value: 0: spec.l in body should have at least 1 items"]
        );
        let errs = s.validate(&json!({"spec": {"l": [{}, {}, {"name": 5}]}}));
        assert_eq!(
            errs.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
            vec![
                "spec.l[2].name: Invalid value: \"integer\": spec.l[2].name in body must be of type string: \"integer\"",
                "spec.l: Too many: 3: must have at most 2 items"
            ]
        );
        assert_eq!(errs[1].reason(), "FieldValueTooMany");
    }

    #[test]
    fn nullable_and_null() {
        let s = spec(json!({"a": {"type": "string", "nullable": true}, "b": {"type": "string"}}));
        assert!(s.validate(&json!({"spec": {"a": null}})).is_empty());
        assert_eq!(
            msgs(&s, json!({"spec": {"b": null}})),
            vec![
                "spec.b: Invalid value: \"null\": spec.b in body must be of type string: \"null\""
            ]
        );
    }

    #[test]
    fn int_or_string() {
        let s = spec(json!({"p": {"x-kubernetes-int-or-string": true,
            "anyOf": [{"type": "integer"}, {"type": "string"}]}}));
        assert!(s.validate(&json!({"spec": {"p": 80}})).is_empty());
        assert!(s.validate(&json!({"spec": {"p": "http"}})).is_empty());
        let errs = s.validate(&json!({"spec": {"p": true}}));
        assert_eq!(
            errs[0].to_string(),
            "spec.p: Invalid value: \"boolean\": spec.p in body must be of type integer,string: \"boolean\""
        );
    }

    #[test]
    fn formats() {
        let s = spec(json!({"u": {"type": "string", "format": "uuid"},
                            "t": {"type": "string", "format": "date-time"},
                            "n": {"type": "integer", "format": "int32"}}));
        assert!(s
            .validate(
                &json!({"spec": {"u": "1b4e28ba-2fa1-11d2-883f-0016d3cca427",
                "t": "2024-01-02T03:04:05Z", "n": 5_000_000_000i64}})
            )
            .is_empty());
        assert_eq!(
            msgs(&s, json!({"spec": {"u": "nope", "t": "yesterday"}})),
            vec![
                "spec.t: Invalid value: \"yesterday\": spec.t in body must be of type date-time: \"yesterday\"",
                "spec.u: Invalid value: \"nope\": spec.u in body must be of type uuid: \"nope\""
            ]
        );
    }

    #[test]
    fn embedded_resources_need_api_version_and_kind() {
        let s = spec(
            json!({"t": {"type": "object", "x-kubernetes-embedded-resource": true,
            "x-kubernetes-preserve-unknown-fields": true}}),
        );
        assert_eq!(
            msgs(&s, json!({"spec": {"t": {"kind": "Pod"}}})),
            vec!["spec.t.apiVersion: Required value"]
        );
        assert!(s
            .validate(&json!({"spec": {"t": {"apiVersion": "v1", "kind": "Pod"}}}))
            .is_empty());
    }

    #[test]
    fn additional_properties_values_are_validated() {
        let s = spec(json!({"m": {"type": "object", "additionalProperties": {"type": "string"}}}));
        assert_eq!(
            msgs(&s, json!({"spec": {"m": {"a": "x", "b": 1}}})),
            vec!["spec.m.b: Invalid value: \"integer\": spec.m.b in body must be of type string: \"integer\""]
        );
    }

    #[test]
    fn list_type_set_and_map_duplicates() {
        let s = spec(json!({
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "items": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["id"],
                "items": {"type": "object", "properties": {"id": {"type": "string"}}}}}));
        let errs = s.validate(&json!({"spec": {"tags": ["a", "b", "a", "a"],
            "items": [{"id": "x"}, {"id": "y"}, {"id": "x", "v": 1}]}}));
        let msgs: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        assert_eq!(
            msgs,
            vec![
                "spec.items[2]: Duplicate value: map[string]interface {}{\"id\":\"x\"}",
                "spec.tags[2]: Duplicate value: \"a\""
            ]
        );
        assert_eq!(errs[0].reason(), "FieldValueDuplicate");
        let errs = s.validate(&json!({"spec": {"items": [{"id": "x"}, "nope"]}}));
        assert_eq!(
            errs.last().unwrap().to_string(),
            "spec.items[1]: Invalid value: \"nope\": must be an object for an array of list-type map"
        );
    }
}
