//! One instance's bindings: each declared input bound to a repo path (a path template rendered
//! with the params after `--set` and the matrix, then checked), to its partner instance
//! of a mapped upstream, or to every instance of a gathered one; and a container stage's image
//! and GPUs rendered for the instance. Templates see the params of the layer that wrote them:
//! the definition's for a value the definition set, the pipeline's otherwise.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use serde_json::Value;

use super::builder::Builder;
use super::join::ProjectionIndex;
use super::params::lookup_scalar;
use super::{label, BoundInput, Matrix};
use crate::diag::Diagnostic;
use crate::model::{InputKind, Pipeline, Selector, Stage};
use crate::spec::GpuSpec;
use crate::template::Template;
use heddle_schema::VecMap;

impl Builder<'_> {
    /// The instance's inputs, and the instances it depends on (sorted); an error for a path
    /// template that does not render to an existing path.
    pub(super) fn bind_inputs(
        &self,
        s: &Stage,
        m: &Matrix,
        partners: &BTreeMap<&str, ProjectionIndex>,
    ) -> Result<(VecMap<BoundInput>, Vec<usize>), Diagnostic> {
        let mut inputs = VecMap::new();
        let mut deps = BTreeSet::new();
        for (iname, input) in &s.inputs {
            let b = match &input.kind {
                InputKind::Path(rel) => BoundInput::Path {
                    rel: rel.clone(),
                    abs: self.p.root.join(rel),
                },
                InputKind::PathTemplate(t) => {
                    let rel = self.render_path(s, iname, t, input.span.clone(), m)?;
                    BoundInput::Path {
                        abs: self.p.root.join(&rel),
                        rel,
                    }
                }
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
        Ok((inputs, deps.into_iter().collect()))
    }

    /// `path = "{{ params.model }}"` for instance `m`: rendered with the pipeline's params
    /// (after `--set`) and the instance's matrix, and checked to exist. Its errors name the
    /// param or matrix key the path came from, since that is what the user changes.
    fn render_path(
        &self,
        s: &Stage,
        iname: &str,
        t: &Template,
        span: Range<usize>,
        m: &Matrix,
    ) -> Result<String, Diagnostic> {
        let p = self.p;
        let at = label(&s.name, m);
        let rel = t
            .render_plain(|path| lookup_scalar(path, &p.params, m))
            .map_err(|e| {
                p.source
                    .error(Some(span.clone()), format!("input `{iname}` of {at}: {e}"))
            })?;
        if !rel.trim().is_empty() && p.root.join(&rel).exists() {
            return Ok(rel);
        }
        let from: Vec<String> = t
            .vars()
            .map(|(path, _)| match path {
                [ns, k] if ns == "params" => format!("param `{k}`"),
                [ns, k] if ns == "matrix" => format!("matrix key `{k}`"),
                other => format!("`{}`", other.join(".")),
            })
            .collect();
        let from = from.join(", ");
        let what = if rel.trim().is_empty() {
            format!("input `{iname}` of {at}: its path renders empty (from {from})")
        } else {
            format!("input `{iname}` of {at}: `{rel}` (from {from}) does not exist")
        };
        let set: Vec<String> = t
            .vars()
            .filter_map(|(path, _)| match path {
                [ns, k] if ns == "params" => Some(format!("--set {k}=PATH")),
                _ => None,
            })
            .collect();
        let help = if set.is_empty() {
            format!(
                "paths are relative to the project root {}",
                p.root.display()
            )
        } else {
            format!(
                "{}, relative to the project root {}",
                set.join(" "),
                p.root.display()
            )
        };
        Err(p.source.error(Some(span), what).with_help(help))
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
            format!("stage `{}`: image: {e}", s.name),
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
            .and_then(|tp| tp.render_plain(|path| lookup_scalar(path, seen, m)))
            .map_err(|e| e.to_string())
            .and_then(|text| GpuSpec::from_text(&text).map_err(|e| heddle_cache::error_chain(&e)))
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
