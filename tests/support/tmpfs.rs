//! A tmpfs mounted for a test's lifetime (root only): a full or read-only disk on demand.
#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Unmounted (lazily) when dropped.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mount a tmpfs with `options` (e.g. `size=256k`, `ro,size=64k`) at `at`, creating it.
    /// `None` after a skip notice when this process may not mount; a panic instead under
    /// `HEDDLE_REQUIRE_ROOT` (tests/all.sh sets it when it runs as root).
    pub fn mount(at: &Path, options: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(at).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(at)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            assert!(
                std::env::var_os("HEDDLE_REQUIRE_ROOT").is_none(),
                "HEDDLE_REQUIRE_ROOT=1 but cannot mount a tmpfs at {}",
                at.display()
            );
            eprintln!("SKIPPED: cannot mount a tmpfs (not root?)");
            return None;
        }
        Some(Tmpfs(at.to_path_buf()))
    }

    pub fn resize(&self, size: &str) {
        let s = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.0)
            .status()
            .unwrap();
        assert!(s.success());
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}
