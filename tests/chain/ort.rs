//! mezo-ort end to end (the python env provisioned by heddle): real numbers in the compare
//! table, a second run all cache hits, a precision added to the matrix runs only its instances,
//! and the probe is bit-for-bit identical under `--force probe`.

use std::collections::{BTreeMap, BTreeSet};

use super::compare_table::{parse_compare, Row};
use super::{json_file, output_digest, ran, set, ORT_SMALL};
use crate::support::assert_contains;
use crate::support::records::{cached, instances, status};
use crate::support::Project;

#[test]
fn ort_chain() {
    let p = Project::from_repo(&["stages", "pipelines/mezo-ort.toml"]);
    // Start with two precisions; the third is added below.
    let full = p.read("pipelines/mezo-ort.toml");
    let three = r#"matrix = { precision = ["a16_w16", "a16_w4", "a8_w8"] }"#;
    assert!(
        full.contains(three),
        "mezo-ort.toml changed its matrix line"
    );
    let two = full.replace(three, r#"matrix = { precision = ["a16_w16", "a8_w8"] }"#);
    p.file("pipelines/mezo-ort.toml", &two);
    let pipe = "pipelines/mezo-ort.toml";

    // First run: everything runs (the env is provisioned into this test's cache).
    let r = p.run(pipe, ORT_SMALL).ok();
    assert_contains(&r.stderr, "out/mezo-ort");
    let rec = p.last_record();
    assert_eq!(rec["status"], "completed");
    let first = instances(&rec);
    assert_eq!(
        first.len(),
        12,
        "1 author + 2x(optimize, compile, deploy) + 4 probes + compare"
    );
    for (l, i) in &first {
        assert_eq!(status(i), "ok", "{l}: {i}");
        assert!(!cached(i), "{l} cached on a fresh cache");
    }

    // The table holds real numbers: every precision x context x eps, and they are the probe's.
    let md = p.read("out/mezo-ort/compare/compare.md");
    let rows = parse_compare(&md);
    let want_eps = [3e-2, 1e-2, 1e-3];
    for prec in ["a16_w16", "a8_w8"] {
        for ctx in ["ORT_INTEGER", "ORT_QDQ_EMULATED"] {
            let got: Vec<&Row> = rows
                .iter()
                .filter(|r| r.precision == prec && r.context == ctx)
                .collect();
            assert_eq!(got.len(), 3, "{prec} x {ctx} rows in\n{md}");
            let probe = json_file(
                &p,
                &format!("out/mezo-ort/probe[context={ctx},precision={prec}]/probe.json"),
            );
            assert_eq!(probe["context"], ctx);
            assert_eq!(probe["float_ref"], "ORT_FLOAT");
            assert_eq!(probe["params"]["draws"], 8);
            for (k, row) in got.iter().enumerate() {
                let pr = &probe["rows"][k];
                assert!((row.eps - want_eps[k]).abs() < 1e-12, "{row:?}");
                assert!((0.0..=100.0).contains(&row.sign), "{row:?}");
                assert!((-1.0..=1.0).contains(&row.r), "{row:?}");
                assert!(row.ratio.is_finite() && row.ratio > 0.0, "{row:?}");
                let (ps, pr_r, pq) = (
                    pr["sign"].as_f64().unwrap(),
                    pr["r"].as_f64().unwrap(),
                    pr["ratio"].as_f64().unwrap(),
                );
                assert!((row.sign - 100.0 * ps).abs() <= 0.051, "{row:?} vs {pr}");
                assert!((row.r - pr_r).abs() <= 0.00051, "{row:?} vs {pr}");
                assert!(
                    (row.ratio - pq).abs() <= 0.051 * pq.max(1.0),
                    "{row:?} vs {pr}"
                );
                assert_eq!(pr["g"].as_array().unwrap().len(), 8);
            }
        }
    }
    assert!(md.contains("| ORT_INTEGER | "), "start-loss table: {md}");
    assert_contains(&md, "## Failed or skipped instances\n\nnone");
    for prec in ["a16_w16", "a8_w8"] {
        let b = json_file(
            &p,
            &format!("out/mezo-ort/deploy[precision={prec}]/deploy.json"),
        );
        assert!(b["fps"].as_f64().unwrap_or(0.0) > 0.0, "{b}");
    }

    // Second run: all cache hits, nothing executes.
    let r = p.run(pipe, ORT_SMALL).ok();
    assert_contains(&r.stderr, "0 ran, 12 cached");
    let rec = p.last_record();
    for (l, i) in instances(&rec) {
        assert!(cached(&i) && status(&i) == "ok", "{l} not a cache hit: {i}");
    }
    eprintln!(
        "ort_chain: all-cached rerun took {} ms (run record)",
        rec["duration_ms"]
    );

    // Add a precision: only its instances run (and compare, whose gather grew).
    p.file("pipelines/mezo-ort.toml", &full);
    p.run(pipe, ORT_SMALL).ok();
    let rec = p.last_record();
    assert_eq!(
        ran(&rec),
        set(&[
            "optimize[precision=a16_w4]",
            "compile[precision=a16_w4]",
            "deploy[precision=a16_w4]",
            "probe[context=ORT_INTEGER,precision=a16_w4]",
            "probe[context=ORT_QDQ_EMULATED,precision=a16_w4]",
            "compare",
        ])
    );
    let all = instances(&rec);
    assert_eq!(all.len(), 17);
    for (l, i) in &all {
        assert_eq!(status(i), "ok", "{l}");
        if !l.contains("a16_w4") && l != "compare" {
            let reason = i["reason"].as_str().unwrap_or("");
            assert!(cached(i), "{l} re-ran: {reason}");
        }
    }
    let md = p.read("out/mezo-ort/compare/compare.md");
    let rows = parse_compare(&md);
    assert_eq!(
        rows.len(),
        3 * 2 * 3,
        "3 precisions x 2 contexts x 3 eps:\n{md}"
    );

    // The probe is bit-for-bit reproducible: --force probe reruns every probe, same bytes.
    let probes: Vec<String> = all
        .keys()
        .filter(|l| l.starts_with("probe["))
        .cloned()
        .collect();
    assert_eq!(probes.len(), 6);
    let before: BTreeMap<String, (String, Vec<u8>)> = probes
        .iter()
        .map(|l| {
            let bytes = std::fs::read(p.path(&format!("out/mezo-ort/{l}/probe.json"))).unwrap();
            (l.clone(), (output_digest(&all[l], "result"), bytes))
        })
        .collect();
    p.run(pipe, &[ORT_SMALL, &["--force", "probe"][..]].concat())
        .ok();
    let rec = p.last_record();
    let after = instances(&rec);
    assert_eq!(ran(&rec), probes.iter().cloned().collect::<BTreeSet<_>>());
    for l in &probes {
        let bytes = std::fs::read(p.path(&format!("out/mezo-ort/{l}/probe.json"))).unwrap();
        let (digest, old) = &before[l];
        assert_eq!(
            &output_digest(&after[l], "result"),
            digest,
            "{l}: sha256 of probe.json changed"
        );
        assert!(
            &bytes == old,
            "{l}: probe.json bytes differ after --force probe"
        );
    }
    // Identical bytes cut off downstream work: compare is served from the cache.
    assert!(
        cached(&after["compare"]),
        "compare re-ran after identical probes"
    );
}
