//! What `heddle runs` says about each run beyond its counts: the params it changed against the
//! run of the same pipeline before it (as `heddle diff` would list them) and its headline number
//! (`heddle_report::headline`: the first number in a cell of its report tables). Both come from
//! the report crate's readers, so the list, `heddle diff` and the logbook agree on every value.

use std::collections::BTreeMap;
use std::path::Path;

use heddle_cache::Store;
use heddle_report::diff::{param_changes, ParamChange};
use heddle_report::headline::{headline, Headline};
use heddle_runner::record::RunRecord;

use crate::artefacts::tables;

/// A param value longer than this is cut (`…`) in the list; `heddle diff` shows it whole.
const VALUE_CHARS: usize = 16;
/// The changed-params column stops adding changes past this width and says how many it left.
const COLUMN_CHARS: usize = 48;

/// One run's extra columns.
#[derive(Debug)]
pub struct RunColumns {
    /// The run of the same pipeline just before this one; `None` for its first run.
    pub previous: Option<String>,
    /// Params that differ from `previous` (empty without one).
    pub changed: Vec<ParamChange>,
    pub headline: Option<Headline>,
}

/// The columns of every run in `rows` (oldest first, as `record::list` orders them). Without a
/// store (the cache could not be opened) no run has a headline: the list itself needs only the
/// run records, so a broken cache does not hide them.
pub fn columns(store: Option<&Store>, root: &Path, rows: &[RunRecord]) -> Vec<RunColumns> {
    let mut last: BTreeMap<&str, &RunRecord> = BTreeMap::new();
    rows.iter()
        .map(|r| {
            let prev = last.insert(r.pipeline.as_str(), r);
            let tables = match store {
                Some(s) => tables(s, root, r),
                None => Vec::new(),
            };
            RunColumns {
                previous: prev.map(|p| p.run_id.clone()),
                changed: prev
                    .map(|p| param_changes(&p.params, &r.params))
                    .unwrap_or_default(),
                headline: headline(&tables),
            }
        })
        .collect()
}

/// `quant=a8_w8→a16_w16, seed=0→1`, at most about [`COLUMN_CHARS`] wide: changes that do not
/// fit are counted (`+2 more`).
pub fn changed_text(changes: &[ParamChange]) -> String {
    let mut out = String::new();
    for (i, c) in changes.iter().enumerate() {
        let t = c.text(VALUE_CHARS);
        let sep = if out.is_empty() { "" } else { ", " };
        if !out.is_empty() && out.chars().count() + sep.len() + t.chars().count() > COLUMN_CHARS {
            out.push_str(&format!(" +{} more", changes.len() - i));
            break;
        }
        out.push_str(sep);
        out.push_str(&t);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn changes_that_do_not_fit_are_counted() {
        let c = |name: &str| ParamChange {
            name: name.into(),
            a: Some(json!("aaaaaaaaaa")),
            b: Some(json!("bbbbbbbbbb")),
        };
        let all: Vec<ParamChange> = ["p1", "p2", "p3", "p4"].map(c).to_vec();
        assert_eq!(changed_text(&all), "p1=aaaaaaaaaa→bbbbbbbbbb +3 more");
        assert_eq!(changed_text(&all[..1]), "p1=aaaaaaaaaa→bbbbbbbbbb");
        assert_eq!(changed_text(&[]), "");
    }
}
