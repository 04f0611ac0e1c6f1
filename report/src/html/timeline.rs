//! The timeline as SVG: one row per instance, a bar from its start to its end, a dot for an
//! instance served from the cache; seconds on the axis at round steps (0.5 s, 1 s, 2 s, 5 s …).
//!
//! Drawn by hand rather than with plotters: instance names go in a left gutter sized to the
//! longest of them (drawn inside the plot they ran over the bars), the axis labels are 13 px
//! (plotters' 11 px labels of raw milliseconds were unreadable at page width), and each row
//! carries a tooltip with the instance, its duration and status.

use std::fmt::Write;

use heddle_schema::RunRecord;

use super::{esc, status_class};

/// Drawing width, px: the page's content width at a 1280 px window.
pub const WIDTH: f64 = 1200.0;
const LABEL_FONT: f64 = 12.0;
const LABEL_CHAR_W: f64 = 7.3;
const AXIS_FONT: f64 = 13.0;
/// Rows are drawn with names while there are at most this many; beyond, only bars.
const NAMED_ROWS: usize = 200;
const AXIS_H: f64 = 46.0;

/// A round tick step for an axis spanning `span`: 1, 2 or 5 times a power of ten, giving at most
/// about ten ticks.
pub fn tick_step(span: f64) -> f64 {
    let raw = (span / 8.0).max(1e-9);
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * mag)
}

/// A tick's text: as many decimals as the step needs, then ` s`.
pub fn tick_text(v: f64, step: f64) -> String {
    let decimals = (-step.log10().floor()).max(0.0) as usize;
    format!("{v:.decimals$} s")
}

fn color(class: &str) -> &'static str {
    match class {
        "ok" => "#66bb6a",
        "failed" => "#ef5350",
        "cached" => "#9e9e9e",
        _ => "#bdbdbd",
    }
}

/// The timeline as one `<svg class="timeline">`.
pub fn timeline_svg(rec: &RunRecord) -> String {
    let n = rec.instances.len().max(1);
    let named = rec.instances.len() <= NAMED_ROWS;
    let row_h = if named {
        20.0
    } else {
        (4000.0 / n as f64).max(1.0)
    };
    let gutter = if named {
        let longest = rec
            .instances
            .iter()
            .map(|(l, _)| l.chars().count())
            .max()
            .unwrap_or(1);
        (longest as f64 * LABEL_CHAR_W + 16.0).min(WIDTH * 0.45)
    } else {
        10.0
    };
    let end_s = rec
        .instances
        .iter()
        .map(|(_, r)| r.end_ms)
        .max()
        .unwrap_or(0)
        .max(1) as f64
        / 1000.0;
    let step = tick_step(end_s);
    let axis_end = (end_s / step).ceil() * step;
    let (x0, x1) = (gutter, WIDTH - 20.0);
    let sx = |s: f64| x0 + (x1 - x0) * s / axis_end;
    let plot_h = n as f64 * row_h;
    let height = 8.0 + plot_h + AXIS_H;
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif">"#
    );
    let top = 8.0;
    let bottom = top + plot_h;
    s.push_str(r#"<g class="axis-x">"#);
    let ticks = (axis_end / step).round() as usize;
    for k in 0..=ticks {
        let v = k as f64 * step;
        let x = sx(v);
        let _ = write!(
            s,
            r##"<line x1="{x}" y1="{top}" x2="{x}" y2="{bottom}" stroke="#eceff1"/><line x1="{x}" y1="{bottom}" x2="{x}" y2="{}" stroke="#546e7a"/><text class="tick" x="{x}" y="{}" font-size="{AXIS_FONT}" text-anchor="middle" fill="#37474f">{}</text>"##,
            bottom + 5.0,
            bottom + 20.0,
            tick_text(v, step)
        );
    }
    let _ = write!(
        s,
        r##"<line x1="{x0}" y1="{bottom}" x2="{x1}" y2="{bottom}" stroke="#546e7a"/><text class="axis-title" x="{}" y="{}" font-size="{AXIS_FONT}" text-anchor="middle" fill="#37474f">seconds since the run started (● = served from the cache)</text></g>"##,
        (x0 + x1) / 2.0,
        bottom + 40.0
    );
    for (i, (label, r)) in rec.instances.iter().enumerate() {
        let y = top + i as f64 * row_h;
        let class = status_class(r.status.status, r.cached);
        let (a, b) = (r.start_ms as f64 / 1000.0, r.end_ms as f64 / 1000.0);
        let _ = write!(
            s,
            r#"<g class="row {class}"><title>{} — {class}, {:.3} s</title>"#,
            esc(label),
            r.duration_ms as f64 / 1000.0
        );
        if named {
            let _ = write!(
                s,
                r##"<text class="label" x="{}" y="{}" font-family="monospace" font-size="{LABEL_FONT}" text-anchor="end" fill="#37474f">{}</text>"##,
                x0 - 8.0,
                y + row_h * 0.7,
                esc(label)
            );
        }
        if r.cached || r.end_ms <= r.start_ms {
            let _ = write!(
                s,
                r#"<circle cx="{}" cy="{}" r="{}" fill="{}"/>"#,
                sx(b),
                y + row_h / 2.0,
                (row_h * 0.25).clamp(1.0, 5.0),
                color(class)
            );
        } else {
            let _ = write!(
                s,
                r#"<rect x="{}" y="{}" width="{}" height="{}" fill="{}"/>"#,
                sx(a),
                y + row_h * 0.15,
                (sx(b) - sx(a)).max(1.0),
                row_h * 0.7,
                color(class)
            );
        }
        s.push_str("</g>");
    }
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_seconds() {
        let near = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b;
        assert!(near(tick_step(12.0), 2.0));
        assert!(near(tick_step(3.7), 0.5));
        assert!(near(tick_step(80.0), 10.0));
        assert!(near(tick_step(0.004), 0.0005));
        assert_eq!(tick_text(1.0, 0.5), "1.0 s");
        assert_eq!(tick_text(10.0, 2.0), "10 s");
        assert_eq!(tick_text(0.0015, 0.0005), "0.0015 s");
    }
}
