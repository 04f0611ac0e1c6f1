//! Who wrote an action entry: every entry heddle writes to a remote is signed by its writer's
//! ed25519 key, and a reader accepts only entries signed by a key its team trusts
//! (`trust.rs`). Bazel's remote caches authenticate writers but do not sign results, so anyone
//! who can write to the bucket decides every reader's results; here a reader can tell which
//! writer made each result, and refuses results nobody it trusts made.
//!
//! # What is signed
//!
//! The canonical bytes of what decides a reader's result: the action key, the entry's family,
//! and every output's name, kind, digest, size and mode (a folder's by its manifest digest,
//! which names every file's digest and size). Never the JSON as sent: a reader (or a server)
//! could reorder or re-space it. Not signed: the expanded key, the duration, the creation time
//! and the metadata, which explain a result but do not make it.
//!
//! ```text
//! heddle/entry-signature/v1
//! key <64 hex>
//! family "<JSON string>"
//! output "<name as a JSON string>" file <digest> <size> <x or ->
//! output "<name as a JSON string>" dir <digest> <size> <files>
//! ```
//!
//! Outputs in name order, one line each; names and the family are JSON strings, so no name can
//! forge a line. Bump the version when these bytes change: old signatures then stop verifying,
//! which is a miss, never a misread.
//!
//! # On the remote
//!
//! The entry JSON gains one field, `"signature": {"scheme", "key", "sig"}` (readers of an
//! older heddle ignore it). The key is `ed25519:<64 hex>`, the signature 128 hex characters.
//!
//! # The key file
//!
//! `heddle cache keygen` writes `$HEDDLE_SIGNING_KEY_FILE`, else `signing.key` in the user's
//! heddle config folder, readable by its owner only; heddle refuses a key file others may read
//! (as ssh does). Its contents are never printed.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use ed25519_dalek::{Signer as _, Verifier as _};
use heddle_cache::{ActionEntry, OutputEntry};
use serde::{Deserialize, Serialize};

/// The domain tag and version of the signed bytes (see the module doc).
pub const SIGNATURE_SCHEME: &str = "heddle/entry-signature/v1";
/// The variable naming the signing key file.
pub const SIGNING_KEY_VAR: &str = "HEDDLE_SIGNING_KEY_FILE";
const SECRET_PREFIX: &str = "ed25519-secret:";
const PUBLIC_PREFIX: &str = "ed25519:";

/// A writer's public key, as a trust file and a signature spell it: `ed25519:<64 hex>`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct WriterKey(ed25519_dalek::VerifyingKey);

impl fmt::Display for WriterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PUBLIC_PREFIX}{}", hex::encode(self.0.as_bytes()))
    }
}

impl fmt::Debug for WriterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Why a text is not a [`WriterKey`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WriterKeyError {
    #[error("expected ed25519:<64 hex characters>")]
    Form,
    #[error("not an ed25519 public key")]
    NotEd25519,
}

impl FromStr for WriterKey {
    type Err = WriterKeyError;

    fn from_str(s: &str) -> Result<WriterKey, WriterKeyError> {
        let hex = s.strip_prefix(PUBLIC_PREFIX).ok_or(WriterKeyError::Form)?;
        let bytes: [u8; 32] = hex::decode(hex)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or(WriterKeyError::Form)?;
        ed25519_dalek::VerifyingKey::from_bytes(&bytes)
            .map(WriterKey)
            .map_err(|_| WriterKeyError::NotEd25519)
    }
}

/// The signature an entry carries on the remote.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntrySignature {
    /// [`SIGNATURE_SCHEME`].
    pub scheme: String,
    /// The writer's [`WriterKey`].
    pub key: String,
    /// The ed25519 signature of [`signed_bytes`], 128 hex characters.
    pub sig: String,
}

/// Why a signature does not verify (before any trust question).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadSignature {
    Scheme(String),
    Key(WriterKeyError),
    Encoding,
    Mismatch,
}

impl fmt::Display for BadSignature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadSignature::Scheme(s) => {
                write!(f, "its signature scheme {s:?} is not {SIGNATURE_SCHEME}")
            }
            BadSignature::Key(why) => write!(f, "its signature's key is unusable: {why}"),
            BadSignature::Encoding => f.write_str("its signature is not 128 hex characters"),
            BadSignature::Mismatch => f.write_str(
                "its signature does not match its contents (changed after it was signed)",
            ),
        }
    }
}

impl EntrySignature {
    /// The key this signature claims, once its bytes are checked to be `entry`'s, signed by it.
    pub fn verify(&self, entry: &ActionEntry) -> Result<WriterKey, BadSignature> {
        if self.scheme != SIGNATURE_SCHEME {
            return Err(BadSignature::Scheme(self.scheme.clone()));
        }
        let key: WriterKey = self.key.parse().map_err(BadSignature::Key)?;
        let sig: [u8; 64] = hex::decode(&self.sig)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or(BadSignature::Encoding)?;
        key.0
            .verify(
                &signed_bytes(entry),
                &ed25519_dalek::Signature::from_bytes(&sig),
            )
            .map_err(|_| BadSignature::Mismatch)?;
        Ok(key)
    }
}

/// The canonical bytes an entry's signature covers (see the module doc).
pub fn signed_bytes(entry: &ActionEntry) -> Vec<u8> {
    let quote = |s: &str| serde_json::to_string(s).expect("a string always serialises");
    let mut out = format!(
        "{SIGNATURE_SCHEME}\nkey {}\nfamily {}\n",
        entry.key,
        quote(&entry.family)
    );
    for (name, output) in &entry.outputs {
        let line = match output {
            OutputEntry::File {
                digest,
                size,
                executable,
            } => format!(
                "output {} file {digest} {size} {}\n",
                quote(name),
                if *executable { "x" } else { "-" }
            ),
            OutputEntry::Dir {
                digest,
                size,
                files,
            } => format!("output {} dir {digest} {size} {files}\n", quote(name)),
        };
        out.push_str(&line);
    }
    out.into_bytes()
}

/// An entry as it goes to the remote: the local store's JSON with one more field, its
/// signature by `key`. (A flattened struct serialises plainly; readers parse the two parts
/// separately, `download.rs`.)
pub fn signed_entry_json(entry: &ActionEntry, key: &SigningKey) -> serde_json::Result<Vec<u8>> {
    #[derive(Serialize)]
    struct SignedOut<'a> {
        #[serde(flatten)]
        entry: &'a ActionEntry,
        signature: EntrySignature,
    }
    serde_json::to_vec_pretty(&SignedOut {
        entry,
        signature: key.sign(entry),
    })
}

/// Why a signing key could not be read or written. Never holds the key's contents.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("failed to read the signing key {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to use the signing key {path}: {reason}")]
    Bad { path: PathBuf, reason: String },
    #[error("failed to write the signing key {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to make a signing key: the system has no randomness to offer ({0})")]
    Random(String),
}

/// This machine's signing key, loaded from its file.
pub struct SigningKey {
    key: ed25519_dalek::SigningKey,
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SigningKey({})", self.public())
    }
}

impl SigningKey {
    /// A new key from the system's randomness.
    pub fn generate() -> Result<SigningKey, KeyError> {
        let mut seed = [0u8; 32];
        getrandom::getrandom(&mut seed).map_err(|e| KeyError::Random(e.to_string()))?;
        Ok(SigningKey::from_seed(seed))
    }

    /// The key whose secret is `seed` (tests, benches).
    pub fn from_seed(seed: [u8; 32]) -> SigningKey {
        SigningKey {
            key: ed25519_dalek::SigningKey::from_bytes(&seed),
        }
    }

    pub fn public(&self) -> WriterKey {
        WriterKey(self.key.verifying_key())
    }

    /// `entry`'s signature by this key.
    pub fn sign(&self, entry: &ActionEntry) -> EntrySignature {
        EntrySignature {
            scheme: SIGNATURE_SCHEME.to_string(),
            key: self.public().to_string(),
            sig: hex::encode(self.key.sign(&signed_bytes(entry)).to_bytes()),
        }
    }

    /// Read the key file at `path`, refusing one that others may read.
    pub fn load(path: &Path) -> Result<SigningKey, KeyError> {
        let text = std::fs::read_to_string(path).map_err(|source| KeyError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let bad = |reason: &str| KeyError::Bad {
            path: path.to_path_buf(),
            reason: reason.to_string(),
        };
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(path)
                .map_err(|source| KeyError::Read {
                    path: path.to_path_buf(),
                    source,
                })?
                .permissions()
                .mode();
            if mode & 0o077 != 0 {
                return Err(bad(&format!(
                    "others may read it (mode {:o}); run chmod 600 on it",
                    mode & 0o777
                )));
            }
        }
        let secret = text
            .lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix(SECRET_PREFIX))
            .ok_or_else(|| {
                bad("it holds no ed25519-secret: line; make one with `heddle cache keygen`")
            })?;
        let seed: [u8; 32] = hex::decode(secret)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| bad("its ed25519-secret: is not 64 hex characters"))?;
        Ok(SigningKey::from_seed(seed))
    }

    /// Write this key to a new file at `path` (never over an existing one), readable by its
    /// owner only, creating its folder.
    pub fn write_new(&self, path: &Path) -> Result<(), KeyError> {
        let failed = |source| KeyError::Write {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(failed)?;
        }
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let mut file = options.open(path).map_err(failed)?;
        let text = format!(
            "# heddle signing key: entries this machine writes to a shared cache are signed with it.\n\
             # Keep it secret; share the public line below (it goes in a team's .heddle/trusted-writers).\n\
             # public: {}\n\
             {SECRET_PREFIX}{}\n",
            self.public(),
            hex::encode(self.key.to_bytes())
        );
        file.write_all(text.as_bytes()).map_err(failed)?;
        file.sync_all().map_err(failed)
    }
}

/// Where the signing key is: `$HEDDLE_SIGNING_KEY_FILE`, else `signing.key` in `config_dir`
/// (the user's heddle config folder).
pub fn signing_key_path(
    env: &dyn Fn(&str) -> Option<String>,
    config_dir: Option<&Path>,
) -> Option<PathBuf> {
    env(SIGNING_KEY_VAR)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| config_dir.map(|d| d.join("signing.key")))
}

/// The user's heddle config folder: `$HEDDLE_CONFIG_DIR`, else `$XDG_CONFIG_HOME/heddle`,
/// else `~/.config/heddle` (as for `hosts.toml`).
pub fn user_config_dir(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let set = |k: &str| env(k).filter(|v| !v.is_empty());
    set("HEDDLE_CONFIG_DIR")
        .map(PathBuf::from)
        .or_else(|| set("XDG_CONFIG_HOME").map(|x| Path::new(&x).join("heddle")))
        .or_else(|| set("HOME").map(|h| Path::new(&h).join(".config").join("heddle")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use heddle_cache::Digest;
    use std::collections::BTreeMap;

    fn entry() -> ActionEntry {
        let mut outputs = BTreeMap::new();
        outputs.insert(
            "model".to_string(),
            OutputEntry::File {
                digest: Digest::of_bytes(b"m"),
                size: 1,
                executable: false,
            },
        );
        outputs.insert(
            "tree".to_string(),
            OutputEntry::Dir {
                digest: Digest::of_bytes(b"t"),
                size: 10,
                files: 2,
            },
        );
        ActionEntry {
            key: Digest::of_bytes(b"k"),
            family: "p/s".into(),
            key_parts: serde_json::json!({"a": 1}),
            outputs,
            duration_ms: 5,
            created_unix_ms: 6,
            meta: serde_json::json!({}),
        }
    }

    #[test]
    fn the_signed_bytes_are_the_documented_lines() {
        let e = entry();
        let text = String::from_utf8(signed_bytes(&e)).unwrap();
        assert_eq!(
            text,
            format!(
                "heddle/entry-signature/v1\nkey {}\nfamily \"p/s\"\n\
                 output \"model\" file {} 1 -\noutput \"tree\" dir {} 10 2\n",
                Digest::of_bytes(b"k"),
                Digest::of_bytes(b"m"),
                Digest::of_bytes(b"t")
            )
        );
    }

    #[test]
    fn a_signature_covers_outputs_and_key_but_not_explanations() {
        let key = SigningKey::from_seed([7; 32]);
        let e = entry();
        let sig = key.sign(&e);
        assert_eq!(sig.verify(&e).unwrap(), key.public());

        let mut explained = e.clone();
        explained.duration_ms = 99;
        explained.key_parts = serde_json::json!({"other": true});
        assert_eq!(sig.verify(&explained).unwrap(), key.public());

        let mut moved = e.clone();
        moved.outputs.insert(
            "model".into(),
            OutputEntry::File {
                digest: Digest::of_bytes(b"other"),
                size: 1,
                executable: false,
            },
        );
        assert_eq!(sig.verify(&moved), Err(BadSignature::Mismatch));
        let mut rekeyed = e.clone();
        rekeyed.key = Digest::of_bytes(b"k2");
        assert_eq!(sig.verify(&rekeyed), Err(BadSignature::Mismatch));
        let mut renamed = e;
        let out = renamed.outputs.remove("tree").unwrap();
        renamed.outputs.insert("tree\noutput".into(), out);
        assert_eq!(sig.verify(&renamed), Err(BadSignature::Mismatch));
    }

    #[test]
    fn a_key_file_round_trips_and_is_refused_when_others_may_read_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/signing.key");
        let key = SigningKey::generate().unwrap();
        key.write_new(&path).unwrap();
        assert_eq!(SigningKey::load(&path).unwrap().public(), key.public());
        assert!(key.write_new(&path).is_err(), "never over an existing key");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            let e = SigningKey::load(&path).unwrap_err().to_string();
            assert!(
                e.ends_with("others may read it (mode 644); run chmod 600 on it"),
                "{e}"
            );
            let secret = hex::encode(key.key.to_bytes());
            assert!(!e.contains(&secret));
        }
    }

    #[test]
    fn writer_keys_parse_and_print_the_same() {
        let k = SigningKey::from_seed([1; 32]).public();
        assert_eq!(k.to_string().parse::<WriterKey>().unwrap(), k);
        assert!("ed25519:xyz".parse::<WriterKey>().is_err());
        assert!("ssh-ed25519 AAAA".parse::<WriterKey>().is_err());
    }
}
