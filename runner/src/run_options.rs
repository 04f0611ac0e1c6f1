//! What the user asked of a run (`--jobs`, `--keep-going`, `--force`, `--no-cache`), read by the
//! scheduler and by the preview that predicts it, so both decide "may this use the cache" and
//! "why does this run anyway" the same way.

use std::collections::BTreeSet;

use crate::key::Reason;
use crate::model::Stage;

#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub jobs: usize,
    pub keep_going: bool,
    /// Stage names whose instances run even when cached.
    pub force: BTreeSet<String>,
    pub no_cache: bool,
    pub run_id: String,
    /// The shared cache: asked on a local miss, given every action stored (readwrite mode).
    pub remote: Option<std::sync::Arc<crate::shared_cache::RemoteGate>>,
    /// `--cluster NAME`: misses run as jobs on that cluster (but a stage's `cluster = false`).
    pub cluster: Option<std::sync::Arc<crate::cluster::Driver>>,
}

impl RunOptions {
    /// The cluster `stage`'s misses run on: the run's, unless the stage says `cluster = false`.
    pub fn cluster_for(&self, stage: &Stage) -> Option<&std::sync::Arc<crate::cluster::Driver>> {
        self.cluster.as_ref().filter(|_| stage.settings.cluster)
    }

    /// Whether `stage`'s instances may be served from the cache.
    pub fn may_use_cache(&self, stage: &Stage) -> bool {
        self.runs_regardless(stage).is_none()
    }

    /// Why `stage` runs whatever the cache holds, if it does: `--force`, `--no-cache`, or
    /// `cache = false`, in that order.
    pub fn runs_regardless(&self, stage: &Stage) -> Option<Reason> {
        if self.force.contains(&stage.name) {
            Some(Reason::Forced)
        } else if self.no_cache {
            Some(Reason::NoCache)
        } else if !stage.settings.cache {
            Some(Reason::NotCacheable)
        } else {
            None
        }
    }
}
