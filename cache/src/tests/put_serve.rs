//! Putting outputs into the store and serving them back: files, trees, links and copies.

use super::*;

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
fn edited_hardlinked_output_never_corrupts_served_content() {
    let (dir, s) = store();
    let data = big(1_000_000, 5);
    let out = put_file(&s, dir.path(), "f", &data);
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

/// An entry (a remote's, say) that gives a stored blob the wrong size is refused, and the
/// blob, which still hashes to its name, stays: for serving and for feeding a stage alike.
#[test]
fn a_wrong_size_in_an_entry_never_quarantines_a_good_blob() {
    let (dir, s) = store();
    let good = put_file(&s, dir.path(), "w.bin", big(200_000, 1));
    let OutputEntry::File { digest, size, .. } = good else {
        panic!("a file")
    };
    let lying = OutputEntry::File {
        digest,
        size: size + 1,
        executable: false,
    };
    let err = s.materialize(&lying, &dir.path().join("out")).unwrap_err();
    assert!(
        matches!(err, crate::CacheError::WrongSize { expected, actual, .. } if expected == size + 1 && actual == size),
        "{err:?}"
    );
    let err = s.link_into(&lying, &dir.path().join("fed")).unwrap_err();
    assert!(
        matches!(err, crate::CacheError::WrongSize { .. }),
        "{err:?}"
    );
    assert!(s.has_blob(&digest));
    assert!(s.verify().unwrap().is_clean());
    s.materialize(&good, &dir.path().join("out")).unwrap();
}

/// A tree listing one blob many times materialises it once: the other places are links to it.
#[cfg(unix)]
#[test]
fn a_tree_listing_one_blob_many_times_is_one_file_on_disk() {
    use std::os::unix::fs::MetadataExt;
    let (dir, s) = store();
    let tree = dir.path().join("tree");
    fs::create_dir_all(&tree).unwrap();
    for i in 0..50 {
        let f = tree.join(format!("f{i}"));
        fs::write(&f, big(100_000, 9)).unwrap();
        set_exec(&f);
    }
    fs::write(tree.join("other"), b"other").unwrap();
    let e = s.put_output(&tree).unwrap();
    let out = dir.path().join("out");
    s.materialize(&e, &out).unwrap();
    let inodes: HashSet<u64> = (0..50)
        .map(|i| fs::metadata(out.join(format!("f{i}"))).unwrap().ino())
        .collect();
    assert_eq!(inodes.len(), 1);
    assert_eq!(fs::read(out.join("f7")).unwrap(), big(100_000, 9));
    assert_eq!(fs::read(out.join("other")).unwrap(), b"other");
    let stats = StatCache::load(&dir.path().join("stats.json"));
    assert!(s.is_materialized(&e, &out, &stats));
}

#[test]
fn read_all_reads_files_shorter_longer_and_exactly_as_long_as_its_buffer() {
    let dir = tempfile::tempdir().unwrap();
    let n = 2048;
    for len in [0, 1, n - 1, n, n + 1, 2 * n, 5 * n + 3] {
        let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let p = dir.path().join(format!("f{len}"));
        fs::write(&p, &bytes).unwrap();
        for capacity in [0, n, len + 1] {
            let mut f = fs::File::open(&p).unwrap();
            let read = crate::fsutil::read_all(&mut f, capacity).unwrap();
            assert_eq!(read, bytes, "{len} bytes into {capacity}");
        }
    }
}

#[cfg(unix)]
#[test]
fn lstat_in_tells_what_symlink_metadata_tells_without_following_a_link() {
    let dir = tempfile::tempdir().unwrap();
    let root = crate::fsutil::open_dir(dir.path()).unwrap();
    fs::create_dir(dir.path().join("ab")).unwrap();
    fs::write(dir.path().join("ab/file"), b"twelve bytes").unwrap();
    std::os::unix::fs::symlink("file", dir.path().join("ab/link")).unwrap();
    for name in ["ab/file", "ab/link", "ab"] {
        let lite = crate::fsutil::lstat_in(&root, name.as_bytes()).unwrap();
        let meta = fs::symlink_metadata(dir.path().join(name)).unwrap();
        assert_eq!(lite, crate::fsutil::NameStat::from(&meta), "{name}");
    }
    assert!(crate::fsutil::lstat_in(&root, b"ab/file").unwrap().is_file);
    assert!(!crate::fsutil::lstat_in(&root, b"ab/link").unwrap().is_file);
    let missing = crate::fsutil::lstat_in(&root, b"ab/none").unwrap_err();
    assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
    let nul = crate::fsutil::lstat_in(&root, b"ab/fi\0le").unwrap_err();
    assert_eq!(nul.kind(), std::io::ErrorKind::InvalidInput);
}

#[cfg(unix)]
#[test]
fn a_blob_is_served_on_its_own_stat_and_a_link_in_its_place_is_corrupt() {
    let (dir, s) = store();
    let src = dir.path().join("o.txt");
    fs::write(&src, b"the bytes").unwrap();
    let e = s.put_output(&src).unwrap();
    let d = e.digest();
    assert_eq!(
        s.blob_state(&d, Some(9)).unwrap(),
        crate::store::BlobState::Ok
    );
    assert_eq!(
        s.blob_state(&d, Some(10)).unwrap(),
        crate::store::BlobState::WrongSize { actual: 9 }
    );
    // A link to the very same bytes is still not a blob: it is quarantined, and then missing.
    let blob = s.blob_path(&d);
    let elsewhere = dir.path().join("elsewhere");
    fs::copy(&blob, &elsewhere).unwrap();
    fs::remove_file(&blob).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &blob).unwrap();
    assert!(!s.has_blob(&d));
    assert_eq!(
        s.blob_state(&d, Some(9)).unwrap(),
        crate::store::BlobState::Corrupt
    );
    assert!(fs::symlink_metadata(&blob).is_err());
    assert_eq!(
        s.blob_state(&d, Some(9)).unwrap(),
        crate::store::BlobState::Missing
    );
}
