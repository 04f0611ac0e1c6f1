//! Two runs compared, as `dvc params diff` and `dvc metrics diff` compare experiments: the
//! params that changed, the instances whose cache keys changed and why, every number in the
//! report tables side by side with its delta, and the facts stages reported that changed.
//!
//! Numbers are paired by [`compare_blocks`], the logbook's own cell-by-cell comparison, with run
//! A in the entry's place: a number has *moved* when B does not agree with A to the digits A
//! printed (the same rule `heddle logbook verify` applies), so a rerun that only adds noise
//! below the printed precision reports nothing moved. Key changes reuse the runner's typed
//! [`Change`]s over the expanded keys each record keeps, so they read as `heddle plan` reasons.
//!
//! [`RunDiff`] serialises as the `--json` output; [`RunDiff::text`] is the terminal rendering.

use std::collections::BTreeMap;

use heddle_runner::key::{Change, KeyParts};
use heddle_schema::{InstanceRecord, RunRecord, Status};
use serde::Serialize;
use serde_json::Value;

use crate::compare::{compare_blocks, parse_number, Rule};
use crate::entry::Table;

mod text;
pub use text::delta_text;
use text::value_text;

/// One side of a comparison: a run record and the report tables it produced
/// ([`crate::artefacts::tables`]).
#[derive(Debug, Clone, Copy)]
pub struct RunSide<'a> {
    pub record: &'a RunRecord,
    pub tables: &'a [Table],
}

/// Everything that differs between run A and run B.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunDiff {
    pub a: RunId,
    pub b: RunId,
    pub params: Vec<ParamChange>,
    pub instances: Vec<InstanceChange>,
    pub tables: Vec<TableDiff>,
    pub facts: Vec<FactChange>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunId {
    pub run_id: String,
    pub pipeline: String,
}

/// A param set in either run with different values (absent on one side: `None`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ParamChange {
    pub name: String,
    pub a: Option<Value>,
    pub b: Option<Value>,
}

impl ParamChange {
    /// `name=a→b` as `heddle diff` prints the values, each cut to `max` characters (`…`).
    pub fn text(&self, max: usize) -> String {
        let cut = |v: Option<&Value>| {
            let t = value_text(v);
            match t.char_indices().nth(max.saturating_sub(1)) {
                Some((i, _)) if t.chars().count() > max => format!("{}…", &t[..i]),
                _ => t,
            }
        };
        format!(
            "{}={}→{}",
            self.name,
            cut(self.a.as_ref()),
            cut(self.b.as_ref())
        )
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum InstanceDelta {
    /// Only in run B.
    Added,
    /// Only in run A.
    Removed,
    /// Its cache key differs; `changes` says what went into it differently (empty when a
    /// record lacks its expanded key).
    KeyChanged { changes: Vec<Change> },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InstanceChange {
    pub label: String,
    pub delta: InstanceDelta,
    /// `ok`, `failed` or `skipped` in each run (`None` where absent).
    pub status_a: Option<Status>,
    pub status_b: Option<Status>,
}

/// One report table (`label#output`) in both runs, number by number.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TableDiff {
    pub src: String,
    pub presence: Presence,
    pub numbers: Vec<NumberDiff>,
    /// Cells or words that differ and are not both numbers (`FAILED` → `72.9%`, a renamed row).
    pub text: Vec<TextDiff>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Presence {
    Both,
    OnlyA,
    OnlyB,
}

/// A number as each run printed it, with B − A.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NumberDiff {
    /// `a16_w16: row "3e-02" col "r"`; a repeated column name gets ` #2`, ` #3`, … in order.
    pub place: String,
    pub a: String,
    pub b: String,
    pub delta: f64,
    /// delta / |a|, when a is not zero.
    pub relative: Option<f64>,
    /// B differs from A beyond the digits A printed.
    pub moved: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TextDiff {
    pub place: String,
    pub a: String,
    pub b: String,
}

/// A value an instance reported (`$HEDDLE_FACTS_FILE`) that differs, by JSON path, where both
/// runs recorded the instance's facts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FactChange {
    pub label: String,
    pub path: String,
    pub a: Option<Value>,
    pub b: Option<Value>,
}

impl RunDiff {
    /// Numbers that moved, over every table.
    pub fn moved(&self) -> impl Iterator<Item = (&str, &NumberDiff)> {
        self.tables
            .iter()
            .flat_map(|t| t.numbers.iter().map(move |n| (t.src.as_str(), n)))
            .filter(|(_, n)| n.moved)
    }
}

/// Compare run A with run B.
pub fn diff(a: RunSide, b: RunSide) -> RunDiff {
    RunDiff {
        a: run_id(a.record),
        b: run_id(b.record),
        params: param_changes(&a.record.params, &b.record.params),
        instances: instances(a.record, b.record),
        tables: tables(a.tables, b.tables),
        facts: facts(a.record, b.record),
    }
}

fn run_id(r: &RunRecord) -> RunId {
    RunId {
        run_id: r.run_id.clone(),
        pipeline: r.pipeline.clone(),
    }
}

/// The params set in either map with different values, by name (`heddle runs` lists them per
/// run against the run before it).
pub fn param_changes(a: &BTreeMap<String, Value>, b: &BTreeMap<String, Value>) -> Vec<ParamChange> {
    let mut names: Vec<&String> = a.keys().chain(b.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter(|n| a.get(*n) != b.get(*n))
        .map(|n| ParamChange {
            name: n.clone(),
            a: a.get(n).cloned(),
            b: b.get(n).cloned(),
        })
        .collect()
}

fn key_changes(a: &InstanceRecord, b: &InstanceRecord) -> Vec<Change> {
    let parts = |r: &InstanceRecord| {
        r.key_parts
            .as_ref()
            .and_then(|v| serde_json::from_str::<KeyParts>(v.get()).ok())
    };
    match (parts(a), parts(b)) {
        (Some(pa), Some(pb)) => heddle_runner::explain::diff(&pa, &pb),
        _ => Vec::new(),
    }
}

/// Instances in B's plan order, then those only A had.
fn instances(a: &RunRecord, b: &RunRecord) -> Vec<InstanceChange> {
    let in_a: BTreeMap<&str, &InstanceRecord> =
        a.instances.iter().map(|(l, r)| (l.as_str(), r)).collect();
    let in_b: BTreeMap<&str, &InstanceRecord> =
        b.instances.iter().map(|(l, r)| (l.as_str(), r)).collect();
    let mut out = Vec::new();
    for (label, rb) in &b.instances {
        let delta = match in_a.get(label.as_str()) {
            None => InstanceDelta::Added,
            Some(ra) if ra.cache_key != rb.cache_key => InstanceDelta::KeyChanged {
                changes: key_changes(ra, rb),
            },
            Some(_) => continue,
        };
        out.push(InstanceChange {
            label: label.clone(),
            delta,
            status_a: in_a.get(label.as_str()).map(|r| r.status.status),
            status_b: Some(rb.status.status),
        });
    }
    for (label, ra) in &a.instances {
        if !in_b.contains_key(label.as_str()) {
            out.push(InstanceChange {
                label: label.clone(),
                delta: InstanceDelta::Removed,
                status_a: Some(ra.status.status),
                status_b: None,
            });
        }
    }
    out
}

fn tables(a: &[Table], b: &[Table]) -> Vec<TableDiff> {
    let mut out = Vec::new();
    for tb in b {
        match a.iter().find(|ta| ta.src == tb.src) {
            Some(ta) => out.push(table(ta, tb)),
            None => out.push(TableDiff {
                src: tb.src.clone(),
                presence: Presence::OnlyB,
                numbers: Vec::new(),
                text: Vec::new(),
            }),
        }
    }
    for ta in a.iter().filter(|ta| !b.iter().any(|tb| tb.src == ta.src)) {
        out.push(TableDiff {
            src: ta.src.clone(),
            presence: Presence::OnlyA,
            numbers: Vec::new(),
            text: Vec::new(),
        });
    }
    out
}

/// One table in both runs: A's text takes the entry's place in the logbook's comparison.
fn table(a: &Table, b: &Table) -> TableDiff {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut numbers = Vec::new();
    let mut text = Vec::new();
    for v in compare_blocks(&a.markdown, &b.markdown, Rule::Printed) {
        let n = seen.entry(v.place.clone()).or_default();
        *n += 1;
        let place = if *n == 1 {
            v.place
        } else {
            format!("{} #{n}", v.place)
        };
        match (parse_number(&v.entry), parse_number(&v.now)) {
            (Some(x), Some(y)) if v.allowed.is_some() => numbers.push(NumberDiff {
                place,
                a: v.entry,
                b: v.now,
                delta: y - x,
                relative: (x != 0.0).then(|| (y - x) / x.abs()),
                moved: !v.ok,
            }),
            _ => text.push(TextDiff {
                place,
                a: v.entry,
                b: v.now,
            }),
        }
    }
    TableDiff {
        src: b.src.clone(),
        presence: Presence::Both,
        numbers,
        text,
    }
}

/// A JSON value as path → leaf (`device.firmware`, `temps[1]`).
fn flatten(prefix: &str, v: &Value, out: &mut BTreeMap<String, Value>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&p, x, out);
            }
        }
        Value::Array(xs) => {
            for (i, x) in xs.iter().enumerate() {
                flatten(&format!("{prefix}[{i}]"), x, out);
            }
        }
        leaf => {
            out.insert(prefix.to_string(), leaf.clone());
        }
    }
}

fn facts(a: &RunRecord, b: &RunRecord) -> Vec<FactChange> {
    let flat = |r: &InstanceRecord| {
        let mut m = BTreeMap::new();
        if let Some(f) = &r.facts {
            flatten("", f, &mut m);
        }
        m
    };
    let in_a: BTreeMap<&str, &InstanceRecord> =
        a.instances.iter().map(|(l, r)| (l.as_str(), r)).collect();
    let mut out = Vec::new();
    for (label, rb) in &b.instances {
        // A record served from the cache carries no facts (the stage did not run), which says
        // nothing about them: only instances with facts on both sides are compared.
        let Some(ra) = in_a.get(label.as_str()) else {
            continue;
        };
        if ra.facts.is_none() || rb.facts.is_none() {
            continue;
        }
        let (fa, fb) = (flat(ra), flat(rb));
        let mut paths: Vec<&String> = fa.keys().chain(fb.keys()).collect();
        paths.sort();
        paths.dedup();
        for p in paths.into_iter().filter(|p| fa.get(*p) != fb.get(*p)) {
            out.push(FactChange {
                label: label.clone(),
                path: p.clone(),
                a: fa.get(p).cloned(),
                b: fb.get(p).cloned(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_keep_four_significant_figures() {
        assert_eq!(delta_text(3.0), "+3");
        assert_eq!(delta_text(-0.0125), "-0.0125");
        assert_eq!(delta_text(0.1 + 0.2 - 0.3), "+5.551e-17");
        assert_eq!(delta_text(1234.5678), "+1235");
        assert_eq!(delta_text(0.0), "0");
    }

    fn t(src: &str, md: &str) -> Table {
        Table {
            src: src.into(),
            digest: String::new(),
            markdown: md.into(),
        }
    }

    #[test]
    fn numbers_pair_up_with_deltas_and_repeated_columns_stay_apart() {
        let a = t(
            "compare#table",
            "## a16_w16\n| eps | X sign | r | Y sign | r |\n| --- | --- | --- | --- | --- |\n| 3e-02 | 95.8% | +0.993 | 43.8% | -0.258 |\n",
        );
        let b = t(
            "compare#table",
            "## a16_w16\n| eps | X sign | r | Y sign | r |\n| --- | --- | --- | --- | --- |\n| 3e-02 | 95.8% | +0.99301 | 45.8% | FAILED |\n",
        );
        let d = table(&a, &b);
        let places: Vec<&str> = d.numbers.iter().map(|n| n.place.as_str()).collect();
        assert_eq!(
            places,
            [
                "a16_w16: row \"3e-02\" col \"X sign\"",
                "a16_w16: row \"3e-02\" col \"r\"",
                "a16_w16: row \"3e-02\" col \"Y sign\"",
            ]
        );
        // Noise below A's printed digits is not a move; 43.8% → 45.8% is.
        assert_eq!(
            d.numbers.iter().map(|n| n.moved).collect::<Vec<_>>(),
            [false, false, true]
        );
        assert!((d.numbers[2].delta - 2.0).abs() < 1e-9);
        assert_eq!(
            d.text,
            [TextDiff {
                place: "a16_w16: row \"3e-02\" col \"r\" #2".into(),
                a: "-0.258".into(),
                b: "FAILED".into()
            }]
        );
    }

    #[test]
    fn a_param_change_reads_name_old_new_with_long_values_cut() {
        let c = |a: Option<Value>, b: Option<Value>| ParamChange {
            name: "quant".into(),
            a,
            b,
        };
        let (a8, a16) = (Value::from("a8_w8"), Value::from("a16_w16"));
        assert_eq!(
            c(Some(a8.clone()), Some(a16)).text(16),
            "quant=a8_w8→a16_w16"
        );
        assert_eq!(c(None, Some(a8)).text(16), "quant=(unset)→a8_w8");
        let long = Value::from("abcdefghijklmnopqrstuvwxyz");
        assert_eq!(
            c(Some(long), Some(Value::from(2))).text(8),
            "quant=abcdefg…→2"
        );
    }
}
