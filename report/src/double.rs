//! Numbers that come from a test double, labelled wherever they reach a person. A stage that ran
//! against a double says so in its facts (`$HEDDLE_FACTS_FILE`: a `test_double` value anywhere
//! in them, as `dfc/identify` and `hailo/deploy` write it); every instance downstream of it, by
//! the record's `deps`, carries the double's numbers. Their report tables get `(double)` in the
//! first cell of every row, in the terminal summary, the HTML report and logbook blocks alike,
//! so a row copied out of its table still says what made it.

use std::collections::BTreeSet;

use heddle_schema::RunRecord;
use serde_json::Value;

/// What a labelled row ends its first cell with.
pub const LABEL: &str = "(double)";

/// Whether `facts` name a test double: a non-empty `test_double` value at any depth.
pub fn names_double(facts: &Value) -> bool {
    match facts {
        Value::Object(m) => m.iter().any(|(k, v)| {
            (k == "test_double"
                && !matches!(v, Value::Null | Value::Bool(false))
                && v.as_str() != Some(""))
                || names_double(v)
        }),
        Value::Array(a) => a.iter().any(names_double),
        _ => false,
    }
}

/// The labels of the instances whose upstream cone (themselves included) holds an instance
/// whose facts name a test double.
pub fn downstream_of_doubles(rec: &RunRecord) -> BTreeSet<String> {
    let mut tainted: BTreeSet<&str> = rec
        .instances
        .iter()
        .filter(|(_, r)| r.facts.as_ref().is_some_and(names_double))
        .map(|(l, _)| l.as_str())
        .collect();
    // Records list instances in plan order, upstream first, so one pass usually settles it; the
    // loop only guards against a record in another order.
    loop {
        let before = tainted.len();
        for (l, r) in &rec.instances {
            if !tainted.contains(l.as_str()) && r.deps.iter().any(|d| tainted.contains(d.as_str()))
            {
                tainted.insert(l);
            }
        }
        if tainted.len() == before {
            return tainted.into_iter().map(str::to_string).collect();
        }
    }
}

/// `md` with [`LABEL`] at the end of the first cell of every data row of every table in it.
pub fn label_rows(md: &str) -> String {
    let mut out = String::with_capacity(md.len() + 64);
    let mut row = None::<usize>;
    for line in md.split_inclusive('\n') {
        let body = line.trim_end_matches(['\n', '\r']);
        let t = body.trim_start();
        if !t.starts_with('|') {
            row = None;
            out.push_str(line);
            continue;
        }
        let n = row.map_or(0, |n| n + 1);
        row = Some(n);
        // Row 0 is the header, row 1 the `|---|` separator.
        let first_end = t[1..].find('|').map(|i| i + 1);
        match first_end {
            Some(end) if n >= 2 && !t[..end].trim_end().ends_with(LABEL) => {
                let indent = &body[..body.len() - t.len()];
                let cell = t[..end].trim_end();
                out.push_str(indent);
                out.push_str(cell);
                out.push(' ');
                out.push_str(LABEL);
                out.push(' ');
                out.push_str(&t[end..]);
                out.push_str(&line[body.len()..]);
            }
            _ => out.push_str(line),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_data_row_of_every_table_is_labelled_once() {
        let md = "# t\n\n| a | b |\n|---|---|\n| x | 1 |\n| y | 2 |\n\ntext\n| c |\n| - |\n| z |\n";
        let once = label_rows(md);
        assert_eq!(
            once,
            "# t\n\n| a | b |\n|---|---|\n| x (double) | 1 |\n| y (double) | 2 |\n\ntext\n| c |\n| - |\n| z (double) |\n"
        );
        assert_eq!(label_rows(&once), once);
    }

    #[test]
    fn facts_name_a_double_at_any_depth() {
        assert!(names_double(
            &serde_json::json!({"dfc": {"test_double": "TEST DOUBLE"}})
        ));
        assert!(!names_double(
            &serde_json::json!({"dfc": {"test_double": null}})
        ));
        assert!(!names_double(&serde_json::json!({"version": "3.33.0"})));
    }
}
