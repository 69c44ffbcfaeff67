//! Field paths built lazily on the stack: the hot path only links references together and a
//! string is formatted only when an error needs it.

use std::fmt;

use serde_json::Value;

use crate::listkey::{KeySpec, ListKey};

/// One step from the root to the current field.
#[derive(Clone, Copy)]
pub(crate) enum Path<'a> {
    Root,
    Field(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
    Item(&'a Path<'a>, &'a ListKey<'a>),
    /// A list-map item named by its key, computed only when the path is rendered.
    Keyed(&'a Path<'a>, KeySpec<'a>, &'a Value),
}

impl Path<'_> {
    pub(crate) fn render(&self) -> String {
        let s = self.to_string();
        if s.is_empty() {
            ".".to_string()
        } else {
            s
        }
    }
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Root => Ok(()),
            Path::Field(parent, name) => {
                parent.fmt(f)?;
                let plain = !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
                if plain {
                    write!(f, ".{name}")
                } else {
                    write!(f, "[{name:?}]")
                }
            }
            Path::Index(parent, i) => {
                parent.fmt(f)?;
                write!(f, "[{i}]")
            }
            Path::Item(parent, key) => {
                parent.fmt(f)?;
                write!(f, "[{key}]")
            }
            Path::Keyed(parent, spec, item) => {
                parent.fmt(f)?;
                match spec.key_of(item, parent) {
                    Ok(key) => write!(f, "[{key}]"),
                    // Not constructed for items without a valid key; keep Display total.
                    Err(_) => f.write_str("[?]"),
                }
            }
        }
    }
}
