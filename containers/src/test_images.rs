//! The busybox images heddle's tests run, built through the engine from Debian's
//! `busybox-static` (`apt-get install busybox-static`), since no registry is assumed.
//!
//! `tests/images/build-busybox.sh` builds the same images with the docker CLI.

use std::path::Path;

use crate::{ContainerError, Engine, ImageIdentity, PullPolicy};

/// A FROM-scratch image with a static busybox and its applets linked into `/bin`.
pub const BUSYBOX: &str = "heddle-test/busybox:latest";
/// [`BUSYBOX`] plus `/moved.txt`: a second image to move a tag to in "retag" tests.
pub const BUSYBOX_MOVED: &str = "heddle-test/busybox:moved";
/// Where Debian's `busybox-static` puts the binary.
pub const BUSYBOX_BINARY: &str = "/bin/busybox";

const BUSYBOX_DOCKERFILE: &str = r#"FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
RUN ["/bin/busybox", "mkdir", "-p", "-m", "1777", "/tmp"]
LABEL org.opencontainers.image.title="heddle test busybox"
CMD ["/bin/sh"]
"#;

const MOVED_DOCKERFILE: &str = r#"FROM heddle-test/busybox:latest
COPY moved.txt /moved.txt
"#;

/// Whether the busybox binary the images need is on this machine. Tests that need the image
/// should skip loudly when it is not.
pub fn busybox_available() -> bool {
    Path::new(BUSYBOX_BINARY).is_file()
}

/// Print a loud skip notice (tests call this and return when [`busybox_available`] is false).
pub fn skip_notice(test: &str) {
    eprintln!(
        "\n*** SKIPPED {test}: {BUSYBOX_BINARY} is missing; install it with \
         `apt-get install busybox-static` to run the Docker tests ***\n"
    );
}

static BUILD_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Make sure [`BUSYBOX`] exists, building it if needed; returns its identity.
pub async fn ensure_busybox(engine: &Engine) -> Result<ImageIdentity, ContainerError> {
    // Tests run in parallel; one build is enough.
    let _lock = BUILD_LOCK.lock().await;
    if let Ok(identity) = engine.resolve_image(BUSYBOX, PullPolicy::Never).await {
        return Ok(identity);
    }
    let busybox = std::fs::read(BUSYBOX_BINARY).map_err(|source| ContainerError::Io {
        path: BUSYBOX_BINARY.into(),
        source,
    })?;
    let context = context_tar(&[
        ("Dockerfile", BUSYBOX_DOCKERFILE.as_bytes(), 0o644),
        ("busybox", &busybox, 0o755),
    ]);
    engine.build_image(BUSYBOX, context).await
}

/// Make sure [`BUSYBOX_MOVED`] exists (and [`BUSYBOX`] under it); returns its identity.
pub async fn ensure_busybox_moved(engine: &Engine) -> Result<ImageIdentity, ContainerError> {
    ensure_busybox(engine).await?;
    let _lock = BUILD_LOCK.lock().await;
    if let Ok(identity) = engine.resolve_image(BUSYBOX_MOVED, PullPolicy::Never).await {
        return Ok(identity);
    }
    let context = context_tar(&[
        ("Dockerfile", MOVED_DOCKERFILE.as_bytes(), 0o644),
        ("moved.txt", b"moved\n", 0o644),
    ]);
    engine.build_image(BUSYBOX_MOVED, context).await
}

/// An in-memory build context: (path, contents, mode) per file.
pub fn context_tar(files: &[(&str, &[u8], u32)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, contents, mode) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(contents.len() as u64);
        header.set_mode(*mode);
        header.set_mtime(0);
        header.set_cksum();
        builder
            .append_data(&mut header, path, *contents)
            .expect("appending to an in-memory tar cannot fail");
    }
    builder
        .into_inner()
        .expect("finishing an in-memory tar cannot fail")
}
