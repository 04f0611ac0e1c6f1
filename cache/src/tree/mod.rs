//! The tree manifest: the canonical, versioned encoding of a directory.
//!
//! ```text
//! heddle/tree/v1
//! {"kind":"dir","path":"sub dir"}
//! {"kind":"file","path":"sub dir/a.txt","digest":"<64 hex>","size":3,"executable":false}
//! {"kind":"symlink","path":"link","target":"sub dir/a.txt"}
//! ```
//!
//! One JSON object per line after the tag line, sorted by path (byte order of the
//! `/`-separated UTF-8 path). serde_json writes struct fields in declaration order and escapes
//! strings deterministically, so the encoding of a given tree is unique. Directories are listed
//! so empty ones survive. The tree digest is the sha256 of these bytes, and the bytes are stored
//! as a blob so a tree can be rebuilt from its digest. A manifest is accepted only after
//! [`check`] has found nothing in it that could write outside its destination.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{CacheError, Digest};

pub mod check;

pub use check::check_tree;

/// Domain tag and format version. Bump the version if the line format changes: old tree
/// digests then simply stop matching, which turns every cached directory output into a miss
/// instead of a misread.
pub const TREE_TAG: &str = "heddle/tree/v1";

/// One entry of a tree manifest. `path` is relative, `/`-separated.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum TreeEntry {
    Dir {
        path: String,
    },
    File {
        path: String,
        digest: Digest,
        size: u64,
        executable: bool,
    },
    Symlink {
        path: String,
        target: String,
    },
}

impl TreeEntry {
    pub fn path(&self) -> &str {
        match self {
            TreeEntry::Dir { path }
            | TreeEntry::File { path, .. }
            | TreeEntry::Symlink { path, .. } => path,
        }
    }
}

/// Encode entries canonically (sorting them first).
pub fn encode_tree(entries: &mut [TreeEntry]) -> Vec<u8> {
    entries.sort_by(|a, b| a.path().cmp(b.path()));
    let mut out = Vec::with_capacity(64 + entries.len() * 128);
    out.extend_from_slice(TREE_TAG.as_bytes());
    out.push(b'\n');
    for e in entries.iter() {
        serde_json::to_writer(&mut out, e).expect("tree entries always serialise");
        out.push(b'\n');
    }
    out
}

/// Decode a manifest, rejecting anything that is not exactly what [`encode_tree`] writes or
/// that would escape the directory it is materialised into.
pub fn decode_tree(digest: Digest, bytes: &[u8]) -> Result<Vec<TreeEntry>, CacheError> {
    let bad = |reason: String| CacheError::BadTree { digest, reason };
    let text = std::str::from_utf8(bytes).map_err(|_| bad("not UTF-8".into()))?;
    let mut lines = text.split_terminator('\n');
    if lines.next() != Some(TREE_TAG) {
        return Err(bad(format!("missing {TREE_TAG} header")));
    }
    let mut entries = Vec::new();
    for line in lines {
        let e: TreeEntry = serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
        entries.push(e);
    }
    check_tree(&entries).map_err(|v| bad(v.to_string()))?;
    Ok(entries)
}

#[derive(Default)]
pub(crate) struct TreeScan {
    pub entries: Vec<TreeEntry>,
    pub size: u64,
    pub files: u64,
}

/// Walk `root` (not following symlinks) and describe it, calling `file_digest` for every
/// regular file (the store ingests the file there; the stat cache consults its records).
pub(crate) fn scan_tree(
    root: &Path,
    file_digest: &mut dyn FnMut(&Path, &fs::Metadata) -> Result<Digest, CacheError>,
) -> Result<TreeScan, CacheError> {
    let mut scan = TreeScan::default();
    walk(root, "", file_digest, &mut scan)?;
    Ok(scan)
}

fn walk(
    dir: &Path,
    rel: &str,
    file_digest: &mut dyn FnMut(&Path, &fs::Metadata) -> Result<Digest, CacheError>,
    scan: &mut TreeScan,
) -> Result<(), CacheError> {
    let rd = fs::read_dir(dir).map_err(CacheError::io("read directory", dir))?;
    let mut children: Vec<(String, PathBuf)> = Vec::new();
    for ent in rd {
        let ent = ent.map_err(CacheError::io("read directory", dir))?;
        let path = ent.path();
        let name = ent
            .file_name()
            .into_string()
            .map_err(|_| CacheError::NonUtf8Path { path: path.clone() })?;
        children.push((name, path));
    }
    children.sort();
    for (name, path) in children {
        let rel_path = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        let meta = fs::symlink_metadata(&path).map_err(CacheError::io("stat", &path))?;
        let ft = meta.file_type();
        if ft.is_symlink() {
            let target = fs::read_link(&path).map_err(CacheError::io("read symlink", &path))?;
            let target = target
                .into_os_string()
                .into_string()
                .map_err(|_| CacheError::NonUtf8Path { path: path.clone() })?;
            scan.entries.push(TreeEntry::Symlink {
                path: rel_path,
                target,
            });
        } else if ft.is_dir() {
            scan.entries.push(TreeEntry::Dir {
                path: rel_path.clone(),
            });
            walk(&path, &rel_path, file_digest, scan)?;
        } else if ft.is_file() {
            let digest = file_digest(&path, &meta)?;
            scan.size += meta.len();
            scan.files += 1;
            let executable = crate::fsutil::is_executable(&meta);
            scan.entries.push(TreeEntry::File {
                path: rel_path,
                digest,
                size: meta.len(),
                executable,
            });
        } else {
            let kind = crate::fsutil::odd_kind(&ft);
            return Err(CacheError::UnsupportedFileType { path, kind });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_is_canonical_and_round_trips() {
        let d = Digest::of_bytes(b"a");
        let mut a = vec![
            TreeEntry::Symlink {
                path: "z".into(),
                target: "a b/c".into(),
            },
            TreeEntry::File {
                path: "a b/c".into(),
                digest: d,
                size: 1,
                executable: true,
            },
            TreeEntry::Dir { path: "a b".into() },
        ];
        let mut b = a.clone();
        b.reverse();
        let ea = encode_tree(&mut a);
        assert_eq!(ea, encode_tree(&mut b));
        let td = Digest::of_bytes(&ea);
        assert_eq!(decode_tree(td, &ea).unwrap(), a);
        assert!(std::str::from_utf8(&ea)
            .unwrap()
            .starts_with("heddle/tree/v1\n{\"kind\":\"dir\",\"path\":\"a b\"}\n"));
    }

    #[test]
    fn decode_rejects_escaping_paths() {
        for p in ["../x", "/etc/passwd", "a/../../b", "", "a//b", "./a"] {
            let mut e = vec![TreeEntry::Dir { path: p.into() }];
            let bytes = encode_tree(&mut e);
            assert!(
                decode_tree(Digest::of_bytes(&bytes), &bytes).is_err(),
                "{p:?}"
            );
        }
    }
}
