//! Resource units: every way a stage instance waits for a share of something scarce (a GPU, a
//! Hailo device, a slot on a remote box) before it runs. A pool is declared by name and size
//! ([`pool_spec`]) and is held by one of three mechanisms, chosen by where it is declared and
//! how far it is shared:
//!
//! - **This run's pools** (`gpu = 2` in `[resources]`): a semaphore in this process ([`run`]).
//!   Nothing outside the run sees them.
//! - **This machine's pools** (`scope = "machine"` in `[resources]`): one lock file per unit in
//!   a folder every heddle on the machine shares ([`machine`], with [`holder_file`] saying who
//!   holds each). The kernel frees a dead holder's units.
//! - **An engine's pools** (`scope = "engine"` in `hosts.toml`): one lock container per unit on
//!   that Docker engine ([`engine`], over `heddle_containers::unit_lock`), shared by every
//!   heddle on any machine that places stages there. The engine frees a dead holder's units.
//!
//! Placement adds a fourth kind of holding rather than a fourth mechanism: a stage placed on a
//! configured host takes that host's units for this run ([`placed`]), then, on the host it got,
//! that engine's shared units.
//!
//! The scheduler takes all of an instance's units, and its job slot, with one call to
//! [`acquire`], which fixes the order they are taken in.
//!
//! Nothing here knows the scheduler (runner/tests/module_graph.rs checks): it says what it is
//! waiting for through a callback the caller gives, and reads the instance and its host
//! through borrowed views.

mod acquire;
pub mod engine;
pub mod holder_file;
pub mod machine;
pub mod placed;
pub mod pool_spec;
pub mod run;

pub use acquire::{acquire, AcquireError, Candidate, Held, Request, Say};
pub use engine::EngineHost;
