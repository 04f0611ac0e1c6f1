//! An instance's params, resolved per matrix assignment: `with` templates see the pipeline's
//! params and the instance's matrix, and a rendered value is type-checked against the
//! definition's param, with the instance named in the error.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{label, Matrix};
use crate::diag::Diagnostic;
use crate::model::{check_param, value_text, Pipeline, Stage, WithValue};
use crate::template::{LookupError, Rendered};

/// The scalars a `with`, `image` or `gpus` template may name: params (of the layer that
/// wrote the template) and the instance's matrix values.
pub(super) fn lookup_scalar(
    path: &[String],
    params: &BTreeMap<String, Value>,
    m: &Matrix,
) -> Result<Rendered, LookupError> {
    match path {
        [ns, k] if ns == "params" => params
            .get(k)
            .map(|v| Rendered::One(value_text(v)))
            .ok_or_else(|| LookupError::UnknownParam { name: k.clone() }),
        [ns, k] if ns == "matrix" => m
            .get(k)
            .map(|v| Rendered::One(value_text(v)))
            .ok_or_else(|| LookupError::UnknownMatrixKey { name: k.clone() }),
        _ => Err(LookupError::unknown(path)),
    }
}

/// An instance's params: a definition's defaults overlaid with the stage's `with` (templates
/// rendered for this instance and type-checked), or, for an inline stage, the pipeline params
/// its `run` names.
pub(super) fn resolve_params(
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
                            .error(Some(span.clone()), format!("`with.{name}`: {e}"))
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
