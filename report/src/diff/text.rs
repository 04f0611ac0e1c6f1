//! The terminal rendering of a [`RunDiff`]: aligned columns of params, instances, every
//! number of every table (moved ones marked `*`) and facts.

use std::fmt::Write;

use heddle_runner::key::Change;
use heddle_schema::Status;
use serde_json::Value;

use super::{InstanceChange, InstanceDelta, Presence, RunDiff, TableDiff};

pub(super) fn value_text(v: Option<&Value>) -> String {
    match v {
        None => "(unset)".into(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// A delta to four significant figures, signed: `+3`, `-0.0125`, `+1.234e-05`.
pub fn delta_text(d: f64) -> String {
    if d == 0.0 {
        return "0".into();
    }
    let mag = d.abs().log10().floor() as i32;
    if !(-4..6).contains(&mag) {
        return format!("{d:+.3e}");
    }
    let decimals = (3 - mag).max(0) as usize;
    let t = format!("{d:+.decimals$}");
    if t.contains('.') {
        t.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        t
    }
}

/// A section of changes: `{title}: N changed`, then one aligned line per change.
fn changed(out: &mut String, title: &str, rows: impl Iterator<Item = Vec<String>>) {
    let rows: Vec<Vec<String>> = rows.collect();
    let _ = writeln!(out, "\n{title}: {} changed", rows.len());
    aligned(&rows, out);
}

/// The cells of one changed value: what it is (`names`), then `a → b`.
fn change_row(names: &[&str], a: &Option<Value>, b: &Option<Value>) -> Vec<String> {
    let values = [value_text(a.as_ref()), "→".into(), value_text(b.as_ref())];
    names.iter().map(|n| n.to_string()).chain(values).collect()
}

/// Rows padded to the width of each column, two spaces apart.
fn aligned(rows: &[Vec<String>], out: &mut String) {
    let widths: Vec<usize> = (0..rows.iter().map(Vec::len).max().unwrap_or(0))
        .map(|j| {
            rows.iter()
                .filter_map(|r| r.get(j))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in rows {
        let mut line = String::from(" ");
        for (j, c) in r.iter().enumerate() {
            let pad = widths[j].saturating_sub(c.chars().count());
            let _ = write!(line, " {c}{}", " ".repeat(pad));
            line.push(' ');
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

impl RunDiff {
    /// The terminal rendering: params, instances, then each table's numbers that moved (with
    /// `all`, every number, moved ones marked `*`), then facts. Sections with nothing in them
    /// say so in one line.
    pub fn text(&self, all: bool) -> String {
        let mut out = format!(
            "run A {} → run B {} (pipeline {})\n",
            self.a.run_id, self.b.run_id, self.b.pipeline
        );
        let params = self
            .params
            .iter()
            .map(|p| change_row(&[&p.name], &p.a, &p.b));
        changed(&mut out, "params", params);
        let instances = self
            .instances
            .iter()
            .map(|i| vec![i.label.clone(), instance_text(i)]);
        changed(&mut out, "instances", instances);
        for t in &self.tables {
            self.table_text(t, all, &mut out);
        }
        if !self.facts.is_empty() {
            let facts = self.facts.iter();
            let facts = facts.map(|f| change_row(&[&f.label, &f.path], &f.a, &f.b));
            changed(&mut out, "facts", facts);
        }
        out
    }

    fn table_text(&self, t: &TableDiff, all: bool, out: &mut String) {
        match t.presence {
            Presence::OnlyA => {
                let _ = writeln!(out, "\ntable {}: only in run A", t.src);
                return;
            }
            Presence::OnlyB => {
                let _ = writeln!(out, "\ntable {}: only in run B", t.src);
                return;
            }
            Presence::Both => {}
        }
        let moved = t.numbers.iter().filter(|n| n.moved).count();
        let _ = writeln!(
            out,
            "\ntable {}: {} numbers, {moved} moved",
            t.src,
            t.numbers.len()
        );
        if !all && moved == 0 && t.text.is_empty() {
            return;
        }
        let mut rows: Vec<Vec<String>> = vec![vec![
            String::new(),
            "where".into(),
            "A".into(),
            "B".into(),
            "B − A".into(),
        ]];
        rows.extend(t.numbers.iter().filter(|n| all || n.moved).map(|n| {
            let rel = n
                .relative
                .filter(|_| n.delta != 0.0)
                .map(|r| format!(" ({:+.1}%)", r * 100.0))
                .unwrap_or_default();
            vec![
                if n.moved { "*" } else { "" }.into(),
                n.place.clone(),
                n.a.clone(),
                n.b.clone(),
                format!("{}{rel}", delta_text(n.delta)),
            ]
        }));
        rows.extend(t.text.iter().map(|x| {
            vec![
                "*".into(),
                x.place.clone(),
                x.a.clone(),
                x.b.clone(),
                "(text)".into(),
            ]
        }));
        aligned(&rows, out);
    }
}

fn instance_text(i: &InstanceChange) -> String {
    let status = match (i.status_a, i.status_b) {
        (Some(a), Some(b)) if a != b => format!(" [{} → {}]", status_word(a), status_word(b)),
        _ => String::new(),
    };
    match &i.delta {
        InstanceDelta::Added => format!("only in run B{status}"),
        InstanceDelta::Removed => format!("only in run A{status}"),
        InstanceDelta::KeyChanged { changes } if changes.is_empty() => {
            format!("key changed{status}")
        }
        InstanceDelta::KeyChanged { changes } => {
            let parts: Vec<String> = changes.iter().map(Change::to_string).collect();
            format!("{}{status}", parts.join("; "))
        }
    }
}

fn status_word(s: Status) -> &'static str {
    match s {
        Status::Ok => "ok",
        Status::Failed => "failed",
        Status::Skipped => "skipped",
    }
}
