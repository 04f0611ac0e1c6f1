//! heddle's engine. It owns the pipeline model (parse, validate, expand matrices, render
//! templates), the planner (a petgraph DAG of stage instances with cache keys and the reason
//! each must run), the tokio scheduler, the [`exec::Executor`] trait with the host and Docker
//! executors, python environments and run records. It does not own bytes on disk (that is
//! `heddle-cache`), the Docker Engine protocol (`heddle-containers`) or the terminal (the
//! `heddle` binary renders [`event::Event`]s).
//!
//! Data flows one way: [`model::load`] → [`plan::build`] → [`prepare::prepare`] →
//! [`run`] → [`record::RunRecord`].

pub mod cluster;
pub mod cmd_exe;
pub mod diag;
pub mod event;
pub mod exec;
pub mod execution;
pub mod explain;
pub mod host_vars;
pub mod hostname;
pub mod hosts;
pub mod inputs;
pub mod key;
pub mod launch;
pub mod liveness;
pub mod lock;
pub mod model;
pub mod names;
pub mod out_lock;
pub mod outputs;
pub mod plan;
pub mod prepare;
pub mod preview;
pub mod pyenv;
pub mod record;
pub mod render;
pub mod run_options;
pub mod sandbox;
/// Private: the binary starts a run with [`run`] and reads its [`event::Event`]s; everything
/// else it needs lives in its own module (runner/tests/module_graph.rs checks).
mod sched;
pub mod secrets;
pub mod shared_cache;
pub mod shell_context;
pub mod spec;
/// The JSON Schemas of the pipeline and definition files (lives under `spec`, whose types it reads).
pub use spec::schema as spec_schema;
pub mod stage_lib;
pub mod template;
pub mod units;

pub use sched::run;
