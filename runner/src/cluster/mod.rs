//! Running instances on a team's batch cluster (`heddle run --cluster NAME`, `[clusters.NAME]`
//! in `hosts.toml`). heddle stays the planner and the record keeper; the cluster does
//! placement, queuing and node failure. heddle does not schedule: it submits only misses, in
//! DAG order, as the ordinary scheduler reaches them.
//!
//! The shared cache is the only data path. The driver ([`driver`]) publishes each action's
//! description there ([`description`]) and submits a job that runs `heddle worker`
//! ([`worker`]) on a node; the worker stores the result there, and the driver reads it back
//! from there. One loop per run talks to the engine ([`poll`]): one status query per tick
//! for every job. [`engine`] is what any engine must offer; [`slurm`] is SLURM's commands,
//! [`kubernetes`] the Job manifest and [`kube_api`] the requests to a Kubernetes API server.

mod bring_back;
pub mod description;
pub mod driver;
pub mod engine;
pub mod error;
pub mod kube_api;
pub mod kubernetes;
pub mod poll;
pub mod slurm;
pub mod worker;

pub use description::EXIT_INFRA;
pub use driver::{Driver, InstanceJob};
pub use worker::Worker;
