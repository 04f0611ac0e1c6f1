//! Remote engines: `[hosts.NAME]` in `hosts.toml` names a Docker Engine (`docker =
//! "tcp://…" | "ssh://user@host" | "unix:///…"`, optional client TLS) and the resource pools it
//! offers (`pools = { gpu = 2, hailo = { units = 1, scope = "engine" } }`).
//!
//! [`file`] reads and checks the files; [`place`] decides, per container stage, which hosts
//! may run it. The scheduler then takes a placed instance's units from one of those hosts
//! (each host's pools are its own capacity) and the Docker executor runs it on that host's
//! engine. Host (non-container) stages always run here, where heddle runs.
//!
//! A pool is this run's capacity on the host unless it says `scope = "engine"`: then its units
//! are shared by every heddle that uses the engine, through lock containers on it
//! ([`crate::units::engine`]).

mod clusters;
mod file;
mod place;

use std::collections::{BTreeMap, BTreeSet};

use heddle_containers::TlsFiles;

use crate::model::Transfer;

pub use clusters::{Cluster, ClusterKind, KubeCluster};
pub use file::{config_files, load};
pub use place::{place, Placement, PlacementError};

/// One `[hosts.NAME]` entry, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Host {
    pub name: String,
    /// The engine's address, as bollard takes it.
    pub docker: String,
    pub tls: Option<TlsFiles>,
    /// Pool name → units this host offers.
    pub pools: BTreeMap<String, u32>,
    /// The pools declared `scope = "engine"`: one set of units for every heddle that places
    /// stages on this engine, not one per run.
    pub engine_wide: BTreeSet<String>,
    /// How sandboxes reach this engine when the stage leaves `transfer` at `auto`.
    pub transfer: Transfer,
    /// `file:line:col` of the `[hosts.NAME]` key, for messages about this host.
    pub defined_at: String,
}

/// Every host the user and the project configured, by name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hosts {
    pub hosts: BTreeMap<String, Host>,
    /// `[clusters.NAME]`: batch schedulers `heddle run --cluster NAME` submits to.
    pub clusters: BTreeMap<String, Cluster>,
}

impl Hosts {
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    /// The host whose engine is at `docker`, if one is configured (for its TLS files).
    pub fn by_address(&self, docker: &str) -> Option<&Host> {
        self.hosts.values().find(|h| h.docker == docker)
    }
}

impl<'a> From<&'a Host> for crate::units::EngineHost<'a> {
    fn from(h: &'a Host) -> Self {
        crate::units::EngineHost {
            name: &h.name,
            docker: &h.docker,
            tls: h.tls.as_ref(),
            pools: &h.pools,
            engine_wide: &h.engine_wide,
        }
    }
}
