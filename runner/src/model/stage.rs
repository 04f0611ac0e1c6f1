//! One `[stages.NAME]` table: resolve its definition, then build each part (`run`, outputs,
//! inputs, `with`, matrix, inherited settings, container) and assemble the [`Stage`]. The
//! parts run in a fixed order so diagnostics come out in the order a user reads the table.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use toml::Spanned;

use super::layers::Layers;
use super::loader::{Loader, Scope};
use super::refs::parse_run;
use super::{valid_name, RunTemplate, Stage, StageDef};
use crate::diag::Source;
use crate::spec::RawStage;

/// A stage's `run`, parsed, with the file and span it was written at.
pub(super) struct Run {
    template: RunTemplate,
    source: Arc<Source>,
    span: Range<usize>,
}

impl Loader {
    pub(super) fn stage(
        &mut self,
        name: &Spanned<String>,
        raw: &Spanned<RawStage>,
        scope: &Scope,
    ) -> Option<Stage> {
        let r = raw.get_ref();
        let sname = name.get_ref().clone();
        if r.include.is_some() {
            self.err(
                raw.span(),
                "`include` belongs in a stage definition's [stage]",
            );
        }
        let loaded = match &r.uses {
            Some(u) => Some(self.definition(u)?),
            None => None,
        };
        let def = loaded.as_ref().map(|l| &l.def);
        let run = self.run(name, r, loaded.as_ref().map(|l| (&*l.stage, &l.def)))?;
        let outputs = self.outputs(&sname, r, def.map(|d| &**d));
        let inputs = self.inputs(name, r, def.map(|d| &**d), scope.stage_names);
        let with = self.with(name, r, def.map(|d| &**d), scope.params)?;
        let (matrix, matrix_span) = self.matrix(r);

        let pipeline = self.src.clone();
        let layers = Layers::new(
            r,
            &pipeline,
            loaded.as_ref().map(|l| (&*l.stage, &l.def.source)),
            scope.defaults,
        );
        let settings = self.settings(&layers, scope);
        let container = self.container(&layers, &sname);
        if container.is_some() && settings.env.is_some() {
            self.err(name.span(), format!("stage `{sname}` sets both `image` and `env`: a host python env cannot be used inside a container"));
        }

        Some(Stage {
            name: sname,
            name_span: name.span(),
            def: def.cloned(),
            with,
            run: run.template,
            run_source: run.source,
            run_span: run.span,
            inputs,
            outputs,
            matrix,
            matrix_span,
            settings,
            container,
        })
    }

    /// `run` comes from the stage or from its definition: not both, not neither.
    fn run(
        &mut self,
        name: &Spanned<String>,
        r: &RawStage,
        def: Option<(&RawStage, &Arc<StageDef>)>,
    ) -> Option<Run> {
        let sname = name.get_ref();
        let (spec, source, span) = match (
            &r.run,
            def.and_then(|(d, def)| Some((d.run.as_ref()?, def))),
        ) {
            (Some(run), Some(_)) => {
                self.err(
                    run.span(),
                    format!("stage `{sname}` sets `run` but its definition `uses` already has one"),
                );
                return None;
            }
            (Some(run), None) => (run.get_ref(), self.src.clone(), run.span()),
            (None, Some((run, d))) => (run.get_ref(), d.source.clone(), run.span()),
            (None, None) => {
                self.err_help(
                    name.span(),
                    format!("stage `{sname}` has no `run`"),
                    "give it `run = \"shell command\"`, `run = [\"prog\", \"arg\"]`, or `uses = \"group/name\"`",
                );
                return None;
            }
        };
        match parse_run(spec, &source, span.clone()) {
            Ok(template) => Some(Run {
                template,
                source,
                span,
            }),
            Err(d) => {
                self.errors.push(d);
                None
            }
        }
    }

    /// A stage's own outputs, or (with `uses`) its definition's, which the stage may not add to.
    fn outputs(
        &mut self,
        sname: &str,
        r: &RawStage,
        def: Option<&StageDef>,
    ) -> BTreeMap<String, String> {
        if let Some(d) = def {
            if let Some((k, _)) = r.outputs.iter().flatten().next() {
                self.err(
                    k.span(),
                    format!(
                        "stage `{sname}` uses `{}`, whose definition declares the outputs",
                        d.uses
                    ),
                );
            }
            return d.outputs.clone();
        }
        let mut outputs = BTreeMap::new();
        for (k, v) in r.outputs.iter().flatten() {
            let file = v.get_ref();
            if !valid_name(k.get_ref()) {
                self.err(
                    k.span(),
                    format!(
                        "output name `{}` must be letters, digits, `-` or `_`",
                        k.get_ref()
                    ),
                );
            }
            if file.is_empty()
                || file.contains('/')
                || file.contains('\\')
                || file == "."
                || file == ".."
            {
                self.err(
                    v.span(),
                    format!("output file `{file}` must be a plain file or folder name"),
                );
            }
            outputs.insert(k.get_ref().clone(), file.clone());
        }
        outputs
    }
}
