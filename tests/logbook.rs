//! Lock files, `heddle status`, logbook entries and HTML reports, through the real binary.

mod support;

use support::Project;

/// A report stage over a matrix, one instance of which fails (allowed) unless `data/fix` exists.
fn project() -> Project {
    let p = Project::new();
    p.file("data/seed.txt", "3\n").file(
        "p.toml",
        r#"
[pipeline]
name = "lb"
[params]
scale = 2
[stages.gen]
matrix = { k = [1, 2, 3] }
inputs = { seed = { path = "data/seed.txt" } }
allow_failure = true
run = """
if [ {{ matrix.k }} = 3 ] && [ ! -e '__ROOT__/data/fix' ]; then
  echo 'ValueError: k=3 is not supported' >&2; exit 1
fi
echo $(( {{ matrix.k }} * {{ params.scale }} + $(cat {{ in.seed }}) )) > {{ out.v }}
"""
outputs = { v = "v.txt" }
[stages.table]
report = true
inputs = { all = "gen[*].v" }
run = """
{ echo '| k | value | ratio |'; echo '| --- | ---: | ---: |'
  for d in {{ in.all.dir }}/*; do
    if [ -f $d/v.txt ]; then echo "| $(basename $d) | $(cat $d/v.txt).25 | 1.5x |"; else echo "| $(basename $d) | FAILED | - |"; fi
  done; } > {{ out.md }}
echo '{"plots":[{"title":"value vs k","x_label":"k","y_label":"value","x_log":true,"y_log":true,"series":[{"name":"v","points":[[1,2],[2,4],[3,6]]}]}]}' > {{ out.plots }}
"""
outputs = { md = "table.md", plots = "t.plots.json" }
"#,
    );
    let text = p
        .read("p.toml")
        .replace("__ROOT__", &p.root().display().to_string());
    p.file("p.toml", &text);
    p
}

#[test]
fn a_run_writes_a_lock_and_status_explains_changes_against_it() {
    let p = project();
    p.run("p.toml", &[]).ok();
    let lock = p.read("p.lock");
    assert!(
        lock.contains("[[instance]]") && lock.contains("label = \"gen[k=1]\""),
        "{lock}"
    );
    assert!(lock.contains("status = \"failed\""), "{lock}");
    let st = p.heddle(&["status", "p.toml", "--check"]).ok();
    assert!(
        st.stdout.contains("4 as locked, 0 changed"),
        "{}",
        st.stdout
    );
    p.file("data/seed.txt", "4\n");
    let st = p.heddle(&["status", "p.toml", "--check"]).code(1);
    assert!(
        st.stdout.contains("changed  gen[k=1]  input seed changed"),
        "{}",
        st.stdout
    );
    let st = p.heddle(&["status", "p.toml", "--set", "scale=5"]).ok();
    assert!(st.stdout.contains("param scale 2 → 5"), "{}", st.stdout);
    // The lock is stable: a no-op rerun rewrites identical bytes.
    p.file("data/seed.txt", "3\n");
    p.run("p.toml", &[]).ok();
    assert_eq!(p.read("p.lock"), lock);
    // `heddle lock` needs everything cached; then it writes the same lock.
    std::fs::remove_file(p.path("p.lock")).unwrap();
    p.file("data/fix", "");
    p.run("p.toml", &[]).ok();
    p.heddle(&["lock", "p.toml"]).ok();
    assert!(p.read("p.lock").contains("label = \"gen[k=3]\""));
}

#[test]
fn an_entry_made_from_a_run_verifies_and_an_edited_number_fails_by_name() {
    let p = project();
    p.run("p.toml", &[]).ok();
    p.heddle(&["logbook", "new", "-o", "logbook/e.md"]).ok();
    let entry = p.read("logbook/e.md");
    assert!(entry.contains("pipeline_file: p.toml"), "{entry}");
    assert!(
        entry.contains("<!-- heddle:begin table src=table#md"),
        "{entry}"
    );
    assert!(entry.contains("| k=1 | 5.25 | 1.5x |"), "{entry}");
    assert!(
        entry.contains("- `gen[k=3]` FAILED ValueError: k=3 is not supported"),
        "{entry}"
    );
    // Prose the author adds outside the markers survives a refresh.
    let with_prose = entry.replace(
        "## Failed instances",
        "My own words about k=3.\n\n## Failed instances",
    );
    p.file("logbook/e.md", &with_prose);
    let v = p.heddle(&["logbook", "verify", "logbook/e.md"]).ok();
    assert!(
        v.stdout
            .contains("ok    table#md row \"k=1\" col \"value\": 5.25 | 5.25"),
        "{}",
        v.stdout
    );
    assert!(
        v.stdout
            .contains("ok    failure gen[k=3]: FAILED ValueError reproduced"),
        "{}",
        v.stdout
    );
    assert!(v.stdout.contains("0 differ"), "{}", v.stdout);

    let edited = with_prose.replace("| k=2 | 7.25 |", "| k=2 | 7.5 |");
    assert_ne!(edited, with_prose);
    p.file("logbook/e.md", &edited);
    let v = p.heddle(&["logbook", "verify", "logbook/e.md"]).code(1);
    assert!(
        v.stdout
            .contains("DIFF  table#md row \"k=2\" col \"value\": entry 7.5 | now 7.25"),
        "{}",
        v.stdout
    );
    assert!(v.stdout.contains("1 differ"), "{}", v.stdout);

    p.heddle(&["logbook", "refresh", "logbook/e.md"]).ok();
    let refreshed = p.read("logbook/e.md");
    assert!(
        refreshed.contains("| k=2 | 7.25 |") && refreshed.contains("My own words about k=3."),
        "{refreshed}"
    );
    p.heddle(&["logbook", "verify", "logbook/e.md"]).ok();
}

#[test]
fn a_failure_that_stops_failing_is_a_difference() {
    let p = project();
    p.run("p.toml", &[]).ok();
    p.heddle(&["logbook", "new", "-o", "e.md"]).ok();
    p.file("data/fix", "");
    let v = p.heddle(&["logbook", "verify", "e.md"]).code(1);
    assert!(
        v.stdout
            .contains("DIFF  failure gen[k=3]: entry FAILED ValueError | now it succeeds"),
        "{}",
        v.stdout
    );
}

#[test]
fn fresh_verify_reexecutes_in_a_private_cache_twice() {
    let p = project();
    p.run("p.toml", &[]).ok();
    p.heddle(&["logbook", "new", "-o", "e.md"]).ok();
    let before = p.heddle(&["runs"]).ok().stdout.lines().count();
    let v = p
        .heddle(&["logbook", "verify", "e.md", "--fresh", "--runs", "2"])
        .ok();
    assert_eq!(
        v.stdout
            .matches("fresh: every instance re-executed")
            .count(),
        2,
        "{}",
        v.stdout
    );
    // Both reruns executed every instance (nothing came from a cache).
    let runs = p.heddle(&["runs"]).ok().stdout;
    let new: Vec<&str> = runs.lines().skip(before).collect();
    assert_eq!(new.len(), 2, "{runs}");
    assert!(new.iter().all(|l| l.contains("cached 0")), "{runs}");
}

#[test]
fn the_report_is_one_self_contained_page() {
    let p = project();
    p.run("p.toml", &[]).ok();
    let r = p.heddle(&["report", "-o", "report.html"]).ok();
    assert!(r.stdout.contains("1 tables, 1 plots"), "{}", r.stdout);
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
    let png = p.path("report.png");
    let shot = std::process::Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1200,1600",
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

fn which(cmd: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(cmd).is_file()))
}
