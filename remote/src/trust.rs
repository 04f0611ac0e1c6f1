//! [`TrustedWriters`]: whose entries a reader accepts. A team lists its writers' public keys
//! (`heddle cache keygen` prints a machine's line) in the project's `.heddle/trusted-writers`,
//! committed with the project; a user may add their own in `trusted-writers` in their heddle
//! config folder. An entry is accepted only when its signature verifies (`signing.rs`) and its
//! key is listed; anything else (unsigned, signed by a key nobody listed, a signature that does
//! not match) is a miss.
//!
//! ```text
//! # one writer per line: its key, then the name records and messages call it by
//! ed25519:3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c  ci-builder
//! ed25519:8a88e3dd7409f195fd52db2d3cba5d72ca6709bf1d94121bf3748801b40f6f5c  alice@laptop
//! ```

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use heddle_cache::ActionEntry;

use crate::signing::{BadSignature, EntrySignature, WriterKey};

/// The file name of a trust file, in a project's `.heddle/` or a user's config folder.
pub const TRUST_FILE: &str = "trusted-writers";

/// A writer a reader trusts: the key that signed an entry and the name the trust file gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Writer {
    pub name: String,
    pub key: WriterKey,
}

impl fmt::Display for Writer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name, self.key)
    }
}

/// The keys whose entries a reader accepts, with their names. Empty: nothing is accepted.
#[derive(Clone, Debug, Default)]
pub struct TrustedWriters {
    writers: Arc<HashMap<WriterKey, String>>,
}

/// Why an entry is not trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Untrusted {
    /// No trust file lists any writer.
    NoneTrusted,
    Unsigned,
    /// A signature heddle cannot check or that does not match the entry.
    Bad(BadSignature),
    /// A valid signature by a key no trust file lists.
    Unknown(WriterKey),
}

impl fmt::Display for Untrusted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Untrusted::NoneTrusted => write!(
                f,
                "no writer is trusted: list the keys of the writers whose results to use in .heddle/{TRUST_FILE}"
            ),
            Untrusted::Unsigned => f.write_str("it is not signed"),
            Untrusted::Bad(why) => why.fmt(f),
            Untrusted::Unknown(key) => write!(
                f,
                "it is signed by {key}, which no {TRUST_FILE} file lists"
            ),
        }
    }
}

/// A trust file that does not parse: where, and what to write instead.
#[derive(Debug, thiserror::Error)]
pub enum TrustFileError {
    #[error("failed to read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to parse {path}:{line}:{col}: {reason}")]
    Parse {
        path: PathBuf,
        line: usize,
        col: usize,
        reason: String,
    },
}

impl TrustedWriters {
    /// The writers `files` list, later files adding to earlier ones. A file that does not
    /// exist lists nobody.
    pub fn load(files: &[PathBuf]) -> Result<TrustedWriters, TrustFileError> {
        let mut writers = HashMap::new();
        for path in files {
            let text = match std::fs::read_to_string(path) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(source) => {
                    return Err(TrustFileError::Read {
                        path: path.clone(),
                        source,
                    })
                }
            };
            parse(&text, path, &mut writers)?;
        }
        Ok(TrustedWriters {
            writers: Arc::new(writers),
        })
    }

    /// Writers given directly (tests, benches).
    pub fn of(writers: impl IntoIterator<Item = (WriterKey, String)>) -> TrustedWriters {
        TrustedWriters {
            writers: Arc::new(writers.into_iter().collect()),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.writers.is_empty()
    }

    /// Who wrote `entry`, if `signature` is a valid signature of it by a listed key.
    pub fn check(
        &self,
        entry: &ActionEntry,
        signature: Option<&EntrySignature>,
    ) -> Result<Writer, Untrusted> {
        if self.writers.is_empty() {
            return Err(Untrusted::NoneTrusted);
        }
        let signature = signature.ok_or(Untrusted::Unsigned)?;
        let key = signature.verify(entry).map_err(Untrusted::Bad)?;
        match self.writers.get(&key) {
            Some(name) => Ok(Writer {
                name: name.clone(),
                key,
            }),
            None => Err(Untrusted::Unknown(key)),
        }
    }
}

/// The trust files for a project: the user's (in their heddle config folder), then the
/// project's `.heddle/trusted-writers`.
pub fn trust_files(project_root: &Path, user_config_dir: Option<&Path>) -> Vec<PathBuf> {
    user_config_dir
        .map(|d| d.join(TRUST_FILE))
        .into_iter()
        .chain([project_root.join(".heddle").join(TRUST_FILE)])
        .collect()
}

fn parse(
    text: &str,
    path: &Path,
    into: &mut HashMap<WriterKey, String>,
) -> Result<(), TrustFileError> {
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let col = raw.len() - line.len() + 1;
        let err = |col: usize, reason: String| TrustFileError::Parse {
            path: path.to_path_buf(),
            line: i + 1,
            col,
            reason,
        };
        let (key, name) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        let key: WriterKey = key.parse().map_err(|why: crate::signing::WriterKeyError| {
            err(
                col,
                format!("{why}, then the writer's name (as `heddle cache keygen` prints)"),
            )
        })?;
        let name = name.trim();
        let name_col = raw.len() - raw.trim_start().len() + line.len() - name.len() + 1;
        if name.is_empty() {
            return Err(err(
                raw.trim_end().len() + 1,
                "expected the writer's name after its key".to_string(),
            ));
        }
        // Names reach records and terminals.
        if name.chars().any(char::is_control) {
            return Err(err(
                name_col,
                "the writer's name holds a control character".to_string(),
            ));
        }
        into.insert(key, name.to_string());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signing::SigningKey;

    #[test]
    fn a_trust_file_lists_keys_with_names_and_points_at_mistakes() {
        let dir = tempfile::tempdir().unwrap();
        let alice = SigningKey::from_seed([1; 32]).public();
        let file = dir.path().join("trusted-writers");
        std::fs::write(&file, format!("# team\n\n  {alice}   alice @ laptop \n")).unwrap();
        let t = TrustedWriters::load(&[dir.path().join("missing"), file.clone()]).unwrap();
        assert_eq!(
            t.writers.get(&alice).map(String::as_str),
            Some("alice @ laptop")
        );

        for (text, want) in [
            ("ed25519:zz ci\n", "1:1: expected ed25519:<64 hex characters>, then the writer's name (as `heddle cache keygen` prints)"),
            (&format!("# x\n  {alice}\n"), "2:75: expected the writer's name after its key"),
            (&format!("{alice} a\u{1b}[31m\n"), "1:74: the writer's name holds a control character"),
        ] {
            std::fs::write(&file, text).unwrap();
            let e = TrustedWriters::load(std::slice::from_ref(&file)).unwrap_err();
            assert_eq!(e.to_string(), format!("failed to parse {}:{want}", file.display()));
        }
    }
}
