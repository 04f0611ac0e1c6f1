//! The crate's error type: one variant per engine operation, each naming the image or container.

use std::path::PathBuf;

/// Everything that can go wrong while talking to the Docker Engine.
///
/// Each variant names what it was acting on (the engine address, the image reference, the
/// container) so a caller can print the message as a headline and the `source()` chain as
/// "caused by" lines.
#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    /// The engine did not answer the version negotiation / ping.
    #[error("cannot reach the Docker Engine at {host}: {reason} — {hint}")]
    EngineUnreachable {
        host: String,
        reason: String,
        hint: &'static str,
    },

    /// The image is not present locally and the pull policy forbids pulling it.
    #[error(
        "image {reference} is not present in the Docker Engine: load it with `docker load -i <file>` \
         or build it with `docker build -t {reference} .`; heddle does not pull unless the stage sets \
         pull = \"missing\""
    )]
    ImageMissing { reference: String },

    #[error("failed to inspect image {reference}")]
    InspectImage {
        reference: String,
        #[source]
        source: bollard::errors::Error,
    },

    #[error("failed to pull image {reference}")]
    Pull {
        reference: String,
        #[source]
        source: bollard::errors::Error,
    },

    #[error("failed to build image {tag}")]
    Build {
        tag: String,
        #[source]
        source: bollard::errors::Error,
    },

    #[error("failed to tag image {image} as {reference}")]
    Tag {
        image: String,
        reference: String,
        #[source]
        source: bollard::errors::Error,
    },

    /// The spec itself is malformed (a bad device string, an empty command, ...).
    #[error("invalid container spec for image {image}: {reason}")]
    InvalidSpec { image: String, reason: String },

    #[error("failed to create a container from image {image}")]
    Create {
        image: String,
        #[source]
        source: bollard::errors::Error,
    },

    #[error("failed to attach to container {container}")]
    Attach {
        container: String,
        #[source]
        source: bollard::errors::Error,
    },

    /// A unit's lock container ([`crate::UnitTry`]) did not start.
    #[error("failed to start lock container {container} (it runs `cat` from image {image})")]
    StartLock {
        container: String,
        image: String,
        #[source]
        source: bollard::errors::Error,
    },

    #[error("failed to start container {container}")]
    Start {
        container: String,
        #[source]
        source: bollard::errors::Error,
    },

    #[error("failed to wait for container {container}")]
    Wait {
        container: String,
        #[source]
        source: bollard::errors::Error,
    },

    #[error("failed to inspect container {container}")]
    Inspect {
        container: String,
        #[source]
        source: bollard::errors::Error,
    },

    #[error("failed to read the output of container {container}")]
    Logs {
        container: String,
        #[source]
        source: bollard::errors::Error,
    },

    #[error("failed to remove container {container}")]
    Remove {
        container: String,
        #[source]
        source: bollard::errors::Error,
    },

    #[error("failed to list containers labelled {label}")]
    List {
        label: String,
        #[source]
        source: bollard::errors::Error,
    },

    #[error("failed to copy {paths} into container {container} (archive upload)")]
    CopyIn {
        container: String,
        paths: String,
        #[source]
        source: bollard::errors::Error,
    },

    #[error("failed to pack {paths} for upload")]
    ArchivePack {
        paths: String,
        #[source]
        source: std::io::Error,
    },

    #[error("failed to copy {path} out of container {container} (archive download)")]
    CopyOut {
        container: String,
        path: String,
        #[source]
        source: bollard::errors::Error,
    },

    #[error("failed to unpack a container's files into {}", dest.display())]
    ArchiveUnpack {
        dest: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("failed to write {}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A size string that [`crate::parse_size`] could not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid size {input:?}: expected a number of bytes with an optional unit b, k, m, g or t (e.g. \"512m\", \"2g\")")]
pub struct SizeError {
    pub input: String,
}
