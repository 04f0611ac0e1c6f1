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
