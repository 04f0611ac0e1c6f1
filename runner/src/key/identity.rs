//! What enters a key for each thing that can change a result besides the command and the
//! plan's own values: a variable's value (as a digest), where the command runs (the executor),
//! and each input (a digest, or a gather's members).

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use heddle_cache::Digest;
use heddle_containers::{GpuRequest, NetworkMode};

use crate::exec::ContainerRequest;
use crate::inputs::Resolved;

/// A variable's value as it enters the key: `{"sha256": "<hex>"}`, never the text. A digest
/// of a guessable value can be guessed; a secret belongs in `secret_env`, which is not in the
/// key at all.
pub fn var_identity(value: &str) -> Value {
    json!({ "sha256": Digest::of_bytes(value.as_bytes()).to_string() })
}

/// Where a command runs, as it enters the key: `{"kind":"host"}`, or `{"kind":"docker", ...}`
/// with the image id (not the tag) and every container setting that can change a result.
/// Fields are in the order of the key format's first (untyped) spelling.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ExecutorIdentity {
    Host,
    Docker(Box<DockerIdentity>),
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DockerIdentity {
    /// `None` when the reference could not be resolved (a preview without an engine).
    pub image_id: Option<String>,
    pub gpus: Option<GpuIdentity>,
    pub devices: Vec<String>,
    pub network: String,
    pub shm_size: Option<String>,
    pub memory: Option<String>,
    pub cpus: Option<f64>,
    pub user: Option<String>,
    pub workdir: Option<String>,
}

/// GPUs as they enter the key: spelled out (`"none"`, `"all"`, a count, ids), not through a
/// Debug derive that could change.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum GpuIdentity {
    Word(&'static str),
    Count(i64),
    Ids(Vec<String>),
}

impl ExecutorIdentity {
    /// The identity of the request the command runs with. Every field of the request is
    /// named: a new one fails to compile here until it is keyed or excluded with its reason.
    pub fn of(container: Option<&ContainerRequest>) -> ExecutorIdentity {
        let Some(req) = container else {
            return ExecutorIdentity::Host;
        };
        let ContainerRequest {
            image_id,
            image_resolved,
            gpus,
            devices,
            network,
            shm_size,
            memory,
            cpus,
            user,
            workdir,
            // Which engine runs it and how the sandbox travels there: the same image and
            // settings give the same result on any engine.
            docker_host: _,
            transfer: _,
            // Set when the instance is placed, after it is keyed.
            placed_on: _,
            holds: _,
        } = req;
        ExecutorIdentity::Docker(Box::new(DockerIdentity {
            image_id: image_resolved.then(|| image_id.clone()),
            gpus: gpus.as_ref().map(GpuIdentity::of),
            devices: devices.clone(),
            network: match network {
                NetworkMode::None => "none",
                NetworkMode::Bridge => "bridge",
                NetworkMode::Host => "host",
            }
            .to_string(),
            shm_size: shm_size.as_ref().map(|s| s.text.clone()),
            memory: memory.as_ref().map(|s| s.text.clone()),
            cpus: *cpus,
            user: user.clone(),
            workdir: workdir.clone(),
        }))
    }
}

impl GpuIdentity {
    fn of(g: &GpuRequest) -> GpuIdentity {
        match g {
            GpuRequest::None => GpuIdentity::Word("none"),
            GpuRequest::All => GpuIdentity::Word("all"),
            GpuRequest::Count(n) => GpuIdentity::Count(i64::from(*n)),
            GpuRequest::Ids(v) => GpuIdentity::Ids(v.clone()),
        }
    }
}

/// An input as it enters the key: a digest, or per gather member its folder, status and digest
/// (or its error and cause, for an allowed failure).
///
/// Kept as JSON text: the record holds it until the run ends, and a gather's, as a `Value`,
/// was an object (a `BTreeMap` node of ~630 bytes) per member, 700 MB for a million members.
/// The text is what the `Value` printed, byte for byte: the members' fields are printed in
/// the order a `Value` object sorts them, `null` where it had `null`.
pub(super) fn input_identity(r: &Resolved) -> Box<RawValue> {
    match r {
        Resolved::Path { digest, .. } => raw_json(&Hex(*digest)),
        Resolved::One { entry, .. } => raw_json(&Hex(entry.digest())),
        Resolved::Gather { members, .. } => {
            let identities = members.iter().map(|m| match &m.entry {
                Some(e) => MemberIdentity::Ok {
                    digest: Hex(e.digest()),
                    member: &m.dir,
                    status: m.outcome(),
                },
                None => MemberIdentity::Failed {
                    cause: m
                        .not_ok
                        .as_ref()
                        .and_then(|s| s.cause.as_ref())
                        .map(|c| c.label.as_str()),
                    error: m.not_ok.as_ref().and_then(|s| s.error.as_deref()),
                    member: &m.dir,
                    status: m.outcome(),
                },
            });
            let mut text = Vec::with_capacity(members.len() * 100 + 2);
            use serde::Serializer as _;
            let mut out = serde_json::Serializer::new(&mut text);
            (&mut out)
                .collect_seq(identities)
                .expect("member identities serialise");
            let text = String::from_utf8(text).expect("serde_json writes UTF-8");
            RawValue::from_string(text).expect("serde_json wrote JSON")
        }
    }
}

/// One gather member as it enters the key, fields in sorted order (see [`input_identity`]).
#[derive(Serialize)]
#[serde(untagged)]
enum MemberIdentity<'a> {
    Ok {
        digest: Hex,
        member: &'a str,
        status: crate::record::Status,
    },
    Failed {
        cause: Option<&'a str>,
        error: Option<&'a str>,
        member: &'a str,
        status: crate::record::Status,
    },
}

/// A digest printed as its hex string, without a `String` of it first.
struct Hex(Digest);

impl Serialize for Hex {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

fn raw_json(v: &impl Serialize) -> Box<RawValue> {
    serde_json::value::to_raw_value(v).expect("an identity serialises")
}
