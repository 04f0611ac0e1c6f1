//! Validation of a tree manifest before anything is written from it or stored under it.
//!
//! A manifest is untrusted input: it may have been edited by hand in the local cache, or (with
//! a shared remote cache) come from the network. Materialising one must never write outside
//! its destination folder, and storing a folder must never capture a way out of it. So a
//! manifest is accepted only when:
//! - every path is a plain relative path (no absolute path, no `.`/`..`, no empty component,
//!   no backslash, no NUL);
//! - every entry's parent folders are listed as folders: nothing sits beneath a symlink or a
//!   file, so creating an entry can never follow a link the manifest itself made;
//! - every symlink resolves inside the tree when it is followed, link by link, the way the
//!   kernel would: a relative target whose `..` components, after substituting the tree's
//!   own links (at most [`MAX_LINK_HOPS`] of them), never climb above the tree's root.
//!
//! The same check runs on a folder heddle is about to store, so an output folder holding
//! `etc -> /etc` or `up -> ../..` is rejected when it is produced, not when it is served.

use std::collections::{HashMap, VecDeque};
use std::path::{Component, Path};

use super::TreeEntry;

/// The most symlinks one resolution may pass through (Linux's own limit is 40).
pub const MAX_LINK_HOPS: usize = 40;

/// Why a manifest was rejected: the entry and the rule it broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TreeViolation {
    #[error("{path:?} is not a plain relative path")]
    UnsafePath { path: String },
    #[error("{path:?} is listed twice or out of order")]
    Unsorted { path: String },
    #[error("{path:?} lies beneath {parent:?}, which is not a folder of the tree")]
    NotBeneathFolder { path: String, parent: String },
    #[error("symlink {path:?} -> {target:?} points outside the tree")]
    EscapingSymlink { path: String, target: String },
}

/// Check a sorted list of entries (see the module docs for the rules).
pub fn check_tree(entries: &[TreeEntry]) -> Result<(), TreeViolation> {
    let mut kinds: HashMap<&str, &TreeEntry> = HashMap::with_capacity(entries.len());
    let mut prev: Option<&str> = None;
    for e in entries {
        let path = e.path();
        if !is_safe_relative(path) {
            return Err(TreeViolation::UnsafePath { path: path.into() });
        }
        if prev.is_some_and(|p| p >= path) {
            return Err(TreeViolation::Unsorted { path: path.into() });
        }
        prev = Some(path);
        kinds.insert(path, e);
    }
    for e in entries {
        let path = e.path();
        if let Some((parent, _)) = path.rsplit_once('/') {
            if !matches!(kinds.get(parent), Some(TreeEntry::Dir { .. })) {
                return Err(TreeViolation::NotBeneathFolder {
                    path: path.into(),
                    parent: parent.into(),
                });
            }
        }
        if let TreeEntry::Symlink { target, .. } = e {
            if !resolves_inside(&kinds, path, target) {
                return Err(TreeViolation::EscapingSymlink {
                    path: path.into(),
                    target: target.clone(),
                });
            }
        }
    }
    Ok(())
}

/// A path made only of normal components, joined by `/`.
pub(crate) fn is_safe_relative(p: &str) -> bool {
    !p.is_empty()
        && !p.contains('\\')
        && !p.contains('\0')
        && p.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
        && Path::new(p)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
}

/// Follow `target` from the folder holding the link at `link_path`, substituting the tree's own
/// symlinks, and say whether the walk stays at or below the tree's root. A component that is
/// not in the tree (a dangling link) ends nothing: what follows it cannot resolve at all.
fn resolves_inside(kinds: &HashMap<&str, &TreeEntry>, link_path: &str, target: &str) -> bool {
    if !is_relative_target(target) {
        return false;
    }
    let mut at: Vec<String> = link_path.split('/').map(str::to_owned).collect();
    at.pop(); // the link's own name
    let mut pending: VecDeque<String> = components(target).collect();
    let mut hops = 0;
    while let Some(c) = pending.pop_front() {
        if c == ".." {
            if at.pop().is_none() {
                return false;
            }
            continue;
        }
        at.push(c);
        let here = at.join("/");
        if let Some(TreeEntry::Symlink { target: next, .. }) = kinds.get(here.as_str()) {
            hops += 1;
            if hops > MAX_LINK_HOPS || !is_relative_target(next) {
                return false;
            }
            at.pop();
            for (i, c) in components(next).enumerate() {
                pending.insert(i, c);
            }
        }
    }
    true
}

fn is_relative_target(target: &str) -> bool {
    !target.is_empty()
        && !target.starts_with('/')
        && !target.contains('\\')
        && !target.contains('\0')
        && !Path::new(target).has_root()
        && !target.contains(':')
}

fn components(target: &str) -> impl Iterator<Item = String> + '_ {
    target
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Digest;

    fn dir(p: &str) -> TreeEntry {
        TreeEntry::Dir { path: p.into() }
    }
    fn file(p: &str) -> TreeEntry {
        TreeEntry::File {
            path: p.into(),
            digest: Digest::of_bytes(b""),
            size: 0,
            executable: false,
        }
    }
    fn link(p: &str, t: &str) -> TreeEntry {
        TreeEntry::Symlink {
            path: p.into(),
            target: t.into(),
        }
    }
    fn check(mut entries: Vec<TreeEntry>) -> Result<(), TreeViolation> {
        entries.sort_by(|a, b| a.path().cmp(b.path()));
        check_tree(&entries)
    }

    #[test]
    fn accepts_links_that_stay_inside() {
        let ok = vec![
            dir("d"),
            file("d/f"),
            dir("d/e"),
            link("d/e/up", "../f"),
            link("top", "d/f"),
            link("self", "."),
            link("dangling", "nowhere/at/all"),
            link("via", "d/e/up"),
        ];
        assert_eq!(check(ok), Ok(()));
    }

    #[test]
    fn rejects_absolute_and_climbing_links() {
        for t in [
            "/etc",
            "..",
            "../x",
            "d/../../x",
            "C:/Windows",
            "a\\..\\..",
            "",
        ] {
            let r = check(vec![dir("d"), link("l", t)]);
            assert!(
                matches!(r, Err(TreeViolation::EscapingSymlink { .. })),
                "{t:?} gave {r:?}"
            );
        }
    }

    #[test]
    fn rejects_an_escape_that_only_link_substitution_reveals() {
        // Lexically `d/s/../..` is the root; the kernel follows d/s to `e` first, then climbs
        // twice from `e`'s parent: above the root.
        let r = check(vec![
            dir("d"),
            dir("e"),
            link("d/s", "../e"),
            link("x", "d/s/../.."),
        ]);
        assert_eq!(
            r,
            Err(TreeViolation::EscapingSymlink {
                path: "x".into(),
                target: "d/s/../..".into()
            })
        );
    }

    #[test]
    fn rejects_link_loops() {
        let r = check(vec![link("a", "b/x"), link("b", "a")]);
        assert!(matches!(r, Err(TreeViolation::EscapingSymlink { .. })));
    }

    #[test]
    fn rejects_entries_beneath_a_link_or_a_file() {
        assert_eq!(
            check(vec![link("l", "d"), dir("d"), file("l/passwd")]),
            Err(TreeViolation::NotBeneathFolder {
                path: "l/passwd".into(),
                parent: "l".into()
            })
        );
        assert!(matches!(
            check(vec![file("f"), file("f/g")]),
            Err(TreeViolation::NotBeneathFolder { .. })
        ));
        assert!(matches!(
            check(vec![file("a/b")]),
            Err(TreeViolation::NotBeneathFolder { .. })
        ));
    }

    #[test]
    fn rejects_unsafe_paths_and_order() {
        for p in ["/abs", "../x", "a/../b", "a//b", "./a", "a\\b", "a\0b", ""] {
            assert_eq!(
                check_tree(&[file(p)]),
                Err(TreeViolation::UnsafePath { path: p.into() }),
                "{p:?}"
            );
        }
        assert!(matches!(
            check_tree(&[file("b"), file("a")]),
            Err(TreeViolation::Unsorted { .. })
        ));
        assert!(matches!(
            check_tree(&[file("a"), file("a")]),
            Err(TreeViolation::Unsorted { .. })
        ));
    }
}
