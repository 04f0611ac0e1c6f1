//! The stage graph: an edge from each referenced stage to the stage that reads it, sorted
//! topologically so instances are expanded producers first. A cycle is rejected here, before
//! anything is expanded, spelled out stage by stage and pointing at the input that closes it.

use std::collections::{BTreeMap, BTreeSet};

use petgraph::algo::{tarjan_scc, toposort};
use petgraph::graph::{DiGraph, NodeIndex};

use crate::diag::Diagnostic;
use crate::model::{InputKind, Pipeline};

/// Each stage's index in `Pipeline::stages`, by name.
pub(super) fn stage_index(p: &Pipeline) -> BTreeMap<&str, usize> {
    p.stages
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.as_str(), i))
        .collect()
}

/// Stage indices in dependency order, or the error that names a cycle.
pub(super) fn stage_order(
    p: &Pipeline,
    index: &BTreeMap<&str, usize>,
) -> Result<Vec<usize>, Diagnostic> {
    let mut sg: DiGraph<usize, ()> = DiGraph::new();
    for i in 0..p.stages.len() {
        sg.add_node(i);
    }
    for (i, s) in p.stages.iter().enumerate() {
        for input in s.inputs.values() {
            if let InputKind::Ref { stage, .. } = &input.kind {
                sg.update_edge(NodeIndex::new(index[stage.as_str()]), NodeIndex::new(i), ());
            }
        }
    }
    match toposort(&sg, None) {
        Ok(o) => Ok(o.into_iter().map(|n| n.index()).collect()),
        Err(_) => Err(cycle_error(p, &sg, index)),
    }
}

fn cycle_error(p: &Pipeline, g: &DiGraph<usize, ()>, index: &BTreeMap<&str, usize>) -> Diagnostic {
    let scc = tarjan_scc(g)
        .into_iter()
        .find(|c| c.len() > 1 || g.contains_edge(c[0], c[0]))
        .expect("toposort failed, so a cycle exists");
    let members: BTreeSet<NodeIndex> = scc.iter().copied().collect();
    // Walk the cycle: from the first member, follow edges that stay in the component.
    let start = *members.iter().next().unwrap();
    let mut path = vec![start];
    let mut cur = start;
    loop {
        let next = g
            .neighbors(cur)
            .filter(|n| members.contains(n))
            .find(|n| *n == start || !path.contains(n))
            .unwrap_or(start);
        if next == start {
            break;
        }
        path.push(next);
        cur = next;
    }
    let names: Vec<&str> = path.iter().map(|n| p.stages[g[*n]].name.as_str()).collect();
    let mut text = names.join(" → ");
    text.push_str(" → ");
    text.push_str(names[0]);
    // Point at the input of the second stage that refers to the first.
    let consumer = &p.stages[g[*path.get(1).unwrap_or(&start)]];
    let span = consumer
        .inputs
        .values()
        .find(|i| matches!(&i.kind, InputKind::Ref { stage, .. } if index[stage.as_str()] == g[start]))
        .map(|i| i.span.clone())
        .unwrap_or(consumer.name_span.clone());
    p.source
        .error(Some(span), format!("the stages form a cycle: {text}"))
}
