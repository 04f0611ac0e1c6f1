//! Running heddle as an unprivileged user when the tests run as root, so checks of ownership and
//! socket permissions are not trivially true.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::support::{self, Project};

/// The uid and gid tests run heddle as when they run as root.
pub(crate) const UNPRIVILEGED: u32 = 4321;

/// Running heddle as [`UNPRIVILEGED`] through `setpriv`, when the test runs as root against the
/// local socket (otherwise the test process is already the user to check).
pub(crate) struct Unprivileged {
    pub(crate) socket_group: u32,
    pub(crate) socket_mode: u32,
}

impl Unprivileged {
    pub(crate) fn get() -> Option<Unprivileged> {
        let root = std::fs::metadata("/proc/self").ok()?.uid() == 0;
        let local = std::env::var("DOCKER_HOST")
            .map(|h| h.is_empty() || h == "unix:///var/run/docker.sock")
            .unwrap_or(true);
        let socket = std::fs::metadata("/var/run/docker.sock").ok()?;
        (root && local && has("setpriv")).then(|| Unprivileged {
            socket_group: socket.gid(),
            socket_mode: socket.mode(),
        })
    }

    /// `heddle ARGS` in `p` (handed over to the user) with `group` as the only supplementary
    /// group.
    pub(crate) fn heddle(&self, p: &Project, group: Option<u32>, args: &[&str]) -> support::Run {
        chown_tree(p.root(), UNPRIVILEGED, UNPRIVILEGED);
        let mut c = Command::new("setpriv");
        c.arg(format!("--reuid={UNPRIVILEGED}"))
            .arg(format!("--regid={UNPRIVILEGED}"));
        match group {
            Some(g) => c.arg(format!("--groups={g}")),
            None => c.arg("--clear-groups"),
        };
        c.arg(support::bin())
            .args(args)
            .current_dir(p.root())
            .env("HEDDLE_CACHE_DIR", &p.cache)
            .output()
            .unwrap()
            .into()
    }
}

pub(crate) fn has(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

pub(crate) fn chown_tree(dir: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::chown(dir, Some(uid), Some(gid)).unwrap();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.file_type().unwrap().is_dir() {
            chown_tree(&e.path(), uid, gid);
        } else {
            std::os::unix::fs::chown(e.path(), Some(uid), Some(gid)).unwrap();
        }
    }
}
