//! The stat cache: what skips a re-hash and what is rewritten.

use super::*;

#[test]
fn stat_cache_skips_rehash_when_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("input");
    fs::write(&p, b"v1").unwrap();
    // Make the file old enough not to be racy.
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
    fs::File::options()
        .write(true)
        .open(&p)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let cache_path = dir.path().join("stats.json");
    let c = StatCache::load(&cache_path);
    assert_eq!(c.hash(&p).unwrap(), Digest::of_bytes(b"v1"));
    assert_eq!(c.hash(&p).unwrap(), Digest::of_bytes(b"v1"));
    assert_eq!(c.hash_count(), 1);
    c.save().unwrap();
    let c = StatCache::load(&cache_path);
    assert_eq!(c.hash(&p).unwrap(), Digest::of_bytes(b"v1"));
    assert_eq!(c.hash_count(), 0);
    fs::write(&p, b"v2").unwrap();
    assert_eq!(c.hash(&p).unwrap(), Digest::of_bytes(b"v2"));
    assert_eq!(c.hash_count(), 1);
    // A fresh (racy) file is re-hashed until it is old enough.
    assert_eq!(c.hash(&p).unwrap(), Digest::of_bytes(b"v2"));
    assert_eq!(c.hash_count(), 2);
    // A torn cache file is an empty cache.
    fs::write(&cache_path, b"{\"format\":\"heddle/stat").unwrap();
    assert!(StatCache::load(&cache_path).is_empty());
}

#[test]
fn is_materialized_uses_stat_records() {
    let (dir, s) = store();
    let out = put_file(&s, dir.path(), "big", big(500_000, 4));
    let stats = StatCache::load(&dir.path().join("stats.json"));
    let dest = dir.path().join("dest");
    s.materialize_recorded(&out, &dest, &stats).unwrap();
    for _ in 0..3 {
        assert!(s.is_materialized(&out, &dest, &stats));
    }
    assert_eq!(stats.hash_count(), 0);
    // Linking the same blob elsewhere (which moves a shared inode's ctime) costs no re-hash.
    s.materialize(&out, &dir.path().join("another")).unwrap();
    assert!(s.is_materialized(&out, &dest, &stats));
    assert_eq!(stats.hash_count(), 0);
    crate::fsutil::remove_any(&dest).unwrap();
    fs::write(&dest, b"something else").unwrap();
    assert!(!s.is_materialized(&out, &dest, &stats));
    assert!(!s.is_materialized(&out, &dir.path().join("absent"), &stats));
}

#[test]
fn an_unchanged_stat_cache_is_not_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f");
    fs::write(&file, b"x").unwrap();
    let at = dir.path().join("stat-cache");
    let c = StatCache::load(&at);
    c.record(&file, Digest::of_bytes(b"x"));
    c.save().unwrap();
    let mtime = || fs::metadata(&at).unwrap().modified().unwrap();
    let first = mtime();
    std::thread::sleep(std::time::Duration::from_millis(20));

    // The same record again (a no-op run materialises nothing new): nothing to write.
    let c = StatCache::load(&at);
    c.record(&file, Digest::of_bytes(b"x"));
    c.save().unwrap();
    assert_eq!(mtime(), first);

    // A change is written.
    c.forget(&file);
    c.save().unwrap();
    assert_ne!(mtime(), first);
    assert!(StatCache::load(&at).is_empty());
}

#[test]
fn a_saved_stat_cache_reads_back_and_a_torn_or_v1_one_is_handled() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    fs::write(&a, b"x").unwrap();
    fs::write(&b, b"y").unwrap();
    let at = dir.path().join("stat-cache");
    let c = StatCache::load(&at);
    c.record(&a, Digest::of_bytes(b"x"));
    c.record(&b, Digest::of_bytes(b"y"));
    c.save().unwrap();
    let c = StatCache::load(&at);
    assert_eq!(c.len(), 2);
    assert_eq!(c.hash(&a).unwrap(), Digest::of_bytes(b"x"));
    assert_eq!(
        c.hash_count(),
        0,
        "a vouched record is served after a reload"
    );

    // Cut anywhere, the file is no cache at all.
    let bytes = fs::read(&at).unwrap();
    for cut in [bytes.len() - 1, bytes.len() / 2, 10] {
        fs::write(&at, &bytes[..cut]).unwrap();
        assert!(StatCache::load(&at).is_empty(), "cut at {cut}");
    }

    // The JSON an earlier heddle saved is still read.
    let meta = fs::metadata(&a).unwrap();
    let v1 = serde_json::json!({
        "format": "heddle/statcache/v1",
        "entries": [[a, {
            "stamp": crate::fsutil::FileStamp::of(&meta),
            "digest": Digest::of_bytes(b"x"),
            "seen_ns": 0,
            "vouched": true,
        }]],
    });
    fs::write(&at, serde_json::to_vec(&v1).unwrap()).unwrap();
    let c = StatCache::load(&at);
    assert_eq!(c.hash(&a).unwrap(), Digest::of_bytes(b"x"));
    assert_eq!(c.hash_count(), 0);
}

#[test]
fn a_save_drops_the_records_of_files_gone_or_changed_and_keeps_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let names = ["used", "untouched", "deleted", "rewritten", "made-a-folder"];
    let path = |n: &str| dir.path().join(n);
    for n in names {
        fs::write(path(n), n).unwrap();
    }
    let at = dir.path().join("stat-cache");
    let c = StatCache::load(&at);
    for n in names {
        c.record(&path(n), Digest::of_bytes(n.as_bytes()));
    }
    c.save().unwrap();
    assert_eq!(StatCache::load(&at).len(), 5);

    fs::remove_file(path("deleted")).unwrap();
    fs::write(path("rewritten"), b"other bytes").unwrap();
    fs::remove_file(path("made-a-folder")).unwrap();
    fs::create_dir(path("made-a-folder")).unwrap();

    // A run that touches one file: the other records are checked, not trusted blindly.
    let c = StatCache::load(&at);
    c.record(&path("used"), Digest::of_bytes(b"used"));
    c.save().unwrap();
    let c = StatCache::load(&at);
    assert_eq!(c.len(), 2, "only `used` and `untouched` are left");
    for n in ["used", "untouched"] {
        assert_eq!(c.hash(&path(n)).unwrap(), Digest::of_bytes(n.as_bytes()));
    }
    assert_eq!(c.hash_count(), 0, "both records still serve");

    // Nothing gone and nothing new: the file is not rewritten.
    let mtime = || fs::metadata(&at).unwrap().modified().unwrap();
    let first = mtime();
    std::thread::sleep(std::time::Duration::from_millis(20));
    StatCache::load(&at).save().unwrap();
    assert_eq!(mtime(), first);
}

#[test]
fn a_save_that_used_few_records_checks_a_bounded_number_of_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let at = dir.path().join("stat-cache");
    let c = StatCache::load(&at);
    let files: Vec<_> = (0..300).map(|i| dir.path().join(format!("f{i}"))).collect();
    for f in &files {
        fs::write(f, b"x").unwrap();
        c.record(f, Digest::of_bytes(b"x"));
    }
    c.save().unwrap();
    for f in &files {
        fs::remove_file(f).unwrap();
    }
    // Nothing used: 256 records are checked (and, their files gone, dropped), the rest wait.
    StatCache::load(&at).save().unwrap();
    assert_eq!(StatCache::load(&at).len(), 300 - 256);
    StatCache::load(&at).save().unwrap();
    assert!(StatCache::load(&at).is_empty());
}
