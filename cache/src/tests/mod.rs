//! Tests of the store on the real filesystem, a file per concern; the shared helpers are here.

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::path::Path;

use crate::{ActionEntry, Digest, OutputEntry, StatCache, Store, TreeEntry};

mod actions;
mod imports;
mod maintenance;
mod processes;
mod put_serve;
mod stat_cache;

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(&dir.path().join("store")).unwrap();
    (dir, s)
}

/// Writes `bytes` to the file `name` in `dir` and puts that file into `s`, as a stage's output.
fn put_file(s: &Store, dir: &Path, name: &str, bytes: impl AsRef<[u8]>) -> OutputEntry {
    let file = dir.join(name);
    fs::write(&file, bytes).unwrap();
    s.put_output(&file).unwrap()
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
