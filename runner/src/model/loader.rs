//! The walk over one pipeline file: `--set` overrides, `[resources]`, `[envs]`, `[defaults]`
//! and then each stage in file order. Every problem becomes a [`Diagnostic`] in one list, so a
//! user sees all of them at once; the stage parts live in their own files.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use toml::Spanned;

use heddle_cache::error_chain;

use super::value::{parse_value_text, toml_to_json, ParamType};
use super::{valid_name, ClusterChoice, EnvDef, LoadError, LoadOptions, Pipeline, StageDef};
use crate::diag::{Diagnostic, Diagnostics, Source};
use crate::spec::{EnvSpec, PipelineSpec, RawStage, NOT_IN_DEFAULTS};
use crate::units::pool_spec;

/// A loaded definition and its `[stage]` table, the middle layer of a stage's settings.
#[derive(Clone)]
pub(super) struct LoadedDef {
    pub def: Arc<StageDef>,
    pub stage: Arc<RawStage>,
}

pub(super) struct Loader {
    pub src: Arc<Source>,
    pub root: PathBuf,
    pub lib_base: PathBuf,
    pub errors: Vec<Diagnostic>,
    /// What loads but should be written otherwise (an old spelling).
    pub warnings: Vec<Diagnostic>,
    /// Definitions loaded so far by `uses` name; `None` for one that failed (reported once).
    pub defs: BTreeMap<String, Option<LoadedDef>>,
}

/// What every stage of the pipeline may refer to.
pub(super) struct Scope<'a> {
    pub params: &'a BTreeMap<String, Value>,
    pub resources: &'a BTreeMap<String, u32>,
    pub envs: &'a BTreeMap<String, EnvDef>,
    pub stage_names: &'a StageNames,
    pub defaults: Option<&'a RawStage>,
}

/// The pipeline's stage names in file order (for messages), with a set to look them up: every
/// input that names a stage is checked against them, and a scan of the list per input made
/// loading a chain of N stages cost N² comparisons (10 % of a 1,000-stage chain's whole run in
/// instructions: benches/RESULTS.md, M15).
pub(super) struct StageNames {
    pub ordered: Vec<String>,
    set: std::collections::HashSet<String>,
}

impl StageNames {
    pub fn new(ordered: Vec<String>) -> StageNames {
        let set = ordered.iter().cloned().collect();
        StageNames { ordered, set }
    }

    pub fn contains(&self, name: &str) -> bool {
        self.set.contains(name)
    }
}

/// `[resources]`: pool sizes, and which pools are shared across the host.
struct Pools {
    units: BTreeMap<String, u32>,
    host: BTreeSet<String>,
}

impl Loader {
    pub fn new(src: Arc<Source>, root: PathBuf, lib_base: PathBuf) -> Loader {
        Loader {
            src,
            root,
            lib_base,
            errors: Vec::new(),
            warnings: Vec::new(),
            defs: BTreeMap::new(),
        }
    }

    /// An error in the pipeline file.
    pub fn err(&mut self, span: Range<usize>, msg: impl Into<String>) {
        let d = self.src.error(Some(span), msg);
        self.errors.push(d);
    }

    pub fn err_help(
        &mut self,
        span: Range<usize>,
        msg: impl Into<String>,
        help: impl Into<String>,
    ) {
        let d = self.src.error(Some(span), msg).with_help(help);
        self.errors.push(d);
    }

    pub fn load(
        mut self,
        spec: PipelineSpec,
        file: &Path,
        opts: &LoadOptions,
    ) -> Result<Pipeline, LoadError> {
        let name = spec.pipeline.get_ref().name.get_ref().clone();
        if !valid_name(&name) {
            let span = spec.pipeline.get_ref().name.span();
            self.err(
                span,
                format!("pipeline name `{name}` must be letters, digits, `-` or `_`"),
            );
        }
        let mut params: BTreeMap<String, Value> = BTreeMap::new();
        for (k, v) in &spec.params {
            // `{{ host.python }}` and the like: rendered here, once (host_vars.rs).
            match crate::host_vars::render_value(toml_to_json(v.get_ref())) {
                Ok(v) => {
                    params.insert(k.clone(), v);
                }
                Err(e) => self.err(v.span(), format!("param `{k}`: {e}")),
            }
        }
        apply_overrides(&mut params, &opts.overrides)?;
        let pools = self.pools(&spec.resources);
        let envs = self.envs(&spec.envs);
        let defaults = spec.defaults.as_ref().map(|d| d.get_ref());
        if let Some(d) = &spec.defaults {
            self.check_stage_keys(d, "[defaults]");
        }

        let mut ordered: Vec<_> = spec.stages.iter().collect();
        ordered.sort_by_key(|(_, s)| s.span().start);
        let stage_names =
            StageNames::new(ordered.iter().map(|(k, _)| k.get_ref().clone()).collect());
        let scope = Scope {
            params: &params,
            resources: &pools.units,
            envs: &envs,
            stage_names: &stage_names,
            defaults,
        };
        let mut stages = Vec::new();
        for (name, raw) in ordered {
            if !valid_name(name.get_ref()) {
                self.err(
                    name.span(),
                    format!(
                        "stage name `{}` must be letters, digits, `-` or `_`",
                        name.get_ref()
                    ),
                );
                continue;
            }
            if let Some(stage) = self.stage(name, raw, &scope) {
                stages.push(stage);
            }
        }
        if stages.is_empty() && self.errors.is_empty() {
            let span = spec.pipeline.span();
            self.err(span, "the pipeline has no stages");
        }
        if !self.errors.is_empty() {
            // A mistake in `[defaults]` or a shared definition is found once per stage that
            // inherits it: report it once.
            let mut unique: Vec<Diagnostic> = Vec::with_capacity(self.errors.len());
            for d in self.errors {
                if !unique.contains(&d) {
                    unique.push(d);
                }
            }
            return Err(LoadError::Invalid(Diagnostics(unique)));
        }
        let cluster = spec.pipeline.get_ref().cluster.as_ref().map(|c| {
            let (line, col) = self.src.line_col(c.span().start);
            ClusterChoice {
                name: c.get_ref().clone(),
                at: format!("{}:{line}:{col}", self.src.path.display()),
            }
        });
        Ok(Pipeline {
            cluster,
            name,
            file: file.to_path_buf(),
            root: self.root,
            source: self.src,
            params,
            resources: pools.units,
            host_pools: pools.host,
            warnings: self.warnings,
            envs,
            stages,
        })
    }

    fn pools(&mut self, spec: &BTreeMap<String, Spanned<toml::Value>>) -> Pools {
        let mut pools = Pools {
            units: BTreeMap::new(),
            host: BTreeSet::new(),
        };
        for (k, v) in spec {
            match pool_spec::parse(v.get_ref(), pool_spec::Place::Resources) {
                Ok(parsed) => {
                    let pool = parsed.spec;
                    pools.units.insert(k.clone(), pool.units);
                    if pool.scope == pool_spec::Scope::Shared {
                        pools.host.insert(k.clone());
                    }
                    if let Some(w) = parsed.warning {
                        let d = self
                            .src
                            .error(Some(v.span()), format!("resource pool `{k}`: {w}"));
                        self.warnings.push(d);
                    }
                }
                Err(why) => self.err(v.span(), format!("resource pool `{k}`: {why}")),
            }
        }
        pools
    }

    fn envs(&mut self, spec: &BTreeMap<String, Spanned<EnvSpec>>) -> BTreeMap<String, EnvDef> {
        let mut envs = BTreeMap::new();
        for (k, v) in spec {
            let e = v.get_ref();
            let requirements = self.requirements_file(&e.requirements);
            envs.insert(
                k.clone(),
                EnvDef {
                    name: k.clone(),
                    requirements,
                    python: e.python.clone().unwrap_or_else(|| "python3".into()),
                },
            );
        }
        envs
    }

    /// An env's requirements file: in the project, else (for `stages/…`) in the shipped library.
    fn requirements_file(&mut self, req: &Spanned<String>) -> PathBuf {
        let rel = req.get_ref();
        let mut path = self.root.join(rel);
        if !path.is_file() {
            // `stages/…` files a project does not have come from the shipped library.
            if let Some(rel) = rel.strip_prefix("stages/") {
                match crate::stage_lib::locate_file(rel, &self.lib_base) {
                    Ok(Some(p)) => path = p,
                    Ok(None) => {}
                    Err(err) => self.err(req.span(), error_chain(&err)),
                }
            }
        }
        if !path.is_file() {
            self.err_help(
                req.span(),
                format!("requirements file `{rel}` not found"),
                format!(
                    "paths are relative to the project root {}",
                    self.root.display()
                ),
            );
        }
        path
    }

    /// `[defaults]` allows only the keys a stage inherits.
    fn check_stage_keys(&mut self, raw: &Spanned<RawStage>, what: &str) {
        let r = raw.get_ref();
        for k in NOT_IN_DEFAULTS.into_iter().filter(|k| r.sets(k)) {
            self.err(raw.span(), format!("`{k}` is not allowed in {what}"));
        }
    }
}

/// Apply `--set k=v` to the pipeline's params: a value keeps its param's type.
fn apply_overrides(
    params: &mut BTreeMap<String, Value>,
    overrides: &[(String, String)],
) -> Result<(), LoadError> {
    for (k, raw) in overrides {
        let Some(old) = params.get(k) else {
            return Err(LoadError::UnknownParam {
                name: k.clone(),
                value: raw.clone(),
                known: params.keys().cloned().collect(),
            });
        };
        let ty = ParamType::of(old);
        let v = match ty.coerce(parse_value_text(raw)) {
            Ok(v) => v,
            // Any text is a string: `--set name=4` keeps "4".
            Err(_) if ty == ParamType::String => Value::String(raw.clone()),
            Err(_) => {
                return Err(LoadError::WrongType {
                    name: k.clone(),
                    value: raw.clone(),
                    ty,
                })
            }
        };
        params.insert(k.clone(), v);
    }
    Ok(())
}
