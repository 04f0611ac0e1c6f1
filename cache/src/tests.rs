//! Tests of the store on the real filesystem.

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::path::Path;

use crate::{ActionEntry, Digest, OutputEntry, StatCache, Store, TreeEntry};

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(&dir.path().join("store")).unwrap();
    (dir, s)
}

fn big(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn action(
    key: &str,
    family: &str,
    outputs: &[(&str, OutputEntry)],
    duration_ms: u64,
    created: u64,
) -> ActionEntry {
    ActionEntry {
        key: Digest::of_bytes(key.as_bytes()),
        family: family.into(),
        key_parts: serde_json::json!({ "k": key }),
        outputs: outputs
            .iter()
            .map(|(n, o)| (n.to_string(), o.clone()))
            .collect::<BTreeMap<_, _>>(),
        duration_ms,
        created_unix_ms: created,
        meta: serde_json::Value::Null,
    }
}

#[cfg(unix)]
fn set_exec(p: &Path) {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(p, fs::Permissions::from_mode(0o755)).unwrap();
}

fn make_tree(at: &Path) {
    fs::create_dir_all(at.join("sub dir/empty")).unwrap();
    fs::write(at.join("sub dir/a file.txt"), b"hello").unwrap();
    fs::write(at.join("big.bin"), big(200_000, 1)).unwrap();
    fs::write(at.join("run.sh"), b"#!/bin/sh\necho hi\n").unwrap();
    #[cfg(unix)]
    {
        set_exec(&at.join("run.sh"));
        std::os::unix::fs::symlink("sub dir/a file.txt", at.join("link")).unwrap();
    }
}

#[test]
fn put_and_materialize_file_small_big_executable() {
    let (dir, s) = store();
    for (name, data, exec) in [
        ("small.txt", b"abc".to_vec(), false),
        ("big.bin", big(300_000, 7), false),
        ("tool", big(100_000, 3), true),
    ] {
        let src = dir.path().join(name);
        fs::write(&src, &data).unwrap();
        #[cfg(unix)]
        if exec {
            set_exec(&src);
        }
        let e = s.put_output(&src).unwrap();
        assert_eq!(
            e,
            OutputEntry::File {
                digest: Digest::of_bytes(&data),
                size: data.len() as u64,
                executable: exec && cfg!(unix)
            }
        );
        assert!(s.has_blob(&e.digest()));
        // Re-put is idempotent and leaves the blob alone.
        let before = fs::metadata(s.blob_path(&e.digest()))
            .unwrap()
            .modified()
            .unwrap();
        assert_eq!(s.put_output(&src).unwrap(), e);
        assert_eq!(
            fs::metadata(s.blob_path(&e.digest()))
                .unwrap()
                .modified()
                .unwrap(),
            before
        );
        // The scratch dir is deleted by its owner; the store keeps the content.
        fs::remove_file(&src).unwrap();
        let dest = dir.path().join("out").join(format!("copy of {name}"));
        s.materialize(&e, &dest).unwrap();
        assert_eq!(fs::read(&dest).unwrap(), data);
        #[cfg(unix)]
        assert_eq!(
            crate::fsutil::is_executable(&fs::metadata(&dest).unwrap()),
            exec
        );
        // Materialising again replaces it.
        s.materialize(&e, &dest).unwrap();
        assert_eq!(fs::read(&dest).unwrap(), data);
    }
    assert!(fs::read_dir(s.root().join("tmp")).unwrap().next().is_none());
}

#[test]
fn put_and_materialize_tree() {
    let (dir, s) = store();
    let src = dir.path().join("produced");
    make_tree(&src);
    let e = s.put_output(&src).unwrap();
    let OutputEntry::Dir {
        files,
        size,
        digest,
    } = e.clone()
    else {
        panic!("{e:?}")
    };
    assert_eq!(files, 3);
    assert_eq!(size, 5 + 200_000 + 18);
    let entries = s.read_tree(&digest).unwrap();
    assert!(entries.contains(&TreeEntry::Dir {
        path: "sub dir/empty".into()
    }));
    #[cfg(unix)]
    assert!(entries.contains(&TreeEntry::Symlink {
        path: "link".into(),
        target: "sub dir/a file.txt".into()
    }));
    assert_eq!(s.put_output(&src).unwrap(), e);

    // Replace an existing file and then an existing directory at dest.
    let dest = dir.path().join("out");
    fs::write(&dest, b"old file").unwrap();
    s.materialize(&e, &dest).unwrap();
    fs::write(dest.join("stray"), b"x").unwrap();
    s.materialize(&e, &dest).unwrap();
    assert!(!dest.join("stray").exists());
    assert_eq!(fs::read(dest.join("sub dir/a file.txt")).unwrap(), b"hello");
    assert_eq!(fs::read(dest.join("big.bin")).unwrap(), big(200_000, 1));
    assert!(dest.join("sub dir/empty").is_dir());
    #[cfg(unix)]
    {
        assert_eq!(
            fs::read_link(dest.join("link")).unwrap(),
            Path::new("sub dir/a file.txt")
        );
        assert!(crate::fsutil::is_executable(
            &fs::metadata(dest.join("run.sh")).unwrap()
        ));
    }
    // The StatCache computes the same tree digest from the materialised copy.
    let stats = StatCache::load(&dir.path().join("stats.json"));
    assert_eq!(stats.hash_dir(&dest).unwrap(), digest);
    assert!(s.is_materialized(&e, &dest, &stats));
    fs::remove_file(dest.join("sub dir/a file.txt")).unwrap();
    assert!(!s.is_materialized(&e, &dest, &stats));
}

#[test]
fn action_record_lookup_and_family() {
    let (dir, s) = store();
    let f = dir.path().join("f");
    fs::write(&f, b"out").unwrap();
    let out = s.put_output(&f).unwrap();
    let a1 = action("k1", "p/stage", &[("o", out.clone())], 10, 1);
    let a2 = action("k2", "p/stage", &[("o", out.clone())], 10, 2);
    let other = action("k3", "p/other", &[], 10, 3);
    assert!(s.lookup_action(&a1.key).unwrap().is_none());
    for a in [&a1, &a2, &other, &a1] {
        s.record_action(a).unwrap();
    }
    assert_eq!(s.lookup_action(&a1.key).unwrap().unwrap(), a1);
    let fam: Vec<Digest> = s
        .actions_in_family("p/stage")
        .unwrap()
        .iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(fam, vec![a2.key, a1.key]);
    assert_eq!(s.actions_in_family("nope").unwrap().len(), 0);
    // Recording an action whose blob is missing fails.
    let ghost = OutputEntry::File {
        digest: Digest::of_bytes(b"ghost"),
        size: 5,
        executable: false,
    };
    assert!(s
        .record_action(&action("k4", "p/stage", &[("o", ghost)], 1, 4))
        .is_err());
}

#[test]
fn torn_action_and_missing_blob_are_misses() {
    let (dir, s) = store();
    let f = dir.path().join("f");
    fs::write(&f, big(100_000, 9)).unwrap();
    let out = s.put_output(&f).unwrap();
    let a = action("k", "fam", &[("o", out.clone())], 1, 1);
    s.record_action(&a).unwrap();
    let p = s.action_path(&a.key);
    let json = fs::read(&p).unwrap();
    fs::write(&p, &json[..json.len() / 2]).unwrap();
    assert!(s.lookup_action(&a.key).unwrap().is_none());
    fs::write(&p, b"").unwrap();
    assert!(s.lookup_action(&a.key).unwrap().is_none());
    s.record_action(&a).unwrap();
    assert!(s.lookup_action(&a.key).unwrap().is_some());
    crate::fsutil::remove_any(&s.blob_path(&out.digest())).unwrap();
    assert!(s.lookup_action(&a.key).unwrap().is_none());
    assert!(matches!(
        s.materialize(&out, &dir.path().join("x")),
        Err(crate::CacheError::MissingBlob { .. })
    ));
}

/// A hit read for its outputs alone is a hit exactly when the whole entry is: a torn entry, an
/// entry under another key, one missing a field and one whose blob is gone are misses both ways.
#[test]
fn outputs_only_lookup_agrees_with_the_full_lookup() {
    let (dir, s) = store();
    let f = dir.path().join("f");
    fs::write(&f, big(100_000, 4)).unwrap();
    let out = s.put_output(&f).unwrap();
    let a = action("k", "fam", &[("o", out.clone())], 1, 1);
    let agree = |want_hit: bool| {
        let full = s.lookup_action(&a.key).unwrap();
        let outputs = s.lookup_outputs(&a.key).unwrap();
        assert_eq!(full.is_some(), want_hit);
        assert_eq!(full.map(|e| e.outputs), outputs);
    };
    agree(false);
    s.record_action(&a).unwrap();
    agree(true);
    assert_eq!(s.lookup_outputs(&a.key).unwrap().unwrap()["o"], out);
    let p = s.action_path(&a.key);
    let json = fs::read(&p).unwrap();
    fs::write(&p, &json[..json.len() / 2]).unwrap();
    agree(false);
    let mut v: serde_json::Value = serde_json::from_slice(&json).unwrap();
    v.as_object_mut().unwrap().remove("family");
    fs::write(&p, serde_json::to_vec(&v).unwrap()).unwrap();
    agree(false);
    let other = action("other", "fam", &[("o", out.clone())], 1, 1);
    fs::write(&p, serde_json::to_vec(&other).unwrap()).unwrap();
    agree(false);
    fs::write(&p, &json).unwrap();
    agree(true);
    crate::fsutil::remove_any(&s.blob_path(&out.digest())).unwrap();
    agree(false);
}

#[test]
fn verify_finds_corrupt_blob_and_cleans_tmp() {
    let (dir, s) = store();
    let f = dir.path().join("f");
    fs::write(&f, b"content").unwrap();
    let out = s.put_output(&f).unwrap();
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
fn edited_hardlinked_output_never_corrupts_served_content() {
    let (dir, s) = store();
    let data = big(1_000_000, 5);
    let f = dir.path().join("f");
    fs::write(&f, &data).unwrap();
    let out = s.put_output(&f).unwrap();
    let a = action("k", "fam", &[("o", out.clone())], 1, 1);
    s.record_action(&a).unwrap();
    let dest = dir.path().join("dest");
    s.materialize(&out, &dest).unwrap();
    #[cfg(unix)]
    let shares_inode = {
        use std::os::unix::fs::MetadataExt;
        fs::metadata(&dest).unwrap().ino()
            == fs::metadata(s.blob_path(&out.digest())).unwrap().ino()
    };
    #[cfg(not(unix))]
    let shares_inode = false;
    // As root, read-only does not stop an in-place write; emulate the user's editor.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&dest, fs::Permissions::from_mode(0o644)).unwrap();
    }
    #[cfg(windows)]
    {
        let mut p = fs::metadata(&dest).unwrap().permissions();
        #[allow(clippy::permissions_set_readonly_false)]
        p.set_readonly(false);
        fs::set_permissions(&dest, p).unwrap();
    }
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut w = fs::OpenOptions::new().write(true).open(&dest).unwrap();
        w.seek(SeekFrom::Start(10)).unwrap();
        w.write_all(b"EDITED").unwrap();
    }
    // Whether dest was a hard link (store damaged, must now be a miss) or a reflink/copy
    // (store intact), the store never serves the edited bytes.
    let dest2 = dir.path().join("dest2");
    match s.materialize(&out, &dest2) {
        Ok(()) => {
            assert!(!shares_inode, "an edited hard-linked blob was served");
            assert_eq!(fs::read(&dest2).unwrap(), data)
        }
        Err(e) => {
            assert!(matches!(e, crate::CacheError::CorruptBlob { .. }), "{e}");
            assert!(s.lookup_action(&a.key).unwrap().is_none());
        }
    }
    match s.lookup_action(&a.key).unwrap() {
        Some(_) => assert_eq!(
            crate::hash_file(&s.blob_path(&out.digest())).unwrap(),
            out.digest()
        ),
        None => assert!(!s.has_blob(&out.digest())),
    }
}

#[test]
fn put_does_not_adopt_a_multiply_linked_user_file() {
    let (dir, s) = store();
    let user = dir.path().join("user.bin");
    fs::write(&user, big(200_000, 2)).unwrap();
    let produced = dir.path().join("produced.bin");
    fs::hard_link(&user, &produced).unwrap();
    let before = fs::metadata(&user).unwrap();
    s.put_output(&produced).unwrap();
    let after = fs::metadata(&user).unwrap();
    assert_eq!(before.modified().unwrap(), after.modified().unwrap());
    assert_eq!(
        before.permissions().readonly(),
        after.permissions().readonly()
    );
}

#[test]
fn lock_key_is_single_flight_across_threads() {
    let (_dir, s) = store();
    let s = std::sync::Arc::new(s);
    let key = Digest::of_bytes(b"key");
    let held = s.lock_key(&key).unwrap();
    assert!(s.try_lock_key(&key).unwrap().is_none());
    assert_eq!(s.lock_holder(&key), Some(std::process::id()));
    let (tx, rx) = std::sync::mpsc::channel();
    let s2 = s.clone();
    let waiter = std::thread::spawn(move || {
        let l = s2.lock_key(&key).unwrap();
        tx.send(()).unwrap();
        drop(l);
    });
    assert!(
        rx.recv_timeout(std::time::Duration::from_millis(200))
            .is_err(),
        "waiter got the lock while held"
    );
    drop(held);
    rx.recv_timeout(std::time::Duration::from_secs(10))
        .expect("waiter acquires after release");
    waiter.join().unwrap();
    assert!(s.try_lock_key(&key).unwrap().is_some());
}

/// Child half of the process tests: does nothing unless the parent test set the variables.
#[test]
fn child_process_helper() {
    let Ok(root) = std::env::var("HEDDLE_CACHE_CHILD_ROOT") else {
        return;
    };
    let s = Store::open(Path::new(&root)).unwrap();
    match std::env::var("HEDDLE_CACHE_CHILD_MODE").as_deref() {
        Ok("lock") => {
            let _l = s.lock_key(&Digest::of_bytes(b"key")).unwrap();
            println!("LOCKED");
            std::thread::sleep(std::time::Duration::from_secs(60));
        }
        Ok("write") => {
            let scratch = Path::new(&root).parent().unwrap().join("scratch");
            for i in 0u64.. {
                let f = scratch.join(format!("f{i}"));
                fs::create_dir_all(&scratch).unwrap();
                fs::write(&f, big(10_000 + (i as usize % 7) * 30_000, i as u8)).unwrap();
                let out = s.put_output(&f).unwrap();
                s.record_action(&action(&format!("k{i}"), "crash", &[("o", out)], 1, i))
                    .unwrap();
                if i == 3 {
                    println!("WRITING");
                }
            }
        }
        _ => {}
    }
}

fn spawn_child(
    root: &Path,
    mode: &str,
) -> (
    std::process::Child,
    std::io::BufReader<std::process::ChildStdout>,
) {
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "tests::child_process_helper",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("HEDDLE_CACHE_CHILD_ROOT", root)
        .env("HEDDLE_CACHE_CHILD_MODE", mode)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = std::io::BufReader::new(child.stdout.take().unwrap());
    (child, out)
}

fn wait_for_line(out: &mut impl std::io::BufRead, want: &str) {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "child exited before printing {want}"
        );
        if line.contains(want) {
            return;
        }
    }
}

#[test]
fn lock_held_by_a_killed_process_is_released() {
    let (_dir, s) = store();
    let key = Digest::of_bytes(b"key");
    let (mut child, mut out) = spawn_child(s.root(), "lock");
    wait_for_line(&mut out, "LOCKED");
    assert!(s.try_lock_key(&key).unwrap().is_none());
    #[cfg(unix)]
    assert_eq!(s.lock_holder(&key), Some(child.id()));
    child.kill().unwrap();
    child.wait().unwrap();
    let _l = s.lock_key(&key).unwrap();
}

#[test]
fn killed_writer_leaves_a_clean_store() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    Store::open(&root).unwrap();
    let (mut child, mut out) = spawn_child(&root, "write");
    wait_for_line(&mut out, "WRITING");
    std::thread::sleep(std::time::Duration::from_millis(150));
    child.kill().unwrap();
    child.wait().unwrap();
    let s = Store::open(&root).unwrap();
    let r = s.verify().unwrap();
    assert!(r.is_clean(), "{r:?}");
    assert!(r.actions_checked >= 4);
    for e in s.actions_in_family("crash").unwrap() {
        let hit = s
            .lookup_action(&e.key)
            .unwrap()
            .expect("every recorded action is a hit");
        s.materialize(&hit.outputs["o"], &dir.path().join("m"))
            .unwrap();
    }
    assert!(fs::read_dir(root.join("tmp")).unwrap().next().is_none());
}

#[test]
fn gc_keeps_keep_and_evicts_cheapest_per_byte_first() {
    let (dir, s) = store();
    let put = |name: &str, n: usize, seed: u8| {
        let p = dir.path().join(name);
        fs::write(&p, big(n, seed)).unwrap();
        s.put_output(&p).unwrap()
    };
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
fn lookups_are_cheap() {
    let dir = tempfile::tempdir().unwrap();
    // Durability does not change lookups; skip the fsyncs to keep the test quick.
    let s = Store::open_with(
        &dir.path().join("store"),
        crate::StoreOptions {
            durability: crate::Durability::None,
        },
    )
    .unwrap();
    let mut keys = Vec::new();
    for i in 0..1000u32 {
        let p = dir.path().join("o");
        fs::write(&p, i.to_le_bytes()).unwrap();
        let out = s.put_output(&p).unwrap();
        let a = action(&format!("k{i}"), "fam", &[("o", out)], 1, i as u64);
        keys.push(a.key);
        s.record_action(&a).unwrap();
    }
    let t = std::time::Instant::now();
    for k in &keys {
        assert!(s.lookup_action(k).unwrap().is_some());
    }
    let el = t.elapsed();
    eprintln!("1000 lookups: {el:?}");
    // Generous: debug build, loaded CI machine.
    assert!(el < std::time::Duration::from_secs(2), "{el:?}");
}

#[test]
fn record_actions_batch_and_verify_reports_torn_entries() {
    let (dir, s) = store();
    let mut batch = Vec::new();
    for i in 0..5 {
        let p = dir.path().join(format!("o{i}"));
        fs::write(&p, format!("{i}")).unwrap();
        let out = s.put_output(&p).unwrap();
        batch.push(action(&format!("k{i}"), "b", &[("o", out)], 1, i));
    }
    s.record_actions(&batch).unwrap();
    assert_eq!(s.actions_in_family("b").unwrap().len(), 5);
    let p = s.action_path(&batch[0].key);
    fs::write(&p, b"{\"key\": ").unwrap();
    fs::create_dir_all(s.root().join("objects/ab")).unwrap();
    let stray = s.root().join("objects/ab/not-a-digest");
    fs::write(&stray, b"x").unwrap();
    let r = s.verify().unwrap();
    assert_eq!(r.bad.len(), 2, "{r:?}");
    assert!(r
        .bad
        .iter()
        .any(|b| matches!(b, crate::BadEntry::BadAction { .. })));
    assert!(r
        .bad
        .iter()
        .any(|b| matches!(b, crate::BadEntry::StrayObject { .. })));
    assert!(s.verify().unwrap().is_clean());
    assert_eq!(s.actions_in_family("b").unwrap().len(), 4);
}

#[test]
fn is_materialized_uses_stat_records() {
    let (dir, s) = store();
    let p = dir.path().join("big");
    fs::write(&p, big(500_000, 4)).unwrap();
    let out = s.put_output(&p).unwrap();
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
fn concurrent_puts_and_records_of_the_same_content() {
    let (dir, s) = store();
    let s = std::sync::Arc::new(s);
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let s = s.clone();
            let base = dir.path().join(format!("t{t}"));
            std::thread::spawn(move || {
                fs::create_dir_all(&base).unwrap();
                for i in 0..20u8 {
                    let p = base.join(format!("f{i}"));
                    fs::write(&p, big(70_000 + i as usize, i)).unwrap();
                    let out = s.put_output(&p).unwrap();
                    s.record_action(&action(&format!("k{i}"), "c", &[("o", out)], 1, i as u64))
                        .unwrap();
                    fs::remove_file(&p).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(s.actions_in_family("c").unwrap().len(), 20);
    assert!(s.verify().unwrap().is_clean());
    for e in s.actions_in_family("c").unwrap() {
        assert!(s.lookup_action(&e.key).unwrap().is_some());
    }
}

#[cfg(unix)]
#[test]
fn adopted_small_outputs_and_sandbox_inputs_are_links_not_copies() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(&dir.path().join("store")).unwrap();
    let produced = dir.path().join("o.txt");
    fs::write(&produced, b"small").unwrap();
    let ino = fs::metadata(&produced).unwrap().ino();

    // put_output keeps its caller's small file separate from the blob...
    let kept = dir.path().join("kept.txt");
    fs::write(&kept, b"kept").unwrap();
    let e = s.put_output(&kept).unwrap();
    let OutputEntry::File { digest, .. } = e else {
        panic!("a file")
    };
    assert_eq!(fs::metadata(&kept).unwrap().nlink(), 1);
    assert_ne!(
        fs::metadata(s.blob_path(&digest)).unwrap().ino(),
        fs::metadata(&kept).unwrap().ino()
    );

    // ...adopt_output makes the file itself the blob.
    let e = s.adopt_output(&produced).unwrap();
    let OutputEntry::File { digest, .. } = &e else {
        panic!("a file")
    };
    assert_eq!(fs::metadata(s.blob_path(digest)).unwrap().ino(), ino);

    // An input laid out for a stage is a link to the blob; the user's copy is not.
    let input = dir.path().join("in.txt");
    s.link_into(&e, &input).unwrap();
    assert_eq!(fs::metadata(&input).unwrap().ino(), ino);
    let user = dir.path().join("user.txt");
    s.materialize(&e, &user).unwrap();
    assert_ne!(fs::metadata(&user).unwrap().ino(), ino);
    assert_eq!(fs::read(&user).unwrap(), b"small");

    // A stage that writes through its input link anyway is caught before the blob is served.
    let mut perm = fs::metadata(&input).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perm.set_readonly(false);
    fs::set_permissions(&input, perm).unwrap();
    fs::write(&input, b"SMALL").unwrap();
    let a = action("k", "fam", &[("o", e)], 1, 1);
    s.record_action(&a).unwrap();
    assert!(
        s.lookup_action(&a.key).unwrap().is_none(),
        "a changed blob is a miss"
    );
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
