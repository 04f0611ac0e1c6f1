//! The HTML page's parts, checked on their exact output: whole DAG labels, the seconds axis, the
//! header, and legends outside the plots' panels. The record is the shape `heddle run` writes,
//! with mezo-ort's matrix labels (the ones the old 34-character cut made unreadable).

use heddle_report::html::{dag_svg, render_page, timeline_svg, Page, PlotFile};
use heddle_runner::record::RunRecord;
use serde_json::json;

fn instance(
    stage: &str,
    label: &str,
    matrix: serde_json::Value,
    deps: &[&str],
    span: (u64, u64),
) -> serde_json::Value {
    json!([label, {
        "stage": stage, "deps": deps, "cached": false, "reason": "never run",
        "status": {"label": label, "status": "ok", "matrix": matrix},
        "duration_ms": span.1 - span.0, "start_ms": span.0, "end_ms": span.1, "attempts": 1,
        "inputs": {}, "outputs": {}, "output_paths": {}
    }])
}

fn record() -> RunRecord {
    let probe = "probe[context=ORT_QDQ_EMULATED,precision=a16_w16]";
    serde_json::from_value(json!({
        "run_id": "20261203-120000000-abcd", "pipeline": "mezo-ort",
        "pipeline_file": "pipelines/mezo-ort.toml", "status": "completed",
        "started_unix_ms": 0, "duration_ms": 4200, "heddle_version": "0.1.0", "host": "vm",
        "params": {"seed": 0, "eps": [0.03, 0.01]}, "jobs": 2,
        "instances": [
            instance("author", "author", json!({}), &[], (0, 900)),
            instance("optimize", "optimize[precision=a16_w16]", json!({"precision": "a16_w16"}), &["author"], (900, 2100)),
            instance("probe", probe, json!({"context": "ORT_QDQ_EMULATED", "precision": "a16_w16"}), &["author", "optimize[precision=a16_w16]"], (2100, 4000)),
            instance("compare", "compare", json!({}), &[probe], (4000, 4200)),
        ]
    }))
    .unwrap()
}

#[test]
fn dag_boxes_show_the_stage_and_the_matrix_values_and_keep_the_whole_label() {
    let svg = dag_svg(&record());
    assert!(!svg.contains('…'), "{svg}");
    assert!(svg.contains("<title>probe[context=ORT_QDQ_EMULATED,precision=a16_w16] — ok</title>"));
    assert!(svg.contains(r#"font-weight="bold">probe</text><text class="matrix""#));
    assert!(svg.contains(r#"font-size="12">ORT_QDQ_EMULATED · a16_w16</text>"#));
    // Every box is wide enough for its longest line (26 characters at 7.4 px, padded by 10).
    let widths: Vec<f64> = svg
        .split("<rect ")
        .skip(1)
        .map(|r| {
            let w = &r[r.find(r#" width=""#).unwrap() + 8..];
            w[..w.find('"').unwrap()].parse().unwrap()
        })
        .collect();
    assert_eq!(widths.len(), 4, "{svg}");
    assert!(widths.iter().all(|w| *w >= 26.0 * 7.4 + 20.0), "{widths:?}");
}

#[test]
fn the_timeline_counts_seconds_at_round_steps() {
    let svg = timeline_svg(&record());
    let ticks: Vec<&str> = svg
        .split(r#"class="tick""#)
        .skip(1)
        .map(|t| &t[t.find('>').unwrap() + 1..t.find("</text>").unwrap()])
        .collect();
    assert_eq!(ticks, ["0 s", "1 s", "2 s", "3 s", "4 s", "5 s"]);
    assert!(svg.contains(
        r##"font-size="13" text-anchor="middle" fill="#37474f">seconds since the run started"##
    ));
    // Names sit in a gutter left of the bars, right-aligned, whole.
    assert!(svg.contains(r##"text-anchor="end" fill="#37474f">probe[context=ORT_QDQ_EMULATED,precision=a16_w16]</text>"##));
}

#[test]
fn the_header_comes_first_with_pipeline_params_and_lock() {
    let rec = record();
    let page = render_page(&Page {
        record: &rec,
        tables: &[],
        plots: &[],
        lock_hash: Some("sha256:29a33f03e110"),
    })
    .unwrap();
    let body = page.split_once("<body>").unwrap().1;
    let header = &body[..body.find("</header>").unwrap() + 9];
    assert_eq!(
        header,
        concat!(
            r#"<header class="run"><h1>Pipeline <code>mezo-ort</code><span class="run-status completed">completed</span></h1>"#,
            r#"<div class="facts">file <code>pipelines/mezo-ort.toml</code> · run <code>20261203-120000000-abcd</code> · lock <code class="lock">sha256:29a33f03e110</code></div>"#,
            r#"<div class="facts">4 instances: 4 ran, 0 cached, 0 failed, 0 skipped · 4.2 s · host <code>vm</code> · heddle 0.1.0</div>"#,
            r#"<ul class="params"><li><b>eps</b> = [0.03,0.01]</li><li><b>seed</b> = 0</li></ul></header>"#
        )
    );
}

#[test]
fn plots_are_small_multiples_with_the_legend_beside_them() {
    let plots: PlotFile = serde_json::from_value(json!({"plots": [{
    "title": "r vs eps", "x_label": "eps", "y_label": "r", "x_log": true,
    "series": [
        {"name": "ORT_INTEGER", "panel": "a16_w16", "points": [[0.001, 1.0], [0.01, 1.0]]},
        {"name": "ORT_QDQ_EMULATED", "panel": "a16_w16", "points": [[0.001, 1.0], [0.01, 1.0]]},
        {"name": "ORT_INTEGER", "panel": "a8_w8", "points": [[0.001, 0.42], [0.01, 0.84]]},
        {"name": "ORT_QDQ_EMULATED", "panel": "a8_w8", "points": [[0.001, 0.42], [0.01, 0.84]]},
        {"name": "ORT_INTEGER", "panel": "a16_w4", "points": [[0.001, 0.07], [0.01, 0.3]]}
    ]}]}))
    .unwrap();
    let rec = record();
    let page = render_page(&Page {
        record: &rec,
        tables: &[],
        plots: &plots.plots,
        lock_hash: None,
    })
    .unwrap();
    let figure = page.split_once(r#"<figure class="plot">"#).unwrap().1;
    let figure = &figure[..figure.find("</figure>").unwrap()];
    assert!(figure.starts_with("<figcaption>r vs eps</figcaption>"));
    let panels: Vec<&str> = figure
        .split(r#"data-panel=""#)
        .skip(1)
        .map(|p| &p[..p.find('"').unwrap()])
        .collect();
    assert_eq!(panels, ["a16_w16", "a8_w8", "a16_w4"]);
    let (charts, legend) = figure.split_once(r#"<ul class="plot-legend">"#).unwrap();
    assert!(
        charts.ends_with("</div></div>"),
        "the legend is not after the panels"
    );
    assert!(
        !charts.contains("ORT_INTEGER"),
        "a legend entry inside a panel"
    );
    assert_eq!(
        legend
            .split("</svg>")
            .skip(1)
            .map(|l| &l[..l.find("</li>").unwrap()])
            .collect::<Vec<_>>(),
        ["ORT_INTEGER", "ORT_QDQ_EMULATED"]
    );
    // The three panels share one row at 1280 px: each at most a third of what the legend leaves.
    let widths: Vec<u32> = charts
        .split(r#"<svg width=""#)
        .skip(1)
        .map(|w| w[..w.find('"').unwrap()].parse().unwrap())
        .collect();
    assert_eq!(widths, [323, 323, 323]);
}
