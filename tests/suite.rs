//! The integration tests of the `heddle` binary, as one test binary (`cargo test --test suite`).
//!
//! Each module was a test binary of its own; every one of them linked the same dependencies
//! (tokio, the runner, the remote clients), so one binary links once where ~20 linked after
//! every change to the binary's sources. A test's name is its file's path:
//! `cargo test --test suite cli::caching::` runs `tests/cli/caching.rs`, `errors::` runs
//! `tests/errors.rs`. The harness all of them share is [`support`].
//!
//! Kept apart:
//! - `tests/docker/` is the `docker` test binary (`cargo test --test docker`), which cargo runs
//!   after this one, never beside it: one of its tests runs `heddle gc --containers`, which
//!   removes every heddle container on the engine, and only the docker tests take the lock that
//!   keeps it apart from the others (`engine!(exclusive)`). Container stages run in this binary's
//!   tests too (the DFC routes, the SLURM containers), and in one process they would race it.
//! - [`cluster_slurm`] is in this binary, but `tests/all.sh` runs it in a `cargo test` of its own
//!   (`cluster_slurm::`) and skips it in the others: its SLURM daemons and jobs want both cores,
//!   as they had when it was a binary that cargo ran alone.

mod support;

mod byom;
mod chain;
mod cli;
mod cluster_k8s;
mod cluster_slurm;
mod containment;
mod corpus;
mod dfc_routes;
mod diff;
mod errors;
mod exec;
mod host_pool;
mod integrity;
mod logbook;
mod remote_cache;
mod remote_hostile;
mod remote_team;
mod remote_trust;
mod runs;
mod schema;
mod shell;
