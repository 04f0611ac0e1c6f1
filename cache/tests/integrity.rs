//! The store's integrity properties, tried the way a careless stage or a hand edit would meet
//! them: a symlink output, a folder that links out of itself, a crafted manifest, a blob that
//! rotted but kept its mtime, and a stage writing through its hard-linked input.

use std::fs;
use std::path::Path;
use std::time::{Duration, SystemTime};

use heddle_cache::{CacheError, Digest, OutputEntry, Store, TREE_TAG};

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(&dir.path().join("store")).unwrap();
    (dir, s)
}

/// A store holding one output, the file `name` of `bytes`, and that output's entry.
fn store_with(name: &str, bytes: &[u8]) -> (tempfile::TempDir, Store, OutputEntry) {
    let (dir, s) = store();
    let p = dir.path().join(name);
    fs::write(&p, bytes).unwrap();
    let entry = s.put_output(&p).unwrap();
    (dir, s, entry)
}

fn big(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect()
}

fn quarantined(s: &Store) -> usize {
    fs::read_dir(s.root().join("quarantine"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Overwrite a blob's bytes in place (same size), keeping its mtime: bit rot as `run` sees it.
fn rot(path: &Path) {
    let mtime = fs::metadata(path).unwrap().modified().unwrap();
    let mut perms = fs::metadata(path).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    fs::set_permissions(path, perms).unwrap();
    let mut bytes = fs::read(path).unwrap();
    bytes[0] ^= 0xff;
    fs::write(path, &bytes).unwrap();
    fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
}

#[cfg(unix)]
#[test]
fn a_symlink_output_is_refused_and_its_target_left_alone() {
    use std::os::unix::fs::PermissionsExt;
    let (dir, s) = store();
    let host = dir.path().join("host-file");
    fs::write(&host, b"precious").unwrap();
    fs::set_permissions(&host, fs::Permissions::from_mode(0o640)).unwrap();
    let when = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    fs::File::options()
        .write(true)
        .open(&host)
        .unwrap()
        .set_modified(when)
        .unwrap();
    let out = dir.path().join("out.bin");
    std::os::unix::fs::symlink(&host, &out).unwrap();

    for adopt in [false, true] {
        let err = if adopt {
            s.adopt_output(&out)
        } else {
            s.put_output(&out)
        }
        .unwrap_err();
        assert!(matches!(err, CacheError::SymlinkOutput { .. }), "{err:?}");
    }
    let meta = fs::metadata(&host).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o640);
    assert_eq!(meta.modified().unwrap(), when);
    use std::os::unix::fs::MetadataExt;
    assert_eq!(meta.nlink(), 1, "the host file was linked into the store");
}

#[cfg(unix)]
#[test]
fn a_folder_linking_outside_itself_is_refused() {
    let (dir, s) = store();
    for (name, target) in [("etc", "/etc"), ("up", "../.."), ("sneaky", "d/s/../..")] {
        let out = dir.path().join(format!("tree-{name}"));
        fs::create_dir_all(out.join("d")).unwrap();
        fs::create_dir_all(out.join("e")).unwrap();
        std::os::unix::fs::symlink("../e", out.join("d/s")).unwrap();
        std::os::unix::fs::symlink(target, out.join(name)).unwrap();
        let err = s.adopt_output(&out).unwrap_err();
        assert!(
            matches!(err, CacheError::UnsafeTree { .. }),
            "{name}: {err:?}"
        );
    }
    // A link that stays inside is kept as a link.
    let ok = dir.path().join("tree-ok");
    fs::create_dir_all(ok.join("d")).unwrap();
    fs::write(ok.join("d/f"), b"x").unwrap();
    std::os::unix::fs::symlink("d/f", ok.join("l")).unwrap();
    let entry = s.put_output(&ok).unwrap();
    let back = dir.path().join("back");
    s.materialize(&entry, &back).unwrap();
    assert_eq!(fs::read_link(back.join("l")).unwrap(), Path::new("d/f"));
}

/// A manifest written by hand into the store (or served by a remote) that would make a plain
/// restore write through a link it creates.
#[test]
fn a_crafted_manifest_writes_nothing_outside_its_destination() {
    let (dir, s) = store();
    let payload = s.put_output(&{
        let p = dir.path().join("payload");
        fs::write(&p, b"owned").unwrap();
        p
    });
    let payload = payload.unwrap();
    let victim = dir.path().join("victim");
    fs::create_dir_all(&victim).unwrap();
    for lines in [
        vec![
            format!(
                r#"{{"kind":"symlink","path":"l","target":"{}"}}"#,
                victim.display()
            ),
            format!(
                r#"{{"kind":"file","path":"l/x","digest":"{}","size":5,"executable":false}}"#,
                payload.digest()
            ),
        ],
        vec![format!(
            r#"{{"kind":"file","path":"../victim/x","digest":"{}","size":5,"executable":false}}"#,
            payload.digest()
        )],
    ] {
        let text = format!("{TREE_TAG}\n{}\n", lines.join("\n"));
        let digest = Digest::of_bytes(text.as_bytes());
        let at = s.blob_path(&digest);
        fs::create_dir_all(at.parent().unwrap()).unwrap();
        fs::write(&at, &text).unwrap();
        let entry = OutputEntry::Dir {
            digest,
            size: 5,
            files: 1,
        };
        let dest = dir.path().join("project/out/t");
        let err = s.materialize(&entry, &dest).unwrap_err();
        assert!(matches!(err, CacheError::BadTree { .. }), "{err:?}");
        assert!(!victim.join("x").exists());
    }
}

#[test]
fn a_rotted_blob_with_its_mtime_kept_is_never_fed_to_a_stage() {
    let (dir, s) = store();
    for (n, bytes) in [
        ("small", b"tiny content".to_vec()),
        ("large", big(300_000, 3)),
    ] {
        let p = dir.path().join(n);
        fs::write(&p, &bytes).unwrap();
        let entry = s.put_output(&p).unwrap();
        rot(&s.blob_path(&entry.digest()));
        // A new process (nothing vouched for yet) lays it out as an input.
        let s2 = Store::open(s.root()).unwrap();
        let dest = dir.path().join(format!("in-{n}"));
        let err = s2.link_into(&entry, &dest).unwrap_err();
        assert!(
            matches!(err, CacheError::CorruptBlob { .. }),
            "{n}: {err:?}"
        );
        assert!(!dest.exists());
        assert!(!s2.has_blob(&entry.digest()), "{n}: still in the store");
    }
    assert_eq!(quarantined(&s), 2);
}

#[test]
fn a_rotted_small_blob_is_never_restored() {
    let (dir, s, entry) = store_with("f", b"some bytes");
    rot(&s.blob_path(&entry.digest()));
    let err = s
        .materialize(&entry, &dir.path().join("restored"))
        .unwrap_err();
    assert!(matches!(err, CacheError::CorruptBlob { .. }), "{err:?}");
    assert!(!dir.path().join("restored").exists());
}

/// What a root stage does to its hard-linked input: write it in place. The stage, and every
/// stage that held the same blob, learns so afterwards; the blob leaves the store.
#[test]
fn a_write_through_an_input_link_is_caught_after_the_stage() {
    let (dir, s, entry) = store_with("model.bin", &big(100_000, 9));
    let a = dir.path().join("sandbox-a-input");
    let b = dir.path().join("sandbox-b-input");
    s.link_into(&entry, &a).unwrap();
    s.link_into(&entry, &b).unwrap();
    s.check_fed(&entry).unwrap();

    // As root the read-only mode does not stop this; emulate by clearing it first.
    let mut perms = fs::metadata(&a).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    fs::set_permissions(&a, perms).unwrap();
    let mut edited = fs::read(&a).unwrap();
    edited[10] ^= 1;
    fs::write(&a, &edited).unwrap();

    let err = s.check_fed(&entry).unwrap_err();
    assert!(matches!(err, CacheError::InputModified { .. }), "{err:?}");
    let sibling = s.check_fed(&entry).unwrap_err();
    assert!(
        matches!(sibling, CacheError::InputModified { .. }),
        "{sibling:?}"
    );
    assert!(!s.has_blob(&entry.digest()));
    assert_eq!(quarantined(&s), 1);
}

#[test]
fn a_touched_but_unchanged_input_passes() {
    let (_dir, s, entry) = store_with("f", &big(100_000, 1));
    let blob = s.blob_path(&entry.digest());
    fs::File::options()
        .write(true)
        .open(&blob)
        .or_else(|_| fs::File::open(&blob))
        .unwrap()
        .set_modified(SystemTime::now())
        .ok();
    s.check_fed(&entry).unwrap();
    assert!(s.has_blob(&entry.digest()));
}
