//! This run's pools: `gpu = 2` in `[resources]` is a semaphore of two permits in this process,
//! which only this run's instances wait on. A pool declared `scope = "machine"` has one too:
//! the run's own instances queue here first, so at most the run's share of them poll the
//! machine's lock files ([`super::machine`]).

use std::collections::{BTreeMap, BTreeSet};

use tokio::sync::Semaphore;

/// Every pool of a pipeline's `[resources]`, by name.
#[derive(Debug, Default)]
pub struct RunPools(BTreeMap<String, RunPool>);

#[derive(Debug)]
pub(super) struct RunPool {
    /// Its size, in units.
    pub(super) units: u32,
    pub(super) semaphore: Semaphore,
    /// Declared `scope = "machine"`: also locked across every heddle on this machine.
    pub(super) machine_wide: bool,
}

impl RunPools {
    /// The pools of `sizes` (name → units), with `machine_wide` naming those shared by every
    /// heddle on this machine.
    pub fn new(sizes: &BTreeMap<String, u32>, machine_wide: &BTreeSet<String>) -> Self {
        RunPools(
            sizes
                .iter()
                .map(|(name, units)| {
                    let pool = RunPool {
                        units: *units,
                        semaphore: Semaphore::new(*units as usize),
                        machine_wide: machine_wide.contains(name),
                    };
                    (name.clone(), pool)
                })
                .collect(),
        )
    }

    /// The pool called `name`; a stage only asks for pools its pipeline declares.
    pub(super) fn get(&self, name: &str) -> &RunPool {
        &self.0[name]
    }
}
