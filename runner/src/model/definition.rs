//! `uses = "group/name"`: find `stages/<group>/<name>/stage.toml` (in the project, else in the
//! shipped library), parse it, and check its params, outputs and `[stage]` table. Each
//! definition is loaded once per pipeline, so stages sharing a broken definition report its
//! errors once.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use toml::Spanned;

use heddle_cache::error_chain;

use super::loader::{LoadedDef, Loader};
use super::value::{toml_to_json, ParamDef, ParamType};
use super::StageDef;
use crate::diag::{Diagnostic, Source};
use crate::spec::{self, ParamDecl, StageDefSpec, NOT_IN_DEFINITION};

impl Loader {
    /// The definition named by `uses`, loaded on first use; `None` (reported) when it is
    /// missing or invalid.
    pub(super) fn definition(&mut self, uses: &Spanned<String>) -> Option<LoadedDef> {
        let name = uses.get_ref();
        if let Some(loaded) = self.defs.get(name) {
            return loaded.clone();
        }
        let (dir, source) = self.read_definition(uses)?;
        let loaded = match spec::parse::<StageDefSpec>(&source) {
            Ok(spec) => self.check_definition(name, dir, source, spec),
            Err(d) => Err(vec![d]),
        };
        let loaded = match loaded {
            Ok(l) => Some(l),
            Err(errs) => {
                self.errors.extend(errs);
                None
            }
        };
        self.defs.insert(name.clone(), loaded.clone());
        loaded
    }

    /// The definition's folder and text. A missing or unreadable one is reported at each
    /// `uses` that names it.
    fn read_definition(&mut self, uses: &Spanned<String>) -> Option<(PathBuf, Arc<Source>)> {
        let name = uses.get_ref();
        let dir = match crate::stage_lib::locate(&self.root, name, &self.lib_base) {
            Ok(Some(dir)) => dir,
            Ok(None) => {
                let expected = self.root.join("stages").join(name).join("stage.toml");
                let mut known = crate::stage_lib::definitions();
                known.extend(crate::stage_lib::project_definitions(&self.root));
                let help = match crate::diag::nearest(name, known.iter().map(String::as_str)) {
                    Some(near) => format!("did you mean `{near}`? (`heddle stages list`)"),
                    None => format!(
                        "expected {}, or one of the shipped definitions (`heddle stages list`)",
                        expected.display()
                    ),
                };
                self.err_help(uses.span(), format!("no stage definition `{name}`"), help);
                return None;
            }
            Err(e) => {
                self.err(uses.span(), error_chain(&e));
                return None;
            }
        };
        let file = dir.join("stage.toml");
        match std::fs::read_to_string(&file) {
            Ok(text) => Some((dir, Arc::new(Source::new(&file, text)))),
            Err(e) => {
                self.err(
                    uses.span(),
                    format!("failed to read {}: {e}", file.display()),
                );
                None
            }
        }
    }

    fn check_definition(
        &mut self,
        name: &str,
        dir: PathBuf,
        source: Arc<Source>,
        spec: StageDefSpec,
    ) -> Result<LoadedDef, Vec<Diagnostic>> {
        let mut errs = Vec::new();
        let params = def_params(&spec.params, &source, &mut errs);
        let mut outputs = BTreeMap::new();
        for (k, v) in &spec.outputs {
            match v.get_ref() {
                toml::Value::String(s) => {
                    outputs.insert(k.get_ref().clone(), s.clone());
                }
                _ => errs.push(source.error(Some(v.span()), format!("output `{}` must be a file name string (put `run` in [stage], not after [outputs])", k.get_ref()))),
            }
        }
        let inputs = spec
            .inputs
            .iter()
            .map(|(k, v)| (k.get_ref().clone(), v.get_ref().optional))
            .collect();
        let st = spec.stage.get_ref();
        for bad in NOT_IN_DEFINITION {
            if st.sets(bad) {
                errs.push(source.error(Some(spec.stage.span()), format!("`{bad}` is not allowed in a definition's [stage]; declare [inputs]/[outputs]/[params] tables")));
            }
        }
        if st.run.is_none() {
            errs.push(source.error(
                Some(spec.stage.span()),
                "a stage definition needs `run` in [stage]",
            ));
        }
        let dir = match &st.include {
            Some(inc) if errs.is_empty() => {
                crate::stage_lib::resolve_includes(&dir, inc, &source, &self.lib_base)
                    .map_err(|d| vec![d])?
            }
            _ => dir,
        };
        if !errs.is_empty() {
            return Err(errs);
        }
        let def = Arc::new(StageDef {
            uses: name.to_string(),
            dir,
            source,
            description: st.description.clone(),
            params,
            inputs,
            outputs,
        });
        Ok(LoadedDef {
            def,
            stage: Arc::new(spec.stage.into_inner()),
        })
    }
}

/// A definition's `[params]`: each type known, each default of its type.
fn def_params(
    decls: &BTreeMap<Spanned<String>, Spanned<ParamDecl>>,
    source: &Source,
    errs: &mut Vec<Diagnostic>,
) -> BTreeMap<String, ParamDef> {
    let mut params = BTreeMap::new();
    for (k, p) in decls {
        let pd = p.get_ref();
        let Some(ty) = ParamType::parse(pd.ty.get_ref()) else {
            errs.push(source.error(
                Some(pd.ty.span()),
                format!(
                    "unknown param type `{}` (string, int, float, bool, list, table)",
                    pd.ty.get_ref()
                ),
            ));
            continue;
        };
        let default = pd.default.as_ref().and_then(|d| {
            // `{{ host.python }}` and the like: rendered here, once (host_vars.rs).
            let v = crate::host_vars::render_value(toml_to_json(d.get_ref()))
                .map_err(|e| {
                    errs.push(
                        source.error(Some(d.span()), format!("default of `{}`: {e}", k.get_ref())),
                    )
                })
                .ok()?;
            ty.coerce(v)
                .map_err(|msg| {
                    errs.push(source.error(
                        Some(d.span()),
                        format!("default of `{}`: {msg}", k.get_ref()),
                    ))
                })
                .ok()
        });
        params.insert(
            k.get_ref().clone(),
            ParamDef {
                ty,
                default,
                choices: pd
                    .choices
                    .as_ref()
                    .map(|c| c.iter().map(toml_to_json).collect()),
                description: pd.description.clone(),
            },
        );
    }
    params
}
