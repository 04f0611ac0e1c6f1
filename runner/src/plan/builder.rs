//! The planner's state while it walks the stages: the instances built so far and what later
//! stages need to know of each. Its own file so the steps that extend it (`build`'s walk,
//! `expand`, `bind`) each depend on it and not on one another.

use std::collections::{BTreeMap, BTreeSet};

use super::Instance;
use crate::diag::{Diagnostic, Diagnostics};
use crate::model::Pipeline;

/// The instances built so far, and what later stages need to know of each stage.
pub(super) struct Builder<'p> {
    pub(super) p: &'p Pipeline,
    pub(super) index: BTreeMap<&'p str, usize>,
    pub(super) instances: Vec<Instance>,
    /// Instance ids per stage (empty for a stage that failed to plan).
    pub(super) by_stage: Vec<Vec<usize>>,
    /// The matrix keys each stage's instances carry.
    pub(super) keys_of: Vec<BTreeSet<String>>,
    pub(super) errors: Vec<Diagnostic>,
}

impl<'p> Builder<'p> {
    pub(super) fn new(p: &'p Pipeline, index: BTreeMap<&'p str, usize>) -> Builder<'p> {
        Builder {
            p,
            index,
            instances: Vec::new(),
            by_stage: vec![Vec::new(); p.stages.len()],
            keys_of: vec![BTreeSet::new(); p.stages.len()],
            errors: Vec::new(),
        }
    }

    /// The instances, or every error found.
    pub(super) fn finish(self) -> Result<Vec<Instance>, Diagnostics> {
        if self.errors.is_empty() {
            Ok(self.instances)
        } else {
            Err(Diagnostics(self.errors))
        }
    }
}
