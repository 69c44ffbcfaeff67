//! Label and annotation selectors with Kubernetes' semantics.
//!
//! A [`Selector`] is either [`Selector::Nothing`] (matches no object) or a conjunction of
//! [`Requirement`]s; an empty conjunction matches every object. This mirrors
//! `metav1.LabelSelectorAsSelector`: a *null* `LabelSelector` selects nothing while an *empty*
//! one (`{}`) selects everything. Upstream Metacontroller overrides the null case in two places,
//! which [`Selector::from_label_selector_or_everything`] reproduces:
//! `CompositeController.spec.parentResource.labelSelector` and the DecoratorController
//! `labelSelector` / `annotationSelector` all treat "absent" as "select everything" (backward
//! compatibility). A CompositeController parent's own `spec.selector` must not be empty; that
//! check belongs to the controller (see [`Selector::is_everything`]).
//!
//! The string form (`a=b,c!=d,e in (x,y),!f,g`) is the one of `labels.Parse`, used by
//! `--target-label-selector` and by the `labelSelector=` query parameter.
//!
//! Keys and values are validated like Kubernetes does (qualified names, label values), also for
//! annotation selectors, because upstream converts annotation selectors into label selectors.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

/// A selector operator. `Equals`, `NotEquals`, `GreaterThan` and `LessThan` only come from the
/// string form; `LabelSelector.matchExpressions` accepts the four set-based operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operator {
    /// The label exists and its value is one of the values.
    In,
    /// The label is absent or its value is none of the values.
    NotIn,
    /// The label exists (any value).
    Exists,
    /// The label is absent.
    DoesNotExist,
    /// `key=value` / `key==value`: like `In` with one value.
    Equals,
    /// `key!=value`: like `NotIn` with one value.
    NotEquals,
    /// `key>n`: the label exists, is an integer and is greater than `n`.
    GreaterThan,
    /// `key<n`: the label exists, is an integer and is less than `n`.
    LessThan,
}

impl Operator {
    /// Parses a `matchExpressions[].operator` (case-sensitive, as Kubernetes).
    pub(crate) fn from_match_expression(op: &str) -> Option<Operator> {
        match op {
            "In" => Some(Operator::In),
            "NotIn" => Some(Operator::NotIn),
            "Exists" => Some(Operator::Exists),
            "DoesNotExist" => Some(Operator::DoesNotExist),
            _ => None,
        }
    }
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operator::In => "In",
            Operator::NotIn => "NotIn",
            Operator::Exists => "Exists",
            Operator::DoesNotExist => "DoesNotExist",
            Operator::Equals => "=",
            Operator::NotEquals => "!=",
            Operator::GreaterThan => "Gt",
            Operator::LessThan => "Lt",
        })
    }
}

/// Why a selector is invalid. `field` is a path such as `matchExpressions[1].values[0]`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// Operator string not one of In, NotIn, Exists, DoesNotExist.
    #[error("{field}: {operator:?} is not a valid label selector operator")]
    InvalidOperator { field: String, operator: String },
    /// Values given with Exists / DoesNotExist.
    #[error("{field}: values set must be empty for operator {operator}")]
    ValuesNotAllowed { field: String, operator: Operator },
    /// No values given with In / NotIn.
    #[error("{field}: values set can't be empty for operator {operator}")]
    ValuesRequired { field: String, operator: Operator },
    /// `=`, `!=`, `>`, `<` need exactly one value.
    #[error("{field}: operator {operator} requires exactly one value")]
    SingleValueRequired { field: String, operator: Operator },
    /// Key is not a qualified name.
    #[error("{field}: invalid key {key:?}: {reason}")]
    InvalidKey {
        field: String,
        key: String,
        reason: String,
    },
    /// Value is not a valid label value.
    #[error("{field}: invalid value {value:?}: {reason}")]
    InvalidValue {
        field: String,
        value: String,
        reason: String,
    },
    /// `>` / `<` with a value that is not a 64-bit integer.
    #[error("{field}: value {value:?} for operator {operator} must be an integer")]
    NotAnInteger {
        field: String,
        value: String,
        operator: Operator,
    },
    /// A CompositeController parent's `spec.selector` selects everything.
    #[error("{field} must have either matchLabels, matchExpressions, or both")]
    EmptyParentSelector { field: String },
    /// A selector in an object is not a `LabelSelector`.
    #[error("{field}: not a label selector: {message}")]
    Malformed { field: String, message: String },
    /// The string form could not be parsed.
    #[error("unable to parse selector {input:?} at byte {position}: {message}")]
    Parse {
        input: String,
        position: usize,
        message: String,
    },
}

/// One term of a selector. Values are kept sorted and de-duplicated (a set, as Kubernetes).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Requirement {
    key: String,
    operator: Operator,
    values: BTreeSet<String>,
}

impl Requirement {
    /// Builds and validates a requirement; `field` prefixes error paths.
    pub(crate) fn new<I, S>(
        field: &str,
        key: &str,
        operator: Operator,
        values: I,
    ) -> Result<Requirement, SelectorError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        validate_key(&format!("{field}.key"), key)?;
        let values: Vec<String> = values.into_iter().map(Into::into).collect();
        let values_field = format!("{field}.values");
        match operator {
            Operator::In | Operator::NotIn => {
                if values.is_empty() {
                    return Err(SelectorError::ValuesRequired {
                        field: values_field,
                        operator,
                    });
                }
            }
            Operator::Exists | Operator::DoesNotExist => {
                if !values.is_empty() {
                    return Err(SelectorError::ValuesNotAllowed {
                        field: values_field,
                        operator,
                    });
                }
            }
            Operator::Equals | Operator::NotEquals => {
                if values.len() != 1 {
                    return Err(SelectorError::SingleValueRequired {
                        field: values_field,
                        operator,
                    });
                }
            }
            Operator::GreaterThan | Operator::LessThan => {
                if values.len() != 1 {
                    return Err(SelectorError::SingleValueRequired {
                        field: values_field,
                        operator,
                    });
                }
                if values[0].parse::<i64>().is_err() {
                    return Err(SelectorError::NotAnInteger {
                        field: format!("{values_field}[0]"),
                        value: values[0].clone(),
                        operator,
                    });
                }
            }
        }
        if !matches!(operator, Operator::GreaterThan | Operator::LessThan) {
            for (i, v) in values.iter().enumerate() {
                validate_value(&format!("{values_field}[{i}]"), v)?;
            }
        }
        Ok(Requirement {
            key: key.to_string(),
            operator,
            values: values.into_iter().collect(),
        })
    }

    /// The values, sorted.
    #[cfg(test)]
    pub(crate) fn values(&self) -> impl Iterator<Item = &str> {
        self.values.iter().map(String::as_str)
    }

    /// Whether `labels` satisfies this requirement.
    pub(crate) fn matches<L: Labels + ?Sized>(&self, labels: &L) -> bool {
        let value = labels.label(&self.key);
        match self.operator {
            Operator::In | Operator::Equals => value.is_some_and(|v| self.values.contains(v)),
            Operator::NotIn | Operator::NotEquals => value.is_none_or(|v| !self.values.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let (Some(have), Some(bound)) = (
                    value.and_then(|v| v.parse::<i64>().ok()),
                    self.values
                        .iter()
                        .next()
                        .and_then(|v| v.parse::<i64>().ok()),
                ) else {
                    return false;
                };
                if self.operator == Operator::GreaterThan {
                    have > bound
                } else {
                    have < bound
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let single = || self.values.iter().next().map(String::as_str).unwrap_or("");
        let list = || self.values.iter().cloned().collect::<Vec<_>>().join(",");
        match self.operator {
            Operator::Exists => write!(f, "{}", self.key),
            Operator::DoesNotExist => write!(f, "!{}", self.key),
            Operator::Equals => write!(f, "{}={}", self.key, single()),
            Operator::NotEquals => write!(f, "{}!={}", self.key, single()),
            Operator::GreaterThan => write!(f, "{}>{}", self.key, single()),
            Operator::LessThan => write!(f, "{}<{}", self.key, single()),
            Operator::In => write!(f, "{} in ({})", self.key, list()),
            Operator::NotIn => write!(f, "{} notin ({})", self.key, list()),
        }
    }
}

/// Read access to a string map of labels or annotations.
pub trait Labels {
    /// The value of `key`, if present.
    fn label(&self, key: &str) -> Option<&str>;
}

impl Labels for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl<S: std::hash::BuildHasher> Labels for HashMap<String, String, S> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

/// A JSON object such as `metadata.labels`; non-string values count as absent.
impl Labels for serde_json::Map<String, serde_json::Value> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(serde_json::Value::as_str)
    }
}

/// A compiled label (or annotation) selector.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Selector {
    /// Matches no object (a null `LabelSelector`).
    Nothing,
    /// Matches objects satisfying every requirement; empty matches everything. Sorted by key.
    All(Vec<Requirement>),
}

impl Default for Selector {
    fn default() -> Self {
        Selector::everything()
    }
}

impl Selector {
    /// The selector that matches everything.
    pub(crate) fn everything() -> Selector {
        Selector::All(Vec::new())
    }

    /// Builds a selector from requirements (sorted by key, as Kubernetes does).
    pub(crate) fn from_requirements(mut requirements: Vec<Requirement>) -> Selector {
        requirements.sort();
        Selector::All(requirements)
    }
    /// True if this selector matches every object (no requirements).
    #[cfg(test)]
    pub(crate) fn is_everything(&self) -> bool {
        matches!(self, Selector::All(r) if r.is_empty())
    }

    /// The requirements (empty for both `Nothing` and everything).
    pub(crate) fn requirements(&self) -> &[Requirement] {
        match self {
            Selector::Nothing => &[],
            Selector::All(r) => r,
        }
    }

    /// Whether `labels` is selected.
    pub fn matches<L: Labels + ?Sized>(&self, labels: &L) -> bool {
        match self {
            Selector::Nothing => false,
            Selector::All(reqs) => reqs.iter().all(|r| r.matches(labels)),
        }
    }

    /// `metav1.LabelSelectorAsSelector`: `None` selects nothing, `{}` selects everything.
    pub(crate) fn from_label_selector(
        selector: Option<&LabelSelector>,
    ) -> Result<Selector, SelectorError> {
        match selector {
            None => Ok(Selector::Nothing),
            Some(s) => Selector::from_parts(
                "matchLabels",
                s.match_labels.as_ref(),
                s.match_expressions.as_deref(),
            ),
        }
    }

    /// Upstream Metacontroller's rule for optional selectors on controller specs: absent
    /// selects everything.
    pub fn from_label_selector_or_everything(
        selector: Option<&LabelSelector>,
    ) -> Result<Selector, SelectorError> {
        match selector {
            None => Ok(Selector::everything()),
            Some(s) => Selector::from_label_selector(Some(s)),
        }
    }

    /// An annotation selector (`matchAnnotations` + `matchExpressions`); absent selects
    /// everything, as in upstream's DecoratorController.
    pub(crate) fn from_annotation_selector(
        match_annotations: Option<&BTreeMap<String, String>>,
        match_expressions: Option<&[LabelSelectorRequirement]>,
    ) -> Result<Selector, SelectorError> {
        Selector::from_parts("matchAnnotations", match_annotations, match_expressions)
    }

    /// Shared conversion; `map_field` names the equality map in error paths.
    fn from_parts(
        map_field: &str,
        match_map: Option<&BTreeMap<String, String>>,
        match_expressions: Option<&[LabelSelectorRequirement]>,
    ) -> Result<Selector, SelectorError> {
        let mut reqs = Vec::new();
        for (k, v) in match_map.into_iter().flatten() {
            reqs.push(Requirement::new(
                &format!("{map_field}[{k:?}]"),
                k,
                Operator::Equals,
                [v.clone()],
            )?);
        }
        for (i, expr) in match_expressions.into_iter().flatten().enumerate() {
            let field = format!("matchExpressions[{i}]");
            let op = Operator::from_match_expression(&expr.operator).ok_or_else(|| {
                SelectorError::InvalidOperator {
                    field: format!("{field}.operator"),
                    operator: expr.operator.clone(),
                }
            })?;
            let values = expr.values.clone().unwrap_or_default();
            reqs.push(Requirement::new(&field, &expr.key, op, values)?);
        }
        Ok(Selector::from_requirements(reqs))
    }

    /// Parses the string form (`labels.Parse`). Empty or blank input selects everything.
    pub fn parse(input: &str) -> Result<Selector, SelectorError> {
        Parser::new(input).parse()
    }

    /// The `labelSelector=` query parameter that makes the API server list and watch only the
    /// objects this selector matches; `None` when the server cannot narrow anything (the
    /// selector matches everything) or must not be asked (`Nothing` has no string form:
    /// its empty string would select everything).
    pub fn server_query(&self) -> Option<String> {
        match self {
            Selector::All(reqs) if !reqs.is_empty() => Some(self.to_string()),
            _ => None,
        }
    }
}

/// The label CompositeController's `generateSelector` puts on children.
pub const CONTROLLER_UID_LABEL: &str = "controller-uid";

impl Selector {
    /// The selector of a CompositeController parent (upstream `makeSelector`): with
    /// `generate_selector`, `controller-uid=<parent uid>` (any `spec.selector` ignored);
    /// otherwise the parent's `spec.selector`, which must not be empty. `extra_match_labels`
    /// are added as equality requirements.
    pub fn for_composite_parent(
        parent: &serde_json::Value,
        generate_selector: bool,
        extra_match_labels: &BTreeMap<String, String>,
    ) -> Result<Selector, SelectorError> {
        let mut selector = if generate_selector {
            let uid = parent
                .get("metadata")
                .and_then(|m| m.get("uid"))
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default();
            LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    CONTROLLER_UID_LABEL.to_string(),
                    uid.to_string(),
                )])),
                match_expressions: None,
            }
        } else {
            let field = "spec.selector";
            let raw = parent
                .get("spec")
                .and_then(|s| s.get("selector"))
                .cloned()
                .unwrap_or(serde_json::Value::Null);
            let parsed: Option<LabelSelector> =
                serde_json::from_value(raw).map_err(|e| SelectorError::Malformed {
                    field: field.to_string(),
                    message: e.to_string(),
                })?;
            let parsed = parsed.unwrap_or_default();
            let no_labels = parsed.match_labels.as_ref().is_none_or(BTreeMap::is_empty);
            let no_exprs = parsed.match_expressions.as_ref().is_none_or(Vec::is_empty);
            if no_labels && no_exprs {
                return Err(SelectorError::EmptyParentSelector {
                    field: field.to_string(),
                });
            }
            parsed
        };
        if !extra_match_labels.is_empty() {
            selector
                .match_labels
                .get_or_insert_with(BTreeMap::new)
                .extend(extra_match_labels.clone());
        }
        Selector::from_label_selector(Some(&selector))
    }
}

impl std::str::FromStr for Selector {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Selector::parse(s)
    }
}

/// The string form. `Nothing` has none in Kubernetes either; it prints as the empty string,
/// which parses back to *everything*, so never send `Nothing` as a query parameter.
impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements().iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

/// DecoratorController's per-resource selector: an object must match both.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ObjectSelector {
    /// Applied to `metadata.labels`.
    pub labels: Selector,
    /// Applied to `metadata.annotations`.
    pub annotations: Selector,
}

impl ObjectSelector {
    /// A DecoratorController resource rule's selector: an absent label or annotation selector
    /// selects everything (upstream's rule).
    pub fn for_decorator(
        label_selector: Option<&LabelSelector>,
        match_annotations: Option<&BTreeMap<String, String>>,
        annotation_expressions: Option<&[LabelSelectorRequirement]>,
    ) -> Result<ObjectSelector, SelectorError> {
        Ok(ObjectSelector {
            labels: Selector::from_label_selector_or_everything(label_selector)?,
            annotations: Selector::from_annotation_selector(
                match_annotations,
                annotation_expressions,
            )?,
        })
    }

    /// Whether an object with these labels and annotations matches.
    pub fn matches<L: Labels + ?Sized, A: Labels + ?Sized>(
        &self,
        labels: &L,
        annotations: &A,
    ) -> bool {
        self.labels.matches(labels) && self.annotations.matches(annotations)
    }

    /// Whether an object (JSON with `metadata.labels` / `metadata.annotations`) matches.
    /// Missing or malformed maps count as empty.
    pub fn matches_object(&self, object: &serde_json::Value) -> bool {
        let empty = serde_json::Map::new();
        let map = |name: &str| {
            object
                .get("metadata")
                .and_then(|m| m.get(name))
                .and_then(serde_json::Value::as_object)
                .unwrap_or(&empty)
        };
        self.matches(map("labels"), map("annotations"))
    }
}

// ---- validation -------------------------------------------------------------------------

const MAX_NAME_LEN: usize = 63;
const MAX_PREFIX_LEN: usize = 253;

fn is_alnum(c: char) -> bool {
    c.is_ascii_alphanumeric()
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn is_label_name_shape(s: &str) -> bool {
    let (Some(first), Some(last)) = (s.chars().next(), s.chars().last()) else {
        return false;
    };
    is_alnum(first)
        && is_alnum(last)
        && s.chars()
            .all(|c| is_alnum(c) || c == '-' || c == '_' || c == '.')
}

/// RFC 1123 subdomain: dot-separated lowercase labels.
fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_PREFIX_LEN
        && s.split('.').all(|part| {
            let (Some(first), Some(last)) = (part.chars().next(), part.chars().last()) else {
                return false;
            };
            let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
            ok(first) && ok(last) && part.chars().all(|c| ok(c) || c == '-')
        })
}

/// Kubernetes `IsQualifiedName`: `[prefix/]name`.
fn validate_key(field: &str, key: &str) -> Result<(), SelectorError> {
    let err = |reason: &str| SelectorError::InvalidKey {
        field: field.to_string(),
        key: key.to_string(),
        reason: reason.to_string(),
    };
    let name = match key.split_once('/') {
        None => key,
        Some((prefix, name)) => {
            if prefix.is_empty() {
                return Err(err("prefix part must be non-empty"));
            }
            if !is_dns1123_subdomain(prefix) {
                return Err(err(
                    "prefix part must be a lowercase RFC 1123 subdomain of at most 253 characters",
                ));
            }
            name
        }
    };
    if name.is_empty() {
        return Err(err("name part must be non-empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(err("name part must be no more than 63 characters"));
    }
    if !is_label_name_shape(name) {
        return Err(err(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start \
             and end with an alphanumeric character",
        ));
    }
    Ok(())
}

/// Kubernetes `IsValidLabelValue`: empty, or a name-shaped string of at most 63 characters.
fn validate_value(field: &str, value: &str) -> Result<(), SelectorError> {
    if value.is_empty() {
        return Ok(());
    }
    let err = |reason: &str| SelectorError::InvalidValue {
        field: field.to_string(),
        value: value.to_string(),
        reason: reason.to_string(),
    };
    if value.len() > MAX_NAME_LEN {
        return Err(err("must be no more than 63 characters"));
    }
    if !is_label_name_shape(value) {
        return Err(err(
            "must consist of alphanumeric characters, '-', '_' or '.', and must start and end \
             with an alphanumeric character",
        ));
    }
    Ok(())
}

// ---- string form parser -----------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    Bang,
    NotEquals,
    Equals,
    DoubleEquals,
    Comma,
    Open,
    Close,
    In,
    NotIn,
    Gt,
    Lt,
    End,
}

impl Token {
    /// Identifiers, plus the keywords where a key or value is expected: Kubernetes rejects
    /// a label named `in`, we accept it so every valid selector has a string form.
    fn word(&self) -> Option<String> {
        match self {
            Token::Ident(s) => Some(s.clone()),
            Token::In => Some("in".into()),
            Token::NotIn => Some("notin".into()),
            _ => None,
        }
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Token::Ident(s) => write!(f, "{s:?}"),
            Token::Bang => f.write_str("'!'"),
            Token::NotEquals => f.write_str("'!='"),
            Token::Equals => f.write_str("'='"),
            Token::DoubleEquals => f.write_str("'=='"),
            Token::Comma => f.write_str("','"),
            Token::Open => f.write_str("'('"),
            Token::Close => f.write_str("')'"),
            Token::In => f.write_str("'in'"),
            Token::NotIn => f.write_str("'notin'"),
            Token::Gt => f.write_str("'>'"),
            Token::Lt => f.write_str("'<'"),
            Token::End => f.write_str("end of string"),
        }
    }
}

fn is_special(c: char) -> bool {
    matches!(c, '!' | '=' | ',' | '(' | ')' | '<' | '>')
}

fn lex(input: &str) -> Vec<(usize, Token)> {
    let mut out = Vec::new();
    let mut chars = input.char_indices().peekable();
    while let Some(&(pos, c)) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        if is_special(c) {
            chars.next();
            let next = chars.peek().map(|&(_, n)| n);
            let tok = match (c, next) {
                ('!', Some('=')) => {
                    chars.next();
                    Token::NotEquals
                }
                ('=', Some('=')) => {
                    chars.next();
                    Token::DoubleEquals
                }
                ('!', _) => Token::Bang,
                ('=', _) => Token::Equals,
                (',', _) => Token::Comma,
                ('(', _) => Token::Open,
                (')', _) => Token::Close,
                ('<', _) => Token::Lt,
                _ => Token::Gt,
            };
            out.push((pos, tok));
            continue;
        }
        let mut word = String::new();
        while let Some(&(_, c)) = chars.peek() {
            if c.is_whitespace() || is_special(c) {
                break;
            }
            word.push(c);
            chars.next();
        }
        let tok = match word.as_str() {
            "in" => Token::In,
            "notin" => Token::NotIn,
            _ => Token::Ident(word),
        };
        out.push((pos, tok));
    }
    out.push((input.len(), Token::End));
    out
}

struct Parser<'a> {
    input: &'a str,
    tokens: Vec<(usize, Token)>,
    at: usize,
}

impl<'a> Parser<'a> {
    fn new(input: &'a str) -> Self {
        Parser {
            input,
            tokens: lex(input),
            at: 0,
        }
    }

    fn peek(&self) -> &(usize, Token) {
        // `lex` always ends with End and `next` never moves past it.
        &self.tokens[self.at.min(self.tokens.len() - 1)]
    }

    fn next(&mut self) -> (usize, Token) {
        let t = self.peek().clone();
        if t.1 != Token::End {
            self.at += 1;
        }
        t
    }

    fn error(&self, position: usize, message: String) -> SelectorError {
        SelectorError::Parse {
            input: self.input.to_string(),
            position,
            message,
        }
    }

    fn parse(mut self) -> Result<Selector, SelectorError> {
        let mut reqs = Vec::new();
        if self.peek().1 == Token::End {
            return Ok(Selector::everything());
        }
        loop {
            reqs.push(self.requirement(reqs.len())?);
            match self.next() {
                (_, Token::End) => break,
                (_, Token::Comma) => continue,
                (pos, t) => {
                    return Err(
                        self.error(pos, format!("found {t}, expected: ',' or end of string"))
                    )
                }
            }
        }
        Ok(Selector::from_requirements(reqs))
    }

    fn requirement(&mut self, index: usize) -> Result<Requirement, SelectorError> {
        let field = format!("requirement[{index}]");
        let negated = if self.peek().1 == Token::Bang {
            self.next();
            true
        } else {
            false
        };
        let key = match self.next() {
            (_, t) if t.word().is_some() => t.word().unwrap_or_default(),
            (pos, t) => {
                return Err(self.error(pos, format!("found {t}, expected: identifier")));
            }
        };
        if matches!(self.peek().1, Token::End | Token::Comma) {
            let op = if negated {
                Operator::DoesNotExist
            } else {
                Operator::Exists
            };
            return Requirement::new(&field, &key, op, Vec::<String>::new());
        }
        let (pos, tok) = self.next();
        if negated {
            return Err(self.error(
                pos,
                format!("found {tok}, expected: ',' or end of string after '!{key}'"),
            ));
        }
        let op = match tok {
            Token::In => Operator::In,
            Token::NotIn => Operator::NotIn,
            Token::Equals | Token::DoubleEquals => Operator::Equals,
            Token::NotEquals => Operator::NotEquals,
            Token::Gt => Operator::GreaterThan,
            Token::Lt => Operator::LessThan,
            t => {
                return Err(self.error(
                    pos,
                    format!("found {t}, expected: in, notin, =, ==, !=, >, <"),
                ));
            }
        };
        let values = match op {
            Operator::In | Operator::NotIn => self.value_list()?,
            _ => vec![self.exact_value()?],
        };
        Requirement::new(&field, &key, op, values)
    }

    /// `( v, v, ... )`; an empty slot is the empty string, as in Kubernetes.
    fn value_list(&mut self) -> Result<Vec<String>, SelectorError> {
        match self.next() {
            (_, Token::Open) => {}
            (pos, t) => return Err(self.error(pos, format!("found {t}, expected: '('"))),
        }
        let mut values = Vec::new();
        let mut current: Option<String> = None;
        loop {
            match self.next() {
                (pos, t) if t.word().is_some() => {
                    let v = t.word().unwrap_or_default();
                    if current.is_some() {
                        return Err(self.error(pos, format!("found {v:?}, expected: ',' or ')'")));
                    }
                    current = Some(v);
                }
                (_, Token::Comma) => values.push(current.take().unwrap_or_default()),
                (_, Token::Close) => {
                    values.push(current.take().unwrap_or_default());
                    return Ok(values);
                }
                (pos, t) => {
                    return Err(self.error(pos, format!("found {t}, expected: value, ',' or ')'")))
                }
            }
        }
    }

    /// The value after `=`, `!=`, `>`, `<`; absent means the empty string.
    fn exact_value(&mut self) -> Result<String, SelectorError> {
        match self.peek().1.clone() {
            Token::End | Token::Comma => Ok(String::new()),
            t if t.word().is_some() => {
                self.next();
                Ok(t.word().unwrap_or_default())
            }
            t => Err(self.error(self.peek().0, format!("found {t}, expected: value"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expr(key: &str, op: &str, values: Option<&[&str]>) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: values.map(|v| v.iter().map(|s| s.to_string()).collect()),
        }
    }

    #[test]
    fn null_selects_nothing_empty_selects_everything() {
        let l = labels(&[("a", "b")]);
        assert!(!Selector::from_label_selector(None).unwrap().matches(&l));
        let empty = LabelSelector::default();
        assert!(Selector::from_label_selector(Some(&empty))
            .unwrap()
            .matches(&l));
        assert!(Selector::from_label_selector(Some(&empty))
            .unwrap()
            .is_everything());
        // Upstream's controller-spec rule: absent means everything.
        assert!(Selector::from_label_selector_or_everything(None)
            .unwrap()
            .matches(&BTreeMap::new()));
    }

    #[test]
    fn server_query_has_every_operator_in_server_syntax() {
        let sel = LabelSelector {
            match_labels: Some(labels(&[("app", "web")])),
            match_expressions: Some(vec![
                expr("tier", "In", Some(&["b", "a"])),
                expr("env", "NotIn", Some(&["dev"])),
                expr("owner", "Exists", None),
                expr("legacy", "DoesNotExist", None),
            ]),
        };
        let sel = Selector::from_label_selector(Some(&sel)).unwrap();
        let query = sel.server_query().unwrap();
        assert_eq!(query, "app=web,env notin (dev),!legacy,owner,tier in (a,b)");
        // What the server parses is what the controller matches.
        assert_eq!(Selector::parse(&query).unwrap(), sel);
        assert_eq!(Selector::everything().server_query(), None);
        assert_eq!(Selector::Nothing.server_query(), None);
    }

    #[test]
    fn match_labels_and_expressions_are_anded() {
        let sel = LabelSelector {
            match_labels: Some(labels(&[("app", "web")])),
            match_expressions: Some(vec![
                expr("tier", "In", Some(&["fe", "be"])),
                expr("env", "NotIn", Some(&["prod"])),
                expr("team", "Exists", None),
                expr("legacy", "DoesNotExist", Some(&[])),
            ]),
        };
        let s = Selector::from_label_selector(Some(&sel)).unwrap();
        let ok = labels(&[("app", "web"), ("tier", "fe"), ("team", "x")]);
        assert!(s.matches(&ok));
        // NotIn matches an absent label but not a listed value.
        let mut prod = ok.clone();
        prod.insert("env".into(), "prod".into());
        assert!(!s.matches(&prod));
        let mut legacy = ok.clone();
        legacy.insert("legacy".into(), "".into());
        assert!(!s.matches(&legacy));
        let mut wrong_tier = ok.clone();
        wrong_tier.insert("tier".into(), "db".into());
        assert!(!s.matches(&wrong_tier));
        let mut no_team = ok.clone();
        no_team.remove("team");
        assert!(!s.matches(&no_team));
        let mut wrong_app = ok;
        wrong_app.insert("app".into(), "api".into());
        assert!(!s.matches(&wrong_app));
    }

    #[test]
    fn invalid_expressions_are_errors_with_paths() {
        let bad_op = LabelSelector {
            match_expressions: Some(vec![expr("a", "in", Some(&["x"]))]),
            ..Default::default()
        };
        assert_eq!(
            Selector::from_label_selector(Some(&bad_op)).unwrap_err(),
            SelectorError::InvalidOperator {
                field: "matchExpressions[0].operator".into(),
                operator: "in".into()
            }
        );
        let exists_values = LabelSelector {
            match_expressions: Some(vec![
                expr("a", "Exists", None),
                expr("b", "Exists", Some(&["x"])),
            ]),
            ..Default::default()
        };
        assert!(matches!(
            Selector::from_label_selector(Some(&exists_values)).unwrap_err(),
            SelectorError::ValuesNotAllowed { field, .. } if field == "matchExpressions[1].values"
        ));
        let in_empty = LabelSelector {
            match_expressions: Some(vec![expr("a", "In", Some(&[]))]),
            ..Default::default()
        };
        assert!(matches!(
            Selector::from_label_selector(Some(&in_empty)).unwrap_err(),
            SelectorError::ValuesRequired { .. }
        ));
        let bad_key = LabelSelector {
            match_labels: Some(labels(&[("-a", "b")])),
            ..Default::default()
        };
        assert!(matches!(
            Selector::from_label_selector(Some(&bad_key)).unwrap_err(),
            SelectorError::InvalidKey { .. }
        ));
        let bad_value = LabelSelector {
            match_labels: Some(labels(&[("a", "has space")])),
            ..Default::default()
        };
        assert!(matches!(
            Selector::from_label_selector(Some(&bad_value)).unwrap_err(),
            SelectorError::InvalidValue { .. }
        ));
    }

    #[test]
    fn key_validation_follows_qualified_names() {
        for good in ["a", "a.b-c_d", "example.com/a", "A1", &"x".repeat(63)] {
            assert!(validate_key("k", good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "/a",
            "a/",
            "Example.com/a",
            "a/b/c",
            "a_",
            &"x".repeat(64),
            "é",
        ] {
            assert!(validate_key("k", bad).is_err(), "{bad}");
        }
        assert!(validate_value("v", "").is_ok());
        assert!(validate_value("v", &"x".repeat(64)).is_err());
    }

    #[test]
    fn parses_the_string_form() {
        let s = Selector::parse("a=b,c!=d, e in (x, y),!f,g,h==i,j notin (z),k>5,l<3").unwrap();
        assert_eq!(s.requirements().len(), 9);
        let l = labels(&[
            ("a", "b"),
            ("e", "y"),
            ("g", ""),
            ("h", "i"),
            ("k", "6"),
            ("l", "2"),
        ]);
        assert!(s.matches(&l));
        let mut gt_fail = l.clone();
        gt_fail.insert("k".into(), "5".into());
        assert!(!s.matches(&gt_fail));
        let mut not_int = l.clone();
        not_int.insert("l".into(), "two".into());
        assert!(!s.matches(&not_int));
        let mut has_f = l;
        has_f.insert("f".into(), "1".into());
        assert!(!s.matches(&has_f));
        // Canonical output: sorted by key, values sorted.
        assert_eq!(
            Selector::parse("z=1, a in (y,x)").unwrap().to_string(),
            "a in (x,y),z=1"
        );
    }

    #[test]
    fn empty_values_follow_kubernetes() {
        let s = Selector::parse("a=").unwrap();
        assert!(s.matches(&labels(&[("a", "")])));
        assert!(!s.matches(&labels(&[("a", "x")])));
        let s = Selector::parse("a in ()").unwrap();
        assert_eq!(s.requirements()[0].values().collect::<Vec<_>>(), vec![""]);
        let s = Selector::parse("a in (x,)").unwrap();
        assert_eq!(
            s.requirements()[0].values().collect::<Vec<_>>(),
            vec!["", "x"]
        );
        assert!(Selector::parse("   ").unwrap().is_everything());
    }

    #[test]
    fn parse_errors_are_values() {
        for bad in [
            "a=b,",
            ",a",
            "a b",
            "!a=b",
            "a in x",
            "a in (x",
            "a in (x y)",
            "a>b",
            "a=(",
            "=a",
            "a=b=c",
            "a in (x))",
            "!",
            "a notin",
            "-a=b",
        ] {
            let err = Selector::parse(bad).unwrap_err();
            assert!(!err.to_string().is_empty(), "{bad}");
        }
        let err = Selector::parse("a=b c").unwrap_err();
        assert!(
            matches!(err, SelectorError::Parse { position: 4, .. }),
            "{err}"
        );
    }

    #[test]
    fn annotation_selector_and_object_matching() {
        let annotations = Selector::from_annotation_selector(
            Some(&labels(&[("example.com/managed", "true")])),
            Some(&[expr("skip", "DoesNotExist", None)]),
        )
        .unwrap();
        let sel = ObjectSelector {
            labels: Selector::parse("app=web").unwrap(),
            annotations,
        };
        let obj = serde_json::json!({"metadata": {
            "labels": {"app": "web"},
            "annotations": {"example.com/managed": "true"}}});
        assert!(sel.matches_object(&obj));
        let skipped = serde_json::json!({"metadata": {
            "labels": {"app": "web"},
            "annotations": {"example.com/managed": "true", "skip": "1"}}});
        assert!(!sel.matches_object(&skipped));
        // Malformed metadata counts as no labels, never a panic.
        assert!(!sel.matches_object(&serde_json::json!({"metadata": {"labels": 3}})));
        assert!(ObjectSelector::default().matches_object(&serde_json::json!(null)));
        // matchAnnotations errors name their own field.
        let err = Selector::from_annotation_selector(Some(&labels(&[("a", "not ok")])), None)
            .unwrap_err();
        assert!(err.to_string().contains("matchAnnotations"), "{err}");
    }

    #[test]
    fn composite_parent_selector_follows_upstream() {
        let none = BTreeMap::new();
        let parent = serde_json::json!({
            "metadata": {"uid": "u-1"},
            "spec": {"selector": {"matchLabels": {"app": "x"}}}});
        let s = Selector::for_composite_parent(&parent, false, &none).unwrap();
        assert_eq!(s.to_string(), "app=x");
        // generateSelector ignores spec.selector.
        let s = Selector::for_composite_parent(&parent, true, &none).unwrap();
        assert_eq!(s.to_string(), "controller-uid=u-1");
        let extra = labels(&[("rev", "1")]);
        let s = Selector::for_composite_parent(&parent, false, &extra).unwrap();
        assert_eq!(s.to_string(), "app=x,rev=1");
        for empty in [
            serde_json::json!({"spec": {}}),
            serde_json::json!({"spec": {"selector": {}}}),
            serde_json::json!({"spec": {"selector": {"matchLabels": {}, "matchExpressions": []}}}),
            serde_json::json!(null),
        ] {
            assert!(matches!(
                Selector::for_composite_parent(&empty, false, &none).unwrap_err(),
                SelectorError::EmptyParentSelector { .. }
            ));
        }
        let malformed = serde_json::json!({"spec": {"selector": {"matchLabels": "app=x"}}});
        assert!(matches!(
            Selector::for_composite_parent(&malformed, false, &none).unwrap_err(),
            SelectorError::Malformed { .. }
        ));
        let bad_op = serde_json::json!({"spec": {"selector": {
            "matchExpressions": [{"key": "a", "operator": "Bogus"}]}}});
        assert!(matches!(
            Selector::for_composite_parent(&bad_op, false, &none).unwrap_err(),
            SelectorError::InvalidOperator { .. }
        ));
    }

    #[test]
    fn decorator_selector_treats_absent_as_everything() {
        let all = ObjectSelector::for_decorator(None, None, None).unwrap();
        assert!(all.matches(&BTreeMap::new(), &BTreeMap::new()));
        let ls = LabelSelector {
            match_labels: Some(labels(&[("app", "web")])),
            ..Default::default()
        };
        let s =
            ObjectSelector::for_decorator(Some(&ls), Some(&labels(&[("a", "b")])), None).unwrap();
        assert!(s.matches(&labels(&[("app", "web")]), &labels(&[("a", "b")])));
        assert!(!s.matches(&labels(&[("app", "web")]), &BTreeMap::new()));
        assert!(!s.matches(&BTreeMap::new(), &labels(&[("a", "b")])));
    }

    fn arb_key() -> impl Strategy<Value = String> {
        (
            proptest::option::of("[a-z]{1,5}(\\.[a-z]{1,4})?"),
            "[a-zA-Z0-9]([a-zA-Z0-9_.-]{0,6}[a-zA-Z0-9])?",
        )
            .prop_map(|(p, n)| match p {
                Some(p) => format!("{p}/{n}"),
                None => n,
            })
    }

    fn arb_value() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(String::new()),
            "[a-zA-Z0-9]([a-zA-Z0-9_.-]{0,6}[a-zA-Z0-9])?"
        ]
    }

    fn arb_requirement() -> impl Strategy<Value = Requirement> {
        (
            arb_key(),
            0..8u8,
            proptest::collection::vec(arb_value(), 1..4),
            any::<i32>(),
        )
            .prop_map(|(key, op, values, n)| {
                let (op, values) = match op {
                    0 => (Operator::In, values),
                    1 => (Operator::NotIn, values),
                    2 => (Operator::Exists, vec![]),
                    3 => (Operator::DoesNotExist, vec![]),
                    4 => (Operator::Equals, values[..1].to_vec()),
                    5 => (Operator::NotEquals, values[..1].to_vec()),
                    6 => (Operator::GreaterThan, vec![n.to_string()]),
                    _ => (Operator::LessThan, vec![n.to_string()]),
                };
                Requirement::new("r", &key, op, values).unwrap()
            })
    }

    proptest! {
        #[test]
        fn string_form_round_trips(reqs in proptest::collection::vec(arb_requirement(), 0..6)) {
            let sel = Selector::from_requirements(reqs);
            let text = sel.to_string();
            prop_assert_eq!(Selector::parse(&text).unwrap(), sel);
        }

        #[test]
        fn parse_never_panics(input in "[a-z=!,() <>in-]{0,30}") {
            let _ = Selector::parse(&input);
        }

        #[test]
        fn parsed_selectors_agree_with_round_trip_on_matching(
            reqs in proptest::collection::vec(arb_requirement(), 0..4),
            pairs in proptest::collection::btree_map(arb_key(), arb_value(), 0..4),
        ) {
            let sel = Selector::from_requirements(reqs);
            let again = Selector::parse(&sel.to_string()).unwrap();
            prop_assert_eq!(sel.matches(&pairs), again.matches(&pairs));
        }
    }
}
