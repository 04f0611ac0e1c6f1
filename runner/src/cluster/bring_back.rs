//! How the driver reads a job's end: from the shared cache, never from the engine. The
//! action's entry there is success; else the worker's outcome is the stage's failure (its logs
//! and error file put where a local run's are), a refusal of what it left, or an
//! infrastructure fault; neither is a lost job. What comes back is materialised into the
//! request's sandbox and log paths, so the scheduler collects it as it collects a local run.

use std::collections::BTreeMap;
use std::path::Path;

use std::collections::HashMap;
use std::sync::Mutex;

use heddle_cache::{ActionEntry, Digest, OutputEntry, Store};

use super::description::{self as d, Outcome};
use super::engine::JobState;
use super::error::JobFault;
use crate::exec::{ExecOutcome, ExecRequest};
use crate::shared_cache::SharedCache;

/// What bringing one job's end back reads and writes: the driver's stores and the instance.
pub(super) struct Return<'a> {
    pub store: &'a Store,
    pub shared: &'a dyn SharedCache,
    /// Actions whose entry was read from the shared cache (the run's write-back skips them).
    pub on_remote: &'a Mutex<HashMap<Digest, BTreeMap<String, OutputEntry>>>,
    pub key: Digest,
    /// Output name → file, as the stage declares them.
    pub outputs: &'a BTreeMap<String, String>,
    /// An existing entry may answer (the stage is cacheable and the run may use the cache).
    pub reuse: bool,
    /// The outcome tag of the job (`slurm:CLUSTER:ID`, ...).
    pub tag: String,
    /// Told the node the worker ran on, once its outcome says.
    pub on_node: &'a (dyn Fn(&str) + Send + Sync),
}

/// How a job's end reads once the cache was asked.
pub(super) enum Back {
    Done(ExecOutcome),
    /// The command exited 0 on the node and what it left was refused there.
    Refused(crate::record::ErrorClass, String),
    Infra(JobFault),
}

impl Return<'_> {
    /// Ask the cache how job `id` ended: the action's entry (success), else the worker's
    /// outcome (the stage's failure, or an infrastructure fault), else a lost job.
    pub(super) async fn bring_back(&self, req: &ExecRequest, id: &str, ended: &JobState) -> Back {
        let key = self.key;
        let okey = d::outcome_key(&key, &self.tag);
        let unreachable = |source| {
            Back::Infra(JobFault::SharedCache {
                remote: self.shared.describe(),
                source,
            })
        };
        let outcome_names = d::outcome_outputs(self.outputs.keys());
        let outcome = match d::fetch_allowing(self.shared, &okey, &outcome_names).await {
            Ok(Some(_)) => match self.read_outcome(okey) {
                Ok(o) => Some(o),
                Err(e) => return Back::Infra(e),
            },
            Ok(None) => None,
            Err(e) => return unreachable(e),
        };
        if let Some((o, _)) = &outcome {
            (self.on_node)(&o.node);
        }
        if self.reuse {
            let names = self.outputs.keys().cloned().collect();
            match self.shared.fetch(key, names).await {
                Ok(Some(_)) => {
                    if let Ok(Some(e)) = self.store.lookup_action(&key) {
                        self.on_remote
                            .lock()
                            .expect("on_remote")
                            .insert(key, e.outputs);
                    }
                    let restored = self.restore(req, key, outcome.as_ref().map(|(_, e)| e), false);
                    return match restored {
                        Ok(()) => Back::Done(ExecOutcome::Exited(0)),
                        Err(e) => Back::Infra(e),
                    };
                }
                Ok(None) => {}
                Err(e) => return unreachable(e),
            }
        }
        let state = match ended {
            JobState::Ended { state, .. } => state.clone(),
            _ => "out of the queue".to_string(),
        };
        let job = id.to_string();
        let Some((o, entry)) = outcome else {
            return Back::Infra(JobFault::Lost { job, state });
        };
        if let Some(why) = o.infra {
            return Back::Infra(JobFault::Worker { job, state, why });
        }
        let Some(exec) = &o.exec else {
            return Back::Infra(JobFault::NoEnd { job, state });
        };
        let exec = ExecOutcome::from(exec);
        if exec == ExecOutcome::Cancelled {
            return Back::Infra(JobFault::Stopped { job, state });
        }
        if let (ExecOutcome::Exited(0), Some(message)) = (&exec, o.collect_error) {
            // The logs and error file still come back, for the record's stderr tail.
            if let Err(e) = self.restore(req, key, Some(&entry), false) {
                return Back::Infra(e);
            }
            let class = o
                .collect_class
                .unwrap_or(crate::record::ErrorClass::HeddleError);
            return Back::Refused(class, message);
        }
        // The outcome carries the outputs the worker could store; one it could not is missing
        // from it, and the request's collection says which, as a local run would.
        let outputs = exec == ExecOutcome::Exited(0);
        match self.restore(req, key, Some(&entry), outputs) {
            Ok(()) => Back::Done(exec),
            Err(e) => Back::Infra(e),
        }
    }

    fn read_outcome(&self, okey: Digest) -> Result<(Outcome, ActionEntry), JobFault> {
        let entry = self
            .store
            .lookup_action(&okey)
            .map_err(|source| JobFault::OutcomeLookup { key: okey, source })?
            .ok_or(JobFault::OutcomeVanished)?;
        let file = entry
            .outputs
            .get(d::OUTCOME_FILE)
            .ok_or(JobFault::OutcomeNoFile)?;
        let path = self.store.blob_path(&file.digest());
        let bytes =
            std::fs::read(&path).map_err(|source| JobFault::OutcomeRead { path, source })?;
        let o: Outcome = serde_json::from_slice(&bytes).map_err(JobFault::OutcomeParse)?;
        Ok((o, entry))
    }

    /// The worker's logs, error and facts files where the request expects them, and the
    /// outputs (from the action's entry, or from the outcome's) under `out/`.
    fn restore(
        &self,
        req: &ExecRequest,
        key: Digest,
        outcome: Option<&ActionEntry>,
        outputs_from_outcome: bool,
    ) -> Result<(), JobFault> {
        let store = self.store;
        let put = |entry: &OutputEntry, dest: &Path| -> Result<(), JobFault> {
            if let Some(parent) = dest.parent() {
                std::fs::create_dir_all(parent).map_err(|source| JobFault::RestoreDir {
                    dir: parent.to_path_buf(),
                    source,
                })?;
            }
            store
                .materialize(entry, dest)
                .map_err(|source| JobFault::Restore {
                    dest: dest.to_path_buf(),
                    source,
                })
        };
        if let Some(o) = outcome {
            for (name, dest) in [
                (d::OUTCOME_STDOUT, req.stdout_log.clone()),
                (d::OUTCOME_STDERR, req.stderr_log.clone()),
                (d::OUTCOME_ERROR, crate::execution::error_file(&req.sandbox)),
                (d::OUTCOME_FACTS, crate::execution::facts_file(&req.sandbox)),
            ] {
                if let Some(e) = o.outputs.get(name) {
                    put(e, &dest)?;
                }
            }
        }
        let outs: BTreeMap<String, OutputEntry> = if outputs_from_outcome {
            outcome
                .map(|o| {
                    o.outputs
                        .iter()
                        .filter_map(|(k, v)| {
                            k.strip_prefix(d::OUTCOME_OUT_PREFIX)
                                .map(|n| (n.to_string(), v.clone()))
                        })
                        .collect()
                })
                .unwrap_or_default()
        } else {
            store
                .lookup_action(&key)
                .map_err(|source| JobFault::ActionLookup { key, source })?
                .map(|e| e.outputs)
                .unwrap_or_default()
        };
        for (name, file) in self.outputs {
            if let Some(e) = outs.get(name) {
                put(e, &req.sandbox.join("out").join(name).join(file))?;
            }
        }
        Ok(())
    }
}
