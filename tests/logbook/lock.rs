//! A run writes a lock; `heddle status` explains changes against it; `heddle lock` rewrites it
//! from the cache.

use crate::project;

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
