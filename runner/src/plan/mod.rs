//! The plan: stage instances expanded from matrices, wired into a petgraph DAG.
//!
//! Expansion walks stages in dependency order. A stage's instances are the cartesian product of
//! its own matrix, naturally joined with every mapped upstream (`stage.out`, or `stage[k=v].out`
//! after filtering) on shared keys; `stage[*].out` gathers and adds no keys. Cycles are rejected
//! here, before anything runs, with the cycle spelled out.
//!
//! The types live here; building is split by concern:
//! - `order`: the stage graph, its topological order, and the cycle error;
//! - `build`: the walk over stages in that order, one stage's instances at a time;
//! - `expand`: a stage's matrix assignments, joined with its mapped upstreams;
//! - `join`: the indexed join those assignments go through;
//! - `bind`: one instance's inputs, image and GPUs;
//! - `params`: one instance's params, and the scalars `with`, `image` and `gpus` templates see;
//! - `check`: every `{{ var }}` in `run` names something the stage has.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use petgraph::graph::{DiGraph, NodeIndex};
use serde_json::Value;

use crate::diag::Diagnostics;
use crate::model::{value_text, Pipeline, Stage};
use crate::template::Rendered;
use heddle_schema::VecMap;

mod bind;
mod build;
mod builder;
mod check;
mod expand;
mod join;
mod order;
mod params;

/// An instance's matrix values (a small sorted map: see [`crate::vecmap`]).
pub type Matrix = VecMap<Value>;

#[derive(Debug, Clone)]
pub enum BoundInput {
    /// A repo file or folder.
    Path {
        rel: String,
        abs: PathBuf,
    },
    One {
        from: usize,
        output: String,
    },
    Gather {
        members: Vec<usize>,
        output: String,
    },
}

#[derive(Debug, Clone)]
pub struct Instance {
    pub id: usize,
    /// Index into `Pipeline::stages`.
    pub stage: usize,
    pub label: String,
    pub matrix: Matrix,
    /// For a `uses` stage: its resolved params. For an inline stage: the pipeline params its
    /// `run` refers to (only those, so an unrelated param change does not rerun it).
    pub params: BTreeMap<String, Value>,
    pub inputs: VecMap<BoundInput>,
    pub deps: Vec<usize>,
    /// The image reference, rendered, for container stages.
    pub image: Option<String>,
    /// GPUs for container stages, with any template rendered.
    pub gpus: Option<crate::spec::GpuSpec>,
}

#[derive(Debug)]
pub struct Plan {
    pub pipeline: Arc<Pipeline>,
    pub instances: Vec<Instance>,
    /// Node `i` is instance `i`; an edge runs from producer to consumer.
    pub graph: DiGraph<usize, ()>,
    /// A topological order of instance ids.
    pub order: Vec<usize>,
}

impl Plan {
    pub fn stage_of(&self, i: usize) -> &Stage {
        &self.pipeline.stages[self.instances[i].stage]
    }
}

/// The folder name of a gathered member: `k1=v1,k2=v2`, or `_` for an unmatrixed stage.
pub fn member_dir(m: &Matrix) -> String {
    if m.is_empty() {
        return "_".into();
    }
    m.iter()
        .map(|(k, v)| format!("{k}={}", value_text(v)))
        .collect::<Vec<_>>()
        .join(",")
}

pub fn label(stage: &str, m: &Matrix) -> String {
    if m.is_empty() {
        stage.to_string()
    } else {
        format!("{stage}[{}]", member_dir(m))
    }
}

/// Expand `pipeline` into its instances and their graph, or say every reason it cannot be.
pub fn build(pipeline: Arc<Pipeline>) -> Result<Plan, Diagnostics> {
    let p = &*pipeline;
    let index = order::stage_index(p);
    let stage_order = order::stage_order(p, &index).map_err(|d| Diagnostics(vec![d]))?;
    let mut builder = builder::Builder::new(p, index);
    for si in stage_order {
        builder.stage(si);
    }
    let instances = builder.finish()?;
    let graph = instance_graph(&instances);
    // Instances were created in stage-topological order, so ids are already a topological order.
    let order = (0..instances.len()).collect();
    Ok(Plan {
        pipeline,
        instances,
        graph,
        order,
    })
}

/// Node `i` is instance `i`; an edge runs from each dependency to its consumer.
fn instance_graph(instances: &[Instance]) -> DiGraph<usize, ()> {
    let mut graph = DiGraph::with_capacity(instances.len(), instances.len());
    for i in 0..instances.len() {
        graph.add_node(i);
    }
    for inst in instances {
        for &d in &inst.deps {
            graph.add_edge(NodeIndex::new(d), NodeIndex::new(inst.id), ());
        }
    }
    graph
}

/// The value a template variable renders to for scalar namespaces; `None` for paths.
pub fn scalar(inst: &Instance, path: &[String]) -> Option<Rendered> {
    match path {
        [ns, k] if ns == "params" => inst.params.get(k).map(|v| Rendered::One(value_text(v))),
        [ns, k] if ns == "matrix" => inst.matrix.get(k).map(|v| Rendered::One(value_text(v))),
        [ns] if ns == "instance" => Some(Rendered::One(inst.label.clone())),
        _ => None,
    }
}
