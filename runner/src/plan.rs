//! The plan: stage instances expanded from matrices, wired into a petgraph DAG.
//!
//! Expansion walks stages in dependency order. A stage's instances are the cartesian product of
//! its own matrix, naturally joined with every mapped upstream (`stage.out`, or `stage[k=v].out`
//! after filtering) on shared keys; `stage[*].out` gathers and adds no keys. Cycles are rejected
//! here, before anything runs, with the cycle spelled out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use petgraph::algo::{tarjan_scc, toposort};
use petgraph::graph::{DiGraph, NodeIndex};
use serde_json::Value;

use crate::diag::{did_you_mean, Diagnostic, Diagnostics};
use crate::join::{join, ProjectionIndex};
use crate::model::{
    check_param, value_text, InputKind, Pipeline, RunTemplate, Selector, Stage, WithValue,
};
use crate::spec::GpuSpec;
use crate::template::{Rendered, Template};
use crate::vecmap::VecMap;

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

pub fn build(pipeline: Arc<Pipeline>) -> Result<Plan, Diagnostics> {
    let p = &*pipeline;
    let index: BTreeMap<&str, usize> = p
        .stages
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.as_str(), i))
        .collect();

    // Stage-level graph for cycle detection and order.
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
    let stage_order = match toposort(&sg, None) {
        Ok(o) => o,
        Err(_) => return Err(Diagnostics(vec![cycle_error(p, &sg, &index)])),
    };

    let mut errors = Vec::new();
    let mut instances: Vec<Instance> = Vec::new();
    let mut by_stage: Vec<Vec<usize>> = vec![Vec::new(); p.stages.len()];
    let mut keys_of: Vec<BTreeSet<String>> = vec![BTreeSet::new(); p.stages.len()];

    for node in stage_order {
        let si = node.index();
        let s = &p.stages[si];
        // A stage downstream of one that failed to plan would only add echoes of that error.
        // (Every stage that planned has instances, so an empty upstream is one that failed.)
        let upstream_failed = s.inputs.values().any(|i| matches!(&i.kind, InputKind::Ref { stage, .. } if by_stage[index[stage.as_str()]].is_empty()));
        if upstream_failed {
            continue;
        }
        let mut assigns: Vec<Matrix> = vec![Matrix::new()];
        for (k, vals) in &s.matrix {
            assigns = assigns
                .into_iter()
                .flat_map(|a| {
                    vals.iter().map(move |v| {
                        let mut a = a.clone();
                        a.insert(k.clone(), v.clone());
                        a
                    })
                })
                .collect();
        }
        let mut keys: BTreeSet<String> = s.matrix.iter().map(|(k, _)| k.clone()).collect();
        // Candidate upstream instances per mapped input, with the keys they contribute.
        let mut mapped: BTreeMap<&str, (Vec<usize>, BTreeSet<String>)> = BTreeMap::new();
        let mut ok = true;
        for (iname, input) in &s.inputs {
            let InputKind::Ref {
                stage,
                selector,
                output,
            } = &input.kind
            else {
                continue;
            };
            let ui = index[stage.as_str()];
            let up = &p.stages[ui];
            if !up.outputs.contains_key(output) {
                let known: Vec<_> = up.outputs.keys().cloned().collect();
                errors.push(
                    p.source
                        .error(
                            Some(input.span.clone()),
                            format!("stage `{stage}` has no output `{output}`"),
                        )
                        .with_help(did_you_mean(output, &known, || {
                            format!("its outputs: {}", known.join(", "))
                        })),
                );
                ok = false;
                continue;
            }
            match selector {
                Selector::All => {}
                Selector::Map => {
                    keys.extend(keys_of[ui].iter().cloned());
                    mapped.insert(iname, (by_stage[ui].clone(), keys_of[ui].clone()));
                }
                Selector::Select(sel) => {
                    for k in sel.keys() {
                        if !keys_of[ui].contains(k) {
                            errors.push(p.source.error(
                                Some(input.span.clone()),
                                format!(
                                    "stage `{stage}` has no matrix key `{k}` ({})",
                                    hint_keys(k, &keys_of[ui], "keys")
                                ),
                            ));
                            ok = false;
                        }
                    }
                    let picked: Vec<usize> = by_stage[ui]
                        .iter()
                        .copied()
                        .filter(|&u| {
                            sel.iter().all(|(k, v)| {
                                instances[u].matrix.get(k).map(value_text).as_deref()
                                    == Some(v.as_str())
                            })
                        })
                        .collect();
                    if ok && picked.is_empty() {
                        errors.push(p.source.error(
                            Some(input.span.clone()),
                            format!("no instance of `{stage}` matches the selector"),
                        ));
                        ok = false;
                    }
                    let rest: BTreeSet<String> = keys_of[ui]
                        .iter()
                        .filter(|k| !sel.contains_key(*k))
                        .cloned()
                        .collect();
                    keys.extend(rest.iter().cloned());
                    mapped.insert(iname, (picked, rest));
                }
            }
        }
        if !ok {
            continue;
        }
        for (cands, ukeys) in mapped.values() {
            assigns = join(&assigns, cands, ukeys, |u| &instances[u].matrix);
        }
        if assigns.is_empty() {
            errors.push(p.source.error(
                Some(s.name_span.clone()),
                format!("stage `{}` has no instances: its matrix and its mapped inputs share keys with no common values", s.name),
            ));
            continue;
        }
        keys_of[si] = keys.clone();
        if let Err(mut e) = check_templates(p, s, &keys) {
            errors.append(&mut e);
            continue;
        }

        // Each instance's partner per mapped input, found through an index on the keys the
        // input contributes (every joined assignment has them all).
        let partners: BTreeMap<&str, ProjectionIndex> = mapped
            .iter()
            .map(|(iname, (cands, ukeys))| {
                let ix = ProjectionIndex::new(
                    ukeys.iter().cloned().collect(),
                    cands.iter().copied(),
                    |u| &instances[u].matrix,
                );
                (*iname, ix)
            })
            .collect();
        for m in assigns {
            let id = instances.len();
            let mut inputs = VecMap::new();
            let mut deps = BTreeSet::new();
            for (iname, input) in &s.inputs {
                let b = match &input.kind {
                    InputKind::Path(rel) => BoundInput::Path {
                        rel: rel.clone(),
                        abs: p.root.join(rel),
                    },
                    InputKind::Ref {
                        stage,
                        selector: Selector::All,
                        output,
                    } => {
                        let members = by_stage[index[stage.as_str()]].clone();
                        deps.extend(members.iter().copied());
                        BoundInput::Gather {
                            members,
                            output: output.clone(),
                        }
                    }
                    InputKind::Ref { output, .. } => {
                        let from = partners[iname.as_str()]
                            .matches(&m, |u| &instances[u].matrix)
                            .next()
                            .expect("joined assignment has a partner");
                        deps.insert(from);
                        BoundInput::One {
                            from,
                            output: output.clone(),
                        }
                    }
                };
                inputs.insert(iname.clone(), b);
            }
            let params = match resolve_params(p, s, &m) {
                Ok(params) => params,
                Err(d) => {
                    errors.push(d);
                    continue;
                }
            };
            // Templates see the params of the layer that wrote them.
            let scope = |in_def: bool| if in_def { &params } else { &p.params };
            let image = match &s.container {
                Some(c) => match c
                    .image
                    .render_plain(|path| lookup_scalar(path, scope(c.image_in_def), &m))
                {
                    Ok(img) if !img.trim().is_empty() => Some(img),
                    Ok(_) => {
                        errors.push(p.source.error(
                            Some(s.name_span.clone()),
                            format!("stage `{}`: image renders empty", s.name),
                        ));
                        continue;
                    }
                    Err(e) => {
                        errors.push(p.source.error(
                            Some(s.name_span.clone()),
                            format!("stage `{}`: image: {}", s.name, e.message),
                        ));
                        continue;
                    }
                },
                None => None,
            };
            let gpus_scope = scope(s.container.as_ref().is_some_and(|c| c.gpus_in_def));
            let gpus = match s.container.as_ref().and_then(|c| c.gpus.clone()) {
                Some(GpuSpec::Template(t)) => {
                    let rendered = Template::parse(&t)
                        .map_err(|e| e.message)
                        .and_then(|tp| {
                            tp.render_plain(|path| lookup_scalar(path, gpus_scope, &m))
                                .map_err(|e| e.message)
                        })
                        .and_then(|text| GpuSpec::from_text(&text));
                    match rendered {
                        Ok(g) => Some(g),
                        Err(msg) => {
                            errors.push(p.source.error(
                                Some(s.name_span.clone()),
                                format!("stage `{}`: gpus: {msg}", s.name),
                            ));
                            continue;
                        }
                    }
                }
                other => other,
            };
            instances.push(Instance {
                id,
                stage: si,
                label: label(&s.name, &m),
                matrix: m,
                params,
                inputs,
                deps: deps.into_iter().collect(),
                image,
                gpus,
            });
            by_stage[si].push(id);
        }
    }
    if !errors.is_empty() {
        return Err(Diagnostics(errors));
    }

    let mut graph = DiGraph::with_capacity(instances.len(), instances.len());
    for i in 0..instances.len() {
        graph.add_node(i);
    }
    for inst in &instances {
        for &d in &inst.deps {
            graph.add_edge(NodeIndex::new(d), NodeIndex::new(inst.id), ());
        }
    }
    // Instances were created in stage-topological order, so ids are already a topological order.
    let order = (0..instances.len()).collect();
    Ok(Plan {
        pipeline,
        instances,
        graph,
        order,
    })
}

fn join_keys(k: &BTreeSet<String>) -> String {
    if k.is_empty() {
        "none".into()
    } else {
        k.iter().cloned().collect::<Vec<_>>().join(", ")
    }
}

fn lookup_scalar(
    path: &[String],
    params: &BTreeMap<String, Value>,
    m: &Matrix,
) -> Result<Rendered, String> {
    match path {
        [ns, k] if ns == "params" => params
            .get(k)
            .map(|v| Rendered::One(value_text(v)))
            .ok_or_else(|| format!("unknown param `{k}`")),
        [ns, k] if ns == "matrix" => m
            .get(k)
            .map(|v| Rendered::One(value_text(v)))
            .ok_or_else(|| format!("unknown matrix key `{k}`")),
        _ => Err(format!("unknown variable `{}`", path.join("."))),
    }
}

fn resolve_params(
    p: &Pipeline,
    s: &Stage,
    m: &Matrix,
) -> Result<BTreeMap<String, Value>, Diagnostic> {
    let Some(def) = &s.def else {
        // Inline: only the pipeline params the command names.
        let mut used = BTreeMap::new();
        for t in s.run.templates() {
            for (path, _) in t.vars() {
                if let [ns, k] = path {
                    if ns == "params" {
                        if let Some(v) = p.params.get(k) {
                            used.insert(k.clone(), v.clone());
                        }
                    }
                }
            }
        }
        return Ok(used);
    };
    let mut out = BTreeMap::new();
    for (name, pd) in &def.params {
        if let Some(d) = &pd.default {
            out.insert(name.clone(), d.clone());
        }
    }
    for (name, (wv, span)) in &s.with {
        let v = match wv {
            WithValue::Literal(v) => v.clone(),
            WithValue::Template(t) => {
                let text = t
                    .render_plain(|path| lookup_scalar(path, &p.params, m))
                    .map_err(|e| {
                        p.source
                            .error(Some(span.clone()), format!("`with.{name}`: {}", e.message))
                    })?;
                check_param(&def.params[name], Value::String(text.clone())).map_err(|msg| {
                    p.source.error(
                        Some(span.clone()),
                        format!(
                            "param `{name}` of `{}` renders to \"{text}\" for {}: {msg}",
                            def.uses,
                            label(&s.name, m)
                        ),
                    )
                })?
            }
        };
        out.insert(name.clone(), v);
    }
    Ok(out)
}

/// Every `{{ var }}` in `run` must name something this stage has.
fn check_templates(
    p: &Pipeline,
    s: &Stage,
    keys: &BTreeSet<String>,
) -> Result<(), Vec<Diagnostic>> {
    let mut errs = Vec::new();
    let params: Vec<String> = match &s.def {
        Some(d) => d.params.keys().cloned().collect(),
        None => p.params.keys().cloned().collect(),
    };
    let gathered = |n: &str| {
        matches!(
            s.inputs.get(n).map(|i| &i.kind),
            Some(InputKind::Ref {
                selector: Selector::All,
                ..
            })
        )
    };
    let declared_inputs: Vec<String> = match &s.def {
        Some(d) => d.inputs.keys().cloned().collect(),
        None => s.inputs.keys().cloned().collect(),
    };
    let shell = matches!(s.run, RunTemplate::Shell(_));
    for t in s.run.templates() {
        for (path, off) in t.vars() {
            let problem = match path {
                [ns, k] if ns == "params" => (!params.contains(k)).then(|| {
                    let hint = did_you_mean(k, &params, || format!("params: {}", list(&params)));
                    format!("unknown param `{k}` ({hint})")
                }),
                [ns, k] if ns == "matrix" => (!keys.contains(k)).then(|| {
                    let what = format!("keys of `{}`", s.name);
                    format!("unknown matrix key `{k}` ({})", hint_keys(k, keys, &what))
                }),
                [ns, k] if ns == "in" => (!declared_inputs.contains(k)).then(|| {
                    let hint = did_you_mean(k, &declared_inputs, || {
                        format!("inputs: {}", list(&declared_inputs))
                    });
                    format!("unknown input `{k}` ({hint})")
                }),
                [ns, k, d] if ns == "in" && d == "dir" => {
                    if !declared_inputs.contains(k) {
                        Some(format!("unknown input `{k}`"))
                    } else if !gathered(k) && s.inputs.contains_key(k) {
                        Some(format!(
                            "`in.{k}.dir` is only for gathered inputs (`stage[*].out`)"
                        ))
                    } else {
                        None
                    }
                }
                [ns, k] if ns == "out" => (!s.outputs.contains_key(k)).then(|| {
                    let o: Vec<String> = s.outputs.keys().cloned().collect();
                    let hint = did_you_mean(k, &o, || format!("outputs: {}", list(&o)));
                    format!("unknown output `{k}` ({hint})")
                }),
                [ns, d] if ns == "stage" && d == "dir" => s
                    .def
                    .is_none()
                    .then(|| "`stage.dir` needs a `uses` definition".to_string()),
                [ns] if ns == "instance" => None,
                _ => {
                    let text = path.join(".");
                    let known = variables(s, &params, keys, &declared_inputs);
                    Some(
                        match crate::diag::nearest(&text, known.iter().map(String::as_str)) {
                            Some(n) => format!("unknown variable `{text}` (did you mean `{n}`?)"),
                            None => format!("unknown variable `{text}`"),
                        },
                    )
                }
            };
            if let Some(msg) = problem {
                let span = if shell {
                    s.run_span.start + 1 + off..s.run_span.start + 1 + off + 2
                } else {
                    s.run_span.clone()
                };
                errs.push(
                    s.run_source
                        .error(Some(span), format!("stage `{}`: {msg}", s.name))
                        .with_help("variables: params.NAME, matrix.KEY, in.NAME, in.NAME.dir, out.NAME, stage.dir, instance"),
                );
            }
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs)
    }
}

/// Every variable a stage's `run` may name, to suggest from.
fn variables(
    s: &Stage,
    params: &[String],
    keys: &BTreeSet<String>,
    inputs: &[String],
) -> Vec<String> {
    let ns = |ns: &str, names: &mut dyn Iterator<Item = &String>| -> Vec<String> {
        names.map(|n| format!("{ns}.{n}")).collect()
    };
    let mut v = ns("params", &mut params.iter());
    v.extend(ns("matrix", &mut keys.iter()));
    v.extend(ns("in", &mut inputs.iter()));
    v.extend(ns("out", &mut s.outputs.keys()));
    v.extend(["stage.dir".to_string(), "instance".to_string()]);
    v
}

/// "did you mean `k`?", else "`what`: a, b" (or "none").
fn hint_keys(k: &str, keys: &BTreeSet<String>, what: &str) -> String {
    let names: Vec<&String> = keys.iter().collect();
    did_you_mean(k, &names, || format!("{what}: {}", join_keys(keys)))
}

fn list(v: &[String]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
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

/// The value a template variable renders to for scalar namespaces; `None` for paths.
pub fn scalar(inst: &Instance, path: &[String]) -> Option<Rendered> {
    match path {
        [ns, k] if ns == "params" => inst.params.get(k).map(|v| Rendered::One(value_text(v))),
        [ns, k] if ns == "matrix" => inst.matrix.get(k).map(|v| Rendered::One(value_text(v))),
        [ns] if ns == "instance" => Some(Rendered::One(inst.label.clone())),
        _ => None,
    }
}
