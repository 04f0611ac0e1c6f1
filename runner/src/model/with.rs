//! A stage's `with`: values for its definition's params. A literal is type-checked here; a
//! template may use pipeline params and matrix keys and is checked per instance by the planner.
//! Every param without a default must be given.

use std::collections::BTreeMap;
use std::ops::Range;

use serde_json::Value;
use toml::Spanned;

use super::loader::Loader;
use super::value::{check_choice, toml_to_json, ParamDef};
use super::{StageDef, WithValue};
use crate::diag::did_you_mean;
use crate::spec::RawStage;
use crate::template::Template;

type With = BTreeMap<String, (WithValue, Range<usize>)>;

impl Loader {
    /// `None` when `with` is given without `uses` (nothing else about the stage can be checked).
    pub(super) fn with(
        &mut self,
        name: &Spanned<String>,
        r: &RawStage,
        def: Option<&StageDef>,
        params: &BTreeMap<String, Value>,
    ) -> Option<With> {
        let sname = name.get_ref();
        let mut with = BTreeMap::new();
        // An empty `with = {}` sets nothing, with or without `uses`.
        if let Some(w) = r.with_.as_ref().filter(|w| !w.is_empty()) {
            let Some(d) = def else {
                let (k, _) = w.iter().next()?;
                self.err(
                    k.span(),
                    format!("`with` needs `uses`; stage `{sname}` has no definition"),
                );
                return None;
            };
            for (k, v) in w {
                let pname = k.get_ref();
                let Some(pd) = d.params.get(pname) else {
                    let known: Vec<_> = d.params.keys().cloned().collect();
                    self.err_help(
                        k.span(),
                        format!("`{}` has no param `{pname}`", d.uses),
                        did_you_mean(pname, &known, || {
                            format!("its params: {}", known.join(", "))
                        }),
                    );
                    continue;
                };
                if let Some(wv) = self.with_value(d, pname, pd, v, params) {
                    with.insert(pname.clone(), (wv, v.span()));
                }
            }
        }
        if let Some(d) = def {
            for (p, pd) in &d.params {
                if pd.default.is_none() && !with.contains_key(p) {
                    self.err(
                        name.span(),
                        format!(
                            "stage `{sname}` must set param `{p}` of `{}` in `with`",
                            d.uses
                        ),
                    );
                }
            }
        }
        Some(with)
    }

    fn with_value(
        &mut self,
        d: &StageDef,
        pname: &str,
        pd: &ParamDef,
        v: &Spanned<toml::Value>,
        params: &BTreeMap<String, Value>,
    ) -> Option<WithValue> {
        let val = toml_to_json(v.get_ref());
        if let Value::String(s) = &val {
            if s.contains("{{") {
                return self.with_template(pname, s, v.span(), params);
            }
        }
        match pd.ty.coerce(val) {
            Ok(v2) => {
                if let Some(msg) = check_choice(pd, &v2) {
                    self.err(v.span(), format!("param `{pname}` of `{}`: {msg}", d.uses));
                }
                Some(WithValue::Literal(v2))
            }
            Err(msg) => {
                self.err(v.span(), format!("param `{pname}` of `{}`: {msg}", d.uses));
                None
            }
        }
    }

    /// A templated `with` value: its variables must be pipeline params or matrix keys (the
    /// keys are checked at plan time, when the matrix is known).
    fn with_template(
        &mut self,
        pname: &str,
        text: &str,
        span: Range<usize>,
        params: &BTreeMap<String, Value>,
    ) -> Option<WithValue> {
        let t = match Template::parse(text) {
            Ok(t) => t,
            Err(e) => {
                self.err(span.start + 1 + e.offset..span.end, e.to_string());
                return None;
            }
        };
        for (path, off) in t.vars() {
            let ok = match path {
                [ns, p] if ns == "params" => params.contains_key(p),
                [ns, _] if ns == "matrix" => true,
                _ => false,
            };
            if !ok {
                self.err_help(
                    span.start + 1 + off..span.end - 1,
                    format!("unknown variable `{}` in `with.{pname}`", path.join(".")),
                    "`with` values may use {{ params.NAME }} (pipeline params) and {{ matrix.KEY }}",
                );
            }
        }
        Some(WithValue::Template(t))
    }
}
