//! The name of the machine heddle runs on, as run records and container labels spell it: run
//! records say where a result was computed, and `heddle.host` tells a crashed run's containers
//! from a live run's on a shared engine.

/// `$HOSTNAME`, else `/etc/hostname`, else `%COMPUTERNAME%` (Windows), else `unknown`.
pub fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .unwrap_or_else(|| "unknown".into())
}
