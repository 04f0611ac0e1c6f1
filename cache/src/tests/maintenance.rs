//! `verify` and `gc`.

use super::*;

#[test]
fn verify_finds_corrupt_blob_and_cleans_tmp() {
    let (dir, s) = store();
    let out = put_file(&s, dir.path(), "f", b"content");
    let a = action("k", "fam", &[("o", out.clone())], 1, 1);
    s.record_action(&a).unwrap();
    assert!(s.verify().unwrap().is_clean());
    fs::write(s.root().join("tmp/leftover"), b"x").unwrap();
    let blob = s.blob_path(&out.digest());
    crate::fsutil::remove_any(&blob).unwrap();
    fs::write(&blob, b"contenT").unwrap();
    let r = s.verify().unwrap();
    assert_eq!(r.tmp_removed.len(), 1);
    // Kept as evidence, not deleted: the edited bytes are in quarantine, out of the store.
    assert_eq!(r.quarantined.len(), 1, "{r:?}");
    assert_eq!(fs::read(&r.quarantined[0]).unwrap(), b"contenT");
    assert!(!blob.exists());
    assert!(
        r.bad.iter().any(
            |b| matches!(b, crate::BadEntry::BlobMismatch { digest, .. } if *digest == out.digest())
        ),
        "{r:?}"
    );
    assert!(
        r.bad
            .iter()
            .any(|b| matches!(b, crate::BadEntry::MissingBlob { key, .. } if *key == a.key)),
        "{r:?}"
    );
    assert!(s.lookup_action(&a.key).unwrap().is_none());
    assert!(s.verify().unwrap().is_clean());
}

#[test]
fn gc_keeps_keep_and_evicts_cheapest_per_byte_first() {
    let (dir, s) = store();
    let put = |name: &str, n: usize, seed: u8| put_file(&s, dir.path(), name, big(n, seed));
    // cost per byte: cheap 1/100k, mid 1000/100k, dear 100000/100k; kept is cheapest but kept.
    let kept = action("kept", "f", &[("o", put("a", 100_000, 1))], 0, 1);
    let cheap = action("cheap", "f", &[("o", put("b", 100_000, 2))], 1, 2);
    let mid = action("mid", "f", &[("o", put("c", 100_000, 3))], 1000, 3);
    let dear = action("dear", "f", &[("o", put("d", 100_000, 4))], 100_000, 4);
    for a in [&kept, &cheap, &mid, &dear] {
        s.record_action(a).unwrap();
    }
    let orphan = put("e", 1000, 5);
    let keep: HashSet<Digest> = [kept.key].into_iter().collect();
    let r = s.gc(&keep, Some(300_000)).unwrap();
    assert_eq!(r.evicted, vec![cheap.key]);
    assert_eq!(r.bytes_remaining, 300_000);
    assert!(!s.has_blob(&orphan.digest()));
    assert!(s.lookup_action(&mid.key).unwrap().is_some());
    let r = s.gc(&keep, Some(150_000)).unwrap();
    assert_eq!(r.evicted, vec![mid.key, dear.key]);
    assert!(s.lookup_action(&kept.key).unwrap().is_some());
    let r = s.gc(&keep, None).unwrap();
    assert!(r.evicted.is_empty());
    let du = s.du().unwrap();
    assert_eq!(
        (du.blob_count, du.blob_bytes, du.action_count),
        (1, 100_000, 1)
    );
    assert_eq!(du.families["f"].actions, 1);
}

/// Quarantine a stored blob the way a stage does that appends to its hard-linked input: the
/// write goes to the blob's inode, `check_fed` sees it and moves the blob to `quarantine/`.
/// Returns the quarantined file and its size.
fn write_through_input(s: &Store, out: &OutputEntry) -> (std::path::PathBuf, u64) {
    use std::io::Write;
    let blob = s.blob_path(&out.digest());
    let mut perms = fs::metadata(&blob).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    fs::set_permissions(&blob, perms).unwrap();
    fs::OpenOptions::new()
        .append(true)
        .open(&blob)
        .unwrap()
        .write_all(b"bad\n")
        .unwrap();
    let quarantined = match s.check_fed(out) {
        Err(crate::CacheError::InputModified { quarantined, .. }) => quarantined,
        other => panic!("expected InputModified, got {other:?}"),
    };
    assert!(!s.has_blob(&out.digest()));
    let len = fs::metadata(&quarantined).unwrap().len();
    (quarantined, len)
}

#[test]
fn verify_reports_quarantined_blobs_and_leaves_them_gc_removes_them() {
    let (dir, s) = store();
    let a = put_file(&s, dir.path(), "a", big(100_000, 7));
    let b = put_file(&s, dir.path(), "b", b"small input\n");
    let (qa, la) = write_through_input(&s, &a);
    let (qb, lb) = write_through_input(&s, &b);
    assert_eq!((la, lb), (100_004, 16));
    let mut expected = vec![qa, qb];
    expected.sort();

    // Reported, not a fault of the store, and still there afterwards (evidence).
    for _ in 0..2 {
        let r = s.verify().unwrap();
        assert!(r.is_clean(), "{r:?}");
        assert_eq!(r.quarantined, expected);
        assert_eq!(r.quarantined_bytes, la + lb);
    }

    // The only open store: gc removes all of it, counted apart from the blobs it sweeps.
    let r = s.gc(&HashSet::new(), None).unwrap();
    assert_eq!(
        (
            r.quarantine_removed,
            r.quarantine_bytes_freed,
            r.quarantine_spared
        ),
        (2, la + lb, 0)
    );
    assert_eq!((r.blobs_removed, r.bytes_freed), (0, 0));
    assert!(expected.iter().all(|p| !p.exists()));
    let v = s.verify().unwrap();
    assert!(
        v.quarantined.is_empty() && v.quarantined_bytes == 0,
        "{v:?}"
    );
}

#[test]
fn gc_spares_a_fresh_quarantine_while_another_store_is_open() {
    let (dir, s) = store();
    let a = put_file(&s, dir.path(), "a", b"input\n");
    let (q, len) = write_through_input(&s, &a);
    // Another holder of the store (its own presence lock) may just have named `q` in an error.
    let other = Store::open(s.root()).unwrap();
    let r = s.gc(&HashSet::new(), None).unwrap();
    assert_eq!((r.quarantine_removed, r.quarantine_spared), (0, 1));
    assert!(q.exists());
    assert_eq!(s.verify().unwrap().quarantined_bytes, len);
    drop(other);
    let r = s.gc(&HashSet::new(), None).unwrap();
    assert_eq!((r.quarantine_removed, r.quarantine_bytes_freed), (1, len));
    assert!(!q.exists());
}

/// `du` counts each blob once: a family's bytes are the blobs only it references, a blob two
/// families reference is shared, one no entry references is unreferenced; they add up to the
/// total (two actions of one family sharing an output count it once, too).
#[test]
fn du_counts_each_blob_once_and_adds_up() {
    let (dir, s) = store();
    let put = |name: &str, n: usize, seed: u8| put_file(&s, dir.path(), name, big(n, seed));
    let same = put("same", 1_000, 1);
    let only_a = put("a", 2_000, 2);
    let only_b = put("b", 4_000, 3);
    let _orphan = put("o", 8_000, 4);
    let a1 = action(
        "a1",
        "fa",
        &[("x", same.clone()), ("y", only_a.clone())],
        1,
        1,
    );
    let a2 = action("a2", "fa", &[("y", only_a)], 1, 2);
    let b1 = action("b1", "fb", &[("x", same), ("z", only_b)], 1, 3);
    for a in [&a1, &a2, &b1] {
        s.record_action(a).unwrap();
    }
    let du = s.du().unwrap();
    assert_eq!(du.blob_bytes, 15_000);
    assert_eq!(du.families["fa"].output_bytes, 2_000);
    assert_eq!(du.families["fa"].actions, 2);
    assert_eq!(du.families["fb"].output_bytes, 4_000);
    assert_eq!((du.shared_bytes, du.unreferenced_bytes), (1_000, 8_000));
    let parts: u64 = du.families.values().map(|f| f.output_bytes).sum::<u64>()
        + du.shared_bytes
        + du.unreferenced_bytes;
    assert_eq!(parts, du.blob_bytes);
}

/// Lock files an older heddle or a killed holder left are removed by `gc`; a held one, the
/// store's own presence lock and a file that names no key are not.
#[cfg(unix)]
#[test]
fn gc_removes_lock_files_nobody_holds() {
    let (_dir, s) = store();
    let locks = s.root().join("locks");
    let left = Digest::of_bytes(b"left behind");
    fs::write(locks.join(format!("{left}.lock")), "12345").unwrap();
    fs::write(locks.join("notes.lock"), "").unwrap();
    let busy = Digest::of_bytes(b"busy");
    let held = s.lock_key(&busy).unwrap();
    let r = s.gc(&HashSet::new(), None).unwrap();
    assert_eq!(r.stale_locks_removed, 1);
    let mut names: Vec<_> = fs::read_dir(&locks)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    let mut want = vec![
        format!("{busy}.lock"),
        "notes.lock".to_string(),
        "store.lock".to_string(),
    ];
    want.sort();
    assert_eq!(names, want);
    assert_eq!(s.lock_holder(&busy), Some(std::process::id()));
    drop(held);
}
