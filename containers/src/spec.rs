//! Plain data describing what to run and what came of it. No engine calls here.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{DeviceError, DeviceProblem, SizeError};

/// When `resolve_image` may pull from a registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PullPolicy {
    /// Use only what the engine already has (heddle's default: runs must not depend on a registry).
    #[default]
    Never,
    /// Pull only when the reference is absent locally.
    Missing,
    /// Pull every time, then inspect.
    Always,
}

/// A pull policy that is none of `never`, `missing`, `always`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown pull policy {0:?}: expected \"never\", \"missing\" or \"always\"")]
pub struct UnknownPullPolicy(pub String);

impl FromStr for PullPolicy {
    type Err = UnknownPullPolicy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "never" => Ok(PullPolicy::Never),
            "missing" => Ok(PullPolicy::Missing),
            "always" => Ok(PullPolicy::Always),
            other => Err(UnknownPullPolicy(other.to_string())),
        }
    }
}

impl fmt::Display for PullPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PullPolicy::Never => "never",
            PullPolicy::Missing => "missing",
            PullPolicy::Always => "always",
        })
    }
}

/// What a reference pointed at when it was resolved. `id` is the content-addressed image id
/// (`sha256:...`); it is what cache keys and `ContainerSpec::image` should use, so that a tag
/// moving mid-run cannot change what runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageIdentity {
    pub reference: String,
    pub id: String,
    /// `name@sha256:...` digests known for the image (empty for images built or loaded locally).
    pub repo_digests: Vec<String>,
}

/// A bind mount of a host path into the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mount {
    /// Must exist on the engine's host (the engine refuses a missing source rather than creating it).
    pub host: PathBuf,
    pub container: String,
    pub read_only: bool,
}

/// GPUs to hand to the container, with `docker run --gpus` semantics.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuRequest {
    #[default]
    None,
    /// `--gpus all`
    All,
    /// `--gpus N`
    Count(u32),
    /// `--gpus '"device=0,1"'`
    Ids(Vec<String>),
}

/// The container's network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    /// Loopback only: a stage should not reach the network unless it says so.
    #[default]
    None,
    Bridge,
    Host,
}

impl NetworkMode {
    pub(crate) fn as_engine_str(self) -> &'static str {
        match self {
            NetworkMode::None => "none",
            NetworkMode::Bridge => "bridge",
            NetworkMode::Host => "host",
        }
    }
}

/// Everything needed to run one container to completion.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerSpec {
    /// Image to run; pass `ImageIdentity::id` rather than a tag.
    pub image: String,
    /// Exec form; the runner passes `["/bin/sh", "-c", script]` for shell form. Empty means the
    /// image's default command.
    pub cmd: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub mounts: Vec<Mount>,
    /// Folders sent into the container before it starts (no shared filesystem needed).
    pub copy_in: Vec<crate::Copy>,
    /// Folders fetched out of the container after it exits, unless it was cancelled.
    pub copy_out: Vec<crate::Copy>,
    pub workdir: Option<String>,
    /// `"uid:gid"` or a user name known to the image.
    pub user: Option<String>,
    pub gpus: GpuRequest,
    /// `"/dev/hailo0"`, `"/dev/x:/dev/y"` or `"/dev/x:/dev/y:rwm"` (see [`parse_device`]).
    pub devices: Vec<String>,
    pub network: NetworkMode,
    /// Bytes of `/dev/shm`.
    pub shm_size: Option<u64>,
    /// Memory limit in bytes; swap is disabled so the limit is a hard one.
    pub memory: Option<u64>,
    /// CPU limit in cores (fractions allowed).
    pub cpus: Option<f64>,
    /// Extra labels; `heddle.managed=true` is always added.
    pub labels: BTreeMap<String, String>,
    pub timeout: Option<Duration>,
    /// Time between SIGTERM and SIGKILL when a run is timed out or cancelled.
    pub stop_grace: Duration,
    pub stdout_log: PathBuf,
    pub stderr_log: PathBuf,
    /// Secret values written as `***` in the log files and lines ([`crate::Mask`]).
    pub mask: crate::Mask,
    pub name: Option<String>,
}

impl Default for ContainerSpec {
    fn default() -> Self {
        ContainerSpec {
            image: String::new(),
            cmd: Vec::new(),
            env: BTreeMap::new(),
            mounts: Vec::new(),
            copy_in: Vec::new(),
            copy_out: Vec::new(),
            workdir: None,
            user: None,
            gpus: GpuRequest::None,
            devices: Vec::new(),
            network: NetworkMode::None,
            shm_size: None,
            memory: None,
            cpus: None,
            labels: BTreeMap::new(),
            timeout: None,
            stop_grace: DEFAULT_STOP_GRACE,
            stdout_log: PathBuf::new(),
            stderr_log: PathBuf::new(),
            mask: crate::Mask::default(),
            name: None,
        }
    }
}

/// `docker stop`'s default grace period.
pub const DEFAULT_STOP_GRACE: Duration = Duration::from_secs(10);

/// Which output stream a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    Stdout,
    Stderr,
}

/// One line of container output, for the progress display.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    pub stream: Stream,
    pub line: String,
}

/// How a run ended when the engine did its part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContainerOutcome {
    Exited {
        code: i64,
    },
    /// The kernel's OOM killer fired inside the container's memory limit.
    OomKilled {
        code: i64,
    },
    /// `timeout` elapsed; the container was stopped and removed.
    TimedOut,
    /// The cancellation token fired; the container was stopped and removed.
    Cancelled,
}

impl ContainerOutcome {
    pub fn success(&self) -> bool {
        matches!(self, ContainerOutcome::Exited { code: 0 })
    }
}

/// Parse `"2g"`, `"512m"`, `"64k"`, `"1024"` (bytes) into bytes, with `docker run --memory`
/// semantics: units are binary (k = 1024) and case-insensitive, an optional trailing `b` is
/// allowed (`"512mb"`), fractions are allowed (`"1.5g"`).
pub fn parse_size(input: &str) -> Result<u64, SizeError> {
    let err = || SizeError {
        input: input.to_string(),
    };
    let s = input.trim().to_ascii_lowercase();
    let s = s.strip_suffix('b').unwrap_or(&s);
    let (number, multiplier): (&str, u64) = match s.char_indices().last() {
        Some((i, 'k')) => (&s[..i], 1 << 10),
        Some((i, 'm')) => (&s[..i], 1 << 20),
        Some((i, 'g')) => (&s[..i], 1 << 30),
        Some((i, 't')) => (&s[..i], 1 << 40),
        Some(_) => (s, 1),
        None => return Err(err()),
    };
    let number = number.trim();
    if number.is_empty() || number.starts_with(['-', '+']) {
        return Err(err());
    }
    if let Ok(n) = number.parse::<u64>() {
        return n.checked_mul(multiplier).ok_or_else(err);
    }
    let f: f64 = number.parse().map_err(|_| err())?;
    let bytes = f * multiplier as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(err());
    }
    Ok(bytes as u64)
}

/// A parsed `--device` string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceMapping {
    pub host: String,
    pub container: String,
    pub permissions: String,
}

/// Parse `"/dev/x"`, `"/dev/x:/dev/y"`, `"/dev/x:rw"` or `"/dev/x:/dev/y:rwm"` the way
/// `docker run --device` does; permissions default to `rwm`.
pub fn parse_device(input: &str) -> Result<DeviceMapping, DeviceError> {
    fn valid_permissions(p: &str) -> bool {
        !p.is_empty() && p.len() <= 3 && p.chars().all(|c| matches!(c, 'r' | 'w' | 'm'))
    }
    let err = |problem| DeviceError {
        input: input.to_string(),
        problem,
    };
    let parts: Vec<&str> = input.split(':').collect();
    let (host, container, permissions) = match parts.as_slice() {
        [host] => (*host, *host, "rwm"),
        [host, perms] if valid_permissions(perms) => (*host, *host, *perms),
        [host, container] => (*host, *container, "rwm"),
        [host, container, perms] => (*host, *container, *perms),
        _ => return Err(err(DeviceProblem::Shape)),
    };
    if host.is_empty() || container.is_empty() {
        return Err(err(DeviceProblem::EmptyPath));
    }
    if !valid_permissions(permissions) {
        return Err(err(DeviceProblem::Permissions));
    }
    if !container.starts_with('/') {
        return Err(err(DeviceProblem::RelativeContainerPath));
    }
    Ok(DeviceMapping {
        host: host.to_string(),
        container: container.to_string(),
        permissions: permissions.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1024"), Ok(1024));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert_eq!(parse_size("512m"), Ok(512 << 20));
        assert_eq!(parse_size("512MB"), Ok(512 << 20));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("1.5g"), Ok(3 << 29));
        assert_eq!(parse_size(" 7b "), Ok(7));
        for bad in ["", "g", "-1m", "12x", "1.2.3m", "99999999999t"] {
            assert!(parse_size(bad).is_err(), "{bad:?} should not parse");
        }
        assert!(parse_size("12x")
            .unwrap_err()
            .to_string()
            .contains("\"12x\""));
    }

    #[test]
    fn devices() {
        let d = parse_device("/dev/hailo0").unwrap();
        assert_eq!(
            (
                d.host.as_str(),
                d.container.as_str(),
                d.permissions.as_str()
            ),
            ("/dev/hailo0", "/dev/hailo0", "rwm")
        );
        let d = parse_device("/dev/x:/dev/y").unwrap();
        assert_eq!(
            (d.container.as_str(), d.permissions.as_str()),
            ("/dev/y", "rwm")
        );
        let d = parse_device("/dev/x:r").unwrap();
        assert_eq!(
            (d.container.as_str(), d.permissions.as_str()),
            ("/dev/x", "r")
        );
        let d = parse_device("/dev/x:/dev/y:rw").unwrap();
        assert_eq!(
            (d.container.as_str(), d.permissions.as_str()),
            ("/dev/y", "rw")
        );
        assert!(parse_device("/dev/x:/dev/y:rwx").is_err());
        assert_eq!(
            parse_device("/dev/x:y").unwrap_err().to_string(),
            "invalid device \"/dev/x:y\": the container path must be absolute"
        );
        assert!(parse_device("a:b:c:d").is_err());
    }

    #[test]
    fn pull_policy_round_trip() {
        for p in [PullPolicy::Never, PullPolicy::Missing, PullPolicy::Always] {
            assert_eq!(p.to_string().parse::<PullPolicy>(), Ok(p));
            assert_eq!(serde_json::to_string(&p).unwrap(), format!("\"{p}\""));
        }
        assert!("sometimes".parse::<PullPolicy>().is_err());
    }
}
