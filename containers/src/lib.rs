//! heddle's narrow wrapper over the Docker Engine API (through bollard).
//!
//! This crate owns talking to the engine: connecting (with API version negotiation, so older
//! engines work), turning an image reference into its content-addressed identity, running one
//! container to completion with mounts, GPUs, devices, limits and a network mode, streaming its
//! output to log files and to a channel, stopping it on timeout or cancellation, and removing
//! it on every path. Every container it runs carries the label `heddle.managed=true`, so
//! [`Engine::remove_labelled`] can clean up after a crash. The one exception is a unit's lock
//! container ([`UnitTry`]): a lock that a cleanup must never remove, and that the engine removes
//! itself once its holder is gone.
//!
//! It does not know about caches, pipelines, stages or templates: the runner decides what to
//! run and what an outcome means; this crate only runs it. It never shells out to the docker
//! CLI.
//!
//! [`test_images`] builds the small FROM-scratch busybox images heddle's tests run.

mod archive;
mod engine;
mod error;
mod mask;
mod run;
mod spec;
pub mod test_images;
mod unit_lock;

pub use archive::Copy;
pub use engine::{Engine, TlsFiles, MANAGED_LABEL};
pub use error::{ContainerError, DeviceError, DeviceProblem, SizeError, SpecError, Unreachable};
pub use mask::{Mask, MaskStream, MASKED};
pub use spec::{
    parse_device, parse_size, ContainerOutcome, ContainerSpec, DeviceMapping, GpuRequest,
    ImageIdentity, LogLine, Mount, NetworkMode, PullPolicy, Stream, DEFAULT_STOP_GRACE,
};
pub use unit_lock::{
    holds_label, unit_container_name, BusyUnit, EngineUnitHolder, HeldUnit, UnitTry,
    UNIT_POOL_LABEL,
};
