//! Entries made from a run verify; an edited number, a failure that stops failing or an absent
//! image are named exactly; `--fresh` re-executes.

use insta::assert_snapshot;

use super::project_with_entry;
use crate::support::docker;
use crate::support::Project;
use crate::support::{assert_contains, assert_lacks};

#[test]
fn an_entry_made_from_a_run_verifies_and_an_edited_number_fails_by_name() {
    let p = project_with_entry("logbook/e.md");
    let entry = p.read("logbook/e.md");
    assert_contains(&entry, "pipeline_file: p.toml");
    assert_contains(&entry, "<!-- heddle:begin table src=table#md");
    assert_contains(&entry, "| k=1 | 5.25 | 1.5x |");
    assert_contains(
        &entry,
        "- `gen[k=3]` FAILED ValueError: k=3 is not supported",
    );
    // Prose the author adds outside the markers survives a refresh.
    let with_prose = entry.replace(
        "## Failed instances",
        "My own words about k=3.\n\n## Failed instances",
    );
    p.file("logbook/e.md", &with_prose);
    let v = p.heddle(&["logbook", "verify", "logbook/e.md"]).ok();
    assert_contains(
        &v.stdout,
        "ok    table#md row \"k=1\" col \"value\": 5.25 | 5.25",
    );
    assert_contains(
        &v.stdout,
        "ok    failure gen[k=3]: FAILED ValueError reproduced",
    );
    assert_contains(&v.stdout, "0 differ");

    let edited = with_prose.replace("| k=2 | 7.25 |", "| k=2 | 7.5 |");
    assert_ne!(edited, with_prose);
    p.file("logbook/e.md", &edited);
    let v = p.heddle(&["logbook", "verify", "logbook/e.md"]).code(1);
    assert_contains(
        &v.stdout,
        "DIFF  table#md row \"k=2\" col \"value\": entry 7.5 | now 7.25 (allowed ±0.05)",
    );
    assert_contains(&v.stdout, "1 differ");

    p.heddle(&["logbook", "refresh", "logbook/e.md"]).ok();
    let refreshed = p.read("logbook/e.md");
    assert!(
        refreshed.contains("| k=2 | 7.25 |") && refreshed.contains("My own words about k=3."),
        "{refreshed}"
    );
    p.heddle(&["logbook", "verify", "logbook/e.md"]).ok();
}

/// What verify prints, in full: the rule, every value with both sides, a difference with what
/// was allowed, the failures, the count. An edit within the printed digits is no edit; one
/// beyond them is named. Snapshots in `tests/logbook/snapshots/`.
#[test]
fn verify_prints_every_value_the_rule_and_each_difference_exactly() {
    let p = project_with_entry("e.md");
    let entry = p.read("e.md");
    // `heddle logbook verify e.md EXTRA…` of `text`, expecting exit `code`.
    let verify = |text: &str, extra: &[&str], code: i32| {
        p.file("e.md", text);
        let mut args = vec!["logbook", "verify", "e.md"];
        args.extend_from_slice(extra);
        p.heddle(&args).code(code)
    };
    assert_snapshot!("verify_unedited", verify(&entry, &[], 0).stdout);

    // 1.5x printed to one decimal: 1.54 is the same number, 1.6 is not.
    let v = verify(
        &entry.replace("| k=1 | 5.25 | 1.5x |", "| k=1 | 5.25 | 1.54x |"),
        &[],
        1,
    );
    assert_snapshot!("verify_edit_beyond_the_printed_digits", v.stdout);
    let edited = entry.replace("| k=2 | 7.25 | 1.5x |", "| k=2 | 7.25 | 1.6x |");
    assert_snapshot!(
        "verify_edit_of_a_printed_digit",
        verify(&edited, &[], 1).stdout
    );

    // A tolerance the entry states on the block replaces the printed digits...
    let stated = edited.replace("src=table#md ", "src=table#md rtol=0.1 ");
    assert_snapshot!("verify_stated_tolerance", verify(&stated, &[], 0).stdout);
    // ...and survives a refresh, which rewrites only what heddle derives.
    p.heddle(&["logbook", "refresh", "e.md"]).ok();
    assert!(
        p.read("e.md").contains("rtol=0.1 -->"),
        "{}",
        p.read("e.md")
    );
    // One on the command line overrides both.
    let v = verify(&stated, &["--atol", "0.01"], 1);
    assert_snapshot!("verify_command_line_tolerance", v.stdout);
    // A stated tolerance that is not a number is a user error.
    let loose = entry.replace("src=table#md ", "src=table#md rtol=loose ");
    assert_snapshot!(
        "verify_tolerance_not_a_number",
        verify(&loose, &[], 2).stderr
    );
}

/// An entry whose pipeline needs an image this machine does not have cannot be verified here:
/// verify says which image, and exits 2 (a user error: load the image), never "differ".
#[test]
fn an_entry_whose_image_is_absent_says_so_and_exits_2() {
    let p = Project::new();
    p.file(
        "p.toml",
        "[pipeline]\nname = \"needs-image\"\n[stages.table]\nimage = \"heddle-test/absent:never\"\nreport = true\nrun = \"echo '| a | b |' > {{ out.md }}\"\noutputs = { md = \"t.md\" }\n",
    )
    .file(
        "e.md",
        "---\nheddle-entry: 1\npipeline: needs-image\npipeline_file: p.toml\nparams: {}\n---\n<!-- heddle:begin table src=table#md -->\n| a | 1.0 |\n<!-- heddle:end table -->\n",
    );
    let v = p.heddle(&["logbook", "verify", "e.md"]).code(2);
    assert!(
        v.stderr.starts_with(
            "error: cannot verify e.md: its pipeline p.toml cannot run here\n  caused by: "
        ),
        "{}",
        v.stderr
    );
    if docker::engine_reachable() {
        assert_contains(
            &v.stderr,
            "image heddle-test/absent:never is not present in the Docker Engine",
        );
    }
    assert_lacks(&v.stdout, "differ");
}

#[test]
fn a_failure_that_stops_failing_is_a_difference() {
    let p = project_with_entry("e.md");
    p.file("data/fix", "");
    let v = p.heddle(&["logbook", "verify", "e.md"]).code(1);
    assert_contains(
        &v.stdout,
        "DIFF  failure gen[k=3]: entry FAILED ValueError | now it succeeds",
    );
}

#[test]
fn fresh_verify_reexecutes_in_a_private_cache_twice() {
    let p = project_with_entry("e.md");
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
