//! Sandboxes for host and container stages: `in/<name>/`, `out/<name>/` and `work/` under
//! `<cache>/scratch/sandbox-*`, reused from one stage to the next within a run.
//!
//! Why reuse: a fresh tree is six folders created and six removed per stage. On ext4 without
//! a journal (this project's CI machines) every inode freed in the last ~30 s makes the next
//! allocation scan past it (`recently_deleted`), so the cost of a short stage grew with every
//! stage before it (benches/RESULTS.md, M6). A reused tree
//! keeps the folders whose names the next stage also uses and empties them; the files in them
//! are hard links into the cache (inputs) or have just become cache blobs (outputs), so
//! removing them frees no inode either.
//!
//! A run's sandboxes sit in its own locked folder, `scratch/run-*/`
//! ([`heddle_cache::scratch`]): a run that died without cleaning up (`kill -9`, a power cut)
//! leaves its folder unlocked, and the next run (when its pool is made) or `gc` removes it,
//! while the folder of a run still going is locked and left alone. The folder is made at the
//! first sandbox, so a run that executes nothing creates nothing.
//!
//! Inputs are laid out here too ([`lay_out`]), and checked after the command ran
//! ([`check_inputs`]): the sandbox is the only place a stage sees them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use std::collections::BTreeMap;

use heddle_cache::scratch::{remove_tree, RunScratch};
use heddle_cache::{error_chain, OutputEntry, Store};

use crate::inputs::Resolved;
use crate::plan::Plan;

/// Sandboxes not in use, ready to be cleaned for the next stage.
pub struct SandboxPool {
    scratch: PathBuf,
    /// This run's locked folder, made at the first sandbox.
    run: Mutex<Option<RunScratch>>,
    free: Mutex<Vec<PathBuf>>,
    all: Mutex<Vec<PathBuf>>,
}

impl SandboxPool {
    /// A pool in `scratch` (`<cache>/scratch`); the folders of dead runs there are removed.
    pub fn new(scratch: PathBuf) -> SandboxPool {
        heddle_cache::scratch::remove_stale(&scratch);
        SandboxPool {
            scratch,
            run: Mutex::new(None),
            free: Mutex::new(Vec::new()),
            all: Mutex::new(Vec::new()),
        }
    }

    /// This run's folder, made and locked on first use.
    fn run_dir(&self) -> Result<PathBuf, SandboxError> {
        let mut run = self.run.lock().expect("sandbox pool");
        if let Some(r) = run.as_ref() {
            return Ok(r.path().to_path_buf());
        }
        let r = RunScratch::create(&self.scratch).map_err(SandboxError::Scratch)?;
        Ok(run.insert(r).path().to_path_buf())
    }

    /// A sandbox holding exactly empty `work/`, `in/<name>/` for each input and `out/<name>/`
    /// for each output.
    pub fn acquire(
        self: &Arc<Self>,
        inputs: &[String],
        outputs: &[String],
    ) -> Result<Sandbox, SandboxError> {
        // A reused sandbox that cannot be emptied (a container running as another user left
        // files heddle may not remove) is set aside, not reused, and a fresh one is made.
        loop {
            let reused = self.free.lock().expect("sandbox pool").pop();
            let fresh = reused.is_none();
            let path = match reused {
                Some(p) => p,
                None => {
                    let dir = self.run_dir()?;
                    let p = tempfile::Builder::new()
                        .prefix("sandbox-")
                        .tempdir_in(&dir)
                        .map_err(|source| SandboxError::Create {
                            dir: dir.clone(),
                            source,
                        })?
                        .keep();
                    self.all.lock().expect("sandbox pool").push(p.clone());
                    p
                }
            };
            match reset(&path, inputs, outputs) {
                Ok(()) => {
                    return Ok(Sandbox {
                        pool: self.clone(),
                        path,
                    })
                }
                Err(e) if fresh => return Err(e),
                Err(e) => tracing::debug!("sandbox set aside: {}", error_chain(&e)),
            }
        }
    }

    /// Remove every sandbox this pool made, and the run's folder (the end of a run). Returns
    /// the sandboxes that could not be removed, each with the reason (a mount a stage left
    /// that would not detach, say), for the run to report; the next run's or `heddle cache
    /// gc`'s sweep of stale scratch tries them again.
    pub fn remove_all(&self) -> Vec<(PathBuf, std::io::Error)> {
        let mut left = Vec::new();
        for p in self.all.lock().expect("sandbox pool").drain(..) {
            if let Err(e) = remove_tree(&p) {
                left.push((p, e));
            }
        }
        self.free.lock().expect("sandbox pool").clear();
        if let Some(run) = self.run.lock().expect("sandbox pool").take() {
            run.remove();
        }
        left
    }
}

/// One stage's sandbox; returned to its pool when dropped.
pub struct Sandbox {
    pool: Arc<SandboxPool>,
    path: PathBuf,
}

impl Sandbox {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let path = std::mem::take(&mut self.path);
        self.pool.free.lock().expect("sandbox pool").push(path);
    }
}

/// Empty `work/`, `in/<name>` for each input and `out/<name>` for each output; remove the rest.
fn reset(root: &Path, inputs: &[String], outputs: &[String]) -> Result<(), SandboxError> {
    let err = |p: &Path, source| SandboxError::Prepare {
        path: p.to_path_buf(),
        source,
    };
    for entry in read_names(root).map_err(|e| err(root, e))? {
        if !matches!(entry.as_str(), "in" | "out" | "work") {
            remove_tree(&root.join(&entry)).map_err(|e| err(&root.join(&entry), e))?;
        }
    }
    let work = root.join("work");
    ensure_empty_dir(&work).map_err(|e| err(&work, e))?;
    for (sub, names) in [("in", inputs), ("out", outputs)] {
        let dir = root.join(sub);
        ensure_dir(&dir).map_err(|e| err(&dir, e))?;
        let wanted: BTreeSet<&str> = names.iter().map(String::as_str).collect();
        for entry in read_names(&dir).map_err(|e| err(&dir, e))? {
            if !wanted.contains(entry.as_str()) {
                let p = dir.join(&entry);
                remove_tree(&p).map_err(|e| err(&p, e))?;
            }
        }
        for name in names {
            let p = dir.join(name);
            ensure_empty_dir(&p).map_err(|e| err(&p, e))?;
        }
    }
    Ok(())
}

fn read_names(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut names = Vec::new();
    for e in std::fs::read_dir(dir)? {
        names.push(e?.file_name().to_string_lossy().into_owned());
    }
    Ok(names)
}

/// `dir` exists and is empty; whatever it held is removed.
fn ensure_empty_dir(dir: &Path) -> std::io::Result<()> {
    if ensure_dir(dir)? {
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            // The entry's type comes from the folder listing: a file (or a link, removed and
            // never followed) is unlinked without the `lstat` `remove_tree` would take first,
            // one system call less per input and output of every stage (benches/RESULTS.md, M15).
            match e.file_type() {
                Ok(t) if !t.is_dir() => match std::fs::remove_file(e.path()) {
                    Err(err) if err.kind() != std::io::ErrorKind::NotFound => return Err(err),
                    _ => {}
                },
                _ => remove_tree(&e.path())?,
            }
        }
    }
    Ok(())
}

/// `dir` is a real folder: made if missing (then `false`: nothing to empty), an error if it is
/// a symlink or a file. A stage may have swapped any folder of its sandbox for a link to a host
/// folder; reading or emptying it through the link would delete the host's files, so such a
/// sandbox is refused (and set aside by [`SandboxPool::acquire`]) instead.
fn ensure_dir(dir: &Path) -> std::io::Result<bool> {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if meta.is_dir() => Ok(true),
        Ok(_) => Err(std::io::Error::other(
            "a stage replaced this folder with a symlink or a file; nothing beneath it is touched",
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir(dir).map(|()| false)
        }
        Err(e) => Err(e),
    }
}

/// Put inputs where the command expects them: `in/<name>/<file>`, gathered members as
/// `in/<name>/<k=v,...>/` with `matrix.json`, `status.json` and the file. The sandbox already
/// holds empty `in/<name>/` and `out/<name>/` folders ([`SandboxPool::acquire`]).
pub fn lay_out(
    store: &Store,
    plan: &Plan,
    sb: &Path,
    inputs: &BTreeMap<String, Resolved>,
) -> Result<(), SandboxError> {
    for (name, r) in inputs {
        let dir = sb.join("in").join(name);
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| SandboxError::LayOut {
                input: name.clone(),
                path,
                source,
            }
        };
        let link = |source| SandboxError::Link {
            input: name.clone(),
            source,
        };
        match r {
            Resolved::Path { abs, .. } => {
                let file = abs
                    .file_name()
                    .map(|f| f.to_os_string())
                    .unwrap_or_default();
                copy_readonly(abs, &dir.join(file)).map_err(|(path, source)| {
                    SandboxError::LayOut {
                        input: name.clone(),
                        path,
                        source,
                    }
                })?;
            }
            Resolved::One { entry, file } => {
                store.link_into(entry, &dir.join(file)).map_err(link)?;
            }
            Resolved::Gather { file, members } => {
                for m in members {
                    let d = dir.join(&m.dir);
                    std::fs::create_dir_all(&d).map_err(io(&d))?;
                    let write = |n: &str, v: &dyn erased::Json| {
                        let path = d.join(n);
                        std::fs::write(&path, v.json()).map_err(io(&path))
                    };
                    let status = m.status(plan);
                    write("matrix.json", &status.matrix)?;
                    write("status.json", &*status)?;
                    if let Some(e) = &m.entry {
                        store.link_into(e, &d.join(file)).map_err(link)?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// [`Store::check_fed`] for every blob laid out as an input, naming the input on failure.
pub fn check_inputs(
    store: &Store,
    inputs: &BTreeMap<String, Resolved>,
) -> Result<(), SandboxError> {
    for (name, r) in inputs {
        let entries: Vec<&OutputEntry> = match r {
            Resolved::Path { .. } => continue,
            Resolved::One { entry, .. } => vec![entry],
            Resolved::Gather { members, .. } => {
                members.iter().filter_map(|m| m.entry.as_ref()).collect()
            }
        };
        for entry in entries {
            store
                .check_fed(entry)
                .map_err(|source| SandboxError::InputModified {
                    input: name.clone(),
                    source,
                })?;
        }
    }
    Ok(())
}

mod erased {
    pub trait Json {
        fn json(&self) -> Vec<u8>;
    }
    impl<T: serde::Serialize> Json for T {
        fn json(&self) -> Vec<u8> {
            serde_json::to_vec_pretty(self).expect("serialisable")
        }
    }
}

/// A repo file or folder copied (reflinked where possible) into the sandbox, read-only, so a
/// stage cannot change the user's file through its input path.
/// On failure, the path that failed and why.
fn copy_readonly(src: &Path, dest: &Path) -> Result<(), (PathBuf, std::io::Error)> {
    let at = |p: &Path| {
        let p = p.to_path_buf();
        move |e| (p, e)
    };
    let meta = std::fs::metadata(src).map_err(at(src))?;
    if meta.is_dir() {
        std::fs::create_dir_all(dest).map_err(at(dest))?;
        for e in std::fs::read_dir(src).map_err(at(src))? {
            let e = e.map_err(at(src))?;
            copy_readonly(&e.path(), &dest.join(e.file_name()))?;
        }
        return Ok(());
    }
    reflink_copy::reflink_or_copy(src, dest).map_err(at(src))?;
    let mut perm = std::fs::metadata(dest).map_err(at(dest))?.permissions();
    perm.set_readonly(true);
    std::fs::set_permissions(dest, perm).map_err(at(dest))
}

/// Why a sandbox could not be made ready, or an input was found changed after the stage. Each
/// message names the thing; its cause follows through `source` ([`error_chain`]).
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("failed to create the run's scratch folder")]
    Scratch(#[source] heddle_cache::CacheError),
    #[error("failed to create a sandbox in {}", dir.display())]
    Create {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to prepare {}", path.display())]
    Prepare {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to lay out input `{input}` at {}", path.display())]
    LayOut {
        input: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to link input `{input}` from the cache")]
    Link {
        input: String,
        #[source]
        source: heddle_cache::CacheError,
    },
    #[error(
        "input `{input}` was modified while the stage ran (by this stage or one beside it); it \
         must be treated as read-only"
    )]
    InputModified {
        input: String,
        #[source]
        source: heddle_cache::CacheError,
    },
    /// On a cluster node the inputs arrive as one bundle, checked as a whole.
    #[error("an input was modified while the stage ran; inputs must be treated as read-only")]
    InputsModified {
        #[source]
        source: heddle_cache::CacheError,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v = read_names(dir).unwrap();
        v.sort();
        v
    }

    #[test]
    fn a_reused_sandbox_is_reset_to_what_the_next_stage_declares() {
        let scratch = tempfile::tempdir().unwrap();
        let pool = Arc::new(SandboxPool::new(scratch.path().to_path_buf()));
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let first = pool.acquire(&v(&["a", "b"]), &v(&["o"])).unwrap();
        let root = first.path().to_path_buf();
        assert_eq!(names(&root), ["in", "out", "work"]);
        assert_eq!(names(&root.join("in")), ["a", "b"]);
        // What a stage leaves behind: files, nested and read-only folders, a script.
        std::fs::write(root.join("in/a/x.txt"), "x").unwrap();
        std::fs::write(root.join("out/o/o.txt"), "o").unwrap();
        std::fs::create_dir_all(root.join("work/deep/er")).unwrap();
        std::fs::write(root.join("work/deep/er/f"), "f").unwrap();
        let mut perm = std::fs::metadata(root.join("work/deep"))
            .unwrap()
            .permissions();
        perm.set_readonly(true);
        std::fs::set_permissions(root.join("work/deep"), perm).unwrap();
        std::fs::write(root.join("command.sh"), "true").unwrap();
        drop(first);

        let second = pool.acquire(&v(&["b", "c"]), &v(&["p"])).unwrap();
        assert_eq!(second.path(), root, "the free sandbox is reused");
        assert_eq!(names(&root), ["in", "out", "work"]);
        assert_eq!(names(&root.join("in")), ["b", "c"]);
        assert_eq!(names(&root.join("out")), ["p"]);
        assert!(names(&root.join("work")).is_empty());
        assert!(names(&root.join("in/b")).is_empty());

        // Two at once get two sandboxes.
        let third = pool.acquire(&[], &[]).unwrap();
        assert_ne!(third.path(), root);
        drop((second, third));

        // A sandbox that cannot be reset (here `work` became a file) is set aside, not reused.
        let spoiled = pool.acquire(&[], &[]).unwrap();
        let spoiled_path = spoiled.path().to_path_buf();
        std::fs::remove_dir(spoiled_path.join("work")).unwrap();
        std::fs::write(spoiled_path.join("work"), "not a folder").unwrap();
        drop(spoiled);
        let a = pool.acquire(&[], &[]).unwrap();
        let b = pool.acquire(&[], &[]).unwrap();
        assert!(a.path() != spoiled_path && b.path() != spoiled_path);
        drop((a, b));
        pool.remove_all();
        assert!(names(scratch.path()).is_empty());
    }

    /// A stage swapped a folder of its sandbox for a link to a host folder: reusing the sandbox
    /// must not empty the host folder through the link (it once deleted a project's files).
    #[cfg(unix)]
    #[test]
    fn a_folder_swapped_for_a_link_is_never_emptied_through_it() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        for swapped in ["out/o", "out", "in/a", "in", "work"] {
            let scratch = tempfile::tempdir().unwrap();
            let host = tempfile::tempdir().unwrap();
            std::fs::write(host.path().join("secret.txt"), "secret").unwrap();
            std::fs::create_dir(host.path().join("o")).unwrap();
            std::fs::write(host.path().join("o/kept.txt"), "kept").unwrap();
            let pool = Arc::new(SandboxPool::new(scratch.path().to_path_buf()));
            let first = pool.acquire(&v(&["a"]), &v(&["o"])).unwrap();
            let root = first.path().to_path_buf();
            std::fs::remove_dir_all(root.join(swapped)).unwrap();
            std::os::unix::fs::symlink(host.path(), root.join(swapped)).unwrap();
            drop(first);

            let second = pool.acquire(&v(&["a"]), &v(&["o"])).unwrap();
            assert_ne!(
                second.path(),
                root,
                "{swapped}: the spoiled sandbox is set aside"
            );
            drop(second);
            pool.remove_all();
            assert_eq!(
                names(host.path()),
                ["o", "secret.txt"],
                "{swapped}: the host folder keeps its files"
            );
            assert_eq!(names(&host.path().join("o")), ["kept.txt"], "{swapped}");
            assert!(names(scratch.path()).is_empty(), "{swapped}");
        }
    }
}
