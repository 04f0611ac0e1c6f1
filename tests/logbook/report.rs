//! `heddle report`: one self-contained HTML page, checked in headless Chromium when it is
//! installed.

use super::project;
use crate::support::Project;
use crate::support::{assert_contains, assert_lacks};

#[test]
fn the_report_is_one_self_contained_page() {
    let p = project();
    p.run("p.toml", &[]).ok();
    let r = p.heddle(&["report", "-o", "report.html"]).ok();
    assert_contains(&r.stdout, "1 tables, 1 plots");
    let html = p.read("report.html");
    for want in [
        "<svg",
        "class=\"dag\"",
        "Timeline",
        "Slowest instances",
        "<table>",
        "value vs k",
        "gen[k=3]",
        "ValueError",
    ] {
        assert!(html.contains(want), "missing {want}");
    }
    for banned in ["http://cdn", "https://", "<script src", "<link "] {
        assert!(!html.contains(banned), "external resource {banned}");
    }
    chromium_check(&p, "report.html");
}

/// Open the page in headless Chromium: it must load without console errors and show the
/// table and the plots. Chromium comes from Debian's `chromium` package (tests/all.sh installs it).
fn chromium_check(p: &Project, page: &str) {
    let Some(chromium) = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|c| which(c))
    else {
        assert!(
            std::env::var_os("HEDDLE_REQUIRE_CHROMIUM").is_none(),
            "chromium is required but not installed"
        );
        eprintln!("SKIPPED chromium check: install Debian's `chromium` package");
        return;
    };
    let url = format!("file://{}", p.path(page).display());
    let out = std::process::Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=3000",
            "--dump-dom",
            &url,
        ])
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "chromium failed: {log}");
    let console_errors: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("CONSOLE") && (l.contains("ERROR") || l.contains("Uncaught")))
        .collect();
    assert!(
        console_errors.is_empty(),
        "console errors: {console_errors:?}"
    );
    assert!(
        dom.contains("<table>") && dom.contains("k=1"),
        "table not in the DOM"
    );
    assert!(
        dom.matches("<svg").count() >= 3,
        "DAG, timeline and plot SVGs expected"
    );
    read_at_a_glance(&dom);
    let png = p.path("report.png");
    let shot = std::process::Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1280,1600",
            &format!("--screenshot={}", png.display()),
            &url,
        ])
        .output()
        .unwrap();
    assert!(shot.status.success());
    assert!(
        std::fs::metadata(&png).unwrap().len() > 10_000,
        "screenshot is blank"
    );
}

/// The text between the first `from` at or after `start` and the next `to`.
fn between<'a>(dom: &'a str, from: &str, to: &str) -> &'a str {
    let i = dom
        .find(from)
        .unwrap_or_else(|| panic!("no {from} in the DOM"));
    let rest = &dom[i..];
    &rest[..rest.find(to).unwrap_or(rest.len())]
}

/// The page as Chromium parsed it reads at a glance (issue 13): the header with pipeline, params
/// and lock comes first; DAG boxes carry whole labels (stage, then matrix values; the full label
/// as the tooltip); the timeline is in seconds; the plot's legend sits beside its panels, outside
/// every SVG.
fn read_at_a_glance(dom: &str) {
    let body = dom.split_once("<body>").expect("a body").1;
    assert!(
        body.trim_start().starts_with(r#"<header class="run">"#),
        "the header is not first: {}",
        &body[..200.min(body.len())]
    );
    let header = between(body, "<header", "</header>");
    for want in [
        "<code>lb</code>",
        "<code>p.toml</code>",
        "<b>scale</b> = 2",
        r#"class="lock""#,
    ] {
        assert!(header.contains(want), "header lacks {want}: {header}");
    }

    let dag = between(
        body,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="dag""#,
        "</svg>",
    );
    assert!(!dag.contains('…'), "a cut label in the DAG");
    assert_contains(dag, "<title>gen[k=3] — failed</title>");
    for want in [">gen</text>", ">3</text>", ">table</text>"] {
        assert!(dag.contains(want), "DAG lacks {want}: {dag}");
    }

    let timeline = between(body, r#"class="timeline""#, "</svg>");
    assert_contains(timeline, "seconds since the run started");
    let ticks: Vec<&str> = timeline
        .split(r#"class="tick""#)
        .skip(1)
        .map(|t| &t[t.find('>').unwrap() + 1..t.find("</text>").unwrap()])
        .collect();
    assert!(ticks.len() >= 3, "{ticks:?}");
    assert!(
        ticks
            .iter()
            .all(|t| t.ends_with(" s") && t[..t.len() - 2].parse::<f64>().is_ok()),
        "{ticks:?}"
    );
    assert_lacks(timeline, "ms since");

    let figure = between(body, r#"<figure class="plot">"#, "</figure>");
    let (panels, legend) = figure
        .split_once(r#"<ul class="plot-legend">"#)
        .expect("a legend beside the panels");
    assert_eq!(
        panels.matches(r#"<div class="panel""#).count(),
        2,
        "{panels}"
    );
    assert_eq!(
        panels.matches("<svg").count(),
        panels.matches("</svg>").count()
    );
    // The legend's SVGs are its 28 px swatches only, never a chart with axes and text.
    assert_eq!(
        legend.matches("<svg").count(),
        legend.matches(r#"<svg width="28""#).count(),
        "{legend}"
    );
    assert!(
        !legend.contains("<text"),
        "the legend is inside a chart: {legend}"
    );
    assert!(
        legend.contains(">v</li>") && legend.contains(">w</li>"),
        "{legend}"
    );
}

fn which(cmd: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(cmd).is_file()))
}

/// Params, matrix values, a stage's table and its error line are shown as text: no script, no
/// event handler, no `javascript:` link, nothing fetched from the network. The table's link
/// and image were rendered as `<a href="javascript:…">` and `<img src="http://…">`.
#[test]
fn nothing_a_stage_or_a_param_says_becomes_markup() {
    let p = Project::with_pipeline(include_str!("fixtures/injection.toml"));
    p.run("p.toml", &["--keep-going"]).code(1);
    p.heddle(&["report", "-o", "report.html"]).ok();
    let html = p.read("report.html").to_lowercase();
    for banned in [
        "<script",
        "<img",
        "<b ",
        "<a ",
        "javascript:alert(3)\"",
        "onerror=alert(1)>",
    ] {
        assert_lacks(&html, banned);
    }
    assert_contains(&html, "click (javascript:alert(3))");
    assert_contains(&html, "&lt;script&gt;alert(2)&lt;/script&gt;");
    assert_contains(&html, "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;");
    assert_contains(&html, "&lt;b onmouseover=alert(6)&gt;");
}
