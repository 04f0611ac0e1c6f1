//! `heddle runs` through the built binary, exact text: per run, its headline number (the first
//! number in a cell of its report tables) and the params it changed against the previous run
//! of the same pipeline.

use crate::support;

use heddle_runner::record;
use support::Project;

/// Two pipelines: `rc.toml`, whose report table shows its params, and `other.toml`.
fn project() -> Project {
    let p = Project::new();
    p.file("rc.toml", include_str!("fixtures/runs/rc.toml"))
        .file("other.toml", include_str!("fixtures/runs/other.toml"));
    p
}

/// `heddle runs` with each run id replaced by `RUN` and the duration column by `<dur>`: the
/// rest is exact.
fn runs_text(p: &Project) -> String {
    let out = p.heddle(&["runs"]).ok().stdout;
    let ids = record::list(p.root());
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), ids.len(), "{out}");
    let mut masked = String::new();
    for (line, id) in lines.iter().zip(&ids) {
        let rest = line
            .strip_prefix(id.as_str())
            .unwrap_or_else(|| panic!("{line}"));
        // `  {status:<11} {pipeline:<16} {duration:>7}`: the duration is 7 characters at 31.
        let (head, tail) = rest.split_at(31);
        masked.push_str(&format!("RUN{head}  <dur>{}\n", &tail[7..]));
    }
    masked
}

#[test]
fn runs_show_the_headline_and_what_each_run_changed() {
    let p = project();
    p.run("rc.toml", &[]).ok();
    p.run("rc.toml", &["--set", "quant=a16_w16"]).ok();
    p.run("other.toml", &[]).ok();
    p.run("rc.toml", &["--set", "quant=a16_w16", "--set", "scale=10"])
        .ok();
    assert_eq!(
        runs_text(&p),
        "\
RUN  completed   rc                 <dur>  ran 1 cached 0 failed 0 skipped 0   2.5
RUN  completed   rc                 <dur>  ran 1 cached 0 failed 0 skipped 0   2.5  quant=a8_w8→a16_w16
RUN  completed   other              <dur>  ran 1 cached 0 failed 0 skipped 0     -
RUN  completed   rc                 <dur>  ran 1 cached 0 failed 0 skipped 0  10.5  scale=2→10
"
    );
    let j: serde_json::Value =
        serde_json::from_str(&p.heddle(&["runs", "--json"]).ok().stdout).unwrap();
    let ids = record::list(p.root());
    assert_eq!(j[3]["previous"], ids[1].as_str());
    assert_eq!(j[2]["previous"], serde_json::Value::Null);
    assert_eq!(
        j[3]["changed_params"],
        serde_json::json!([{"name": "scale", "a": 2, "b": 10}])
    );
    assert_eq!(
        j[3]["headline"],
        serde_json::json!({"src": "table#md", "place": "a16_w16 (seed 0): row \"x\" col \"v\"", "value": "10.5"})
    );
}

#[test]
fn without_report_tables_there_is_no_headline_column() {
    let p = project();
    p.run("other.toml", &[]).ok();
    p.run("other.toml", &["--set", "quant=y"]).ok();
    assert_eq!(
        runs_text(&p),
        "\
RUN  completed   other              <dur>  ran 1 cached 0 failed 0 skipped 0
RUN  completed   other              <dur>  ran 1 cached 0 failed 0 skipped 0  quant=x→y
"
    );
}

/// `heddle runs --prune KEEP` removes all but the newest KEEP records (a no-op at 100k
/// instances writes ~100 MB of record) and says what it removed; the kept runs still list.
#[test]
fn prune_keeps_the_newest_runs() {
    let p = project();
    p.run("rc.toml", &[]).ok();
    p.run("rc.toml", &["--set", "scale=3"]).ok();
    p.run("rc.toml", &["--set", "scale=4"]).ok();
    let ids = record::list(p.root());
    let r = p.heddle(&["runs", "--prune", "1"]).ok();
    // The size (`3.1 KiB`) depends on the record's durations and paths.
    let (head, rest) = r.stderr.split_once(" (").unwrap();
    let (_, tail) = rest.split_once(')').unwrap();
    assert_eq!(
        format!("{head} (SIZE){tail}"),
        "removed 2 run records (SIZE) from .heddle/runs\n"
    );
    assert_eq!(record::list(p.root()), ids[2..]);
    assert_eq!(r.stdout.lines().count(), 1, "{}", r.stdout);
    let r = p.heddle(&["runs", "--prune", "5", "--json"]).ok();
    assert_eq!(r.stderr, "removed 0 run records (0 B) from .heddle/runs\n");
    let j: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(j[0]["run_id"], ids[2].as_str());
}
