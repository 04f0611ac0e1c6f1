//! How a heddle action entry lives in a REAPI ActionCache.
//!
//! - **AC key.** For heddle key `K`, a synthetic `Action` whose `Command` is
//!   `["heddle-action-entry", "v1", hex(K)]` with an empty input root. Its digest (sha256 of
//!   the encoded `Action`, as every REAPI client computes it) is the ActionCache key. Being a
//!   real `Action` digest, it never collides with a build tool's actions on a shared server,
//!   and `v1` leaves room for a different layout later. The `Command` and `Action` blobs are
//!   uploaded to the CAS with the entry, so tools that browse the cache can resolve them.
//! - **ActionResult.** `output_files[0]` is `heddle/entry.json`, whose digest is the CAS blob
//!   holding the local store's `ActionEntry` JSON. Then one `heddle/blobs/<sha256>` per blob
//!   the entry needs (file outputs, tree manifests, the files a manifest lists), with its size.
//!   They say which blobs the entry keeps alive: servers that check an ActionResult's outputs
//!   before serving it (BuildGrid, bazel-remote, Buildbarn's completeness checking) answer a
//!   miss once one has been evicted, instead of an entry naming a missing blob; and they carry
//!   the size of each tree manifest, which REAPI needs to read a blob and heddle's entry does
//!   not record. `exit_code` is 0.
//!
//! Entry last: the entry blob and the ActionResult are written only after every blob they
//! name (`upload.rs`), so a reader never sees an ActionResult naming a blob not yet there.

use bytes::Bytes;
use heddle_cache::Digest;
use prost::Message;

use super::names::{digest_of, reapi_digest};
use super::proto::build::bazel::remote::execution::v2 as re;

/// The output path of the entry blob in the ActionResult.
pub(super) const ENTRY_PATH: &str = "heddle/entry.json";
const BLOB_PREFIX: &str = "heddle/blobs/";

/// The ActionCache key of heddle key `key`, and the `Command` and `Action` blobs behind it.
pub(super) struct ActionKey {
    pub digest: re::Digest,
    /// `(digest, bytes)` of the `Command` and the `Action`.
    pub blobs: [(re::Digest, Bytes); 2],
}

pub(super) fn action_key(key: Digest) -> ActionKey {
    let command = re::Command {
        arguments: vec![
            "heddle-action-entry".to_string(),
            "v1".to_string(),
            key.to_hex(),
        ],
        ..Default::default()
    }
    .encode_to_vec();
    let command_digest = digest_of(&command);
    let action = re::Action {
        command_digest: Some(command_digest.clone()),
        // The empty Directory encodes to no bytes.
        input_root_digest: Some(digest_of(&[])),
        ..Default::default()
    }
    .encode_to_vec();
    let digest = digest_of(&action);
    ActionKey {
        blobs: [
            (command_digest, Bytes::from(command)),
            (digest.clone(), Bytes::from(action)),
        ],
        digest,
    }
}

/// The ActionResult for an entry stored as blob `entry`, needing `blobs`.
pub(super) fn action_result(entry: re::Digest, blobs: &[(Digest, u64)]) -> re::ActionResult {
    let file = |path: String, digest: re::Digest| re::OutputFile {
        path,
        digest: Some(digest),
        ..Default::default()
    };
    let mut output_files = vec![file(ENTRY_PATH.to_string(), entry)];
    output_files.extend(
        blobs
            .iter()
            .map(|(d, size)| file(format!("{BLOB_PREFIX}{d}"), reapi_digest(*d, *size))),
    );
    re::ActionResult {
        output_files,
        exit_code: 0,
        ..Default::default()
    }
}

/// What an ActionResult written by [`action_result`] holds.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct StoredEntry {
    /// The entry blob's digest and size.
    pub entry: (Digest, u64),
    /// Its bytes when the server inlined them (`inline_output_files`), else empty.
    pub inline: Bytes,
    /// Every blob the entry needs, with its size.
    pub blobs: Vec<(Digest, u64)>,
}

/// Why an ActionResult is not one heddle wrote; its text is [`RemoteError::BadEntry`]'s
/// reason.
///
/// [`RemoteError::BadEntry`]: crate::RemoteError::BadEntry
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum ForeignResult {
    #[error("output {path} has no digest")]
    NoDigest { path: String },
    #[error("output {path} has digest {hash:?}")]
    BadDigest { path: String, hash: String },
    #[error("output {path} has size {size}")]
    BadSize { path: String, size: i64 },
    #[error("output {path} has digest {hash}")]
    WrongBlob { path: String, hash: Digest },
    #[error("it has no {}: not an action entry heddle wrote", ENTRY_PATH)]
    NoEntry,
}

/// Read back an ActionResult heddle wrote.
pub(super) fn stored_entry(result: re::ActionResult) -> Result<StoredEntry, ForeignResult> {
    let mut entry = None;
    let mut blobs = Vec::new();
    for f in result.output_files {
        let Some(digest) = f.digest else {
            return Err(ForeignResult::NoDigest { path: f.path });
        };
        let Ok(hash) = digest.hash.parse::<Digest>() else {
            return Err(ForeignResult::BadDigest {
                path: f.path,
                hash: digest.hash,
            });
        };
        let Ok(size) = u64::try_from(digest.size_bytes) else {
            return Err(ForeignResult::BadSize {
                path: f.path,
                size: digest.size_bytes,
            });
        };
        if f.path == ENTRY_PATH {
            entry = Some(((hash, size), f.contents));
        } else if let Some(named) = f.path.strip_prefix(BLOB_PREFIX) {
            if named != hash.to_hex() {
                return Err(ForeignResult::WrongBlob { path: f.path, hash });
            }
            blobs.push((hash, size));
        }
    }
    let (entry, inline) = entry.ok_or(ForeignResult::NoEntry)?;
    Ok(StoredEntry {
        entry,
        inline,
        blobs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_action_key_is_a_real_action_digest_and_differs_by_key() {
        let a = action_key(Digest::of_bytes(b"a"));
        let b = action_key(Digest::of_bytes(b"b"));
        assert_ne!(a.digest, b.digest);
        let (action_digest, action) = &a.blobs[1];
        assert_eq!(&a.digest, action_digest);
        assert_eq!(&digest_of(action), action_digest);
        let decoded = re::Action::decode(action.clone()).unwrap();
        let (command_digest, command) = &a.blobs[0];
        assert_eq!(decoded.command_digest.as_ref(), Some(command_digest));
        let command = re::Command::decode(command.clone()).unwrap();
        assert_eq!(
            command.arguments,
            [
                "heddle-action-entry",
                "v1",
                &Digest::of_bytes(b"a").to_hex()
            ]
        );
        // Stable across runs and machines: the same key, the same AC key.
        assert_eq!(action_key(Digest::of_bytes(b"a")).digest, a.digest);
    }

    #[test]
    fn an_action_result_round_trips_and_foreign_ones_are_refused() {
        let entry = Digest::of_bytes(b"{}");
        let blobs = vec![(Digest::of_bytes(b"x"), 1), (Digest::of_bytes(b"yy"), 2)];
        let result = action_result(reapi_digest(entry, 2), &blobs);
        assert_eq!(
            stored_entry(result.clone()).unwrap(),
            StoredEntry {
                entry: (entry, 2),
                inline: Bytes::new(),
                blobs: blobs.clone()
            }
        );

        let mut foreign = result.clone();
        foreign.output_files.remove(0);
        assert_eq!(stored_entry(foreign), Err(ForeignResult::NoEntry));

        let mut lying = result;
        lying.output_files[1].digest = Some(reapi_digest(Digest::of_bytes(b"z"), 1));
        assert!(stored_entry(lying)
            .unwrap_err()
            .to_string()
            .starts_with("output heddle/blobs/"));
    }
}
