//! Imports from a remote: journaled instead of fsynced, whatever their size, and opening the
//! store deals with the journals others left (a reboot re-hashes, a dead owner's are synced).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::*;
use crate::{Durability, ImportOutcome, StoreOptions};

const BOOT: &str = "test-boot-a";

fn open_booted(root: &Path, boot: &str) -> Store {
    Store::open_booted(root, StoreOptions::default(), Some(boot.to_string())).unwrap()
}

/// Import `bytes` as a remote hit would, and describe the blob as an output.
fn import(s: &Store, bytes: &[u8]) -> OutputEntry {
    let digest = Digest::of_bytes(bytes);
    let mut import = s.start_blob_import(digest).unwrap();
    for chunk in bytes.chunks(1 << 20) {
        import.write(chunk).unwrap();
    }
    let size = bytes.len() as u64;
    assert_eq!(
        s.import_verified_blob(import).unwrap(),
        ImportOutcome::Stored { size }
    );
    OutputEntry::File {
        digest,
        size,
        executable: false,
    }
}

fn large(seed: u8) -> Vec<u8> {
    big(4 * 1024 * 1024 + 4096, seed)
}

fn journals(root: &Path) -> Vec<PathBuf> {
    match fs::read_dir(root.join("imports")) {
        Ok(rd) => rd.map(|e| e.unwrap().path()).collect(),
        Err(_) => Vec::new(),
    }
}

fn journal_digests(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// What a blob torn by a power loss looks like: its bytes zeroed, its size and sentinel mtime
/// kept (metadata survived, data did not), so its stat alone would pass it.
fn tear(path: &Path) {
    let len = fs::metadata(path).unwrap().len();
    let mut perms = fs::metadata(path).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    fs::set_permissions(path, perms).unwrap();
    let f = fs::OpenOptions::new().write(true).open(path).unwrap();
    std::io::Write::write_all(&mut &f, &vec![0u8; len as usize]).unwrap();
    f.set_modified(crate::fsutil::blob_mtime()).unwrap();
    drop(f);
    crate::fsutil::set_readonly(path, false).unwrap();
}

#[test]
fn a_large_import_is_journaled_and_not_fsynced() {
    let dir = tempfile::tempdir().unwrap();
    let s = open_booted(&dir.path().join("store"), BOOT);
    let out = import(&s, &large(1));
    // Listed in this store's journal, which is named after the boot; not in the group commit.
    let journal = s.imports_journal_path().expect("a journal");
    let name = journal.file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with(&format!("{BOOT}-")), "{name}");
    assert_eq!(journal_digests(&journal), [out.digest().to_string()]);
    assert_eq!(s.pending_len(), 0);
    // Recording the entry fsyncs none of it, and the hit is served.
    let a = action("k", "fam", &[("o", out.clone())], 1, 1);
    s.record_action(&a).unwrap();
    assert_eq!(s.pending_len(), 0);
    assert_eq!(s.lookup_action(&a.key).unwrap(), Some(a));
    assert_eq!(fs::read(s.blob_path(&out.digest())).unwrap(), large(1));
}

#[test]
fn a_small_import_is_journaled_too() {
    let dir = tempfile::tempdir().unwrap();
    let s = open_booted(&dir.path().join("store"), BOOT);
    let out = import(&s, &big(100_000, 2));
    assert_eq!(s.pending_len(), 0);
    let journal = s.imports_journal_path().expect("a journal");
    assert_eq!(journal_digests(&journal), [out.digest().to_string()]);
}

#[test]
fn concurrent_imports_are_all_journaled() {
    let dir = tempfile::tempdir().unwrap();
    let s = open_booted(&dir.path().join("store"), BOOT);
    let outs: Vec<OutputEntry> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..16u8)
            .map(|i| {
                let s = &s;
                scope.spawn(move || import(s, &big(1000 + i as usize, i)))
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let journal = s.imports_journal_path().expect("a journal");
    let mut listed = journal_digests(&journal);
    listed.sort();
    let mut want: Vec<String> = outs.iter().map(|o| o.digest().to_string()).collect();
    want.sort();
    assert_eq!(listed, want);
    assert_eq!(s.pending_len(), 0);
}

#[test]
fn without_durability_nothing_is_journaled() {
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions {
        durability: Durability::None,
    };
    let s = Store::open_booted(&dir.path().join("store"), options, Some(BOOT.into())).unwrap();
    import(&s, &large(3));
    assert_eq!(s.pending_len(), 0);
    assert_eq!(s.imports_journal_path(), None);
}

#[test]
fn without_a_boot_id_a_large_import_is_fsynced_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open_booted(&dir.path().join("store"), StoreOptions::default(), None).unwrap();
    import(&s, &large(4));
    assert_eq!(s.pending_len(), 1);
    assert_eq!(s.imports_journal_path(), None);
}

#[test]
fn the_digest_is_journaled_before_the_blob_is_renamed_in() {
    let dir = tempfile::tempdir().unwrap();
    let s = open_booted(&dir.path().join("store"), BOOT);
    let bytes = large(5);
    let digest = Digest::of_bytes(&bytes);
    // A file where the blob's shard folder belongs makes the rename fail.
    let shard = s.blob_path(&digest).parent().unwrap().to_path_buf();
    fs::write(&shard, b"in the way").unwrap();
    let mut import = s.start_blob_import(digest).unwrap();
    import.write(&bytes).unwrap();
    assert!(s.import_verified_blob(import).is_err());
    let journal = s
        .imports_journal_path()
        .expect("journaled before the rename");
    assert_eq!(journal_digests(&journal), [digest.to_string()]);
}

#[test]
fn after_a_reboot_a_torn_import_is_quarantined_and_misses() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let (good, torn) = {
        let s = open_booted(&root, BOOT);
        let good = action("good", "fam", &[("o", import(&s, &large(6)))], 1, 1);
        let torn = action("torn", "fam", &[("o", import(&s, &large(7)))], 1, 2);
        s.record_actions(&[good.clone(), torn.clone()]).unwrap();
        tear(&s.blob_path(&torn.outputs["o"].digest()));
        (good, torn)
    };
    assert_eq!(journals(&root).len(), 1);
    let s = open_booted(&root, "test-boot-b");
    assert_eq!(journals(&root), Vec::<PathBuf>::new());
    assert_eq!(s.lookup_action(&good.key).unwrap(), Some(good.clone()));
    assert_eq!(
        fs::read(s.blob_path(&good.outputs["o"].digest())).unwrap(),
        large(6)
    );
    assert!(!s.has_blob(&torn.outputs["o"].digest()));
    assert_eq!(s.lookup_action(&torn.key).unwrap(), None);
    assert_eq!(fs::read_dir(root.join("quarantine")).unwrap().count(), 1);
}

#[test]
fn a_dead_owners_journal_is_synced_and_removed_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let out = {
        let s = open_booted(&root, BOOT);
        import(&s, &large(8))
    };
    // Its owner is gone (the store dropped its lock), the boot is the same.
    assert_eq!(journals(&root).len(), 1);
    let s = open_booted(&root, BOOT);
    let start = Instant::now();
    while !journals(&root).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "journal still there"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(fs::read(s.blob_path(&out.digest())).unwrap(), large(8));
}

#[test]
fn a_live_owners_journal_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let owner = open_booted(&root, BOOT);
    import(&owner, &large(9));
    let journal = owner.imports_journal_path().unwrap();
    let other = open_booted(&root, BOOT);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(journals(&root), std::slice::from_ref(&journal));
    // The owner goes on journaling into it.
    import(&other, &large(10));
    import(&owner, &large(11));
    assert_eq!(journal_digests(&journal).len(), 2);
    assert_eq!(journals(&root).len(), 2);
}

#[test]
fn verify_and_gc_leave_journals_alone() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let s = open_booted(&root, BOOT);
    let out = import(&s, &large(12));
    s.record_action(&action("k", "fam", &[("o", out)], 1, 1))
        .unwrap();
    let report = s.verify().unwrap();
    assert!(report.is_clean(), "{report:?}");
    s.gc(&HashSet::new(), None).unwrap();
    assert_eq!(journals(&root).len(), 1);
}

#[test]
fn a_journal_left_half_created_is_removed_once_stale() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let imports = root.join("imports");
    fs::create_dir_all(&imports).unwrap();
    let stale = imports.join(format!("{BOOT}-1-0-0.unsynced.new"));
    let young = imports.join(format!("{BOOT}-2-0-0.unsynced.new"));
    fs::write(&stale, b"").unwrap();
    fs::write(&young, b"").unwrap();
    let f = fs::File::options().write(true).open(&stale).unwrap();
    f.set_modified(std::time::SystemTime::now() - Duration::from_secs(600))
        .unwrap();
    drop(f);
    let _s = open_booted(&root, BOOT);
    assert_eq!(journals(&root), [young]);
}

#[test]
fn a_fetched_entry_over_journaled_imports_is_recorded_without_a_commit() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    let (good, torn) = {
        let s = open_booted(&root, BOOT);
        let good = action("good", "fam", &[("o", import(&s, &big(500, 9)))], 1, 1);
        let torn = action("torn", "fam", &[("o", import(&s, &big(600, 10)))], 1, 2);
        s.record_fetched_action(&good).unwrap();
        s.record_fetched_action(&torn).unwrap();
        assert_eq!(s.pending_len(), 0);
        assert_eq!(s.lookup_action(&good.key).unwrap(), Some(good.clone()));
        assert_eq!(s.actions_in_family("fam").unwrap().len(), 2);
        // A power loss that kept the blob's size and sentinel mtime but not its bytes.
        tear(&s.blob_path(&torn.outputs["o"].digest()));
        (good, torn)
    };
    // The next boot re-hashes what the journal lists: the torn blob is a miss, not a hit.
    let s = open_booted(&root, "test-boot-b");
    assert_eq!(s.lookup_action(&good.key).unwrap(), Some(good));
    assert_eq!(s.lookup_action(&torn.key).unwrap(), None);
}

#[test]
fn a_fetched_entry_over_a_blob_awaiting_the_group_commit_waits_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = open_booted(&dir.path().join("store"), BOOT);
    let produced = dir.path().join("produced");
    fs::write(&produced, b"made here, not yet durable").unwrap();
    let out = s.put_output(&produced).unwrap();
    assert_eq!(s.pending_len(), 1);
    let a = action("k", "fam", &[("o", out)], 1, 1);
    s.record_fetched_action(&a).unwrap();
    assert_eq!(
        s.pending_len(),
        0,
        "the blob was committed before the entry"
    );
    assert_eq!(s.lookup_action(&a.key).unwrap(), Some(a));
}
