//! A real single-node SLURM (munged, slurmctld, slurmd) in a temp folder, started by
//! tests/support/slurm.sh and stopped when the guard drops. Needs root and Debian's
//! `slurmctld slurmd slurm-client munge`; without them the test is skipped, or fails under
//! `HEDDLE_REQUIRE_SLURM=1` (tests/all.sh sets it once it installed them).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU16, Ordering};

use super::project::repo_root;
use super::require::found_or_skip;

pub struct Slurm {
    pub dir: tempfile::TempDir,
    pub conf: PathBuf,
}

static NEXT: AtomicU16 = AtomicU16::new(0);

impl Slurm {
    /// A fresh cluster whose node offers `gres` (e.g. "gpu:2,hailo:1"), or `None` (skipped).
    pub fn start(what: &str, gres: &str) -> Option<Slurm> {
        let root = is_root();
        let have = Command::new("sh")
            .args([
                "-c",
                "command -v slurmctld && command -v slurmd && command -v munged",
            ])
            .output()
            .is_ok_and(|o| o.status.success());
        let usable = (root && have).then_some(());
        found_or_skip(
            usable,
            "HEDDLE_REQUIRE_SLURM",
            what,
            "SLURM needs root and `apt-get install slurmctld slurmd slurm-client munge`",
        )?;
        let dir = tempfile::Builder::new()
            .prefix("heddle-slurm-")
            .tempdir()
            .unwrap();
        // Ports apart per test binary and per cluster it starts.
        let port =
            17000 + (std::process::id() % 400) as u16 * 10 + NEXT.fetch_add(2, Ordering::Relaxed);
        let out = Command::new("bash")
            .arg(repo_root().join("tests/support/slurm.sh"))
            .args([
                "start",
                &dir.path().to_string_lossy(),
                &port.to_string(),
                gres,
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "slurm.sh start failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let conf = dir.path().join("etc/slurm.conf");
        Some(Slurm { dir, conf })
    }

    /// A SLURM client command against this cluster.
    pub fn cmd(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("SLURM_CONF", &self.conf);
        c
    }

    /// `squeue` rows `id|name|state|reason|comment` of every job, ended ones too.
    pub fn jobs(&self) -> Vec<Vec<String>> {
        let out = self
            .cmd("squeue")
            .args(["--noheader", "--states=all", "--format=%i|%j|%T|%r|%k"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.trim().split('|').map(str::to_string).collect())
            .collect()
    }

    /// Stop slurmctld alone, as if it crashed; the guard still stops the rest.
    pub fn stop_controller(&self) {
        let out = Command::new("bash")
            .arg(repo_root().join("tests/support/slurm.sh"))
            .args(["stop-controller", &self.dir.path().to_string_lossy()])
            .output()
            .unwrap();
        assert!(out.status.success(), "slurm.sh stop-controller failed");
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(repo_root().join("tests/support/slurm.sh"))
            .args(["stop", &self.dir.path().to_string_lossy()])
            .output();
    }
}

fn is_root() -> bool {
    extern "C" {
        fn geteuid() -> u32;
    }
    // SAFETY: geteuid has no preconditions and no memory effects.
    unsafe { geteuid() == 0 }
}
