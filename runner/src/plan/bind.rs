//! One instance's bindings: each declared input bound to a repo path, to its partner instance
//! of a mapped upstream, or to every instance of a gathered one; and a container stage's image
//! and GPUs rendered for the instance. Templates see the params of the layer that wrote them:
//! the definition's for a value the definition set, the pipeline's otherwise.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::build::Builder;
use super::join::ProjectionIndex;
use super::params::lookup_scalar;
use super::{BoundInput, Matrix};
use crate::diag::Diagnostic;
use crate::model::{InputKind, Pipeline, Selector, Stage};
use crate::spec::GpuSpec;
use crate::template::Template;
use heddle_schema::VecMap;

impl Builder<'_> {
    /// The instance's inputs, and the instances it depends on (sorted).
    pub(super) fn bind_inputs(
        &self,
        s: &Stage,
        m: &Matrix,
        partners: &BTreeMap<&str, ProjectionIndex>,
    ) -> (VecMap<BoundInput>, Vec<usize>) {
        let mut inputs = VecMap::new();
        let mut deps = BTreeSet::new();
        for (iname, input) in &s.inputs {
            let b = match &input.kind {
                InputKind::Path(rel) => BoundInput::Path {
                    rel: rel.clone(),
                    abs: self.p.root.join(rel),
                },
                InputKind::Ref {
                    stage,
                    selector: Selector::All,
                    output,
                } => {
                    let members = self.by_stage[self.index[stage.as_str()]].clone();
                    deps.extend(members.iter().copied());
                    BoundInput::Gather {
                        members,
                        output: output.clone(),
                    }
                }
                InputKind::Ref { output, .. } => {
                    let from = partners[iname.as_str()]
                        .matches(m, |u| &self.instances[u].matrix)
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
        (inputs, deps.into_iter().collect())
    }
}

/// Which params a template sees: the definition's (the instance's own) or the pipeline's.
fn scope<'a>(
    p: &'a Pipeline,
    params: &'a BTreeMap<String, Value>,
    in_def: bool,
) -> &'a BTreeMap<String, Value> {
    if in_def {
        params
    } else {
        &p.params
    }
}

/// A container stage's image reference, rendered; `None` for a host stage.
pub(super) fn image(
    p: &Pipeline,
    s: &Stage,
    params: &BTreeMap<String, Value>,
    m: &Matrix,
) -> Result<Option<String>, Diagnostic> {
    let Some(c) = &s.container else {
        return Ok(None);
    };
    let seen = scope(p, params, c.image_in_def);
    match c.image.render_plain(|path| lookup_scalar(path, seen, m)) {
        Ok(img) if !img.trim().is_empty() => Ok(Some(img)),
        Ok(_) => Err(p.source.error(
            Some(s.name_span.clone()),
            format!("stage `{}`: image renders empty", s.name),
        )),
        Err(e) => Err(p.source.error(
            Some(s.name_span.clone()),
            format!("stage `{}`: image: {}", s.name, e.message),
        )),
    }
}

/// A container stage's GPUs, with a template rendered and parsed.
pub(super) fn gpus(
    p: &Pipeline,
    s: &Stage,
    params: &BTreeMap<String, Value>,
    m: &Matrix,
) -> Result<Option<GpuSpec>, Diagnostic> {
    let seen = scope(
        p,
        params,
        s.container.as_ref().is_some_and(|c| c.gpus_in_def),
    );
    match s.container.as_ref().and_then(|c| c.gpus.clone()) {
        Some(GpuSpec::Template(t)) => Template::parse(&t)
            .map_err(|e| e.message)
            .and_then(|tp| {
                tp.render_plain(|path| lookup_scalar(path, seen, m))
                    .map_err(|e| e.message)
            })
            .and_then(|text| GpuSpec::from_text(&text))
            .map(Some)
            .map_err(|msg| {
                p.source.error(
                    Some(s.name_span.clone()),
                    format!("stage `{}`: gpus: {msg}", s.name),
                )
            }),
        other => Ok(other),
    }
}
