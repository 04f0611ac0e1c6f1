//! Local stores, the action every case pushes and fetches, and listings to compare outputs by.

use super::*;

/// The key the tests' writers sign entries with (a fixed seed: tests only).
pub fn signer() -> SigningKey {
    SigningKey::from_seed([42; 32])
}

/// Read rules that trust [`signer`] and nobody else.
pub fn rules() -> ReadRules {
    ReadRules {
        writers: TrustedWriters::of([(signer().public(), "test-writer".to_string())]),
        ..ReadRules::default()
    }
}

/// A local store in a temp dir.
pub struct Local {
    pub dir: tempfile::TempDir,
    pub store: Arc<Store>,
}

pub fn local() -> Local {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(&dir.path().join("store")).unwrap());
    Local { dir, store }
}

/// A local store holding [`make_action`]'s entry for `seed` and `big`, pushed to `remote`: where
/// each fetch case starts.
pub async fn pushed_action(
    remote: &dyn RemoteBackend,
    seed: u64,
    big: usize,
) -> (Local, ActionEntry) {
    let a = local();
    let entry = make_action(&a, seed, big);
    push_action(remote, &a.store, &entry, &signer())
        .await
        .unwrap();
    (a, entry)
}

/// Bytes that differ by seed and are not trivially compressible.
pub fn pseudo_random(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Produce an action's outputs in `work` (a file, an executable, and a tree with a
/// subfolder, an empty folder and a symlink), store them in `local` and record the entry.
pub fn make_action(local: &Local, seed: u64, big: usize) -> ActionEntry {
    let work = local.dir.path().join(format!("work-{seed}"));
    let tree = work.join("tree");
    std::fs::create_dir_all(tree.join("sub/deeper")).unwrap();
    std::fs::create_dir_all(tree.join("empty")).unwrap();
    std::fs::write(work.join("model.onnx"), pseudo_random(seed, big)).unwrap();
    std::fs::write(tree.join("a.txt"), b"alpha\n").unwrap();
    std::fs::write(
        tree.join("sub/deeper/b.bin"),
        pseudo_random(seed + 1, 100_000),
    )
    .unwrap();
    let tool = tree.join("sub/run.sh");
    std::fs::write(&tool, b"#!/bin/sh\necho hi\n").unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink("sub/deeper/b.bin", tree.join("link")).unwrap();
    }
    let mut outputs = BTreeMap::new();
    outputs.insert(
        "model".to_string(),
        local.store.put_output(&work.join("model.onnx")).unwrap(),
    );
    outputs.insert("tree".to_string(), local.store.put_output(&tree).unwrap());
    let key = Digest::of_bytes(format!("action-{seed}").as_bytes());
    let entry = ActionEntry {
        key_parts: serde_json::json!({ "seed": seed }),
        duration_ms: 1234,
        created_unix_ms: 1_700_000_000_000,
        ..action_entry(key, "test/stage", outputs)
    };
    local.store.record_action(&entry).unwrap();
    entry
}

/// The entry of action `key` in `family` with these `outputs`, and nothing else: no key parts,
/// no duration, no metadata.
pub fn action_entry(
    key: Digest,
    family: &str,
    outputs: BTreeMap<String, OutputEntry>,
) -> ActionEntry {
    ActionEntry {
        key,
        family: family.to_string(),
        key_parts: serde_json::json!({}),
        outputs,
        duration_ms: 0,
        created_unix_ms: 0,
        meta: serde_json::json!({}),
    }
}

/// Materialise every output of `entry` from `store` under `dest`.
pub fn materialize_all(store: &Store, entry: &ActionEntry, dest: &Path) {
    std::fs::create_dir_all(dest).unwrap();
    for (name, out) in &entry.outputs {
        store.materialize(out, &dest.join(name)).unwrap();
    }
}

/// What a fetch of the action `entry` (pushed from `a`, its 5 blobs) into the empty store `b`
/// must leave: the same entry, recorded in `b`, every blob moved, outputs identical to `a`'s.
pub fn assert_fetched(
    a: &Local,
    b: &Local,
    entry: &ActionEntry,
    (fetched, report): (ActionEntry, FetchReport),
) {
    assert_eq!(&fetched, entry);
    assert_eq!(report.blobs_fetched, 5, "{report:?}");
    assert_eq!(
        b.store.lookup_action(&entry.key).unwrap(),
        Some(entry.clone())
    );
    assert_same_outputs(a, b, entry);
}

/// `entry`'s outputs materialised from `a` and from `b` are the same files, modes and bytes.
pub fn assert_same_outputs(a: &Local, b: &Local, entry: &ActionEntry) {
    materialize_all(&a.store, entry, &a.dir.path().join("out"));
    materialize_all(&b.store, entry, &b.dir.path().join("out"));
    assert_eq!(
        snapshot(&a.dir.path().join("out")),
        snapshot(&b.dir.path().join("out"))
    );
}

/// A listing of a file or tree: path, kind, mode bits that matter, and full contents.
pub fn snapshot(root: &Path) -> Vec<(String, String, Vec<u8>)> {
    let mut out = Vec::new();
    fn walk(p: &Path, rel: String, out: &mut Vec<(String, String, Vec<u8>)>) {
        let m = std::fs::symlink_metadata(p).unwrap();
        if m.file_type().is_symlink() {
            let t = std::fs::read_link(p).unwrap();
            out.push((rel, "link".into(), t.to_string_lossy().as_bytes().to_vec()));
        } else if m.is_dir() {
            out.push((rel.clone(), "dir".into(), vec![]));
            let mut names: Vec<_> = std::fs::read_dir(p)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            names.sort();
            for n in names {
                walk(&p.join(&n), format!("{rel}/{}", n.to_string_lossy()), out);
            }
        } else {
            #[cfg(unix)]
            let exec = {
                use std::os::unix::fs::PermissionsExt;
                m.permissions().mode() & 0o111 != 0
            };
            #[cfg(not(unix))]
            let exec = false;
            out.push((rel, format!("file exec={exec}"), std::fs::read(p).unwrap()));
        }
    }
    walk(root, String::new(), &mut out);
    out
}

/// Files left in a store's tmp/ (a failed fetch must leave none).
pub fn tmp_leftovers(store: &Store) -> Vec<PathBuf> {
    std::fs::read_dir(store.root().join("tmp"))
        .map(|rd| rd.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default()
}

// ------------------------------------------------------------------ cases
