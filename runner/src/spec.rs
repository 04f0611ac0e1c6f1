//! `PipelineSpec`: what the TOML says, with spans. Parsing only; meaning is given in `model`.
//!
//! Unknown keys are errors (`deny_unknown_fields`), and every value that a later check may
//! reject keeps its span so the error points at it. One struct, [`RawStage`], serves a pipeline
//! stage, `[defaults]` and a definition's `[stage]` table; `model` says which keys each allows.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use toml::Spanned;

use crate::diag::{Diagnostic, Source};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineSpec {
    pub pipeline: Spanned<PipelineMeta>,
    #[serde(default)]
    pub params: BTreeMap<String, Spanned<toml::Value>>,
    /// A pool's size (`gpu = 1`) or `{ units = N, scope = "run" | "host" }`.
    #[serde(default)]
    pub resources: BTreeMap<String, Spanned<toml::Value>>,
    #[serde(default)]
    pub envs: BTreeMap<String, Spanned<EnvSpec>>,
    #[serde(default)]
    pub defaults: Option<Spanned<RawStage>>,
    #[serde(default)]
    pub stages: BTreeMap<Spanned<String>, Spanned<RawStage>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineMeta {
    pub name: Spanned<String>,
    #[serde(default)]
    pub description: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvSpec {
    /// A pip requirements file, relative to the project root.
    pub requirements: Spanned<String>,
    /// The interpreter that creates the venv (default `python3`).
    #[serde(default)]
    pub python: Option<String>,
}

/// A stage as written: in `[stages.NAME]`, in `[defaults]`, or in a definition's `[stage]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStage {
    pub description: Option<String>,
    pub uses: Option<Spanned<String>>,
    #[serde(rename = "with")]
    pub with_: Option<BTreeMap<Spanned<String>, Spanned<toml::Value>>>,
    pub run: Option<Spanned<RunSpec>>,
    pub inputs: Option<BTreeMap<Spanned<String>, Spanned<InputSpec>>>,
    pub outputs: Option<BTreeMap<Spanned<String>, Spanned<String>>>,
    pub matrix: Option<BTreeMap<Spanned<String>, Spanned<Vec<toml::Value>>>>,
    pub timeout: Option<Spanned<String>>,
    pub retries: Option<Spanned<i64>>,
    pub allow_failure: Option<bool>,
    /// `false`: never served from the cache (device measurements), still recorded.
    pub cache: Option<bool>,
    /// Its Markdown outputs are report tables: logbook entries and HTML reports embed them.
    pub report: Option<bool>,
    pub resources: Option<BTreeMap<Spanned<String>, Spanned<i64>>>,
    /// Name of an `[envs.NAME]` python environment.
    pub env: Option<Spanned<String>>,
    /// Environment variables for the command; they enter the cache key.
    pub vars: Option<BTreeMap<String, String>>,
    /// Host variables passed through; their values enter the cache key.
    pub pass_env: Option<Vec<Spanned<String>>>,
    // Container settings (the Docker executor).
    pub image: Option<Spanned<String>>,
    pub gpus: Option<Spanned<GpuSpec>>,
    pub devices: Option<Vec<String>>,
    pub network: Option<Spanned<String>>,
    pub shm_size: Option<Spanned<String>>,
    pub memory: Option<Spanned<String>>,
    pub cpus: Option<f64>,
    pub user: Option<String>,
    pub workdir: Option<String>,
    pub pull: Option<Spanned<String>>,
    pub docker_host: Option<String>,
    /// How the sandbox reaches the container: "auto" (bind mounts for a local engine, the
    /// archive API otherwise), "bind" or "archive".
    pub transfer: Option<Spanned<String>>,
    /// In a definition: helper files (relative to its folder) copied beside its scripts.
    pub include: Option<Vec<Spanned<String>>>,
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

impl GpuSpec {
    /// Parse a rendered value: "all", "none"/"", a count, or comma-separated ids.
    pub fn from_text(s: &str) -> Result<GpuSpec, String> {
        let s = s.trim();
        match s {
            "all" => Ok(GpuSpec::All),
            "none" | "" | "0" => Ok(GpuSpec::None),
            _ if s.chars().all(|c| c.is_ascii_digit()) => {
                Ok(GpuSpec::Count(s.parse().map_err(|e| format!("{e}"))?))
            }
            _ if s.starts_with('[') => {
                let v: Vec<String> = serde_json::from_str(s).map_err(|_| {
                    format!("gpus `{s}`: expected \"all\", \"none\", a count or ids")
                })?;
                Ok(GpuSpec::Ids(v))
            }
            _ => Err(format!(
                "gpus `{s}`: expected \"all\", \"none\", a count or an array of ids"
            )),
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
                GpuSpec::from_text(s).map_err(E::custom)
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

/// A stage definition file, `stages/<group>/<name>/stage.toml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageDefSpec {
    pub stage: Spanned<RawStage>,
    #[serde(default)]
    pub params: BTreeMap<Spanned<String>, Spanned<ParamDecl>>,
    #[serde(default)]
    pub inputs: BTreeMap<Spanned<String>, Spanned<InputDecl>>,
    #[serde(default)]
    pub outputs: BTreeMap<Spanned<String>, Spanned<toml::Value>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParamDecl {
    #[serde(rename = "type")]
    pub ty: Spanned<String>,
    pub default: Option<Spanned<toml::Value>>,
    pub description: Option<String>,
    /// Allowed values, for string params.
    pub choices: Option<Vec<toml::Value>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputDecl {
    pub description: Option<String>,
    #[serde(default)]
    pub optional: bool,
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
