//! Plots as small multiples: a plot's series are split into panels (a series' `panel`, e.g. the
//! precision), drawn side by side on shared axes so they compare at a glance, the way a logbook
//! entry sets its per-context tables next to each other. The legend is HTML beside the panels,
//! never inside the data: plotters' in-chart legend box covered the curves it named.
//!
//! A series keeps its colour and marker in every panel (both keyed by its name), so `ORT_INTEGER`
//! is the same orange in the a16_w16 panel as in the a8_w8 one. Panels are drawn with plotters'
//! SVG backend.

use std::fmt::Write;

use plotters::prelude::*;
use serde::Deserialize;

use super::{esc, HtmlError};

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
    /// The small multiple this series is drawn in (e.g. `a16_w16`); series without one share a
    /// single panel.
    #[serde(default)]
    pub panel: Option<String>,
}

/// Colours by series name, in order of first appearance (Tableau 10: distinct on white and
/// for the common colour-vision deficiencies).
const COLOURS: [(u8, u8, u8); 10] = [
    (0x1f, 0x77, 0xb4),
    (0xff, 0x7f, 0x0e),
    (0x2c, 0xa0, 0x2c),
    (0xd6, 0x27, 0x28),
    (0x94, 0x67, 0xbd),
    (0x8c, 0x56, 0x4b),
    (0xe3, 0x77, 0xc2),
    (0x7f, 0x7f, 0x7f),
    (0xbc, 0xbd, 0x22),
    (0x17, 0xbe, 0xcf),
];

/// Width available to one plot's panels and legend, px.
const WIDTH: u32 = 1200;
const LEGEND_W: u32 = 230;
const PANEL_H: u32 = 280;

fn colour(i: usize) -> RGBColor {
    let (r, g, b) = COLOURS[i % COLOURS.len()];
    RGBColor(r, g, b)
}

/// Distinct values in order of first appearance.
fn distinct<'a>(it: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for s in it {
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

/// A series' points on the drawn axes: non-finite values and, on a log axis, values ≤ 0 left
/// out; log axes carry log10 of the value.
fn drawn_points(spec: &PlotSpec, s: &Series) -> Vec<(f64, f64)> {
    let t = |log: bool, v: f64| if log { v.log10() } else { v };
    s.points
        .iter()
        .filter(|(x, y)| {
            x.is_finite() && y.is_finite() && (!spec.x_log || *x > 0.0) && (!spec.y_log || *y > 0.0)
        })
        .map(|(x, y)| (t(spec.x_log, *x), t(spec.y_log, *y)))
        .collect()
}

/// The shared axis range over every panel, padded by 8 % (a single value gets ±0.5).
fn range(values: impl Iterator<Item = f64> + Clone) -> (f64, f64) {
    let lo = values.clone().fold(f64::INFINITY, f64::min);
    let hi = values.fold(f64::NEG_INFINITY, f64::max);
    if (hi - lo).abs() < 1e-12 {
        (lo - 0.5, hi + 0.5)
    } else {
        (lo - (hi - lo) * 0.08, hi + (hi - lo) * 0.08)
    }
}

fn axis_text(log: bool, v: f64) -> String {
    if log {
        format!("{:.0e}", 10f64.powf(v))
    } else {
        let t = format!("{v:.3}");
        let t = t.trim_end_matches('0').trim_end_matches('.');
        if t == "-0" {
            "0".into()
        } else {
            t.into()
        }
    }
}

/// A series ready to draw: its colour index, its panel, its points on the drawn axes.
type Drawn<'a> = (usize, Option<&'a str>, Vec<(f64, f64)>);

/// One panel: the series of `panel`, on the shared ranges, coloured by their name's index.
struct Panel<'a> {
    caption: Option<&'a str>,
    series: Vec<(usize, Vec<(f64, f64)>)>,
}

fn panel_svg(
    spec: &PlotSpec,
    panel: &Panel,
    size: (u32, u32),
    xr: (f64, f64),
    yr: (f64, f64),
) -> Result<String, HtmlError> {
    let draw = |e: &dyn std::fmt::Display| HtmlError::Plot {
        title: spec.title.clone(),
        message: e.to_string(),
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(|e| draw(&e))?;
        let mut builder = ChartBuilder::on(&root);
        builder
            .margin(10)
            .x_label_area_size(44)
            .y_label_area_size(68);
        if let Some(c) = panel.caption {
            builder.caption(c, ("sans-serif", 15));
        }
        let mut chart = builder
            .build_cartesian_2d(xr.0..xr.1, yr.0..yr.1)
            .map_err(|e| draw(&e))?;
        let log_note = |log: bool| if log { " (log)" } else { "" };
        let xf = |v: &f64| axis_text(spec.x_log, *v);
        let yf = |v: &f64| axis_text(spec.y_log, *v);
        chart
            .configure_mesh()
            .x_desc(format!("{}{}", spec.x_label, log_note(spec.x_log)))
            .y_desc(format!("{}{}", spec.y_label, log_note(spec.y_log)))
            .x_labels(5)
            .y_labels(6)
            .x_label_formatter(&xf)
            .y_label_formatter(&yf)
            .label_style(("sans-serif", 13))
            .axis_desc_style(("sans-serif", 13))
            .light_line_style(RGBColor(0xf0, 0xf0, 0xf0))
            .draw()
            .map_err(|e| draw(&e))?;
        for (i, pts) in &panel.series {
            let c = colour(*i);
            chart
                .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                .map_err(|e| draw(&e))?;
            // Distinct markers keep coinciding series apart (both ORT contexts agree exactly
            // at a16_w16, so their lines overlap).
            match i % 3 {
                0 => chart
                    .draw_series(pts.iter().map(|p| Circle::new(*p, 4, c.filled())))
                    .map(|_| ()),
                1 => chart
                    .draw_series(
                        pts.iter()
                            .map(|p| TriangleMarker::new(*p, 6, c.stroke_width(2))),
                    )
                    .map(|_| ()),
                _ => chart
                    .draw_series(pts.iter().map(|p| Cross::new(*p, 5, c.stroke_width(2))))
                    .map(|_| ()),
            }
            .map_err(|e| draw(&e))?;
        }
        root.present().map_err(|e| draw(&e))?;
    }
    Ok(svg)
}

/// The legend: one entry per series name, with its colour and marker, as HTML.
fn legend_html(names: &[&str]) -> String {
    let mut h = String::from(r#"<ul class="plot-legend">"#);
    for (i, name) in names.iter().enumerate() {
        let (r, g, b) = COLOURS[i % COLOURS.len()];
        let c = format!("#{r:02x}{g:02x}{b:02x}");
        let marker = match i % 3 {
            0 => format!(r#"<circle cx="14" cy="7" r="4" fill="{c}"/>"#),
            1 => format!(
                r#"<path d="M14,2 L19,11 L9,11 Z" fill="none" stroke="{c}" stroke-width="2"/>"#
            ),
            _ => format!(r#"<path d="M10,3 L18,11 M18,3 L10,11" stroke="{c}" stroke-width="2"/>"#),
        };
        let _ = write!(
            h,
            r#"<li><svg width="28" height="14" aria-hidden="true"><line x1="0" y1="7" x2="28" y2="7" stroke="{c}" stroke-width="2"/>{marker}</svg>{}</li>"#,
            esc(name)
        );
    }
    h.push_str("</ul>");
    h
}

/// One plot as a `<figure class="plot">`: its title, a row of panels, and the legend beside them.
pub fn plot_html(spec: &PlotSpec) -> Result<String, HtmlError> {
    let names = distinct(spec.series.iter().map(|s| s.name.as_str()));
    let panels = distinct(spec.series.iter().map(|s| s.panel.as_deref().unwrap_or("")));
    // (colour index, panel, points) per series.
    let drawn: Vec<Drawn> = spec
        .series
        .iter()
        .map(|s| {
            let i = names.iter().position(|n| *n == s.name).unwrap_or(0);
            (i, s.panel.as_deref(), drawn_points(spec, s))
        })
        .collect();
    let all = drawn.iter().flat_map(|(_, _, p)| p);
    if all.clone().next().is_none() {
        return Ok(format!(
            "<p class=\"noplot\">{}: no data</p>",
            esc(&spec.title)
        ));
    }
    let xr = range(all.clone().map(|p| p.0));
    let yr = range(all.map(|p| p.1));
    let per = ((WIDTH - LEGEND_W) / panels.len() as u32).clamp(300, 560);
    let mut h = format!(
        r#"<figure class="plot"><figcaption>{}</figcaption><div class="panels">"#,
        esc(&spec.title)
    );
    for name in &panels {
        let panel = Panel {
            caption: (!name.is_empty()).then_some(*name),
            series: drawn
                .iter()
                .filter(|(_, p, _)| p.unwrap_or("") == *name)
                .map(|(i, _, pts)| (*i, pts.clone()))
                .collect(),
        };
        let _ = write!(
            h,
            r#"<div class="panel" data-panel="{}">{}</div>"#,
            esc(name),
            panel_svg(spec, &panel, (per, PANEL_H), xr, yr)?
        );
    }
    h.push_str("</div>");
    h.push_str(&legend_html(&names));
    h.push_str("</figure>");
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> PlotSpec {
        serde_json::from_str(
            r#"{"title":"r vs eps","x_label":"eps","y_label":"r","x_log":true,"series":[
            {"name":"ORT_QDQ_EMULATED","panel":"a16_w16","points":[[0.001,0.9],[0.01,1.0]]},
            {"name":"ORT_INTEGER","panel":"a16_w16","points":[[0.001,0.9],[0.01,1.0]]},
            {"name":"ORT_QDQ_EMULATED","panel":"a8_w8","points":[[0.001,0.4],[0.01,0.9]]},
            {"name":"ORT_INTEGER","panel":"a8_w8","points":[[0.001,0.5],[0.01,0.9]]}]}"#,
        )
        .unwrap()
    }

    #[test]
    fn one_panel_per_panel_name_and_one_legend_outside_them() {
        let h = plot_html(&spec()).unwrap();
        assert_eq!(h.matches(r#"<div class="panel""#).count(), 2, "{h}");
        assert!(h.contains(r#"data-panel="a16_w16""#) && h.contains(r#"data-panel="a8_w8""#));
        // The legend follows the panels, outside every SVG, and names each series once.
        let (panels, legend) = h.split_once(r#"<ul class="plot-legend">"#).unwrap();
        assert_eq!(legend.matches("<li>").count(), 2);
        assert!(legend.contains("ORT_QDQ_EMULATED</li>") && legend.contains("ORT_INTEGER</li>"));
        assert_eq!(
            panels.matches("<svg").count(),
            panels.matches("</svg>").count()
        );
        assert!(
            !panels.contains("ORT_INTEGER"),
            "a series name inside a panel"
        );
    }

    #[test]
    fn series_without_a_panel_share_one() {
        let mut s = spec();
        for x in &mut s.series {
            x.panel = None;
        }
        let h = plot_html(&s).unwrap();
        assert_eq!(h.matches(r#"<div class="panel""#).count(), 1, "{h}");
    }

    #[test]
    fn a_plot_without_drawable_points_says_so() {
        let mut s = spec();
        for x in &mut s.series {
            x.points = vec![(-1.0, 1.0)];
        }
        assert_eq!(
            plot_html(&s).unwrap(),
            "<p class=\"noplot\">r vs eps: no data</p>"
        );
    }
}
