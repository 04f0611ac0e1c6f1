//! The crate's error type: one variant per engine operation, each naming the image or container.

use std::path::PathBuf;

/// Everything that can go wrong while talking to the Docker Engine.
///
/// Each variant names what it was acting on (the engine address, the image reference, the
/// container) so a caller can print the message as a headline and the `source()` chain as
/// "caused by" lines.
#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    /// The engine did not answer the version negotiation / ping; the cause says why and what
    /// to check.
    #[error("cannot reach the Docker Engine at {host}")]
    EngineUnreachable {
        host: String,
        #[source]
        cause: Unreachable,
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

    /// The spec itself is malformed (a bad device string, a limit out of range, ...).
    #[error("invalid container spec for image {image}")]
    InvalidSpec {
        image: String,
        #[source]
        problem: SpecError,
    },

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

/// Why the Docker Engine could not be reached, with what to check.
///
/// A failed request keeps bollard's error but prints only its innermost cause ("connection
/// refused", "permission denied"): the links between (bollard's, hyper's client and connector
/// errors) say nothing a user can act on. So it is not a `source()`, and nothing prints twice.
#[derive(Debug, thiserror::Error)]
pub enum Unreachable {
    #[error("TLS file {} does not exist — check the host's `tls = {{ ca, cert, key }}` paths", path.display())]
    MissingTlsFile { path: PathBuf },
    /// bollard checks that a unix socket exists before any request.
    #[error("socket {path} does not exist — {}", hint_for("no such file"))]
    NoSocket { path: String },
    /// bollard could not make a client for the address.
    #[error(
        "{} — use unix:///path/to/docker.sock, tcp://host:port, ssh://user@host or npipe:////./pipe/name",
        root_cause(.0)
    )]
    Address(bollard::errors::Error),
    /// The version negotiation (the first request) failed.
    #[error("{} — {}", root_cause(.0), hint_for(&root_cause(.0)))]
    Request(bollard::errors::Error),
    #[error("no answer within {}s — is the daemon running and is DOCKER_HOST right?", waited.as_secs())]
    Timeout { waited: std::time::Duration },
}

/// The innermost cause's text, without io::Error's "(os error N)", which helps nobody here.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    let text = cause.to_string();
    match text.rfind(" (os error ") {
        Some(i) => text[..i].to_lowercase(),
        None => text,
    }
}

fn hint_for(reason: &str) -> &'static str {
    let reason = reason.to_lowercase();
    if reason.contains("permission denied") || reason.contains("access is denied") {
        "is your user in the docker group (or allowed to open the socket)?"
    } else if reason.contains("no such file") || reason.contains("cannot find the file") {
        "is the daemon running? set DOCKER_HOST or the stage's docker_host if it listens elsewhere"
    } else if reason.contains("refused") {
        "is the daemon running and listening at that address?"
    } else {
        "is the daemon running and is DOCKER_HOST right?"
    }
}

/// What makes a [`crate::ContainerSpec`] one the engine would misread.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpecError {
    #[error("no image given")]
    NoImage,
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error("{what} of {bytes} bytes is too large")]
    TooLarge { what: &'static str, bytes: u64 },
    #[error("cpus must be a positive number, not {cpus}")]
    Cpus { cpus: f64 },
}

/// A device string that [`crate::parse_device`] could not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid device {input:?}: {problem}")]
pub struct DeviceError {
    pub input: String,
    pub problem: DeviceProblem,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DeviceProblem {
    #[error("expected HOST[:CONTAINER][:PERMISSIONS]")]
    Shape,
    #[error("empty path")]
    EmptyPath,
    #[error("permissions must be a combination of r, w and m")]
    Permissions,
    #[error("the container path must be absolute")]
    RelativeContainerPath,
}

/// A size string that [`crate::parse_size`] could not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid size {input:?}: expected a number of bytes with an optional unit b, k, m, g or t (e.g. \"512m\", \"2g\")")]
pub struct SizeError {
    pub input: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_follow_the_cause() {
        assert!(hint_for("permission denied").contains("docker group"));
        assert!(hint_for("No such file or directory").contains("daemon running"));
    }

    #[test]
    fn the_cause_reads_as_one_line_after_the_headline() {
        let e = ContainerError::EngineUnreachable {
            host: "unix:///x.sock".into(),
            cause: Unreachable::NoSocket {
                path: "/x.sock".into(),
            },
        };
        let cause = std::error::Error::source(&e).unwrap();
        assert_eq!(
            format!("{e}: {cause}"),
            "cannot reach the Docker Engine at unix:///x.sock: socket /x.sock does not exist — is \
             the daemon running? set DOCKER_HOST or the stage's docker_host if it listens elsewhere"
        );
        assert!(cause.source().is_none());
    }
}
