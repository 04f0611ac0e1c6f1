//! The DAG as SVG: one box per instance, layered by depth (longest path from a source), columns
//! centred on each other, edges as curves, coloured by status.
//!
//! A box shows the whole instance, never a cut label: the stage name on the first line and its
//! matrix values on the second (`probe` / `ORT_QDQ_EMULATED · a16_w16`); the full label
//! (`probe[context=ORT_QDQ_EMULATED,precision=a16_w16]`) is the box's tooltip. Every box is as wide
//! as the longest line in the graph, measured in monospace advances, so columns line up. Cutting
//! labels at 34 characters made the matrix instances of mezo-ort indistinguishable.

use std::collections::BTreeMap;
use std::fmt::Write;

use heddle_schema::{InstanceRecord, RunRecord};

use super::{esc, fill, status_class};

/// Font size of node text, px.
const FONT: f64 = 12.0;
/// Advance of one monospace character at [`FONT`] (DejaVu Sans Mono: 0.602 em), rounded up so
/// text never touches the box edge.
const CHAR_W: f64 = 7.4;
const PAD_X: f64 = 10.0;
const GAP_X: f64 = 64.0;
const GAP_Y: f64 = 14.0;

/// What a node box says: the stage, and the matrix values when the instance has any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeText {
    pub stage: String,
    pub matrix: Option<String>,
}

/// Split an instance into its box lines. The matrix comes from the record's status (values only,
/// keys are in the tooltip); a record without one falls back to the label's `[k=v,…]` part.
pub fn node_text(label: &str, r: &InstanceRecord) -> NodeText {
    let values: Vec<String> = r.status.matrix.values().map(value_text).collect();
    if !values.is_empty() {
        return NodeText {
            stage: r.stage.clone(),
            matrix: Some(values.join(" · ")),
        };
    }
    match label.split_once('[') {
        Some((stage, rest)) => NodeText {
            stage: stage.to_string(),
            matrix: Some(
                rest.trim_end_matches(']')
                    .split(',')
                    .map(|kv| kv.split_once('=').map_or(kv, |(_, v)| v))
                    .collect::<Vec<_>>()
                    .join(" · "),
            ),
        },
        None => NodeText {
            stage: label.to_string(),
            matrix: None,
        },
    }
}

fn value_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Each instance's position in the record, by label.
fn positions(rec: &RunRecord) -> BTreeMap<&str, usize> {
    rec.instances
        .iter()
        .enumerate()
        .map(|(i, (l, _))| (l.as_str(), i))
        .collect()
}

/// Depth of every instance: the longest path from a source. Records list instances in
/// topological order, so one pass suffices.
fn depths(rec: &RunRecord) -> Vec<usize> {
    let index = positions(rec);
    let mut depth = vec![0usize; rec.instances.len()];
    for (i, (_, r)) in rec.instances.iter().enumerate() {
        depth[i] = r
            .deps
            .iter()
            .filter_map(|d| index.get(d.as_str()))
            .map(|&d| depth[d] + 1)
            .max()
            .unwrap_or(0);
    }
    depth
}

/// Top-left corner of every box, with the drawing's width and height.
struct Layout {
    xy: Vec<(f64, f64)>,
    w: f64,
    h: f64,
    width: f64,
    height: f64,
}

fn layout(depth: &[usize], texts: &[NodeText]) -> Layout {
    let longest = texts
        .iter()
        .flat_map(|t| std::iter::once(&t.stage).chain(t.matrix.as_ref()))
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(1);
    // Whole pixels keep every coordinate short and exact in the SVG.
    let w = (longest as f64 * CHAR_W + 2.0 * PAD_X).max(90.0).ceil();
    let two_lines = texts.iter().any(|t| t.matrix.is_some());
    let h = if two_lines { 40.0 } else { 26.0 };
    let mut per_col: BTreeMap<usize, usize> = BTreeMap::new();
    let mut slot = vec![0usize; depth.len()];
    for (i, d) in depth.iter().enumerate() {
        let n = per_col.entry(*d).or_default();
        slot[i] = *n;
        *n += 1;
    }
    let cols = depth.iter().max().map_or(1, |d| d + 1);
    let rows = per_col.values().max().copied().unwrap_or(1);
    let xy = depth
        .iter()
        .zip(&slot)
        .map(|(d, s)| {
            // A column with fewer boxes sits centred against the tallest one.
            let offset = (rows - per_col[d]) as f64 * (h + GAP_Y) / 2.0;
            (
                10.0 + *d as f64 * (w + GAP_X),
                10.0 + offset + *s as f64 * (h + GAP_Y),
            )
        })
        .collect();
    Layout {
        xy,
        w,
        h,
        width: cols as f64 * (w + GAP_X) - GAP_X + 20.0,
        height: rows as f64 * (h + GAP_Y) - GAP_Y + 20.0,
    }
}

/// The DAG as one `<svg class="dag">`.
pub fn dag_svg(rec: &RunRecord) -> String {
    let depth = depths(rec);
    let texts: Vec<NodeText> = rec.instances.iter().map(|(l, r)| node_text(l, r)).collect();
    let Layout {
        xy,
        w,
        h,
        width,
        height,
    } = layout(&depth, &texts);
    let index = positions(rec);
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="dag" width="{width}" height="{height}" viewBox="0 0 {width} {height}">"#
    );
    for (i, (_, r)) in rec.instances.iter().enumerate() {
        for d in r.deps.iter().filter_map(|d| index.get(d.as_str())) {
            let ((x0, y0), (x1, y1)) = (xy[*d], xy[i]);
            let (sx, sy, ex, ey) = (x0 + w, y0 + h / 2.0, x1, y1 + h / 2.0);
            let mx = (sx + ex) / 2.0;
            let _ = write!(
                s,
                r##"<path d="M{sx},{sy} C{mx},{sy} {mx},{ey} {ex},{ey}" fill="none" stroke="#90a4ae" stroke-width="1.2"/>"##
            );
        }
    }
    for (i, ((label, r), text)) in rec.instances.iter().zip(&texts).enumerate() {
        let (x, y) = xy[i];
        let class = status_class(r.status.status, r.cached);
        let dash = if r.cached {
            r#" stroke-dasharray="4 2""#
        } else {
            ""
        };
        let _ = write!(
            s,
            r##"<g class="node {class}"><title>{} — {class}</title><rect x="{x}" y="{y}" width="{w}" height="{h}" rx="6" fill="{}" stroke="#455a64"{dash}/>"##,
            esc(label),
            fill(class),
        );
        let tx = x + PAD_X;
        match &text.matrix {
            Some(m) => {
                let _ = write!(
                    s,
                    r##"<text class="stage" x="{tx}" y="{}" font-family="monospace" font-size="{FONT}" font-weight="bold">{}</text><text class="matrix" x="{tx}" y="{}" font-family="monospace" font-size="{FONT}">{}</text></g>"##,
                    y + 16.0,
                    esc(&text.stage),
                    y + 32.0,
                    esc(m)
                );
            }
            None => {
                let _ = write!(
                    s,
                    r##"<text class="stage" x="{tx}" y="{}" font-family="monospace" font-size="{FONT}" font-weight="bold">{}</text></g>"##,
                    y + h / 2.0 + 4.0,
                    esc(&text.stage)
                );
            }
        }
    }
    s.push_str("</svg>");
    s
}
