//! Shared by the remote cache tests: real servers on 127.0.0.1 (moto for S3, nginx for
//! WebDAV) started and killed by the test, local stores with an action of file and tree
//! outputs, and the cases every backend must pass. This file holds what the parts share (the
//! repository root, free ports, server processes); [`test_servers`] starts each server,
//! [`fixtures`] makes stores and actions, [`cases`] holds the cases.
#![allow(dead_code)]

mod cases;
mod fixtures;
mod test_servers;
// Every test binary that includes this module uses some of each part, not all of them.
#[allow(unused_imports)]
pub use cases::*;
#[allow(unused_imports)]
pub use fixtures::*;
#[allow(unused_imports)]
pub use test_servers::*;

use std::collections::{BTreeMap, HashMap};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use heddle_cache::{ActionEntry, Digest, OutputEntry, Store};
use heddle_remote::{
    fetch_action, push_action, FetchReport, OpendalCache, ReadRules, ReapiCache, ReapiOptions,
    RemoteBackend, RemoteError, RemoteUrl, S3Settings, SigningKey, Timeouts, TrustedWriters,
};

/// The workspace root, whether this file is compiled into heddle-remote's tests or (through
/// `#[path]`) into the binary's end-to-end tests.
/// Run `cmd` to the end and fail the test, with its stderr, unless it succeeds.
pub fn run_ok(cmd: &mut Command, what: &str) -> std::process::Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub fn repo_root() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    if dir.join("remote").is_dir() {
        dir.to_path_buf()
    } else {
        dir.parent().unwrap().to_path_buf()
    }
}

/// `None` (after saying why) when the server is not installed and the run does not require
/// it; a panic when `HEDDLE_REQUIRE_REMOTE_SERVERS` is set (tests/all.sh installs them).
pub fn require(what: &str, found: Option<PathBuf>) -> Option<PathBuf> {
    if found.is_some() {
        return found;
    }
    if std::env::var_os("HEDDLE_REQUIRE_REMOTE_SERVERS").is_some() {
        panic!("{what} is not installed but HEDDLE_REQUIRE_REMOTE_SERVERS is set; run bash remote/tests/servers.sh");
    }
    eprintln!("skipped: {what} is not installed (run bash remote/tests/servers.sh)");
    None
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Up to 3 minutes: BuildGrid (Python) takes 45 s to start on a 2-core machine busy with
/// builds. A bound on a hang, not a timing assertion.
fn wait_listening(port: u16, child: &mut Child, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(180);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("{what} exited before listening: {status}");
        }
        assert!(
            Instant::now() < deadline,
            "{what} did not listen on {port} within 180 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A server process, killed when dropped.
pub struct Server {
    pub child: Child,
    pub port: u16,
    pub dir: tempfile::TempDir,
}

impl Server {
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Freeze the server (SIGSTOP): it keeps its socket but answers nothing.
    pub fn stop(&self) {
        signal(self.child.id(), "STOP");
    }

    pub fn resume(&self) {
        signal(self.child.id(), "CONT");
    }
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig} {pid}");
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // A stopped process still dies of SIGKILL; no need to resume it first.
            self.kill();
        }
    }
}

// ------------------------------------------------------------------ moto (S3)
