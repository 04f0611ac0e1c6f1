//! `heddle run --cluster NAME`: the executor an instance runs on when the run hands misses to a
//! cluster ([`crate::cluster::driver`]), built from what the scheduler knows of the instance.

use std::sync::{Arc, Mutex};

use serde_json::json;

use crate::cluster::description::EntryDesc;
use crate::cluster::InstanceJob;
use crate::exec::Executor;
use crate::key::family;
use crate::record::{InstanceRecord, JobRecord};

use super::Inst;

/// Where the record learns which job ran the instance.
pub(super) type Placed = Option<Arc<Mutex<Option<JobRecord>>>>;

/// The instance's executor: the cluster's when the run has one, else the stage's own.
pub(super) fn executor(i: Inst<'_>, record: &InstanceRecord) -> (Arc<dyn Executor>, Placed) {
    let plan = &i.sh.ctx.plan;
    let stage = i.stage;
    let (Some(driver), Some(key)) = (
        i.sh.opts.cluster_for(stage),
        record
            .cache_key
            .as_deref()
            .and_then(|k| k.parse::<heddle_cache::Digest>().ok()),
    ) else {
        return (i.sh.ctx.executor(stage), None);
    };
    let inst = i.inst;
    let entry = stage.settings.cache.then(|| EntryDesc {
        family: family(plan, stage),
        key_parts: record
            .key_parts
            .as_ref()
            .and_then(|k| serde_json::from_str(k.get()).ok())
            .unwrap_or_default(),
        meta: json!({"label": inst.label, "pipeline": plan.pipeline.name}),
    });
    let job = InstanceJob {
        key,
        label: inst.label.clone(),
        container: stage.container.is_some(),
        outputs: stage.outputs.clone(),
        resources: stage.settings.resources.clone(),
        reuse: i.sh.opts.may_use_cache(stage),
        entry,
    };
    let (exec, placed) = driver.executor(job);
    (Arc::new(exec), Some(placed))
}

/// Copy the job that ran the instance into its record.
pub(super) fn record_job(placed: &Placed, record: &mut InstanceRecord) {
    if let Some(p) = placed {
        record.job = p.lock().expect("placed").clone().map(Box::new);
    }
}
