//! What reruns and what does not: a second run executes nothing, a deleted output is restored,
//! a changed input, param or definition reruns exactly its cone, identical upstream bytes cut
//! off downstream work.

use crate::support::assert_contains;
use crate::support::Project;

/// Two chains, `a → a2` and `b → b2`, each stage logging that it ran; only `b` uses a param.
pub const CHAIN: &str = include_str!("fixtures/chain.toml");

pub fn chain_project() -> Project {
    let p = Project::with_logged_pipeline(CHAIN);
    p.file("data/a.txt", "abc\n").file("data/b.txt", "b\n");
    p
}

/// [`chain_project`] after its first run, with the log of what ran cleared: where each rerun
/// test starts.
fn chain_project_after_a_run() -> Project {
    let p = chain_project();
    p.run("p.toml", &[]).ok();
    p.clear_ran();
    p
}

#[test]
fn second_run_executes_nothing() {
    let p = chain_project();
    p.run("p.toml", &[]).ok();
    assert_eq!(p.ran(), ["a", "a2", "b", "b2"]);
    assert_eq!(p.read("out/t/a/up.txt"), "ABC\n");
    assert_eq!(p.read("out/t/b2/twice.txt"), "b\nhello\nb\nhello\n");
    p.clear_ran();
    // The lock file of a no-op run is the same: it is left alone, not rewritten.
    let lock = p.path("p.lock");
    let lock_mtime = || std::fs::metadata(&lock).unwrap().modified().unwrap();
    // An mtime no write of this run could produce, so the check cannot pass by a coarse clock.
    let before = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
    std::fs::File::options()
        .write(true)
        .open(&lock)
        .unwrap()
        .set_modified(before)
        .unwrap();
    let r = p.run("p.toml", &[]).ok();
    assert!(p.ran().is_empty(), "nothing may run: {:?}", p.ran());
    assert_contains(&r.stderr, "0 ran, 4 cached");
    assert_eq!(lock_mtime(), before, "an unchanged lock was rewritten");
}

#[test]
fn deleted_output_is_restored_from_the_cache_without_running() {
    let p = chain_project_after_a_run();
    std::fs::remove_file(p.path("out/t/a/up.txt")).unwrap();
    std::fs::write(p.path("out/t/b/copy.txt"), "edited by hand\n").unwrap();
    p.run("p.toml", &[]).ok();
    assert!(p.ran().is_empty(), "{:?}", p.ran());
    assert_eq!(p.read("out/t/a/up.txt"), "ABC\n");
    assert_eq!(p.read("out/t/b/copy.txt"), "b\nhello\n");
}

/// An edit of `a`'s input reruns `a`, and `a2` only if `a`'s output bytes changed.
#[test]
fn a_changed_input_reruns_its_cone_and_identical_upstream_bytes_cut_it_off() {
    // (data/a.txt, what reruns, a's output). One changed byte reruns exactly the cone: a's
    // output changed bytes but not length, so a2's key changes (its input digest moved). A
    // different input with the same uppercase output reruns a, and a2 is a hit.
    let cases: [(&str, &[&str], &str); 2] =
        [("abd\n", &["a", "a2"], "ABD\n"), ("ABC\n", &["a"], "ABC\n")];
    for (input, reruns, output) in cases {
        let p = chain_project_after_a_run();
        p.file("data/a.txt", input);
        p.run("p.toml", &[]).ok();
        assert_eq!(p.ran(), reruns, "data/a.txt = {input:?}");
        assert_eq!(p.read("out/t/a/up.txt"), output);
    }
}

#[test]
fn changed_param_reruns_only_instances_that_use_it() {
    let p = chain_project_after_a_run();
    p.run("p.toml", &["--set", "greeting=hi"]).ok();
    assert_eq!(p.ran(), ["b", "b2"]);
    p.clear_ran();
    p.run("p.toml", &["--set", "unused=2"]).ok();
    assert!(p.ran().is_empty(), "{:?}", p.ran());
    // Going back to an earlier value is a hit: every key ever seen is kept.
    p.run("p.toml", &[]).ok();
    assert!(p.ran().is_empty(), "{:?}", p.ran());
    assert_eq!(p.read("out/t/b/copy.txt"), "b\nhello\n");
}

/// A project stage definition `text/shout` (a script and a typed param) used by `shout`, and
/// two stages after and beside it; every stage logs that it ran.
pub fn uses_project() -> Project {
    let p = Project::with_logged_pipeline(USES);
    p.file(
        "stages/text/shout/stage.toml",
        &SHOUT.replace("__LOG__", &p.log()),
    )
    .file(
        "stages/text/shout/shout.sh",
        "for i in $(seq $2); do tr a-z A-Z < $1; done\n",
    )
    .file("data/in.txt", "hey\n");
    p
}

const SHOUT: &str = include_str!("fixtures/shout_stage.toml");

const USES: &str = include_str!("fixtures/uses.toml");

#[test]
fn edited_stage_script_reruns_that_stage_and_its_cone() {
    let p = uses_project();
    p.run("p.toml", &[]).ok();
    assert_eq!(p.read("out/u/after/o.txt"), "HEY\nHEY\n");
    p.clear_ran();
    p.file(
        "stages/text/shout/shout.sh",
        "for i in $(seq $2); do tr a-z A-Z < $1; echo; done\n",
    );
    p.run("p.toml", &[]).ok();
    assert_eq!(p.ran(), ["after", "shout"]);
}
