//! `heddle run PIPELINE STAGE...`: only those stages and the stages they read from, transitively,
//! as `dvc repro STAGE` and `snakemake --until` run a target and what it needs. The pipeline is
//! cut before it is planned, so the plan, the cache keys and the record are those of the smaller
//! pipeline, and every key is the one a whole run would compute (a key depends only on a stage's
//! upstream cone, all of which is kept).

use std::collections::BTreeSet;

use heddle_runner::diag::did_you_mean;
use heddle_runner::model::{InputKind, Pipeline};

use crate::error::Error;

/// Keep the stages `only` names and their upstream cone (nothing to do when `only` is empty).
/// An unknown name is a usage error with the nearest stage name, or the list of stages.
pub fn keep_only(p: &mut Pipeline, only: &[String]) -> Result<(), Error> {
    if only.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = p.stages.iter().map(|s| s.name.as_str()).collect();
    if let Some(bad) = only.iter().find(|o| !names.contains(&o.as_str())) {
        let hint = did_you_mean(bad, &names, || format!("stages: {}", names.join(", ")));
        return Err(Error::Usage(format!(
            "no stage `{bad}` in pipeline `{}` ({hint})",
            p.name
        )));
    }
    let mut keep: BTreeSet<String> = BTreeSet::new();
    let mut todo: Vec<String> = only.to_vec();
    while let Some(name) = todo.pop() {
        if !keep.insert(name.clone()) {
            continue;
        }
        let Some(stage) = p.stages.iter().find(|s| s.name == name) else {
            continue;
        };
        for input in stage.inputs.values() {
            if let InputKind::Ref { stage, .. } = &input.kind {
                todo.push(stage.clone());
            }
        }
    }
    p.stages.retain(|s| keep.contains(&s.name));
    Ok(())
}
