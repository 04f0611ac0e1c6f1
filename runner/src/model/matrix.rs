//! A stage's own `matrix`: keys with lists of scalar values, each value once. The product and
//! the joins with upstream matrices are the planner's (`plan`, `join`).

use std::collections::BTreeSet;
use std::ops::Range;

use serde_json::Value;

use super::loader::Loader;

/// A stage's matrix keys with their values, in file order.
type Keys = Vec<(String, Vec<Value>)>;
use super::valid_name;
use super::value::{toml_to_json, value_text};
use crate::spec::RawStage;

impl Loader {
    /// The matrix keys in file order, and the span of the first (where planner errors point).
    pub(super) fn matrix(&mut self, r: &RawStage) -> (Keys, Option<Range<usize>>) {
        let mut matrix = Vec::new();
        let mut matrix_span = None;
        for (k, vals) in r.matrix.iter().flatten() {
            let key = k.get_ref();
            matrix_span.get_or_insert(k.span());
            if !valid_name(key) {
                self.err(
                    k.span(),
                    format!("matrix key `{key}` must be letters, digits, `-` or `_`"),
                );
            }
            if vals.get_ref().is_empty() {
                self.err(vals.span(), format!("matrix key `{key}` has no values"));
                continue;
            }
            let vs: Vec<Value> = vals.get_ref().iter().map(toml_to_json).collect();
            let mut seen = BTreeSet::new();
            for v in &vs {
                if matches!(v, Value::Array(_) | Value::Object(_)) {
                    self.err(
                        vals.span(),
                        format!("matrix key `{key}`: values must be strings, numbers or booleans"),
                    );
                    break;
                }
                if !seen.insert(value_text(v)) {
                    self.err(
                        vals.span(),
                        format!("matrix key `{key}` repeats the value `{}`", value_text(v)),
                    );
                }
            }
            matrix.push((key.clone(), vs));
        }
        (matrix, matrix_span)
    }
}
