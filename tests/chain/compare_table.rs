//! The eps tables of `compare.md` (mezo/compare's report), parsed back into numbers so a test
//! can hold them against the probes' own JSON.

use crate::support::records::table_cells;

/// One row of a compare.md block: precision, context, eps, sign %, r, ratio.
#[derive(Debug, Clone)]
pub struct Row {
    pub precision: String,
    pub context: String,
    pub eps: f64,
    pub sign: f64,
    pub r: f64,
    pub ratio: f64,
}

fn num(cell: &str, what: &str) -> f64 {
    let c = cell
        .trim()
        .trim_end_matches('%')
        .trim_end_matches('x')
        .replace(',', "");
    c.parse()
        .unwrap_or_else(|_| panic!("{what}: `{cell}` is not a number"))
}

/// Parse every `## precision` block's eps table of compare.md.
pub fn parse_compare(md: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut precision = String::new();
    let mut contexts: Vec<String> = Vec::new();
    let mut in_table = false;
    for line in md.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            precision = h.trim().to_string();
            in_table = false;
            continue;
        }
        if !line.starts_with('|') {
            in_table = false;
            continue;
        }
        let cells = table_cells(line);
        if cells[0] == "eps" {
            contexts = cells[1..]
                .chunks(3)
                .map(|c| {
                    assert_eq!(&c[1..], ["r", "ratio"], "header {line}");
                    c[0].strip_suffix(" sign")
                        .unwrap_or_else(|| panic!("header cell {}", c[0]))
                        .to_string()
                })
                .collect();
            in_table = true;
            continue;
        }
        if !in_table || cells[0].starts_with("---") {
            continue;
        }
        let eps = num(cells[0], "eps");
        assert_eq!(cells.len(), 1 + 3 * contexts.len(), "row {line}");
        for (k, ctx) in contexts.iter().enumerate() {
            let c = &cells[1 + 3 * k..4 + 3 * k];
            rows.push(Row {
                precision: precision.clone(),
                context: ctx.clone(),
                eps,
                sign: num(c[0], "sign"),
                r: num(c[1], "r"),
                ratio: num(c[2], "ratio"),
            });
        }
    }
    rows
}
