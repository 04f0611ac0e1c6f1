//! [`Digest`], the sha256 of some bytes, and [`hash_file`].

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::str::FromStr;

use sha2::{Digest as _, Sha256};

use crate::CacheError;

/// A sha256 digest. Displayed, parsed and serialised as 64 lowercase hex characters.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Digest([u8; 32]);

impl Digest {
    /// The digest of `bytes`.
    pub fn of_bytes(bytes: &[u8]) -> Digest {
        Digest(Sha256::digest(bytes).into())
    }

    pub const fn from_bytes(bytes: [u8; 32]) -> Digest {
        Digest(bytes)
    }

    /// The first 12 hex characters, for display.
    pub fn short(&self) -> String {
        hex::encode(&self.0[..6])
    }

    /// All 64 hex characters.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = [0u8; 64];
        hex::encode_to_slice(self.0, &mut buf).expect("64 bytes of room for 32 bytes");
        f.write_str(std::str::from_utf8(&buf).expect("hex is ascii"))
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({self})")
    }
}

impl FromStr for Digest {
    type Err = CacheError;

    fn from_str(s: &str) -> Result<Digest, CacheError> {
        let bad = || CacheError::BadDigest {
            input: s.chars().take(80).collect(),
        };
        // Uppercase hex would parse but give a second spelling of the same digest, and
        // digests name files: accept only the canonical lowercase form.
        if s.len() != 64
            || !s
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(bad());
        }
        let mut out = [0u8; 32];
        hex::decode_to_slice(s, &mut out).map_err(|_| bad())?;
        Ok(Digest(out))
    }
}

impl serde::Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Digest, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Read buffer for [`hash_file`]: 64–128 KiB keeps the kernel's copy into the buffer inside L2,
/// which cut the system time of hashing a page-cached file several-fold against a 1 MiB buffer
/// (benches/RESULTS.md, M8); user time is sha256 itself (SHA-NI through sha2's runtime
/// detection).
const HASH_BUF: usize = 128 * 1024;

/// Files up to this size are read in one go and hashed from memory.
pub(crate) const SMALL_FILE: u64 = 64 * 1024;

/// The sha256 of a regular file's contents. Anything else is refused before a byte is read: a
/// FIFO would block the read until a writer came (heddle hung on a FIFO named as a repo
/// input), and `/dev/zero` would never end. The open does not block on a FIFO (`O_NONBLOCK`,
/// which changes nothing for a regular file), and the type is checked on the open descriptor.
pub fn hash_file(path: &Path) -> Result<Digest, CacheError> {
    let mut file = open_nonblocking(path).map_err(CacheError::io("open", path))?;
    let ft = file
        .metadata()
        .map_err(CacheError::io("stat", path))?
        .file_type();
    if !ft.is_file() {
        return Err(CacheError::NotAFile {
            path: path.to_path_buf(),
            kind: crate::fsutil::odd_kind(&ft),
        });
    }
    hash_reader(&mut file).map_err(CacheError::io("read", path))
}

fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
    }
    #[cfg(not(unix))]
    {
        File::open(path)
    }
}

pub(crate) fn hash_reader(r: &mut impl Read) -> std::io::Result<Digest> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; HASH_BUF];
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
    }
    Ok(Digest(hasher.finalize().into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vector() {
        assert_eq!(
            Digest::of_bytes(b"abc").to_string(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(Digest::of_bytes(b"abc").short(), "ba7816bf8f01");
    }

    #[test]
    fn parse_round_trip_and_rejects_bad_hex() {
        let d = Digest::of_bytes(b"x");
        assert_eq!(d.to_string().parse::<Digest>().unwrap(), d);
        let good = d.to_string();
        for bad in [
            String::new(),
            good[..63].to_string(),
            format!("{good}0"),
            good.to_uppercase(),
            format!("g{}", &good[1..]),
            format!(" {}", &good[1..]),
        ] {
            assert!(bad.parse::<Digest>().is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn serde_as_hex_string() {
        let d = Digest::of_bytes(b"x");
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(json, format!("\"{d}\""));
        assert_eq!(serde_json::from_str::<Digest>(&json).unwrap(), d);
        assert!(serde_json::from_str::<Digest>("\"abc\"").is_err());
    }

    #[test]
    fn hash_file_matches_of_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        assert_eq!(hash_file(&p).unwrap(), Digest::of_bytes(&data));
    }
}
