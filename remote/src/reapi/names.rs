//! REAPI digests and ByteStream resource names for heddle's blobs. REAPI names a blob by its
//! hash *and* size; heddle's digests are sha256 like the server's default digest function.

use heddle_cache::Digest;

use super::proto::build::bazel::remote::execution::v2 as re;

/// The REAPI digest of heddle blob `digest` of `size` bytes.
pub(super) fn reapi_digest(digest: Digest, size: u64) -> re::Digest {
    re::Digest {
        hash: digest.to_hex(),
        size_bytes: size as i64,
    }
}

/// The REAPI digest of `bytes`.
pub(super) fn digest_of(bytes: &[u8]) -> re::Digest {
    reapi_digest(Digest::of_bytes(bytes), bytes.len() as u64)
}

/// `{instance}/blobs/{hash}/{size}`: what a ByteStream `Read` asks for.
pub(super) fn read_resource(instance: &str, digest: Digest, size: u64) -> String {
    under_instance(instance, format!("blobs/{digest}/{size}"))
}

/// `{instance}/uploads/{uuid}/blobs/{hash}/{size}`: a ByteStream `Write` of one upload; the
/// uuid keeps two uploads of the same blob apart on the server.
pub(super) fn write_resource(instance: &str, digest: Digest, size: u64) -> String {
    let upload = uuid::Uuid::new_v4();
    under_instance(instance, format!("uploads/{upload}/blobs/{digest}/{size}"))
}

/// `{instance}/{name}`; the server's default instance (an empty name) adds no `/`.
fn under_instance(instance: &str, name: String) -> String {
    if instance.is_empty() {
        name
    } else {
        format!("{instance}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_names_follow_the_spec() {
        let d = Digest::of_bytes(b"x");
        assert_eq!(read_resource("", d, 1), format!("blobs/{d}/1"));
        assert_eq!(read_resource("team/a", d, 1), format!("team/a/blobs/{d}/1"));
        let w = write_resource("team", d, 7);
        let parts: Vec<&str> = w.split('/').collect();
        assert_eq!(parts.len(), 6, "{w}");
        assert_eq!((parts[0], parts[1], parts[3]), ("team", "uploads", "blobs"));
        assert!(uuid::Uuid::parse_str(parts[2]).is_ok(), "{w}");
        assert_eq!((parts[4], parts[5]), (d.to_hex().as_str(), "7"));
        assert_ne!(w, write_resource("team", d, 7), "a fresh uuid per upload");
    }

    #[test]
    fn digest_of_is_sha256_hex_and_length() {
        let d = digest_of(b"");
        assert_eq!(
            d.hash,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(d.size_bytes, 0);
    }
}
