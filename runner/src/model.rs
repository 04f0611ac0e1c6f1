//! The validated pipeline: what the TOML means. Built from [`crate::spec`] by [`load`], which
//! resolves `uses` definitions, type-checks params, parses references and templates, and reports
//! every problem it finds with a position. Nothing here touches the cache or runs anything.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use toml::Spanned;

use heddle_cache::error_chain;

use crate::diag::{Diagnostic, Diagnostics, Source};
use crate::spec::{self, GpuSpec, InputSpec, PipelineSpec, RawStage, RunSpec, StageDefSpec};
use crate::template::Template;

#[derive(Debug)]
pub struct Pipeline {
    pub name: String,
    /// The pipeline file as the user named it.
    pub file: PathBuf,
    /// The project root: repo paths, `stages/` and `out/` are relative to it.
    pub root: PathBuf,
    pub source: Arc<Source>,
    pub params: BTreeMap<String, Value>,
    pub resources: BTreeMap<String, u32>,
    /// Pools declared `scope = "host"`: units locked across every heddle on this host.
    pub host_pools: BTreeSet<String>,
    pub envs: BTreeMap<String, EnvDef>,
    /// In file order.
    pub stages: Vec<Stage>,
}

#[derive(Debug, Clone)]
pub struct EnvDef {
    pub name: String,
    /// Absolute path of the requirements file.
    pub requirements: PathBuf,
    pub python: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamType {
    String,
    Int,
    Float,
    Bool,
    List,
    Table,
}

impl ParamType {
    fn parse(s: &str) -> Option<ParamType> {
        Some(match s {
            "string" | "str" => ParamType::String,
            "int" | "integer" => ParamType::Int,
            "float" | "number" => ParamType::Float,
            "bool" | "boolean" => ParamType::Bool,
            "list" | "array" => ParamType::List,
            "table" | "map" => ParamType::Table,
            _ => return None,
        })
    }

    pub fn of(v: &Value) -> ParamType {
        match v {
            Value::String(_) | Value::Null => ParamType::String,
            Value::Number(n) if n.is_i64() || n.is_u64() => ParamType::Int,
            Value::Number(_) => ParamType::Float,
            Value::Bool(_) => ParamType::Bool,
            Value::Array(_) => ParamType::List,
            Value::Object(_) => ParamType::Table,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ParamType::String => "string",
            ParamType::Int => "int",
            ParamType::Float => "float",
            ParamType::Bool => "bool",
            ParamType::List => "list",
            ParamType::Table => "table",
        }
    }

    /// Coerce a value to this type: a rendered template is text, so "4" becomes 4 for an int.
    pub fn coerce(self, v: Value) -> Result<Value, String> {
        let got = ParamType::of(&v);
        if got == self {
            return Ok(v);
        }
        match (self, &v) {
            (ParamType::Float, Value::Number(n)) => {
                Ok(serde_json::json!(n.as_f64().unwrap_or_default()))
            }
            (_, Value::String(s)) => {
                let parsed = parse_value_text(s);
                let pt = ParamType::of(&parsed);
                if pt == self || (self == ParamType::Float && pt == ParamType::Int) {
                    self.coerce(parsed)
                } else {
                    Err(format!("expected {}, got \"{s}\"", self.name()))
                }
            }
            _ => Err(format!("expected {}, got {} {v}", self.name(), got.name())),
        }
    }
}

/// Parse a `--set` or rendered value as a TOML value when it is one (`4`, `true`, `[1,2]`),
/// else keep it as a string.
pub fn parse_value_text(s: &str) -> Value {
    let doc = format!("v = {s}");
    match toml::from_str::<toml::Table>(&doc) {
        Ok(t) => t
            .get("v")
            .map(toml_to_json)
            .unwrap_or(Value::String(s.into())),
        Err(_) => Value::String(s.to_string()),
    }
}

pub fn toml_to_json(v: &toml::Value) -> Value {
    match v {
        toml::Value::String(s) => Value::String(s.clone()),
        toml::Value::Integer(i) => Value::from(*i),
        toml::Value::Float(f) => serde_json::json!(f),
        toml::Value::Boolean(b) => Value::Bool(*b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(a) => Value::Array(a.iter().map(toml_to_json).collect()),
        toml::Value::Table(t) => Value::Object(
            t.iter()
                .map(|(k, v)| (k.clone(), toml_to_json(v)))
                .collect(),
        ),
    }
}

/// A value as it appears in a label or a rendered command: strings bare, the rest as JSON.
pub fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[derive(Debug, Clone)]
pub struct ParamDef {
    pub ty: ParamType,
    pub default: Option<Value>,
    pub choices: Option<Vec<Value>>,
    pub description: Option<String>,
}

/// A reusable stage definition: `stages/<uses>/stage.toml` and the files beside it.
#[derive(Debug)]
pub struct StageDef {
    pub uses: String,
    pub dir: PathBuf,
    pub source: Arc<Source>,
    pub description: Option<String>,
    pub params: BTreeMap<String, ParamDef>,
    pub inputs: BTreeMap<String, bool>,
    pub outputs: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Selector {
    /// `stage.out`: one instance per upstream instance, joined on shared matrix keys.
    Map,
    /// `stage[*].out`: every instance.
    All,
    /// `stage[k=v].out`: the instances with these values; remaining keys still map.
    Select(BTreeMap<String, String>),
}

#[derive(Debug, Clone)]
pub enum InputKind {
    /// A file or folder in the repo, relative to the root.
    Path(String),
    Ref {
        stage: String,
        selector: Selector,
        output: String,
    },
}

#[derive(Debug, Clone)]
pub struct Input {
    pub kind: InputKind,
    pub span: Range<usize>,
}

#[derive(Debug, Clone)]
pub enum RunTemplate {
    Shell(Template),
    Exec(Vec<Template>),
}

impl RunTemplate {
    pub fn templates(&self) -> Vec<&Template> {
        match self {
            RunTemplate::Shell(t) => vec![t],
            RunTemplate::Exec(ts) => ts.iter().collect(),
        }
    }
}

/// A `with` value: literal, or a template over pipeline params and matrix values.
#[derive(Debug, Clone)]
pub enum WithValue {
    Literal(Value),
    Template(Template),
}

#[derive(Debug, Clone)]
pub struct ContainerOpts {
    pub image: Template,
    /// `image` / `gpus` were set by the `uses` definition, so their templates see the
    /// definition's params; set in the pipeline, they see the pipeline's params.
    pub image_in_def: bool,
    pub gpus_in_def: bool,
    pub gpus: Option<GpuSpec>,
    pub devices: Vec<String>,
    pub network: String,
    pub shm_size: Option<String>,
    pub memory: Option<String>,
    pub cpus: Option<f64>,
    pub user: Option<String>,
    pub workdir: Option<String>,
    pub pull: String,
    pub docker_host: Option<String>,
    pub transfer: crate::exec::Transfer,
}

#[derive(Debug)]
pub struct Stage {
    pub name: String,
    pub name_span: Range<usize>,
    pub def: Option<Arc<StageDef>>,
    pub with: BTreeMap<String, (WithValue, Range<usize>)>,
    pub run: RunTemplate,
    /// Where `run` was written (the pipeline or the definition), for template errors.
    pub run_source: Arc<Source>,
    pub run_span: Range<usize>,
    pub inputs: BTreeMap<String, Input>,
    pub outputs: BTreeMap<String, String>,
    pub matrix: Vec<(String, Vec<Value>)>,
    pub matrix_span: Option<Range<usize>>,
    pub timeout: Option<Duration>,
    pub retries: u32,
    pub allow_failure: bool,
    pub cache: bool,
    pub report: bool,
    pub resources: BTreeMap<String, u32>,
    pub env: Option<String>,
    pub vars: BTreeMap<String, String>,
    pub pass_env: Vec<String>,
    pub container: Option<ContainerOpts>,
}

/// Options that come from the command line rather than the file.
#[derive(Debug, Default, Clone)]
pub struct LoadOptions {
    /// `--set k=v`, raw text.
    pub overrides: Vec<(String, String)>,
    /// Overrides the discovered project root.
    pub root: Option<PathBuf>,
    /// Where the shipped stage library and included definitions are extracted
    /// ([`crate::stage_lib`]); default `<root>/.heddle/stage-lib`.
    pub stage_lib: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{0}")]
    Invalid(Diagnostics),
    #[error("failed to read pipeline {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Usage(String),
}

impl From<Diagnostic> for LoadError {
    fn from(d: Diagnostic) -> Self {
        LoadError::Invalid(Diagnostics(vec![d]))
    }
}

/// Find the project root: the nearest folder at or above the pipeline's that holds `stages/`,
/// `.heddle/` or `.git`; else the pipeline's own folder.
pub fn find_root(pipeline_file: &Path) -> PathBuf {
    let abs = std::path::absolute(pipeline_file).unwrap_or_else(|_| pipeline_file.to_path_buf());
    let start = abs.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut dir = Some(start.as_path());
    while let Some(d) = dir {
        if d.join("stages").is_dir() || d.join(".heddle").is_dir() || d.join(".git").exists() {
            return d.to_path_buf();
        }
        dir = d.parent();
    }
    start
}

pub fn load(file: &Path, opts: &LoadOptions) -> Result<Pipeline, LoadError> {
    let text = std::fs::read_to_string(file).map_err(|source| LoadError::Read {
        path: file.to_path_buf(),
        source,
    })?;
    load_str(file, text, opts)
}

/// [`load`] of a pipeline's text as if read from `file` (stage definitions are still read from
/// the project root). The fuzz targets enter here.
pub fn load_str(file: &Path, text: String, opts: &LoadOptions) -> Result<Pipeline, LoadError> {
    let source = Arc::new(Source::new(file, text));
    let spec: PipelineSpec = spec::parse(&source)?;
    let root = match &opts.root {
        Some(r) => std::path::absolute(r).unwrap_or_else(|_| r.clone()),
        None => find_root(file),
    };
    Loader {
        src: source.clone(),
        lib_base: opts
            .stage_lib
            .clone()
            .unwrap_or_else(|| crate::stage_lib::default_base(&root)),
        root,
        errors: Vec::new(),
        defs: BTreeMap::new(),
    }
    .load(spec, file, opts)
}

struct Loader {
    src: Arc<Source>,
    root: PathBuf,
    lib_base: PathBuf,
    errors: Vec<Diagnostic>,
    defs: BTreeMap<String, Option<Arc<StageDef>>>,
}

impl Loader {
    fn err(&mut self, span: Range<usize>, msg: impl Into<String>) {
        let d = self.src.error(Some(span), msg);
        self.errors.push(d);
    }

    fn err_help(&mut self, span: Range<usize>, msg: impl Into<String>, help: impl Into<String>) {
        let d = self.src.error(Some(span), msg).with_help(help);
        self.errors.push(d);
    }

    fn load(
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
        let mut params: BTreeMap<String, Value> = spec
            .params
            .iter()
            .map(|(k, v)| (k.clone(), toml_to_json(v.get_ref())))
            .collect();
        for (k, raw) in &opts.overrides {
            match params.get(k) {
                None => {
                    let known: Vec<_> = params.keys().cloned().collect();
                    return Err(LoadError::Usage(format!(
                        "--set {k}={raw}: the pipeline has no param `{k}` (params: {})",
                        if known.is_empty() {
                            "none".into()
                        } else {
                            known.join(", ")
                        }
                    )));
                }
                Some(old) => {
                    let ty = ParamType::of(old);
                    let v = ty.coerce(parse_value_text(raw)).or_else(|_| {
                        if ty == ParamType::String {
                            Ok(Value::String(raw.clone()))
                        } else {
                            Err(())
                        }
                    });
                    match v {
                        Ok(v) => {
                            params.insert(k.clone(), v);
                        }
                        Err(()) => {
                            return Err(LoadError::Usage(format!(
                                "--set {k}={raw}: param `{k}` is a {}",
                                ty.name()
                            )))
                        }
                    }
                }
            }
        }

        let mut resources = BTreeMap::new();
        let mut host_pools = BTreeSet::new();
        for (k, v) in &spec.resources {
            match crate::pool_spec::parse(v.get_ref()) {
                Ok(pool) => {
                    resources.insert(k.clone(), pool.units);
                    if pool.scope == crate::pool_spec::Scope::Host {
                        host_pools.insert(k.clone());
                    }
                }
                Err(why) => self.err(v.span(), format!("resource pool `{k}`: {why}")),
            }
        }

        let mut envs = BTreeMap::new();
        for (k, v) in &spec.envs {
            let e = v.get_ref();
            let req = e.requirements.get_ref();
            let mut path = self.root.join(req);
            if !path.is_file() {
                // `stages/…` files a project does not have come from the shipped library.
                if let Some(rel) = req.strip_prefix("stages/") {
                    match crate::stage_lib::locate_file(rel, &self.lib_base) {
                        Ok(Some(p)) => path = p,
                        Ok(None) => {}
                        Err(err) => self.err(e.requirements.span(), error_chain(&err)),
                    }
                }
            }
            if !path.is_file() {
                self.err_help(
                    e.requirements.span(),
                    format!("requirements file `{req}` not found"),
                    format!(
                        "paths are relative to the project root {}",
                        self.root.display()
                    ),
                );
            }
            envs.insert(
                k.clone(),
                EnvDef {
                    name: k.clone(),
                    requirements: path,
                    python: e.python.clone().unwrap_or_else(|| "python3".into()),
                },
            );
        }

        let defaults = spec.defaults.as_ref().map(|d| d.get_ref());
        if let Some(d) = &spec.defaults {
            self.check_stage_keys(d, "[defaults]", false);
        }

        let mut ordered: Vec<_> = spec.stages.iter().collect();
        ordered.sort_by_key(|(_, s)| s.span().start);
        let stage_names: Vec<String> = ordered.iter().map(|(k, _)| k.get_ref().clone()).collect();
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
            if let Some(stage) = self.stage(
                name,
                raw,
                defaults,
                &params,
                &resources,
                &envs,
                &stage_names,
            ) {
                stages.push(stage);
            }
        }
        if stages.is_empty() && self.errors.is_empty() {
            let span = spec.pipeline.span();
            self.err(span, "the pipeline has no stages");
        }
        if !self.errors.is_empty() {
            return Err(LoadError::Invalid(Diagnostics(self.errors)));
        }
        Ok(Pipeline {
            name,
            file: file.to_path_buf(),
            root: self.root,
            source: self.src,
            params,
            resources,
            host_pools,
            envs,
            stages,
        })
    }

    /// Keys allowed in `[defaults]` and a definition's `[stage]` are a subset of a stage's.
    fn check_stage_keys(&mut self, raw: &Spanned<RawStage>, what: &str, is_def: bool) {
        let r = raw.get_ref();
        let mut bad = Vec::new();
        if r.uses.is_some() {
            bad.push("uses");
        }
        if r.with_.is_some() {
            bad.push("with");
        }
        if r.inputs.is_some() {
            bad.push("inputs");
        }
        if r.outputs.is_some() {
            bad.push("outputs");
        }
        if r.matrix.is_some() {
            bad.push("matrix");
        }
        if !is_def && r.run.is_some() {
            bad.push("run");
        }
        if !is_def && r.include.is_some() {
            bad.push("include");
        }
        for k in bad {
            self.err(raw.span(), format!("`{k}` is not allowed in {what}"));
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn stage(
        &mut self,
        name: &Spanned<String>,
        raw: &Spanned<RawStage>,
        defaults: Option<&RawStage>,
        params: &BTreeMap<String, Value>,
        resources: &BTreeMap<String, u32>,
        envs: &BTreeMap<String, EnvDef>,
        stage_names: &[String],
    ) -> Option<Stage> {
        let r = raw.get_ref();
        let sname = name.get_ref().clone();
        if r.include.is_some() {
            self.err(
                raw.span(),
                "`include` belongs in a stage definition's [stage]",
            );
        }
        let (def, def_raw) = match &r.uses {
            Some(u) => {
                let (d, raw) = self.def(u)?;
                (Some(d), Some(raw))
            }
            None => (None, None),
        };
        let def_stage = def_raw.as_ref().map(|d| d.get_ref());

        // run: from the stage, or from its definition — not both, not neither.
        let (run_spec, run_source, run_span) = match (
            &r.run,
            def_stage.and_then(|d| d.run.as_ref()),
            &def,
        ) {
            (Some(_), Some(_), _) => {
                self.err(
                    r.run.as_ref().unwrap().span(),
                    format!("stage `{sname}` sets `run` but its definition `uses` already has one"),
                );
                return None;
            }
            (Some(run), None, _) => (run.get_ref().clone(), self.src.clone(), run.span()),
            (None, Some(run), Some(d)) => (run.get_ref().clone(), d.source.clone(), run.span()),
            _ => {
                self.err_help(
                    name.span(),
                    format!("stage `{sname}` has no `run`"),
                    "give it `run = \"shell command\"`, `run = [\"prog\", \"arg\"]`, or `uses = \"group/name\"`",
                );
                return None;
            }
        };
        let run = match parse_run(&run_spec, &run_source, run_span.clone()) {
            Ok(r) => r,
            Err(d) => {
                self.errors.push(d);
                return None;
            }
        };

        // outputs
        let mut outputs = BTreeMap::new();
        if let Some(d) = &def {
            if let Some(o) = &r.outputs {
                if let Some((k, _)) = o.iter().next() {
                    self.err(
                        k.span(),
                        format!(
                            "stage `{sname}` uses `{}`, whose definition declares the outputs",
                            d.uses
                        ),
                    );
                }
            }
            outputs = d.outputs.clone();
        } else if let Some(o) = &r.outputs {
            for (k, v) in o {
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
        }

        // inputs
        let mut inputs = BTreeMap::new();
        if let Some(ins) = &r.inputs {
            for (k, v) in ins {
                let iname = k.get_ref().clone();
                if let Some(d) = &def {
                    if !d.inputs.contains_key(&iname) {
                        let known: Vec<_> = d.inputs.keys().cloned().collect();
                        self.err_help(
                            k.span(),
                            format!("`{}` declares no input `{iname}`", d.uses),
                            format!("its inputs: {}", known.join(", ")),
                        );
                        continue;
                    }
                }
                match v.get_ref() {
                    InputSpec::Path(p) => {
                        let abs = self.root.join(p);
                        if !abs.exists() {
                            self.err_help(
                                v.span(),
                                format!("input `{iname}`: file `{p}` does not exist"),
                                format!("repo paths are relative to the project root {}", self.root.display()),
                            );
                            continue;
                        }
                        inputs.insert(iname, Input { kind: InputKind::Path(p.clone()), span: v.span() });
                    }
                    InputSpec::Ref(text) => match parse_ref(text) {
                        Ok((stage, selector, output)) => {
                            if !stage_names.contains(&stage) {
                                self.err_help(
                                    v.span(),
                                    format!("input `{iname}` refers to unknown stage `{stage}`"),
                                    format!("stages: {}", stage_names.join(", ")),
                                );
                                continue;
                            }
                            inputs.insert(iname, Input { kind: InputKind::Ref { stage, selector, output }, span: v.span() });
                        }
                        Err(msg) => self.err_help(
                            v.span(),
                            format!("input `{iname}`: {msg}"),
                            "write \"stage.output\", \"stage[*].output\" or \"stage[key=value].output\"",
                        ),
                    },
                }
            }
        }
        if let Some(d) = &def {
            for (iname, optional) in &d.inputs {
                if !optional
                    && !inputs.contains_key(iname)
                    && !self
                        .errors
                        .iter()
                        .any(|e| e.message.contains(&format!("input `{iname}`")))
                {
                    self.err(
                        name.span(),
                        format!("stage `{sname}` must bind input `{iname}` of `{}`", d.uses),
                    );
                }
            }
        }

        // with → params of the definition
        let mut with = BTreeMap::new();
        if let Some(w) = &r.with_ {
            let Some(d) = &def else {
                let (k, _) = w.iter().next().unwrap();
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
                        format!("its params: {}", known.join(", ")),
                    );
                    continue;
                };
                let val = toml_to_json(v.get_ref());
                let wv = match &val {
                    Value::String(s) if s.contains("{{") => match Template::parse(s) {
                        Ok(t) => {
                            for (path, off) in t.vars() {
                                let ok = match path {
                                    [ns, p] if ns == "params" => params.contains_key(p),
                                    [ns, _] if ns == "matrix" => true, // checked against keys in plan
                                    _ => false,
                                };
                                if !ok {
                                    let span = v.span().start + 1 + off..v.span().end - 1;
                                    self.err_help(
                                        span,
                                        format!("unknown variable `{}` in `with.{pname}`", path.join(".")),
                                        "`with` values may use {{ params.NAME }} (pipeline params) and {{ matrix.KEY }}",
                                    );
                                }
                            }
                            WithValue::Template(t)
                        }
                        Err(e) => {
                            self.err(v.span().start + 1 + e.offset..v.span().end, e.message);
                            continue;
                        }
                    },
                    _ => match pd.ty.coerce(val.clone()) {
                        Ok(v2) => {
                            if let Some(msg) = check_choice(pd, &v2) {
                                self.err(
                                    v.span(),
                                    format!("param `{pname}` of `{}`: {msg}", d.uses),
                                );
                            }
                            WithValue::Literal(v2)
                        }
                        Err(msg) => {
                            self.err(v.span(), format!("param `{pname}` of `{}`: {msg}", d.uses));
                            continue;
                        }
                    },
                };
                with.insert(pname.clone(), (wv, v.span()));
            }
        }
        if let Some(d) = &def {
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

        // matrix
        let mut matrix = Vec::new();
        let mut matrix_span = None;
        if let Some(m) = &r.matrix {
            for (k, vals) in m {
                matrix_span.get_or_insert(k.span());
                if !valid_name(k.get_ref()) {
                    self.err(
                        k.span(),
                        format!(
                            "matrix key `{}` must be letters, digits, `-` or `_`",
                            k.get_ref()
                        ),
                    );
                }
                if vals.get_ref().is_empty() {
                    self.err(
                        vals.span(),
                        format!("matrix key `{}` has no values", k.get_ref()),
                    );
                    continue;
                }
                let vs: Vec<Value> = vals.get_ref().iter().map(toml_to_json).collect();
                let mut seen = std::collections::BTreeSet::new();
                for v in &vs {
                    if matches!(v, Value::Array(_) | Value::Object(_)) {
                        self.err(
                            vals.span(),
                            format!(
                                "matrix key `{}`: values must be strings, numbers or booleans",
                                k.get_ref()
                            ),
                        );
                        break;
                    }
                    if !seen.insert(value_text(v)) {
                        self.err(
                            vals.span(),
                            format!(
                                "matrix key `{}` repeats the value `{}`",
                                k.get_ref(),
                                value_text(v)
                            ),
                        );
                    }
                }
                matrix.push((k.get_ref().clone(), vs));
            }
        }

        // Everything below may come from the stage, else its definition, else [defaults].
        let pick = |f: &dyn Fn(&RawStage) -> bool| -> Option<&RawStage> {
            if f(r) {
                Some(r)
            } else if def_stage.is_some_and(f) {
                def_stage
            } else if defaults.is_some_and(f) {
                defaults
            } else {
                None
            }
        };

        let timeout = match pick(&|s| s.timeout.is_some()).and_then(|s| s.timeout.as_ref()) {
            Some(t) => match humantime::parse_duration(t.get_ref()) {
                Ok(d) => Some(d),
                Err(e) => {
                    let err = format!(
                        "timeout `{}`: {e} (write e.g. \"90s\", \"10m\", \"2h\")",
                        t.get_ref()
                    );
                    self.err_at_any(
                        t.span(),
                        err,
                        def_stage.is_some() && r.timeout.is_none(),
                        &def,
                    );
                    None
                }
            },
            None => None,
        };
        let retries = match pick(&|s| s.retries.is_some()).and_then(|s| s.retries.as_ref()) {
            Some(n) if *n.get_ref() < 0 || *n.get_ref() > 100 => {
                self.err(n.span(), "retries must be between 0 and 100");
                0
            }
            Some(n) => *n.get_ref() as u32,
            None => 0,
        };
        let allow_failure = pick(&|s| s.allow_failure.is_some())
            .and_then(|s| s.allow_failure)
            .unwrap_or(false);
        let report = pick(&|s| s.report.is_some())
            .and_then(|s| s.report)
            .unwrap_or(false);
        let cache = pick(&|s| s.cache.is_some())
            .and_then(|s| s.cache)
            .unwrap_or(true);

        let mut res = BTreeMap::new();
        if let Some(rs) = pick(&|s| s.resources.is_some()).and_then(|s| s.resources.as_ref()) {
            for (k, v) in rs {
                let Some(pool) = resources.get(k.get_ref()) else {
                    let known: Vec<_> = resources.keys().cloned().collect();
                    self.err_help(
                        k.span(),
                        format!("unknown resource pool `{}`", k.get_ref()),
                        format!(
                            "declare it under [resources]; pools: {}",
                            if known.is_empty() {
                                "none".into()
                            } else {
                                known.join(", ")
                            }
                        ),
                    );
                    continue;
                };
                match u32::try_from(*v.get_ref()) {
                    Ok(n) if n >= 1 && n <= *pool => {
                        res.insert(k.get_ref().clone(), n);
                    }
                    _ => self.err(
                        v.span(),
                        format!(
                            "stage asks for {} of `{}`, whose pool has {pool}",
                            v.get_ref(),
                            k.get_ref()
                        ),
                    ),
                }
            }
        }

        let env = pick(&|s| s.env.is_some())
            .and_then(|s| s.env.as_ref())
            .and_then(|e| {
                if envs.contains_key(e.get_ref()) {
                    Some(e.get_ref().clone())
                } else {
                    let known: Vec<_> = envs.keys().cloned().collect();
                    let d = self
                        .src
                        .error(Some(e.span()), format!("unknown env `{}`", e.get_ref()))
                        .with_help(format!(
                            "declare it as [envs.{}]; envs: {}",
                            e.get_ref(),
                            if known.is_empty() {
                                "none".into()
                            } else {
                                known.join(", ")
                            }
                        ));
                    self.errors.push(d);
                    None
                }
            });
        let mut vars = BTreeMap::new();
        for s in [defaults, def_stage, Some(r)].into_iter().flatten() {
            if let Some(v) = &s.vars {
                vars.extend(v.clone());
            }
        }
        let mut pass_env: Vec<String> = Vec::new();
        for s in [defaults, def_stage, Some(r)].into_iter().flatten() {
            for v in s.pass_env.iter().flatten() {
                if !pass_env.contains(v.get_ref()) {
                    pass_env.push(v.get_ref().clone());
                }
            }
        }

        let container = self.container(r, def_stage, defaults, &sname, name.span());
        if container.is_some() && env.is_some() {
            self.err(name.span(), format!("stage `{sname}` sets both `image` and `env`: a host python env cannot be used inside a container"));
        }

        Some(Stage {
            name: sname,
            name_span: name.span(),
            def,
            with,
            run,
            run_source,
            run_span,
            inputs,
            outputs,
            matrix,
            matrix_span,
            timeout,
            retries,
            allow_failure,
            cache,
            report,
            resources: res,
            env,
            vars,
            pass_env,
            container,
        })
    }

    fn err_at_any(
        &mut self,
        span: Range<usize>,
        msg: String,
        in_def: bool,
        def: &Option<Arc<StageDef>>,
    ) {
        match (in_def, def) {
            (true, Some(d)) => self.errors.push(d.source.error(Some(span), msg)),
            _ => self.err(span, msg),
        }
    }

    fn container(
        &mut self,
        r: &RawStage,
        def_stage: Option<&RawStage>,
        defaults: Option<&RawStage>,
        sname: &str,
        name_span: Range<usize>,
    ) -> Option<ContainerOpts> {
        let layers: Vec<&RawStage> = [Some(r), def_stage, defaults]
            .into_iter()
            .flatten()
            .collect();
        let first = |f: &dyn Fn(&RawStage) -> bool| layers.iter().copied().find(|s| f(s));
        let image_layer = first(&|s| s.image.is_some())?;
        let in_def = |layer: Option<&RawStage>| match (layer, def_stage) {
            (Some(l), Some(d)) => std::ptr::eq(l, d),
            _ => false,
        };
        let image_in_def = in_def(Some(image_layer));
        let gpus_in_def = in_def(first(&|s| s.gpus.is_some()));
        let image = image_layer.image.as_ref()?;
        let img = match Template::parse(image.get_ref()) {
            Ok(t) => t,
            Err(e) => {
                self.err(name_span, format!("stage `{sname}`: image: {}", e.message));
                return None;
            }
        };
        let network = first(&|s| s.network.is_some())
            .and_then(|s| s.network.as_ref())
            .map(|n| n.get_ref().clone())
            .unwrap_or_else(|| "none".into());
        if !["none", "bridge", "host"].contains(&network.as_str()) {
            self.err(name_span.clone(), format!("stage `{sname}`: network must be \"none\", \"bridge\" or \"host\", not \"{network}\""));
        }
        let pull = first(&|s| s.pull.is_some())
            .and_then(|s| s.pull.as_ref())
            .map(|n| n.get_ref().clone())
            .unwrap_or_else(|| "never".into());
        if !["never", "missing", "always"].contains(&pull.as_str()) {
            self.err(name_span.clone(), format!("stage `{sname}`: pull must be \"never\", \"missing\" or \"always\", not \"{pull}\""));
        }
        let transfer = match first(&|s| s.transfer.is_some())
            .and_then(|s| s.transfer.as_ref())
            .map(|t| t.get_ref().as_str())
        {
            None | Some("auto") => crate::exec::Transfer::Auto,
            Some("bind") => crate::exec::Transfer::Bind,
            Some("archive") => crate::exec::Transfer::Archive,
            Some(other) => {
                self.err(name_span.clone(), format!("stage `{sname}`: transfer must be \"auto\", \"bind\" or \"archive\", not \"{other}\""));
                crate::exec::Transfer::Auto
            }
        };
        let size = |f: &dyn Fn(&RawStage) -> Option<&Spanned<String>>| {
            first(&|s| f(s).is_some())
                .and_then(f)
                .map(|v| v.get_ref().clone())
        };
        let shm_size = size(&|s| s.shm_size.as_ref());
        let memory = size(&|s| s.memory.as_ref());
        for (what, v) in [("shm_size", &shm_size), ("memory", &memory)] {
            if let Some(v) = v {
                if heddle_containers::parse_size(v).is_err() {
                    self.err(
                        name_span.clone(),
                        format!(
                            "stage `{sname}`: {what} `{v}` is not a size like \"2g\" or \"512m\""
                        ),
                    );
                }
            }
        }
        if let Some(GpuSpec::Count(n)) = first(&|s| s.gpus.is_some())
            .and_then(|s| s.gpus.as_ref())
            .map(|g| g.get_ref())
        {
            if *n < 1 {
                self.err(
                    name_span.clone(),
                    format!("stage `{sname}`: gpus count must be at least 1"),
                );
            }
        }
        Some(ContainerOpts {
            image: img,
            image_in_def,
            gpus_in_def,
            gpus: first(&|s| s.gpus.is_some())
                .and_then(|s| s.gpus.as_ref())
                .map(|g| g.get_ref().clone()),
            devices: first(&|s| s.devices.is_some())
                .and_then(|s| s.devices.clone())
                .unwrap_or_default(),
            network,
            shm_size,
            memory,
            cpus: first(&|s| s.cpus.is_some()).and_then(|s| s.cpus),
            user: first(&|s| s.user.is_some()).and_then(|s| s.user.clone()),
            workdir: first(&|s| s.workdir.is_some()).and_then(|s| s.workdir.clone()),
            pull,
            docker_host: first(&|s| s.docker_host.is_some()).and_then(|s| s.docker_host.clone()),
            transfer,
        })
    }

    /// Load (once) the definition named by `uses`.
    fn def(&mut self, uses: &Spanned<String>) -> Option<(Arc<StageDef>, Spanned<RawStage>)> {
        let name = uses.get_ref();
        let dir = match crate::stage_lib::locate(&self.root, name, &self.lib_base) {
            Ok(Some(dir)) => dir,
            Ok(None) => {
                let expected = self.root.join("stages").join(name).join("stage.toml");
                self.err_help(
                    uses.span(),
                    format!("no stage definition `{name}`"),
                    format!(
                        "expected {}, or one of the shipped definitions (`heddle stages list`)",
                        expected.display()
                    ),
                );
                return None;
            }
            Err(e) => {
                self.err(uses.span(), error_chain(&e));
                return None;
            }
        };
        let file = dir.join("stage.toml");
        let text = match std::fs::read_to_string(&file) {
            Ok(t) => t,
            Err(e) => {
                self.err(
                    uses.span(),
                    format!("failed to read {}: {e}", file.display()),
                );
                return None;
            }
        };
        let source = Arc::new(Source::new(&file, text));
        let spec: StageDefSpec = match spec::parse(&source) {
            Ok(s) => s,
            Err(d) => {
                self.errors.push(d);
                return None;
            }
        };
        let mut errs = Vec::new();
        let mut params = BTreeMap::new();
        for (k, p) in &spec.params {
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
            let default = match &pd.default {
                Some(d) => match ty.coerce(toml_to_json(d.get_ref())) {
                    Ok(v) => Some(v),
                    Err(msg) => {
                        errs.push(source.error(
                            Some(d.span()),
                            format!("default of `{}`: {msg}", k.get_ref()),
                        ));
                        None
                    }
                },
                None => None,
            };
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
        for (bad, set) in [
            ("uses", st.uses.is_some()),
            ("with", st.with_.is_some()),
            ("inputs", st.inputs.is_some()),
            ("outputs", st.outputs.is_some()),
            ("matrix", st.matrix.is_some()),
        ] {
            if set {
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
                match crate::stage_lib::resolve_includes(&dir, inc, &source, &self.lib_base) {
                    Ok(d) => d,
                    Err(d) => {
                        errs.push(d);
                        dir
                    }
                }
            }
            _ => dir,
        };
        let failed = !errs.is_empty();
        self.errors.extend(errs);
        if failed {
            self.defs.insert(name.clone(), None);
            return None;
        }
        let def = Arc::new(StageDef {
            uses: name.clone(),
            dir,
            source,
            description: st.description.clone(),
            params,
            inputs,
            outputs,
        });
        self.defs.insert(name.clone(), Some(def.clone()));
        Some((def, spec.stage))
    }
}

fn check_choice(pd: &ParamDef, v: &Value) -> Option<String> {
    let choices = pd.choices.as_ref()?;
    if choices.contains(v) {
        None
    } else {
        let c: Vec<_> = choices.iter().map(value_text).collect();
        Some(format!(
            "`{}` is not one of {}",
            value_text(v),
            c.join(", ")
        ))
    }
}

/// Check a coerced param value against its definition (used at plan time for templated `with`).
pub fn check_param(pd: &ParamDef, v: Value) -> Result<Value, String> {
    let v = pd.ty.coerce(v)?;
    match check_choice(pd, &v) {
        Some(msg) => Err(msg),
        None => Ok(v),
    }
}

fn parse_run(run: &RunSpec, src: &Source, span: Range<usize>) -> Result<RunTemplate, Diagnostic> {
    let err = |off: usize, msg: String| src.error(Some(span.start + 1 + off..span.end), msg);
    match run {
        RunSpec::Shell(s) => Template::parse(s)
            .map(RunTemplate::Shell)
            .map_err(|e| err(e.offset, e.message)),
        RunSpec::Exec(args) => args
            .iter()
            .map(|a| Template::parse(a).map_err(|e| src.error(Some(span.clone()), e.message)))
            .collect::<Result<Vec<_>, _>>()
            .map(RunTemplate::Exec),
    }
}

/// `stage.out`, `stage[*].out`, `stage[k=v,k2=v2].out`.
pub fn parse_ref(text: &str) -> Result<(String, Selector, String), String> {
    let (head, output) = text
        .rsplit_once('.')
        .ok_or_else(|| format!("`{text}` is not a reference like \"stage.output\""))?;
    let (stage, selector) = match head.split_once('[') {
        None => (head.to_string(), Selector::Map),
        Some((stage, rest)) => {
            let inner = rest
                .strip_suffix(']')
                .ok_or_else(|| format!("`{text}`: unclosed `[`"))?;
            if inner.trim() == "*" {
                (stage.to_string(), Selector::All)
            } else {
                let mut sel = BTreeMap::new();
                for part in inner.split(',') {
                    let (k, v) = part
                        .split_once('=')
                        .ok_or_else(|| format!("`{text}`: selector `{part}` is not key=value"))?;
                    sel.insert(k.trim().to_string(), v.trim().to_string());
                }
                (stage.to_string(), Selector::Select(sel))
            }
        }
    };
    if !valid_name(&stage) || !valid_name(output) {
        return Err(format!("`{text}` is not a reference like \"stage.output\""));
    }
    Ok((stage, selector, output.to_string()))
}

pub fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs_parse() {
        assert_eq!(
            parse_ref("a.b").unwrap(),
            ("a".into(), Selector::Map, "b".into())
        );
        assert_eq!(
            parse_ref("a[*].b").unwrap(),
            ("a".into(), Selector::All, "b".into())
        );
        let (_, s, _) = parse_ref("a[k=2, j=x].b").unwrap();
        assert_eq!(
            s,
            Selector::Select([("j".into(), "x".into()), ("k".into(), "2".into())].into())
        );
        assert!(parse_ref("ab").is_err());
        assert!(parse_ref("a[k=2.b").is_err());
    }

    #[test]
    fn coercion_of_rendered_text() {
        assert_eq!(
            ParamType::Int.coerce(Value::String("4".into())).unwrap(),
            Value::from(4)
        );
        assert!(ParamType::Int.coerce(Value::String("four".into())).is_err());
        assert_eq!(
            ParamType::Float.coerce(Value::from(1)).unwrap(),
            serde_json::json!(1.0)
        );
        assert_eq!(parse_value_text("[1, 2]"), serde_json::json!([1, 2]));
        assert_eq!(
            parse_value_text("hi there"),
            Value::String("hi there".into())
        );
    }
}
