//! A run writes a lock; `heddle status` explains changes against it; `heddle lock` rewrites it
//! from the cache.

use super::project;
use crate::support::assert_contains;
use crate::support::Project;

#[test]
fn a_run_writes_a_lock_and_status_explains_changes_against_it() {
    let p = project();
    p.run("p.toml", &[]).ok();
    let lock = p.read("p.lock");
    assert!(
        lock.contains("[[instance]]") && lock.contains("label = \"gen[k=1]\""),
        "{lock}"
    );
    assert_contains(&lock, "status = \"failed\"");
    let st = p.heddle(&["status", "p.toml", "--check"]).ok();
    assert_contains(&st.stdout, "4 as locked, 0 changed");
    p.file("data/seed.txt", "4\n");
    let st = p.heddle(&["status", "p.toml", "--check"]).code(1);
    assert_contains(&st.stdout, "changed  gen[k=1]  input seed changed");
    let st = p.heddle(&["status", "p.toml", "--set", "scale=5"]).ok();
    assert_contains(&st.stdout, "param scale 2 → 5");
    // The lock is stable: a no-op rerun rewrites identical bytes.
    p.file("data/seed.txt", "3\n");
    p.run("p.toml", &[]).ok();
    assert_eq!(p.read("p.lock"), lock);
    // `heddle lock` needs everything cached; then it writes the same lock. Before that, nothing
    // failed: the user has a step to take, so it is exit 2 (usage), not 1 (a stage failed).
    std::fs::remove_file(p.path("p.lock")).unwrap();
    let fresh = project();
    let missing = fresh.heddle(&["lock", "p.toml"]).code(2);
    assert_contains(&missing.stderr, "are not in the cache");
    assert_contains(&missing.stderr, "run the pipeline first");
    p.file("data/fix", "");
    p.run("p.toml", &[]).ok();
    p.heddle(&["lock", "p.toml"]).ok();
    assert!(p.read("p.lock").contains("label = \"gen[k=3]\""));
}

/// `heddle status` of a large matrix finds every instance in its lock (looked up by label, not
/// scanned for), and still names the one instance whose locked key differs.
#[test]
fn status_of_a_large_matrix_finds_every_locked_instance() {
    let n = 1500;
    let values: Vec<String> = (0..n).map(|i| i.to_string()).collect();
    let p = Project::new();
    p.file(
        "p.toml",
        &format!(
            "[pipeline]\nname = \"big\"\n[stages.m]\nmatrix = {{ i = [{}] }}\n\
             run = \"echo {{{{ matrix.i }}}} > {{{{ out.o }}}}\"\noutputs = {{ o = \"o.txt\" }}\n",
            values.join(", ")
        ),
    );
    p.run("p.toml", &[]).ok();
    let st = p.heddle(&["status", "p.toml", "--check"]).ok();
    assert!(
        st.stdout.contains(&format!(
            "{n} instances against p.lock: {n} as locked, 0 changed, 0 removed"
        )),
        "{}",
        st.stdout
    );
    // One locked key edited: that instance, and only it, is changed.
    let lock = p.read("p.lock");
    let at = lock.find("label = \"m[i=700]\"").expect("locked");
    let key_at = at + lock[at..].find("cache_key = \"").unwrap() + "cache_key = \"".len();
    let edited = format!(
        "{}{}{}",
        &lock[..key_at],
        "0".repeat(64),
        &lock[key_at + 64..]
    );
    p.file("p.lock", &edited);
    let st = p.heddle(&["status", "p.toml", "--check"]).code(1);
    let changed: Vec<&str> = st
        .stdout
        .lines()
        .filter(|l| l.starts_with("changed"))
        .collect();
    assert_eq!(changed.len(), 1, "{}", st.stdout);
    assert!(
        changed[0].starts_with("changed  m[i=700] "),
        "{}",
        changed[0]
    );
    assert!(
        st.stdout.contains(&format!(
            "{n} instances against p.lock: {} as locked, 1 changed, 0 removed",
            n - 1
        )),
        "{}",
        st.stdout
    );
}
