//! Resource pools that span every heddle process on this machine: `[resources] hailo = { units
//! = 1, scope = "machine" }`.
//!
//! A per-run pool is a semaphore inside one process, so two runs on the device's machine would
//! both take `/dev/hailo0`. A machine pool is one lock file per unit in a machine-wide folder
//! (`$HEDDLE_HOST_LOCK_DIR`, else `<temp dir>/heddle-host-locks/<pool>/<unit>.lock`), locked
//! with `flock`/`LockFileEx`: the kernel releases a unit when its holder dies, even by
//! `kill -9`, so a crashed run never keeps the device. The holder writes who it is (pid, run,
//! instance, since) into the file for `heddle status`.
//!
//! Waiting is a poll (every [`POLL`]) over non-blocking tries, not a blocking `flock`: a unit
//! may be any of several files, a waiter must stay cancellable by Ctrl-C, and the cost (one
//! syscall per unit per poll, only while waiting for a device) is nothing next to a device
//! stage.

use std::fs::{File, TryLockError};
use std::io::Read;
use std::path::{Path, PathBuf};

use super::holder_file;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How often a waiter tries the units again.
pub const POLL: Duration = Duration::from_millis(50);

/// The folder holding every machine pool's unit locks.
pub fn lock_dir() -> PathBuf {
    std::env::var_os("HEDDLE_HOST_LOCK_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("heddle-host-locks"))
}

/// Held units of one machine pool; released on drop (or when the process dies).
#[derive(Debug)]
pub struct MachineUnits {
    _files: Vec<File>,
}

/// Who holds a unit, as its holder wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineUnitHolder {
    pub pool: String,
    pub unit: u32,
    pub pid: Option<u32>,
    pub run_id: String,
    pub instance: String,
    pub since_unix: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
#[error("failed to open host lock {path} (set HEDDLE_HOST_LOCK_DIR to a folder every heddle on this host can write)")]
pub struct MachineUnitError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

fn unit_path(dir: &Path, pool: &str, unit: u32) -> PathBuf {
    dir.join(pool).join(format!("{unit}.lock"))
}

fn open_unit(dir: &Path, pool: &str, unit: u32) -> Result<File, MachineUnitError> {
    let path = unit_path(dir, pool, unit);
    holder_file::open(&path).map_err(|source| MachineUnitError { path, source })
}

/// Try once to take `want` of the pool's `units` units; `Ok(None)` when fewer are free (none
/// is kept then, so two waiters for two units each cannot each hold one forever).
pub fn try_take(
    dir: &Path,
    pool: &str,
    units: u32,
    want: u32,
    who: (&str, &str),
) -> Result<Option<MachineUnits>, MachineUnitError> {
    let mut held = Vec::new();
    for unit in 0..units {
        if held.len() as u32 == want {
            break;
        }
        let mut f = open_unit(dir, pool, unit)?;
        match f.try_lock() {
            Ok(()) => {
                note_holder(&mut f, who);
                held.push(f);
            }
            Err(TryLockError::WouldBlock) => {}
            Err(TryLockError::Error(source)) => {
                return Err(MachineUnitError {
                    path: unit_path(dir, pool, unit),
                    source,
                })
            }
        }
    }
    Ok((held.len() as u32 == want).then_some(MachineUnits { _files: held }))
}

/// Take `want` of the pool's `units` units, trying again every [`POLL`] while other heddle
/// processes hold them, and saying once through `say` who holds them. Cancel by dropping the
/// future (a try keeps nothing it could not complete).
pub async fn take(
    pool: &str,
    units: u32,
    want: u32,
    who: (&str, &str),
    say: &(dyn Fn(String) + Sync),
) -> Result<MachineUnits, MachineUnitError> {
    let dir = lock_dir();
    let mut told = false;
    loop {
        if let Some(u) = try_take(&dir, pool, units, want, who)? {
            return Ok(u);
        }
        if !told {
            told = true;
            let held: Vec<String> = holders(&dir)
                .into_iter()
                .filter(|h| h.pool == pool)
                .map(|h| {
                    format!(
                        "pid {} run {} ({})",
                        h.pid.map_or("?".into(), |p| p.to_string()),
                        h.run_id,
                        h.instance
                    )
                })
                .collect();
            say(format!(
                "waiting for host-wide `{pool}`, held by {}",
                held.join(", ")
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

fn note_holder(f: &mut File, (run_id, instance): (&str, &str)) {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let pid = std::process::id();
    holder_file::say_holder(f, &format!("{pid}\n{run_id}\n{instance}\n{since}\n"));
}

/// Every unit currently held on this machine, in every pool (for `heddle status`).
pub fn holders(dir: &Path) -> Vec<MachineUnitHolder> {
    let mut out = Vec::new();
    let Ok(pools) = std::fs::read_dir(dir) else {
        return out;
    };
    let mut pools: Vec<_> = pools.flatten().collect();
    pools.sort_by_key(|e| e.file_name());
    for p in pools {
        let pool = p.file_name().to_string_lossy().into_owned();
        let Ok(units) = std::fs::read_dir(p.path()) else {
            continue;
        };
        let mut units: Vec<u32> = units
            .flatten()
            .filter_map(|u| {
                u.file_name()
                    .to_string_lossy()
                    .strip_suffix(".lock")?
                    .parse()
                    .ok()
            })
            .collect();
        units.sort();
        for unit in units {
            let Ok(mut f) = File::open(unit_path(dir, &pool, unit)) else {
                continue;
            };
            // Free if we can take it for a moment (a shared lock would do, but it must not
            // stay taken: dropped at the end of this block).
            if f.try_lock_shared().is_ok() {
                continue;
            }
            let mut text = String::new();
            let _ = f.read_to_string(&mut text);
            let mut lines = text.lines();
            out.push(MachineUnitHolder {
                pool: pool.clone(),
                unit,
                pid: lines.next().and_then(|l| l.parse().ok()),
                run_id: lines.next().unwrap_or("?").to_string(),
                instance: lines.next().unwrap_or("?").to_string(),
                since_unix: lines.next().and_then(|l| l.parse().ok()),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_exclusive_and_holders_are_listed() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let a = try_take(d, "hailo", 2, 1, ("run-a", "probe"))
            .unwrap()
            .unwrap();
        let b = try_take(d, "hailo", 2, 1, ("run-b", "deploy"))
            .unwrap()
            .unwrap();
        assert!(try_take(d, "hailo", 2, 1, ("run-c", "x"))
            .unwrap()
            .is_none());
        let held = holders(d);
        assert_eq!(held.len(), 2);
        assert_eq!(held[0].run_id, "run-a");
        assert_eq!(held[1].instance, "deploy");
        assert_eq!(held[0].pid, Some(std::process::id()));
        drop(a);
        // All-or-nothing: wanting two with one free takes none.
        assert!(try_take(d, "hailo", 2, 2, ("run-c", "x"))
            .unwrap()
            .is_none());
        assert!(try_take(d, "hailo", 2, 1, ("run-c", "x"))
            .unwrap()
            .is_some());
        drop(b);
        assert!(holders(d).is_empty());
    }
}
