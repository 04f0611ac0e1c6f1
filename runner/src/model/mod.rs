//! The validated pipeline: what the TOML means. Built from [`crate::spec`] by [`load`], which
//! resolves `uses` definitions, type-checks params, parses references and templates, and reports
//! every problem it finds with a position. Nothing here touches the cache or runs anything.
//!
//! The types live here; the loader is split by concern:
//! - [`loader`]: the pipeline file's own tables (`--set`, `[resources]`, `[envs]`) and the walk
//!   over stages, collecting every diagnostic;
//! - [`layers`]: the precedence stage > definition > `[defaults]`, one helper that returns a
//!   value with the file it came from, so each diagnostic quotes the right file;
//! - `stage`, `inputs`, `with`, `matrix`, `settings`, `container`: one part of a stage each;
//! - `definition`: `stages/<uses>/stage.toml`;
//! - [`value`] and [`refs`]: param values and the text forms (references, `run`).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use heddle_containers::PullPolicy;
use serde_json::Value;

use crate::diag::{Diagnostic, Diagnostics, Source};
use crate::spec::{self, GpuSpec, PipelineSpec};
use crate::template::Template;

mod container;
mod definition;
mod inputs;
mod layers;
mod loader;
mod matrix;
pub mod refs;
mod secrets;
mod settings;
mod stage;
#[cfg(test)]
mod tests;
pub mod value;
mod with;

pub use refs::{parse_ref, valid_name, Input, InputKind, RefError, RunTemplate, Selector};
pub use settings::Settings;
pub use value::{
    check_param, parse_value_text, toml_to_json, value_text, ParamDef, ParamType, ParamValueError,
};

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
    /// Pools declared `scope = "machine"`: units locked across every heddle on this machine.
    pub host_pools: BTreeSet<String>,
    pub envs: BTreeMap<String, EnvDef>,
    /// In file order.
    pub stages: Vec<Stage>,
    /// What loads but should be written otherwise (an old spelling), for the CLI to print.
    pub warnings: Vec<Diagnostic>,
    /// `[pipeline] cluster = "NAME"`: the cluster a run uses without `--cluster`.
    pub cluster: Option<ClusterChoice>,
}

/// A cluster the pipeline file names, and where (for "no such cluster" errors).
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterChoice {
    pub name: String,
    /// `file:line:col` of the value.
    pub at: String,
}

#[derive(Debug, Clone)]
pub struct EnvDef {
    pub name: String,
    /// Absolute path of the requirements file.
    pub requirements: PathBuf,
    pub python: String,
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
    pub network: Network,
    pub shm_size: Option<ByteSize>,
    pub memory: Option<ByteSize>,
    pub cpus: Option<f64>,
    pub user: Option<String>,
    pub workdir: Option<String>,
    pub pull: PullPolicy,
    pub docker_host: Option<String>,
    pub transfer: Transfer,
}

/// A size setting (`shm_size`, `memory`), parsed once where it is checked: the engine takes
/// the bytes; the cache key keeps the text as written, as it always has (so `"2g"` and
/// `"2048m"` are different keys, and no existing key moved when the parse moved here).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ByteSize {
    pub text: String,
    pub bytes: u64,
}

impl ByteSize {
    /// A size known only in bytes (a cluster job's description): its text is the number.
    pub fn of_bytes(bytes: u64) -> ByteSize {
        ByteSize {
            text: bytes.to_string(),
            bytes,
        }
    }
}

/// How a container stage's sandbox reaches the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transfer {
    /// Bind mounts for an engine on this machine (no `docker_host`, or `unix://`/`npipe://`);
    /// the archive API for any other (`tcp://`, `ssh://`), which cannot see heddle's files.
    #[default]
    Auto,
    Bind,
    Archive,
}

impl Transfer {
    /// Whether this stage copies its sandbox through the archive API on `docker_host`.
    pub fn uses_archive(self, docker_host: Option<&str>) -> bool {
        match self {
            Transfer::Bind => false,
            Transfer::Archive => true,
            Transfer::Auto => docker_host
                .is_some_and(|h| !(h.starts_with("unix://") || h.starts_with("npipe://"))),
        }
    }
}

/// A container's `network`: parsed at load, so a typo is a load-time error at the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// Loopback only (the default): a stage reaches the network only when it says so.
    None,
    Bridge,
    Host,
}

impl Network {
    pub fn parse(s: &str) -> Option<Network> {
        match s {
            "none" => Some(Network::None),
            "bridge" => Some(Network::Bridge),
            "host" => Some(Network::Host),
            _ => None,
        }
    }

    /// The TOML spelling, which is also what the cache key's executor identity holds.
    pub fn as_str(self) -> &'static str {
        match self {
            Network::None => "none",
            Network::Bridge => "bridge",
            Network::Host => "host",
        }
    }
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
    /// What the stage, its definition and `[defaults]` say, layered in that order.
    pub settings: Settings,
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
    #[error("failed to read pipeline {}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// `--set NAME=VALUE` for a param the pipeline does not declare; `known` are the ones
    /// it does, for a "did you mean".
    #[error(
        "--set {name}={value}: the pipeline has no param `{name}` ({})",
        did_you_mean_param(name, known)
    )]
    UnknownParam {
        name: String,
        value: String,
        known: Vec<String>,
    },
    /// `--set NAME=VALUE` whose value is not of the param's type (any text is a string).
    #[error(
        "--set {name}={value}: param `{name}` is {} {}",
        article(ty.name()),
        ty.name()
    )]
    WrongType {
        name: String,
        value: String,
        ty: ParamType,
    },
}

fn did_you_mean_param(name: &str, known: &[String]) -> String {
    crate::diag::did_you_mean(name, known, || {
        if known.is_empty() {
            "params: none".into()
        } else {
            format!("params: {}", known.join(", "))
        }
    })
}

/// "an int", "a string".
fn article(word: &str) -> &'static str {
    if word.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    }
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
    let lib_base = opts
        .stage_lib
        .clone()
        .unwrap_or_else(|| crate::stage_lib::default_base(&root));
    loader::Loader::new(source, root, lib_base).load(spec, file, opts)
}
