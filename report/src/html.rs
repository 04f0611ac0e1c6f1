//! A run as one self-contained HTML page: the DAG as SVG coloured by status, a timeline (one
//! bar per instance, cached ones marked), the slowest instances, the report stages' tables, and
//! their plots. No network, no script, no external resource. Charts are drawn with plotters'
//! SVG backend; only the DAG's layered layout is ours.

use std::collections::BTreeMap;
use std::fmt::Write;

use heddle_schema::{RunRecord, Status};
use plotters::prelude::*;
use serde::Deserialize;

use crate::entry::Table;

/// Plots a report stage asks for: an output whose file ends in `.plots.json`, schema
/// `{"plots": [PlotSpec, ...]}`.
#[derive(Debug, Clone, Deserialize)]
pub struct PlotFile {
    pub plots: Vec<PlotSpec>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct PlotSpec {
    pub title: String,
    #[serde(default)]
    pub x_label: String,
    #[serde(default)]
    pub y_label: String,
    /// Draw the axis in log10 (values ≤ 0 are left out).
    #[serde(default)]
    pub x_log: bool,
    #[serde(default)]
    pub y_log: bool,
    pub series: Vec<Series>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn status_class(status: Status, cached: bool) -> &'static str {
    match (status, cached) {
        (Status::Ok, true) => "cached",
        (Status::Ok, false) => "ok",
        (Status::Failed, _) => "failed",
        (Status::Skipped, _) => "skipped",
    }
}

fn fill(class: &str) -> &'static str {
    match class {
        "ok" => "#66bb6a",
        "cached" => "#c5e1a5",
        "failed" => "#ef5350",
        _ => "#e0e0e0",
    }
}

/// The DAG, layered by depth (longest path from a source), edges as curves.
pub fn dag_svg(rec: &RunRecord) -> String {
    let index: BTreeMap<&str, usize> = rec
        .instances
        .iter()
        .enumerate()
        .map(|(i, (l, _))| (l.as_str(), i))
        .collect();
    let mut depth = vec![0usize; rec.instances.len()];
    // Records list instances in topological order, so one pass suffices.
    for (i, (_, r)) in rec.instances.iter().enumerate() {
        depth[i] = r
            .deps
            .iter()
            .filter_map(|d| index.get(d.as_str()))
            .map(|&d| depth[d] + 1)
            .max()
            .unwrap_or(0);
    }
    let mut rows: BTreeMap<usize, usize> = BTreeMap::new();
    let mut pos = vec![(0usize, 0usize); rec.instances.len()];
    for (i, d) in depth.iter().enumerate() {
        let r = rows.entry(*d).or_default();
        pos[i] = (*d, *r);
        *r += 1;
    }
    let (w, h, gx, gy) = (230.0, 28.0, 290.0, 40.0);
    let cols = depth.iter().max().map(|d| d + 1).unwrap_or(1);
    let maxrows = rows.values().max().copied().unwrap_or(1);
    let width = cols as f64 * gx + 20.0;
    let height = maxrows as f64 * gy + 20.0;
    let xy = |i: usize| (10.0 + pos[i].0 as f64 * gx, 10.0 + pos[i].1 as f64 * gy);
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="dag" width="{width}" height="{height}" viewBox="0 0 {width} {height}">"#
    );
    for (i, (_, r)) in rec.instances.iter().enumerate() {
        for d in r.deps.iter().filter_map(|d| index.get(d.as_str())) {
            let (x0, y0) = xy(*d);
            let (x1, y1) = xy(i);
            let (sx, sy, ex, ey) = (x0 + w, y0 + h / 2.0, x1, y1 + h / 2.0);
            let mx = (sx + ex) / 2.0;
            let _ = write!(
                s,
                r##"<path d="M{sx},{sy} C{mx},{sy} {mx},{ey} {ex},{ey}" fill="none" stroke="#90a4ae" stroke-width="1.2"/>"##
            );
        }
    }
    for (i, (label, r)) in rec.instances.iter().enumerate() {
        let (x, y) = xy(i);
        let class = status_class(r.status.status, r.cached);
        let text: String = if label.chars().count() > 34 {
            format!("{}…", label.chars().take(33).collect::<String>())
        } else {
            label.clone()
        };
        let dash = if r.cached {
            r#" stroke-dasharray="4 2""#
        } else {
            ""
        };
        let _ = write!(
            s,
            r##"<g class="node {class}"><title>{} — {class}</title><rect x="{x}" y="{y}" width="{w}" height="{h}" rx="6" fill="{}" stroke="#455a64"{dash}/><text x="{}" y="{}" font-family="monospace" font-size="11">{}</text></g>"##,
            esc(label),
            fill(class),
            x + 8.0,
            y + 18.0,
            esc(&text)
        );
    }
    s.push_str("</svg>");
    s
}

/// One bar per instance from its start to its end; cached instances are a marked dot.
pub fn timeline_svg(rec: &RunRecord) -> Result<String, String> {
    let n = rec.instances.len().max(1);
    let end = rec
        .instances
        .iter()
        .map(|(_, r)| r.end_ms)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let height = (60 + 16 * n).min(4000) as u32;
    let labels: Vec<String> = rec.instances.iter().map(|(l, _)| l.clone()).collect();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .margin(8)
            .x_label_area_size(30)
            .y_label_area_size(10)
            .build_cartesian_2d(0.0..end * 1.02, 0.0..n as f64)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .disable_y_axis()
            .x_desc("ms since the run started (● = served from the cache)")
            .label_style(("monospace", 11))
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, (_, r)) in rec.instances.iter().enumerate() {
            let y = n as f64 - i as f64 - 1.0;
            let class = status_class(r.status.status, r.cached);
            let color = match class {
                "ok" => RGBColor(0x66, 0xbb, 0x6a),
                "failed" => RGBColor(0xef, 0x53, 0x50),
                "cached" => RGBColor(0x9e, 0x9e, 0x9e),
                _ => RGBColor(0xbd, 0xbd, 0xbd),
            };
            if r.cached || r.end_ms <= r.start_ms {
                chart
                    .draw_series(std::iter::once(Circle::new(
                        (r.end_ms as f64, y + 0.5),
                        4,
                        color.filled(),
                    )))
                    .map_err(|e| e.to_string())?;
            } else {
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(r.start_ms as f64, y + 0.15), (r.end_ms as f64, y + 0.85)],
                        color.filled(),
                    )))
                    .map_err(|e| e.to_string())?;
            }
        }
        // Instance names sit on their rows, inside the plot, so long labels need no margin.
        if n <= 200 {
            chart
                .draw_series(labels.iter().enumerate().map(|(i, l)| {
                    Text::new(
                        l.clone(),
                        (end * 0.005, n as f64 - i as f64 - 0.25),
                        ("monospace", 10)
                            .into_font()
                            .color(&RGBColor(0x37, 0x47, 0x4f)),
                    )
                }))
                .map_err(|e| e.to_string())?;
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// One chart; a log axis plots log10 of the values with ticks labelled as powers.
pub fn plot_svg(spec: &PlotSpec) -> Result<String, String> {
    let tx = |v: f64| if spec.x_log { v.log10() } else { v };
    let ty = |v: f64| if spec.y_log { v.log10() } else { v };
    let series: Vec<(String, Vec<(f64, f64)>)> = spec
        .series
        .iter()
        .map(|s| {
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .filter(|(x, y)| {
                    x.is_finite()
                        && y.is_finite()
                        && (!spec.x_log || *x > 0.0)
                        && (!spec.y_log || *y > 0.0)
                })
                .map(|(x, y)| (tx(*x), ty(*y)))
                .collect();
            (s.name.clone(), pts)
        })
        .collect();
    let all: Vec<&(f64, f64)> = series.iter().flat_map(|(_, p)| p).collect();
    if all.is_empty() {
        return Ok(format!(
            "<p class=\"noplot\">{}: no data</p>",
            esc(&spec.title)
        ));
    }
    let pad = |lo: f64, hi: f64| {
        if (hi - lo).abs() < 1e-12 {
            (lo - 0.5, hi + 0.5)
        } else {
            (lo - (hi - lo) * 0.08, hi + (hi - lo) * 0.08)
        }
    };
    let (x0, x1) = pad(
        all.iter().map(|p| p.0).fold(f64::INFINITY, f64::min),
        all.iter().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max),
    );
    let (y0, y1) = pad(
        all.iter().map(|p| p.1).fold(f64::INFINITY, f64::min),
        all.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max),
    );
    let fmt_axis = |log: bool| {
        move |v: &f64| {
            if log {
                format!("{:.0e}", 10f64.powf(*v))
            } else {
                format!("{v:.3}")
            }
        }
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (600, 380)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut chart = ChartBuilder::on(&root)
            .caption(&spec.title, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(|e| e.to_string())?;
        let xf = fmt_axis(spec.x_log);
        let yf = fmt_axis(spec.y_log);
        chart
            .configure_mesh()
            .x_desc(format!(
                "{}{}",
                spec.x_label,
                if spec.x_log { " (log)" } else { "" }
            ))
            .y_desc(format!(
                "{}{}",
                spec.y_label,
                if spec.y_log { " (log)" } else { "" }
            ))
            .x_labels(6)
            .y_labels(8)
            .x_label_formatter(&xf)
            .y_label_formatter(&yf)
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, (name, pts)) in series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                });
            chart
                .draw_series(pts.iter().map(|p| Circle::new(*p, 3, color.filled())))
                .map_err(|e| e.to_string())?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 11))
            .draw()
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

fn markdown_html(md: &str) -> String {
    let mut opts = pulldown_cmark::Options::empty();
    opts.insert(pulldown_cmark::Options::ENABLE_TABLES);
    let parser = pulldown_cmark::Parser::new_ext(md, opts).map(|ev| match ev {
        // Raw HTML inside an artefact is shown as text, never interpreted.
        pulldown_cmark::Event::Html(h) | pulldown_cmark::Event::InlineHtml(h) => {
            pulldown_cmark::Event::Text(h)
        }
        e => e,
    });
    let mut out = String::new();
    pulldown_cmark::html::push_html(&mut out, parser);
    out
}

const CSS: &str = r#"
body{font-family:system-ui,sans-serif;margin:24px;color:#263238;max-width:1400px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #cfd8dc}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
td,th{border:1px solid #cfd8dc;padding:3px 8px;text-align:right}td:first-child,th:first-child{text-align:left}
.scroll{overflow:auto;border:1px solid #eceff1;padding:6px}
.legend span{display:inline-block;padding:2px 8px;margin-right:6px;border:1px solid #455a64;border-radius:4px;font-size:12px}
.plots{display:flex;flex-wrap:wrap;gap:12px}
.summary td{text-align:left}
.status-failed{color:#c62828;font-weight:bold}
"#;

/// The whole page.
pub fn render(rec: &RunRecord, tables: &[Table], plots: &[PlotSpec]) -> Result<String, String> {
    let (ran, cached, failed, skipped) = rec.counts();
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>heddle run {id} — {p}</title><style>{CSS}</style></head><body>",
        id = esc(&rec.run_id),
        p = esc(&rec.pipeline)
    );
    let _ = write!(
        h,
        "<h1>Run <code>{}</code> of <code>{}</code></h1><table class=\"summary\"><tr><th>status</th><td>{:?}</td></tr><tr><th>instances</th><td>{} — {ran} ran, {cached} cached, {failed} failed, {skipped} skipped</td></tr><tr><th>duration</th><td>{} ms</td></tr><tr><th>pipeline file</th><td>{}</td></tr><tr><th>host</th><td>{}</td></tr><tr><th>heddle</th><td>{}</td></tr></table>",
        esc(&rec.run_id),
        esc(&rec.pipeline),
        rec.status,
        rec.instances.len(),
        rec.duration_ms,
        esc(&rec.pipeline_file),
        esc(&rec.host),
        esc(&rec.heddle_version)
    );
    h.push_str("<h2 id=\"dag\">DAG</h2><p class=\"legend\">");
    for c in ["ok", "cached", "failed", "skipped"] {
        let _ = write!(h, "<span style=\"background:{}\">{c}</span>", fill(c));
    }
    let _ = write!(h, "</p><div class=\"scroll\">{}</div>", dag_svg(rec));
    let _ = write!(
        h,
        "<h2 id=\"timeline\">Timeline</h2><div class=\"scroll\">{}</div>",
        timeline_svg(rec)?
    );

    h.push_str("<h2 id=\"slowest\">Slowest instances</h2><table><tr><th>instance</th><th>status</th><th>duration ms</th><th>reason it ran</th></tr>");
    let mut by_time: Vec<_> = rec.instances.iter().filter(|(_, r)| !r.cached).collect();
    by_time.sort_by_key(|(_, r)| std::cmp::Reverse(r.duration_ms));
    for (label, r) in by_time.iter().take(10) {
        let class = status_class(r.status.status, r.cached);
        let _ = write!(
            h,
            "<tr><td>{}</td><td class=\"status-{class}\">{class}</td><td>{}</td><td>{}</td></tr>",
            esc(label),
            r.duration_ms,
            esc(&r.reason)
        );
    }
    h.push_str("</table>");

    let failures: Vec<_> = rec
        .instances
        .iter()
        .filter(|(_, r)| r.status.status == Status::Failed)
        .collect();
    if !failures.is_empty() {
        h.push_str(
            "<h2 id=\"failures\">Failures</h2><table><tr><th>instance</th><th>error</th></tr>",
        );
        for (label, r) in failures {
            let _ = write!(
                h,
                "<tr><td>{}</td><td class=\"status-failed\">{}</td></tr>",
                esc(label),
                esc(r.status.error.as_deref().unwrap_or(""))
            );
        }
        h.push_str("</table>");
    }

    if !tables.is_empty() {
        h.push_str("<h2 id=\"tables\">Tables</h2>");
        for t in tables {
            let _ = write!(h, "<section class=\"report-table\"><p><small>from <code>{}</code> (sha256 {})</small></p>{}</section>", esc(&t.src), esc(&t.digest[..12.min(t.digest.len())]), markdown_html(&t.markdown));
        }
    }
    if !plots.is_empty() {
        h.push_str("<h2 id=\"plots\">Plots</h2><div class=\"plots\">");
        for p in plots {
            let _ = write!(h, "<figure class=\"plot\">{}</figure>", plot_svg(p)?);
        }
        h.push_str("</div>");
    }
    h.push_str("</body></html>\n");
    Ok(h)
}
