//! Which projects may choose where the user's credentials go.
//!
//! A project's `.heddle/config.toml` can name a remote cache and its `.heddle/hosts.toml` the
//! Docker engines stages run on. Both travel with a clone, and both decide where the user's
//! own credentials are sent: `HEDDLE_REMOTE_HEADERS` (a bearer token), the AWS key id, secret
//! and session token, a client certificate, an engine's TLS files or ssh keys. So, as
//! `direnv allow` and `mise trust` do, heddle uses those two files only once the user has
//! trusted the project (`heddle trust`), and the trust is recorded for the project's path and
//! the files' exact content: an edit (a `git pull` that changes the remote) needs trusting
//! again. Until then a project file may only turn things down (`remote = "off"`,
//! `remote_mode = "read"`); the user's own config, `HEDDLE_REMOTE_CACHE` and the flags are
//! never affected, and `heddle plan` contacts nothing the project chose.
//!
//! The record lives in the user's config folder (`$HEDDLE_CONFIG_DIR`, else
//! `$XDG_CONFIG_HOME/heddle`, else `~/.config/heddle`), under `trust/`, one file per project
//! named by the digest of its canonical path: a project cannot ship its own trust.

use std::path::{Path, PathBuf};

use heddle_cache::Digest;

/// The project files whose content a trust covers, relative to the project root.
/// `trusted-writers` names whose signed entries from the shared cache are accepted: a project's
/// copy counts only once trusted, like the other two.
pub const PROJECT_FILES: [&str; 3] = [
    ".heddle/config.toml",
    ".heddle/hosts.toml",
    ".heddle/trusted-writers",
];

/// Bump when what [`content_digest`] covers changes: every recorded trust lapses.
const TRUST_VERSION: &str = "heddle/trust/v1";

/// What the user decided about a project, as of its files now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    /// Trusted, and the files are as they were when trusted.
    Trusted,
    /// Never trusted (or revoked).
    Untrusted,
    /// Trusted once, but a file changed since.
    Changed,
}

impl Trust {
    pub fn is_trusted(self) -> bool {
        self == Trust::Trusted
    }

    /// Why a project setting is not used, for the warning.
    pub fn why_not(self) -> &'static str {
        match self {
            Trust::Trusted => "it is trusted",
            Trust::Untrusted => "this project is not trusted to choose where your credentials go",
            Trust::Changed => "it changed since you trusted this project",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("no config folder for trust records: set HEDDLE_CONFIG_DIR, XDG_CONFIG_HOME or HOME")]
    NoConfigDir,
    #[error("failed to {op} {}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// One recorded trust.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Record {
    path: PathBuf,
    digest: String,
}

/// The user's config folder, as `hosts.toml` finds it.
fn config_dir(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let set = |k: &str| env(k).filter(|v| !v.is_empty());
    set("HEDDLE_CONFIG_DIR")
        .map(PathBuf::from)
        .or_else(|| set("XDG_CONFIG_HOME").map(|x| Path::new(&x).join("heddle")))
        .or_else(|| set("HOME").map(|h| Path::new(&h).join(".config").join("heddle")))
}

/// The project's path as trust records name it: canonical, so `./p` and `/abs/p` are one.
fn canonical(root: &Path) -> PathBuf {
    std::fs::canonicalize(root)
        .or_else(|_| std::path::absolute(root))
        .unwrap_or_else(|_| root.to_path_buf())
}

fn record_path(dir: &Path, root: &Path) -> PathBuf {
    let name = Digest::of_bytes(root.as_os_str().as_encoded_bytes());
    dir.join("trust").join(format!("{name}.json"))
}

/// The digest of the trust-relevant files as they are now (an absent file counts too, so
/// adding a `hosts.toml` to a trusted project lapses the trust). `None` when neither exists.
pub fn content_digest(root: &Path) -> Option<Digest> {
    let mut buf = Vec::new();
    buf.extend_from_slice(TRUST_VERSION.as_bytes());
    let mut any = false;
    for rel in PROJECT_FILES {
        buf.push(0);
        buf.extend_from_slice(rel.as_bytes());
        buf.push(0);
        // A file that cannot be read is treated as absent: the loaders skip it too.
        match std::fs::read(root.join(rel)) {
            Ok(bytes) => {
                any = true;
                buf.push(1);
                buf.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
                buf.extend_from_slice(&bytes);
            }
            Err(_) => buf.push(0),
        }
    }
    any.then(|| Digest::of_bytes(&buf))
}

/// Whether `root`'s project files may be used.
pub fn check(root: &Path, env: &dyn Fn(&str) -> Option<String>) -> Trust {
    let Some(dir) = config_dir(env) else {
        return Trust::Untrusted;
    };
    let root = canonical(root);
    let Ok(text) = std::fs::read_to_string(record_path(&dir, &root)) else {
        return Trust::Untrusted;
    };
    let Ok(rec) = serde_json::from_str::<Record>(&text) else {
        return Trust::Untrusted;
    };
    if rec.path != root {
        return Trust::Untrusted;
    }
    match content_digest(&root) {
        Some(d) if d.to_string() == rec.digest => Trust::Trusted,
        _ => Trust::Changed,
    }
}

/// The one warning for a project file that is not used: which file, what it would have
/// chosen, why not, and how to use it.
pub fn warn_ignored(root: &Path, file: &Path, what: &str, trust: Trust) {
    let file = crate::session::display_rel(file);
    let root = crate::session::display_rel(root);
    let root = if root.is_empty() { ".".into() } else { root };
    eprintln!(
        "{}",
        crate::printable::printable(&format!(
            "warning: not using {what} in {file}: {}\n  = help: read it, then `heddle trust --root {root}` to use it",
            trust.why_not()
        ))
    );
}

/// What `heddle trust` recorded.
#[derive(Debug)]
pub struct Granted {
    pub root: PathBuf,
    /// The project files that exist, relative to the root.
    pub files: Vec<&'static str>,
}

/// Trust `root`'s project files as they are now. `Ok(None)`: it has none to trust.
pub fn grant(
    root: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Granted>, TrustError> {
    let root = canonical(root);
    let Some(digest) = content_digest(&root) else {
        return Ok(None);
    };
    let dir = config_dir(env).ok_or(TrustError::NoConfigDir)?;
    let path = record_path(&dir, &root);
    let parent = path.parent().expect("a record has a folder");
    std::fs::create_dir_all(parent).map_err(|source| TrustError::Io {
        op: "create",
        path: parent.to_path_buf(),
        source,
    })?;
    let rec = Record {
        path: root.clone(),
        digest: digest.to_string(),
    };
    let text = serde_json::to_string_pretty(&rec).expect("a record serialises");
    // Written beside and renamed, so a crash never leaves half a record.
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, text + "\n")
        .and_then(|_| std::fs::rename(&tmp, &path))
        .map_err(|source| TrustError::Io {
            op: "write",
            path: path.clone(),
            source,
        })?;
    let files = PROJECT_FILES
        .into_iter()
        .filter(|rel| root.join(rel).is_file())
        .collect();
    Ok(Some(Granted { root, files }))
}

/// Forget `root`'s trust. `Ok(false)`: there was none.
pub fn revoke(root: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<bool, TrustError> {
    let Some(dir) = config_dir(env) else {
        return Ok(false);
    };
    let path = record_path(&dir, &canonical(root));
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(TrustError::Io {
            op: "remove",
            path,
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trust_follows_path_and_content() {
        let home = tempfile::tempdir().unwrap();
        let proj = tempfile::tempdir().unwrap();
        let h = home.path().display().to_string();
        let env = move |k: &str| (k == "HEDDLE_CONFIG_DIR").then(|| h.clone());
        assert!(
            grant(proj.path(), &env).unwrap().is_none(),
            "nothing to trust"
        );
        std::fs::create_dir_all(proj.path().join(".heddle")).unwrap();
        std::fs::write(proj.path().join(".heddle/config.toml"), "[cache]\n").unwrap();
        assert_eq!(check(proj.path(), &env), Trust::Untrusted);
        let g = grant(proj.path(), &env).unwrap().unwrap();
        assert_eq!(g.files, [".heddle/config.toml"]);
        assert_eq!(check(proj.path(), &env), Trust::Trusted);
        std::fs::write(proj.path().join(".heddle/hosts.toml"), "").unwrap();
        assert_eq!(
            check(proj.path(), &env),
            Trust::Changed,
            "a new file lapses it"
        );
        std::fs::remove_file(proj.path().join(".heddle/hosts.toml")).unwrap();
        assert_eq!(check(proj.path(), &env), Trust::Trusted);
        std::fs::write(proj.path().join(".heddle/config.toml"), "[cache]\n#\n").unwrap();
        assert_eq!(
            check(proj.path(), &env),
            Trust::Changed,
            "an edit lapses it"
        );
        assert!(revoke(proj.path(), &env).unwrap());
        assert_eq!(check(proj.path(), &env), Trust::Untrusted);
        assert!(!revoke(proj.path(), &env).unwrap());
    }
}
