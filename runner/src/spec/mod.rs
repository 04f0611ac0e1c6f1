//! `PipelineSpec`: what the TOML says, with spans. Parsing only; meaning is given in `model`.
//!
//! Unknown keys are errors (`deny_unknown_fields`), and every value that a later check may
//! reject keeps its span so the error points at it. One struct, [`RawStage`], serves a pipeline
//! stage, `[defaults]` and a definition's `[stage]` table; `model` says which keys each allows
//! ([`NOT_IN_DEFAULTS`], [`NOT_IN_DEFINITION`], [`ONLY_IN_DEFINITION`]).
//!
//! The same types derive the JSON Schema editors complete and validate these files with
//! ([`crate::spec_schema`]): a field's doc comment is the hover text a user reads, so it says
//! what to write, not how heddle stores it. `Spanned` and `toml::Value` have no schema of their
//! own; `#[schemars(with = ...)]` names the type a user writes instead.

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use toml::Spanned;

use crate::diag::{Diagnostic, Source};
pub mod schema;

use schema::{
    AnyValue, DefaultsTable, DefinitionStage, MatrixValue, NetworkName, ParamTypeName,
    PipelineStage, PoolValue, PullPolicyName, TransferName,
};

/// A heddle pipeline file (`pipelines/NAME.toml`): `[pipeline]`, optional `[params]`,
/// `[resources]`, `[envs.NAME]` and `[defaults]`, and its `[stages.NAME]`. Reference:
/// docs/pipeline-format.md.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "heddle pipeline")]
pub struct PipelineSpec {
    /// The pipeline's name (and an optional description).
    #[schemars(with = "PipelineMeta")]
    pub pipeline: Spanned<PipelineMeta>,
    /// Values that templates read as `{{ params.NAME }}` and `heddle run --set NAME=VALUE`
    /// replaces for one run (the new value keeps the param's type). Only the params a stage's
    /// command names (with `uses`: every param of its definition) enter its cache key.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, AnyValue>")]
    pub params: BTreeMap<String, Spanned<toml::Value>>,
    /// Named pools of units that stages hold while they run: a pool's size (`gpu = 1`, held
    /// within one run) or `{ units = N, scope = "run" | "machine" }` (`machine`: shared by
    /// every heddle process on the machine; `"host"` is its old spelling, warned about).
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, PoolValue>")]
    pub resources: BTreeMap<String, Spanned<toml::Value>>,
    /// Python virtual environments heddle provisions (once per requirements content); a stage
    /// names one with `env = "NAME"`.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, EnvSpec>")]
    pub envs: BTreeMap<String, Spanned<EnvSpec>>,
    /// Settings every stage inherits (a stage's own, then its definition's, win).
    #[serde(default)]
    #[schemars(with = "Option<DefaultsTable>")]
    pub defaults: Option<Spanned<RawStage>>,
    /// The stages, run in dependency order: one instance per `matrix` combination.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, PipelineStage>")]
    pub stages: BTreeMap<Spanned<String>, Spanned<RawStage>>,
}

/// `[pipeline]`: what the pipeline is called.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PipelineMeta {
    /// The pipeline's name (letters, digits, `-`, `_`): it names `out/<name>/`, the lock file
    /// and run records.
    #[schemars(with = "String", regex(pattern = r"^[A-Za-z0-9_-]+$"))]
    pub name: Spanned<String>,
    /// Free text.
    #[serde(default)]
    pub description: Option<String>,
    /// Run every miss on this cluster (`[clusters.NAME]` in hosts.toml), as `heddle run
    /// --cluster NAME` does; the flag wins. Not part of any cache key.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub cluster: Option<Spanned<String>>,
}

/// `[envs.NAME]`: a python virtual environment, put first on `PATH` for the stages that name it.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EnvSpec {
    /// A pip requirements file, relative to the project root; a `stages/…` path the project
    /// lacks comes from heddle's shipped stage library.
    #[schemars(with = "String")]
    pub requirements: Spanned<String>,
    /// The interpreter that creates the venv (default `python3`).
    #[serde(default)]
    pub python: Option<String>,
}

/// Keys that say what one stage is rather than how stages run: `[defaults]` cannot set them.
pub const NOT_IN_DEFAULTS: [&str; 7] = [
    "uses", "with", "inputs", "outputs", "matrix", "run", "include",
];
/// Keys a definition's `[stage]` cannot set: a definition declares its params, inputs and
/// outputs as tables of their own, and a stage that uses it binds them.
pub const NOT_IN_DEFINITION: [&str; 5] = ["uses", "with", "inputs", "outputs", "matrix"];
/// Keys only a definition's `[stage]` sets.
pub const ONLY_IN_DEFINITION: [&str; 1] = ["include"];

/// A stage as written: in `[stages.NAME]`, in `[defaults]`, or in a definition's `[stage]`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawStage {
    /// Free text (for a definition, `heddle stages list` shows its first sentence).
    pub description: Option<String>,
    /// A stage definition, `"group/name"`: `stages/group/name/stage.toml` in the project, else
    /// heddle's shipped library (`heddle stages list`). It gives `run` and declares the params,
    /// inputs and outputs.
    #[schemars(with = "Option<String>")]
    pub uses: Option<Spanned<String>>,
    /// Values for the definition's params (needs `uses`). A literal is checked against the
    /// param's type and `choices`; a string holding `{{ params.NAME }}` or `{{ matrix.KEY }}`
    /// is rendered and checked per instance.
    #[serde(rename = "with")]
    #[schemars(with = "Option<BTreeMap<String, AnyValue>>")]
    pub with_: Option<BTreeMap<Spanned<String>, Spanned<toml::Value>>>,
    /// The command, run once per instance. A string is shell form (every template value is
    /// shell-quoted); an array is exec form, the program and its arguments. Templates:
    /// `{{ params.NAME }}`, `{{ matrix.KEY }}`, `{{ in.NAME }}`, `{{ out.NAME }}`,
    /// `{{ stage.dir }}`, `{{ instance }}`.
    #[schemars(with = "Option<RunSpec>")]
    pub run: Option<Spanned<RunSpec>>,
    /// Inputs: `NAME = "stage.output"` (or `"stage[*].output"` to gather every instance,
    /// `"stage[k=v].output"` to select some), or `NAME = { path = "repo/file" }` for a file or
    /// folder in the project.
    #[schemars(with = "Option<BTreeMap<String, InputSpec>>")]
    pub inputs: Option<BTreeMap<Spanned<String>, Spanned<InputSpec>>>,
    /// Outputs: `NAME = "file"`, a plain file or folder name (no `/`) the command writes. Not
    /// with `uses`: the definition declares them.
    #[schemars(with = "Option<BTreeMap<String, String>>")]
    pub outputs: Option<BTreeMap<Spanned<String>, Spanned<String>>>,
    /// `KEY = [values]`: one instance per combination; values are strings, numbers or booleans,
    /// each once.
    #[schemars(with = "Option<BTreeMap<String, Vec<MatrixValue>>>")]
    pub matrix: Option<BTreeMap<Spanned<String>, Spanned<Vec<toml::Value>>>>,
    /// A duration such as `"90s"`, `"10m"`, `"2h"`: the stage's process tree (or container) is
    /// killed after it.
    #[schemars(with = "Option<String>")]
    pub timeout: Option<Spanned<String>>,
    /// Extra attempts after a failure (0–100, default 0).
    #[schemars(with = "Option<u32>", range(max = 100))]
    pub retries: Option<Spanned<i64>>,
    /// `true`: a failure becomes a status record that downstream stages see, and the run goes
    /// on (default `false`).
    pub allow_failure: Option<bool>,
    /// `false`: never served from the cache (device measurements), still recorded (default
    /// `true`).
    pub cache: Option<bool>,
    /// `false`: runs on this machine even when the run hands its misses to a cluster
    /// (`--cluster`, `[pipeline] cluster`): a stage that needs a device plugged in here, or a
    /// quick one not worth a job (default `true`). Not part of any cache key.
    pub cluster: Option<bool>,
    /// `true`: its Markdown outputs are report tables and its `*.plots.json` outputs plots
    /// (logbook entries, HTML reports, `heddle diff`, `heddle runs`).
    pub report: Option<bool>,
    /// `POOL = N`: units of a `[resources]` pool held while the stage runs.
    #[schemars(with = "Option<BTreeMap<String, u32>>")]
    pub resources: Option<BTreeMap<Spanned<String>, Spanned<i64>>>,
    /// Name of an `[envs.NAME]` python environment (not with `image`).
    #[schemars(with = "Option<String>")]
    pub env: Option<Spanned<String>>,
    /// Environment variables for the command; their values enter the cache key as sha256
    /// digests (never as text: not in a lock file, a run record or a cache entry).
    pub vars: Option<BTreeMap<String, String>>,
    /// Host variables passed through; their values enter the cache key as sha256 digests. A
    /// name that looks like a secret (`*TOKEN*`, `*SECRET*`, `*PASSWORD*`, `*KEY*`, `AWS_*`,
    /// ...) is refused: pass it with `secret_env`.
    #[schemars(with = "Option<Vec<String>>")]
    pub pass_env: Option<Vec<Spanned<String>>>,
    /// Host variables passed through as secrets: the value reaches the command but never a
    /// cache key, a lock file, a run record, a log (heddle writes `***` for it) or an output
    /// (a stage whose output holds the value fails). The stage's result must not depend on
    /// which secret it was given: changing the value does not rerun it.
    #[schemars(with = "Option<Vec<String>>")]
    pub secret_env: Option<Vec<Spanned<String>>>,
    // Container settings (the Docker executor).
    /// An image reference (templates allowed): the stage runs in a container through the Docker
    /// Engine API, and the image id enters the cache key.
    #[schemars(with = "Option<String>")]
    pub image: Option<Spanned<String>>,
    /// GPUs requested from the engine: `"all"`, `"none"`, a count, an array of device ids, or a
    /// template such as `"{{ params.gpus }}"` that renders to one of those.
    #[schemars(with = "Option<GpuSpec>")]
    pub gpus: Option<Spanned<GpuSpec>>,
    /// Host devices as `docker run --device` takes them: `"/dev/x"`, `"/dev/x:/dev/y"`,
    /// `"/dev/x:/dev/y:rwm"`.
    pub devices: Option<Vec<String>>,
    /// The container's network (default `"none"`).
    #[schemars(with = "Option<NetworkName>")]
    pub network: Option<Spanned<String>>,
    /// Shared memory size such as `"2g"` or `"512m"` (default: the engine's).
    #[schemars(with = "Option<String>")]
    pub shm_size: Option<Spanned<String>>,
    /// Memory limit such as `"8g"` (default: none).
    #[schemars(with = "Option<String>")]
    pub memory: Option<Spanned<String>>,
    /// CPUs the container may use (default: no limit).
    pub cpus: Option<f64>,
    /// `uid[:gid]` or a user name inside the image (default: the invoking user).
    pub user: Option<String>,
    /// The command's working folder in the container (default `/heddle/work`).
    pub workdir: Option<String>,
    /// When `heddle run` may pull the image from a registry (default `"never"`).
    #[schemars(with = "Option<PullPolicyName>")]
    pub pull: Option<Spanned<String>>,
    /// The engine's address: `unix://…`, `tcp://…`, `ssh://…` (default: the local engine).
    pub docker_host: Option<String>,
    /// How the sandbox reaches the container: "auto" (bind mounts for a local engine, the
    /// archive API otherwise), "bind" or "archive".
    #[schemars(with = "Option<TransferName>")]
    pub transfer: Option<Spanned<String>>,
    /// In a definition: helper files (relative to its folder, e.g. `"../../lib/helper.py"`)
    /// copied beside its scripts; their bytes enter the key.
    #[schemars(with = "Option<Vec<String>>")]
    pub include: Option<Vec<Spanned<String>>>,
}

impl RawStage {
    /// Whether the stage sets `key` (one of [`NOT_IN_DEFAULTS`]: the keys a context may forbid).
    pub fn sets(&self, key: &str) -> bool {
        match key {
            "uses" => self.uses.is_some(),
            "with" => self.with_.is_some(),
            "inputs" => self.inputs.is_some(),
            "outputs" => self.outputs.is_some(),
            "matrix" => self.matrix.is_some(),
            "run" => self.run.is_some(),
            "include" => self.include.is_some(),
            other => unreachable!("RawStage::sets({other}): not a key a context forbids"),
        }
    }
}

/// `run = "shell string"` or `run = ["exec", "form"]`.
#[derive(Debug, Clone, PartialEq)]
pub enum RunSpec {
    Shell(String),
    Exec(Vec<String>),
}

impl<'de> Deserialize<'de> for RunSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RunSpec;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a shell command string or an array of strings (exec form)")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<RunSpec, E> {
                Ok(RunSpec::Shell(s.to_string()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RunSpec, A::Error> {
                let mut v = Vec::new();
                while let Some(s) = seq.next_element::<String>()? {
                    v.push(s);
                }
                if v.is_empty() {
                    return Err(de::Error::custom(
                        "exec-form `run` needs at least a program",
                    ));
                }
                Ok(RunSpec::Exec(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// An input: `"stage.output"` (with `[*]` or `[k=v]` selectors) or `{ path = "repo/file" }`.
#[derive(Debug, Clone, PartialEq)]
pub enum InputSpec {
    Ref(String),
    Path(String),
}

impl<'de> Deserialize<'de> for InputSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = InputSpec;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a reference like \"stage.output\" or a table { path = \"file\" }")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<InputSpec, E> {
                Ok(InputSpec::Ref(s.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<InputSpec, A::Error> {
                let mut path = None;
                while let Some(k) = map.next_key::<String>()? {
                    match k.as_str() {
                        "path" => path = Some(map.next_value::<String>()?),
                        other => {
                            return Err(de::Error::unknown_field(other, &["path"]));
                        }
                    }
                }
                path.map(InputSpec::Path)
                    .ok_or_else(|| de::Error::missing_field("path"))
            }
        }
        d.deserialize_any(V)
    }
}

/// `gpus = "all" | "none" | 2 | ["0", "1"]`, or a template such as `"{{ params.gpus }}"` that
/// renders to one of those per instance (so a GPU-less machine can turn them off with `--set`).
#[derive(Debug, Clone, PartialEq)]
pub enum GpuSpec {
    None,
    All,
    Count(i64),
    Ids(Vec<String>),
    Template(String),
}

/// A `gpus` value that is none of the forms [`GpuSpec`] takes.
#[derive(Debug, thiserror::Error)]
pub enum GpuSpecError {
    #[error("gpus `{text}`: failed to read the count")]
    Count {
        text: String,
        #[source]
        source: std::num::ParseIntError,
    },
    #[error("gpus `{text}`: expected \"all\", \"none\", a count or an array of ids")]
    Ids {
        text: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("gpus `{text}`: expected \"all\", \"none\", a count or an array of ids")]
    Other { text: String },
}

impl GpuSpec {
    /// Parse a rendered value: "all", "none"/"", a count, or comma-separated ids.
    pub fn from_text(s: &str) -> Result<GpuSpec, GpuSpecError> {
        let s = s.trim();
        match s {
            "all" => Ok(GpuSpec::All),
            "none" | "" | "0" => Ok(GpuSpec::None),
            _ if s.chars().all(|c| c.is_ascii_digit()) => {
                s.parse()
                    .map(GpuSpec::Count)
                    .map_err(|source| GpuSpecError::Count {
                        text: s.into(),
                        source,
                    })
            }
            _ if s.starts_with('[') => {
                serde_json::from_str(s)
                    .map(GpuSpec::Ids)
                    .map_err(|source| GpuSpecError::Ids {
                        text: s.into(),
                        source,
                    })
            }
            _ => Err(GpuSpecError::Other { text: s.into() }),
        }
    }
}

impl<'de> Deserialize<'de> for GpuSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = GpuSpec;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("\"all\", \"none\", a count, or an array of device ids")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<GpuSpec, E> {
                if s.contains("{{") {
                    return Ok(GpuSpec::Template(s.to_string()));
                }
                GpuSpec::from_text(s).map_err(|e| E::custom(heddle_cache::error_chain(&e)))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<GpuSpec, E> {
                Ok(GpuSpec::Count(n))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<GpuSpec, E> {
                Ok(GpuSpec::Count(n as i64))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<GpuSpec, A::Error> {
                let mut v = Vec::new();
                while let Some(s) = seq.next_element::<String>()? {
                    v.push(s);
                }
                Ok(GpuSpec::Ids(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// A heddle stage definition (`stages/<group>/<name>/stage.toml`): a reusable stage. `[stage]`
/// holds `run` and the settings it gives the stages that use it; `[params]`, `[inputs]` and
/// `[outputs]` declare what a stage binds. Reference: docs/pipeline-format.md.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "heddle stage definition")]
pub struct StageDefSpec {
    /// `run` and the settings the definition gives its stages (a stage's own settings win,
    /// `[defaults]` comes after).
    #[schemars(with = "DefinitionStage")]
    pub stage: Spanned<RawStage>,
    /// Typed params a stage sets with `with = { NAME = value }`; `run` reads them as
    /// `{{ params.NAME }}`.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, ParamDecl>")]
    pub params: BTreeMap<Spanned<String>, Spanned<ParamDecl>>,
    /// The inputs a stage binds with `inputs = { NAME = "stage.output" }`.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, InputDecl>")]
    pub inputs: BTreeMap<Spanned<String>, Spanned<InputDecl>>,
    /// `NAME = "file"`: the files or folders the command writes, `{{ out.NAME }}` in `run`.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, String>")]
    pub outputs: BTreeMap<Spanned<String>, Spanned<toml::Value>>,
}

/// `[params.NAME]`: a typed param of a definition.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ParamDecl {
    /// The param's type: `"string"`, `"int"`, `"float"`, `"bool"`, `"list"` or `"table"` (also
    /// `str`, `integer`, `number`, `boolean`, `array`, `map`).
    #[serde(rename = "type")]
    #[schemars(with = "ParamTypeName")]
    pub ty: Spanned<String>,
    /// A value of that type; without one, every stage that uses the definition must set it in
    /// `with`.
    #[schemars(with = "Option<AnyValue>")]
    pub default: Option<Spanned<toml::Value>>,
    /// What the param does (`heddle stages show` prints it).
    pub description: Option<String>,
    /// Allowed values, for string params.
    #[schemars(with = "Option<Vec<AnyValue>>")]
    pub choices: Option<Vec<toml::Value>>,
}

/// `[inputs.NAME]`: an input a stage binds.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InputDecl {
    /// What the input is (`heddle stages show` prints it).
    pub description: Option<String>,
    /// `true`: a stage may leave it unbound (default `false`).
    #[serde(default)]
    pub optional: bool,
}

/// The file's bytes after a `#:schema <path or URL>` first line (the directive taplo and Even
/// Better TOML read to find a file's JSON Schema), or all of them when it has none.
pub fn without_schema_directive(bytes: &[u8]) -> &[u8] {
    if !bytes.starts_with(b"#:schema") {
        return bytes;
    }
    match bytes.iter().position(|b| *b == b'\n') {
        Some(i) => &bytes[i + 1..],
        None => &[],
    }
}

/// Parse TOML text into `T`, turning a syntax or shape error into a positioned diagnostic.
pub fn parse<T: for<'de> Deserialize<'de>>(src: &Source) -> Result<T, Diagnostic> {
    toml::from_str::<T>(&src.text).map_err(|e| {
        let msg = e.message().trim().to_string();
        let span = e.span();
        if let Some((field, near)) = unknown_field_suggestion(&msg) {
            return src
                .error(span, format!("unknown field `{field}`"))
                .with_help(format!(
                    "did you mean `{near}`? (every key: docs/pipeline-format.md)"
                ));
        }
        let mut d = src.error(span, msg.clone());
        if msg.contains("unknown field") {
            d = d.with_help("see docs/pipeline-format.md for the keys a stage accepts");
        }
        d
    })
}

/// From serde's "unknown field `timout`, expected one of `timeout`, ...": the field and the
/// accepted key nearest to it, when one is near enough to be what was meant.
fn unknown_field_suggestion(msg: &str) -> Option<(&str, &str)> {
    let rest = msg.strip_prefix("unknown field `")?;
    let (field, expected) = rest.split_once('`')?;
    let accepted = expected.split('`').skip(1).step_by(2);
    Some((field, crate::diag::nearest(field, accepted)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(t: &str) -> Source {
        Source::new("t.toml", t)
    }

    #[test]
    fn run_accepts_shell_and_exec_forms() {
        let p: PipelineSpec = parse(&src(
            "[pipeline]\nname='x'\n[stages.a]\nrun='echo'\n[stages.b]\nrun=['python','x.py']\n",
        ))
        .unwrap();
        let runs: Vec<_> = p
            .stages
            .values()
            .map(|s| s.get_ref().run.as_ref().unwrap().get_ref().clone())
            .collect();
        assert_eq!(runs[0], RunSpec::Shell("echo".into()));
        assert_eq!(runs[1], RunSpec::Exec(vec!["python".into(), "x.py".into()]));
    }

    #[test]
    fn unknown_key_points_at_it() {
        let e = parse::<PipelineSpec>(&src("[pipeline]\nname='x'\n[stages.a]\nrun='x'\nrnu='y'\n"))
            .unwrap_err();
        assert_eq!((e.line, e.col), (5, 1), "{e}");
        assert!(e.message.contains("unknown field"), "{e}");
    }

    #[test]
    fn duplicate_stage_is_a_toml_error_with_position() {
        let e = parse::<PipelineSpec>(&src(
            "[pipeline]\nname='x'\n[stages.a]\nrun='x'\n[stages.a]\nrun='y'\n",
        ))
        .unwrap_err();
        assert_eq!(e.line, 5, "{e}");
    }

    #[test]
    fn input_forms() {
        let p: PipelineSpec = parse(&src(
            "[pipeline]\nname='x'\n[stages.a]\nrun='x'\ninputs={a='b.c', d={path='f'}}\n",
        ))
        .unwrap();
        let s = p.stages.values().next().unwrap().get_ref();
        let ins: Vec<_> = s
            .inputs
            .as_ref()
            .unwrap()
            .values()
            .map(|v| v.get_ref().clone())
            .collect();
        assert_eq!(
            ins,
            vec![InputSpec::Ref("b.c".into()), InputSpec::Path("f".into())]
        );
    }
}
