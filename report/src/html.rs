//! A run as one self-contained HTML page, laid out to be read at a glance at 1280 px: a header
//! with the pipeline, its params and the lock file's hash; the DAG coloured by status; a timeline
//! in seconds; the report stages' tables; their plots as small multiples with the legend beside
//! them; the slowest instances and the failures. No network, no script, no external resource.
//!
//! The DAG ([`dag`]) and the timeline ([`timeline`]) are drawn by hand as SVG, the plots
//! ([`plot`]) with plotters' SVG backend. This file assembles the page.

mod dag;
mod plot;
mod timeline;

use std::fmt::Write;

use heddle_schema::{RunRecord, Status};

pub use dag::{dag_svg, node_text, NodeText};
pub use plot::{plot_html, PlotFile, PlotSpec, Series};
pub use timeline::timeline_svg;

use crate::entry::Table;

/// Why a page could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum HtmlError {
    #[error("failed to draw the plot `{title}`: {message}")]
    Plot { title: String, message: String },
}

/// Everything a page shows.
#[derive(Debug, Clone, Copy)]
pub struct Page<'a> {
    pub record: &'a RunRecord,
    /// The report stages' Markdown outputs.
    pub tables: &'a [Table],
    pub plots: &'a [PlotSpec],
    /// sha256 of the pipeline's lock file (`sha256:…`), as `heddle logbook new` records it.
    pub lock_hash: Option<&'a str>,
}

pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub(crate) fn status_class(status: Status, cached: bool) -> &'static str {
    match (status, cached) {
        (Status::Ok, true) => "cached",
        (Status::Ok, false) => "ok",
        (Status::Failed, _) => "failed",
        (Status::Skipped, _) => "skipped",
    }
}

pub(crate) fn fill(class: &str) -> &'static str {
    match class {
        "ok" => "#66bb6a",
        "cached" => "#c5e1a5",
        "failed" => "#ef5350",
        _ => "#e0e0e0",
    }
}

/// A stage's Markdown as HTML that can do nothing but show it. Raw HTML is shown as text, never
/// interpreted. Links and images become text too: `[x](javascript:…)` ran script when clicked
/// and `![x](http://…)` made the page fetch from the network (a tracking pixel), and the page
/// promises neither. A link shows as its text followed by its address in parentheses; an
/// image as its alt text.
fn markdown_html(md: &str) -> String {
    use pulldown_cmark::{Event, Tag, TagEnd};
    let mut opts = pulldown_cmark::Options::empty();
    opts.insert(pulldown_cmark::Options::ENABLE_TABLES);
    let mut links = Vec::new();
    let parser = pulldown_cmark::Parser::new_ext(md, opts).filter_map(move |ev| match ev {
        Event::Html(h) | Event::InlineHtml(h) => Some(Event::Text(h)),
        Event::Start(Tag::Link { dest_url, .. }) => {
            links.push(dest_url);
            None
        }
        Event::End(TagEnd::Link) => links
            .pop()
            .map(|dest| Event::Text(format!(" ({dest})").into())),
        Event::Start(Tag::Image { .. }) | Event::End(TagEnd::Image) => None,
        e => Some(e),
    });
    let mut out = String::new();
    pulldown_cmark::html::push_html(&mut out, parser);
    out
}

fn seconds(ms: u64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

const CSS: &str = r#"
body{font-family:system-ui,sans-serif;margin:24px;color:#263238;max-width:1232px;font-size:14px}
h1{font-size:24px;margin:0 0 6px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #cfd8dc}
header.run{border:1px solid #cfd8dc;border-radius:8px;padding:12px 16px;background:#fafcfd}
header.run .facts{margin:4px 0;color:#455a64}
header.run code{font-size:13px}
.run-status{font-size:14px;padding:2px 8px;border-radius:4px;vertical-align:middle;margin-left:8px}
.run-status.completed{background:#c8e6c9}.run-status.failed,.run-status.interrupted{background:#ffcdd2}
.params{display:flex;flex-wrap:wrap;gap:6px;margin:8px 0 0;padding:0;list-style:none}
.params li{border:1px solid #b0bec5;border-radius:4px;padding:2px 8px;font-family:monospace;font-size:13px;background:#fff}
.params b{color:#37474f}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
td,th{border:1px solid #cfd8dc;padding:3px 8px;text-align:right}td:first-child,th:first-child{text-align:left}
.scroll{overflow:auto;border:1px solid #eceff1;padding:6px}
.legend span{display:inline-block;padding:2px 8px;margin-right:6px;border:1px solid #455a64;border-radius:4px;font-size:12px}
figure.plot{display:flex;flex-wrap:wrap;align-items:center;margin:0 0 18px}
figure.plot figcaption{flex-basis:100%;font-weight:600;font-size:15px;margin-bottom:4px}
.panels{display:flex;flex-wrap:wrap}
.plot-legend{list-style:none;margin:0 0 0 12px;padding:8px 12px;border:1px solid #eceff1;font-size:13px}
.plot-legend li{display:flex;align-items:center;gap:6px;margin:3px 0}
.status-failed{color:#c62828;font-weight:bold}
"#;

/// The header: pipeline, run, status, params and lock hash, then the instance counts.
fn header(rec: &RunRecord, lock_hash: Option<&str>) -> String {
    let (ran, cached, failed, skipped) = rec.counts();
    let status = serde_json::to_value(rec.status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let mut h = format!(
        r#"<header class="run"><h1>Pipeline <code>{}</code><span class="run-status {status}">{status}</span></h1>"#,
        esc(&rec.pipeline)
    );
    let _ = write!(
        h,
        r#"<div class="facts">file <code>{}</code> · run <code>{}</code> · lock <code class="lock">{}</code></div>"#,
        esc(&rec.pipeline_file),
        esc(&rec.run_id),
        lock_hash.map_or_else(|| "not recorded".to_string(), esc)
    );
    let _ = write!(
        h,
        r#"<div class="facts">{} instances: {ran} ran, {cached} cached, {failed} failed, {skipped} skipped · {} · host <code>{}</code> · heddle {}</div>"#,
        rec.instances.len(),
        seconds(rec.duration_ms),
        esc(&rec.host),
        esc(&rec.heddle_version)
    );
    h.push_str(r#"<ul class="params">"#);
    for (k, v) in &rec.params {
        let v = match v {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let _ = write!(h, "<li><b>{}</b> = {}</li>", esc(k), esc(&v));
    }
    h.push_str("</ul></header>");
    h
}

fn slowest_and_failures(rec: &RunRecord, h: &mut String) {
    h.push_str("<h2 id=\"slowest\">Slowest instances</h2><table><tr><th>instance</th><th>status</th><th>duration s</th><th>reason it ran</th></tr>");
    let mut by_time: Vec<_> = rec.instances.iter().filter(|(_, r)| !r.cached).collect();
    by_time.sort_by_key(|(_, r)| std::cmp::Reverse(r.duration_ms));
    for (label, r) in by_time.iter().take(10) {
        let class = status_class(r.status.status, r.cached);
        let _ = write!(
            h,
            "<tr><td>{}</td><td class=\"status-{class}\">{class}</td><td>{:.3}</td><td>{}</td></tr>",
            esc(label),
            r.duration_ms as f64 / 1000.0,
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
}

/// The whole page.
pub fn render_page(page: &Page) -> Result<String, HtmlError> {
    let rec = page.record;
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>heddle run {id} — {p}</title><style>{CSS}</style></head><body>",
        id = esc(&rec.run_id),
        p = esc(&rec.pipeline)
    );
    h.push_str(&header(rec, page.lock_hash));
    h.push_str("<h2 id=\"dag\">DAG</h2><p class=\"legend\">");
    for c in ["ok", "cached", "failed", "skipped"] {
        let _ = write!(h, "<span style=\"background:{}\">{c}</span>", fill(c));
    }
    let _ = write!(h, "</p><div class=\"scroll\">{}</div>", dag_svg(rec));
    let _ = write!(
        h,
        "<h2 id=\"timeline\">Timeline</h2><div class=\"scroll\">{}</div>",
        timeline_svg(rec)
    );
    if !page.tables.is_empty() {
        h.push_str("<h2 id=\"tables\">Tables</h2>");
        for t in page.tables {
            let _ = write!(h, "<section class=\"report-table\"><p><small>from <code>{}</code> (sha256 {})</small></p>{}</section>", esc(&t.src), esc(&t.digest[..12.min(t.digest.len())]), markdown_html(&t.markdown));
        }
    }
    if !page.plots.is_empty() {
        h.push_str("<h2 id=\"plots\">Plots</h2>");
        for p in page.plots {
            h.push_str(&plot_html(p)?);
        }
    }
    slowest_and_failures(rec, &mut h);
    h.push_str("</body></html>\n");
    Ok(h)
}

/// The whole page without a lock hash (the header says it is not recorded).
pub fn render(rec: &RunRecord, tables: &[Table], plots: &[PlotSpec]) -> Result<String, HtmlError> {
    render_page(&Page {
        record: rec,
        tables,
        plots,
        lock_hash: None,
    })
}
