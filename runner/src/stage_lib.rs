//! The stage library that ships with heddle, and definitions that include shared files.
//!
//! `uses = "group/name"` resolves in the project's `stages/` first, then in this library: the
//! repository's `stages/` tree packed into the binary by `build.rs`. The library is extracted on
//! demand into a content-addressed folder, `<base>/lib-<hash>/`, so a definition from it is a
//! real folder like a project's (the host executor runs its scripts, the Docker executor mounts
//! it) and its key is made exactly as a project definition's: from the bytes of its files. A
//! library version that changes a definition's bytes changes that definition's key; one that
//! leaves them alone keeps it (the whole-library hash is only the folder name, so an edit to one
//! stage does not rerun every other stage).
//!
//! A definition's `[stage] include = ["../../lib/heddle_stage.py"]` names helper files relative
//! to its folder. They are copied beside its scripts in a second content-addressed folder,
//! `<base>/def-<hash>/` (the definition's files plus the includes), which then stands for the
//! definition: `{{ stage.dir }}` points at it, so `import heddle_stage` works from a script's own
//! folder on the host and in a container, and the helpers' bytes enter the key as definition
//! files do.
//!
//! Both folders are written to a temporary sibling and renamed into place, so a crash leaves
//! either the whole folder or none; a folder already present is trusted by name (its bytes are
//! hashed again by the key anyway, so an edited copy changes keys instead of hiding).

use std::path::{Path, PathBuf};

use heddle_cache::error_chain;
use sha2::{Digest, Sha256};
use toml::Spanned;

use crate::diag::{Diagnostic, Source};

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/stage_lib_files.rs"));
}

#[derive(Debug, thiserror::Error)]
pub enum StageLibError {
    #[error("failed to extract the stage library into {dir}")]
    Extract {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to write the definition folder {dir}")]
    Write {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("included file `{name}` would replace the definition's own {name}")]
    IncludeClash { name: String },
}

/// The library's version: sha256 over its files' paths and bytes (computed by `build.rs`).
pub fn version() -> &'static str {
    embedded::HASH
}

/// Every file of the library, `(path relative to stages/, bytes)`, sorted by path.
pub fn files() -> &'static [(&'static str, &'static [u8])] {
    embedded::FILES
}

/// One file of the library by its path relative to `stages/`.
pub fn file(rel: &str) -> Option<&'static [u8]> {
    files().iter().find(|(p, _)| *p == rel).map(|(_, b)| *b)
}

/// Names (`group/name`) of the library's definitions, sorted.
pub fn definitions() -> Vec<String> {
    files()
        .iter()
        .filter_map(|(p, _)| p.strip_suffix("/stage.toml"))
        .map(str::to_string)
        .collect()
}

/// Names (`group/name`) of the project's own definitions (`stages/GROUP/NAME/stage.toml`),
/// for "did you mean" when a `uses` names neither kind.
pub fn project_definitions(root: &Path) -> Vec<String> {
    let mut names = Vec::new();
    let Ok(groups) = std::fs::read_dir(root.join("stages")) else {
        return names;
    };
    for group in groups.flatten() {
        let Ok(members) = std::fs::read_dir(group.path()) else {
            continue;
        };
        for member in members.flatten() {
            if member.path().join("stage.toml").is_file() {
                names.push(format!(
                    "{}/{}",
                    group.file_name().to_string_lossy(),
                    member.file_name().to_string_lossy()
                ));
            }
        }
    }
    names.sort();
    names
}

/// Where a `uses` name's definition folder is: the project's `stages/NAME` when it holds a
/// `stage.toml`, else the library's (extracted under `base`), else `None`.
pub fn locate(root: &Path, name: &str, base: &Path) -> Result<Option<PathBuf>, StageLibError> {
    if name
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Ok(None);
    }
    let project = root.join("stages").join(name);
    if project.join("stage.toml").is_file() {
        return Ok(Some(project));
    }
    if file(&format!("{name}/stage.toml")).is_none() {
        return Ok(None);
    }
    Ok(Some(extract(base)?.join(name)))
}

/// A file of the library as a path (extracting it), for pipeline paths such as an env's
/// `requirements = "stages/requirements-ort.txt"` in a project that has no `stages/`.
pub fn locate_file(rel_to_stages: &str, base: &Path) -> Result<Option<PathBuf>, StageLibError> {
    if file(rel_to_stages).is_none() {
        return Ok(None);
    }
    Ok(Some(extract(base)?.join(rel_to_stages)))
}

/// The default base folder when the caller names none: inside the project's `.heddle/`.
pub fn default_base(root: &Path) -> PathBuf {
    root.join(".heddle").join("stage-lib")
}

/// Extract the library (once per version) and return its folder, which holds what the
/// repository's `stages/` holds.
pub fn extract(base: &Path) -> Result<PathBuf, StageLibError> {
    let dir = base.join(format!("lib-{}", &version()[..16]));
    if dir.join(COMPLETE).is_file() {
        return Ok(dir);
    }
    let files = files().iter().map(|(p, b)| (p.to_string(), b.to_vec()));
    write_folder(base, &dir, files).map_err(|source| StageLibError::Extract {
        dir: dir.clone(),
        source,
    })?;
    Ok(dir)
}

/// A definition folder with its included files beside its scripts: `<base>/def-<hash>/`, the
/// hash over every file's path and bytes. `includes` are `(file name, source path)`.
pub fn with_includes(
    base: &Path,
    def_dir: &Path,
    includes: &[(String, PathBuf)],
) -> Result<PathBuf, StageLibError> {
    let mut files = Vec::new();
    read_tree(def_dir, def_dir, &mut files)?;
    for (name, src) in includes {
        if files.iter().any(|(p, _)| p == name) {
            return Err(StageLibError::IncludeClash { name: name.clone() });
        }
        let bytes = std::fs::read(src).map_err(|source| StageLibError::Read {
            path: src.clone(),
            source,
        })?;
        files.push((name.clone(), bytes));
    }
    files.sort();
    let mut h = Sha256::new();
    for (p, b) in &files {
        h.update(p.as_bytes());
        h.update([0u8]);
        h.update((b.len() as u64).to_le_bytes());
        h.update(b);
    }
    let hash: String = h.finalize().iter().map(|x| format!("{x:02x}")).collect();
    let dir = base.join(format!("def-{}", &hash[..16]));
    if dir.join(COMPLETE).is_file() {
        return Ok(dir);
    }
    write_folder(base, &dir, files.into_iter()).map_err(|source| StageLibError::Write {
        dir: dir.clone(),
        source,
    })?;
    Ok(dir)
}

/// A definition's `include` list: each entry a file relative to the definition's folder, copied
/// under its own file name. Returns the folder that stands for the definition, or a diagnostic
/// at the entry that is wrong.
pub fn resolve_includes(
    def_dir: &Path,
    include: &[Spanned<String>],
    source: &Source,
    base: &Path,
) -> Result<PathBuf, Diagnostic> {
    let mut files: Vec<(String, PathBuf)> = Vec::new();
    for inc in include {
        let rel = inc.get_ref();
        let path = def_dir.join(rel);
        let name = Path::new(rel)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        let Some(name) = name.filter(|_| path.is_file()) else {
            return Err(source
                .error(Some(inc.span()), format!("included file `{rel}` not found"))
                .with_help(format!(
                    "paths are relative to the definition's folder; looked for {}",
                    path.display()
                )));
        };
        if files.iter().any(|(n, _)| *n == name) {
            return Err(source.error(
                Some(inc.span()),
                format!("two included files are named `{name}`"),
            ));
        }
        files.push((name, path));
    }
    with_includes(base, def_dir, &files).map_err(|e| {
        let span = include.first().map(|i| i.span());
        source.error(span, error_chain(&e))
    })
}

/// Marks a folder as whole; it is written last, inside the temporary folder before the rename.
/// A dot file, so `definition_digests` (and the key) never see it.
const COMPLETE: &str = ".complete";

fn write_folder(
    base: &Path,
    dir: &Path,
    files: impl Iterator<Item = (String, Vec<u8>)>,
) -> std::io::Result<()> {
    std::fs::create_dir_all(base)?;
    let tmp = tempfile::Builder::new().prefix(".tmp-").tempdir_in(base)?;
    for (rel, bytes) in files {
        let p = tmp.path().join(&rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&p, bytes)?;
    }
    std::fs::write(tmp.path().join(COMPLETE), b"")?;
    let tmp = tmp.keep();
    match std::fs::rename(&tmp, dir) {
        Ok(()) => Ok(()),
        // Another heddle extracted the same content first: theirs is as good as ours.
        Err(_) if dir.join(COMPLETE).is_file() => {
            let _ = std::fs::remove_dir_all(&tmp);
            Ok(())
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            Err(e)
        }
    }
}

/// The files of a definition folder, skipped as `definition_digests` skips them.
fn read_tree(
    dir: &Path,
    base: &Path,
    out: &mut Vec<(String, Vec<u8>)>,
) -> Result<(), StageLibError> {
    let read_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| StageLibError::Read { path, source }
    };
    for e in std::fs::read_dir(dir).map_err(read_err(dir))? {
        let e = e.map_err(read_err(dir))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name == "__pycache__" || name.ends_with(".pyc") || name.starts_with('.') {
            continue;
        }
        let p = e.path();
        if e.file_type().map_err(read_err(&p))?.is_dir() {
            read_tree(&p, base, out)?;
        } else {
            let rel = p
                .strip_prefix(base)
                .unwrap_or(&p)
                .to_string_lossy()
                .replace('\\', "/");
            out.push((rel, std::fs::read(&p).map_err(read_err(&p))?));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_holds_the_repository_stages() {
        let defs = definitions();
        assert!(defs.contains(&"onnx/author".to_string()), "{defs:?}");
        assert_eq!(version().len(), 64);
        assert!(file("lib/heddle_stage.py").is_some());
    }

    #[test]
    fn project_first_then_library() {
        let root = tempfile::tempdir().unwrap();
        let base = root.path().join("base");
        let lib = locate(root.path(), "onnx/author", &base).unwrap().unwrap();
        assert!(lib.starts_with(&base), "{}", lib.display());
        assert!(lib.join("stage.toml").is_file());
        // Extracting again reuses the folder.
        assert_eq!(extract(&base).unwrap(), extract(&base).unwrap());
        let own = root.path().join("stages/onnx/author");
        std::fs::create_dir_all(&own).unwrap();
        std::fs::write(own.join("stage.toml"), "x").unwrap();
        assert_eq!(
            locate(root.path(), "onnx/author", &base).unwrap(),
            Some(own)
        );
        assert_eq!(locate(root.path(), "../x", &base).unwrap(), None);
        assert_eq!(locate(root.path(), "no/such", &base).unwrap(), None);
    }

    #[test]
    fn includes_are_content_addressed() {
        let t = tempfile::tempdir().unwrap();
        let def = t.path().join("def");
        std::fs::create_dir_all(&def).unwrap();
        std::fs::write(def.join("stage.toml"), "a").unwrap();
        let helper = t.path().join("h.py");
        std::fs::write(&helper, "one").unwrap();
        let inc = [("h.py".to_string(), helper.clone())];
        let a = with_includes(&t.path().join("b"), &def, &inc).unwrap();
        assert_eq!(std::fs::read_to_string(a.join("h.py")).unwrap(), "one");
        std::fs::write(&helper, "two").unwrap();
        let b = with_includes(&t.path().join("b"), &def, &inc).unwrap();
        assert_ne!(a, b);
        let clash = [("stage.toml".to_string(), helper)];
        assert!(matches!(
            with_includes(&t.path().join("b"), &def, &clash),
            Err(StageLibError::IncludeClash { .. })
        ));
    }
}
