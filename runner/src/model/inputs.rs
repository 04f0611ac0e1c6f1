//! A stage's `inputs`: repo paths that must exist (a path with `{{ params.NAME }}` in it is
//! checked by the planner once rendered), and references to other stages' outputs
//! (checked here against the stage names; outputs and selectors are checked by the planner,
//! which knows the matrices). With `uses`, the names are the definition's declared inputs and
//! every required one must be bound.

use std::collections::{BTreeMap, BTreeSet};

use toml::Spanned;

use super::loader::{Loader, StageNames};
use super::refs::parse_ref;
use super::{Input, InputKind, StageDef};
use crate::diag::did_you_mean;
use crate::spec::{InputSpec, RawStage};
use crate::template::Template;

impl Loader {
    pub(super) fn inputs(
        &mut self,
        name: &Spanned<String>,
        r: &RawStage,
        def: Option<&StageDef>,
        stage_names: &StageNames,
    ) -> BTreeMap<String, Input> {
        let mut inputs = BTreeMap::new();
        // Names the stage binds, including those whose binding was wrong: an input that is
        // bound but invalid has its own error, so "must bind" would repeat it.
        let mut bound = BTreeSet::new();
        for (k, v) in r.inputs.iter().flatten() {
            let iname = k.get_ref().clone();
            if let Some(d) = def {
                if !d.inputs.contains_key(&iname) {
                    let known: Vec<_> = d.inputs.keys().cloned().collect();
                    self.err_help(
                        k.span(),
                        format!("`{}` declares no input `{iname}`", d.uses),
                        did_you_mean(&iname, &known, || {
                            format!("its inputs: {}", known.join(", "))
                        }),
                    );
                    continue;
                }
            }
            bound.insert(iname.clone());
            if let Some(kind) = self.input_kind(&iname, v, stage_names) {
                inputs.insert(
                    iname,
                    Input {
                        kind,
                        span: v.span(),
                    },
                );
            }
        }
        if let Some(d) = def {
            for (iname, optional) in &d.inputs {
                if !optional && !bound.contains(iname) {
                    self.err(
                        name.span(),
                        format!(
                            "stage `{}` must bind input `{iname}` of `{}`",
                            name.get_ref(),
                            d.uses
                        ),
                    );
                }
            }
        }
        inputs
    }

    fn input_kind(
        &mut self,
        iname: &str,
        v: &Spanned<InputSpec>,
        stage_names: &StageNames,
    ) -> Option<InputKind> {
        match v.get_ref() {
            InputSpec::Path(p) if p.contains("{{") => match Template::parse(p) {
                // Rendered and checked by the planner, which knows the params after `--set`
                // and the instance's matrix.
                Ok(t) => Some(InputKind::PathTemplate(t)),
                Err(e) => {
                    self.err(v.span(), format!("input `{iname}`: {e}"));
                    None
                }
            },
            InputSpec::Path(p) => {
                if !self.root.join(p).exists() {
                    self.err_help(
                        v.span(),
                        format!("input `{iname}`: file `{p}` does not exist"),
                        format!(
                            "repo paths are relative to the project root {}",
                            self.root.display()
                        ),
                    );
                    return None;
                }
                Some(InputKind::Path(p.clone()))
            }
            InputSpec::Ref(text) => match parse_ref(text) {
                Ok((stage, selector, output)) => {
                    if !stage_names.contains(&stage) {
                        let names = &stage_names.ordered;
                        self.err_help(
                            v.span(),
                            format!("input `{iname}` refers to unknown stage `{stage}`"),
                            did_you_mean(&stage, names, || format!("stages: {}", names.join(", "))),
                        );
                        return None;
                    }
                    Some(InputKind::Ref {
                        stage,
                        selector,
                        output,
                    })
                }
                Err(msg) => {
                    self.err_help(
                        v.span(),
                        format!("input `{iname}`: {msg}"),
                        "write \"stage.output\", \"stage[*].output\" or \"stage[key=value].output\"",
                    );
                    None
                }
            },
        }
    }
}
