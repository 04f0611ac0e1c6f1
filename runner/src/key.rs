//! Cache keys and the reasons an instance must run.
//!
//! A key is sha256 over a domain tag and the canonical JSON of [`KeyParts`]: one field per thing
//! that can change a result, maps as `BTreeMap` so the encoding is canonical. The expanded parts
//! are stored beside every action entry, so a miss is explained by diffing against the nearest
//! earlier entry of the same stage ([`crate::explain`], within a budget).
//!
//! [`KeyView::for_launch`] is the one place an instance's key is assembled.

use std::collections::BTreeMap;

use heddle_cache::Digest;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};

use heddle_containers::{GpuRequest, NetworkMode};
use heddle_schema::VecMap;

use crate::exec::ContainerRequest;
use crate::inputs::{member_ok_fn, Resolved};
use crate::launch::Launch;
use crate::model::Stage;
use crate::plan::Plan;
use crate::prepare::Context;
use crate::render::{render, Command, PathLayout};
pub use heddle_schema::{Change, Reason};

/// Bump when the encoding of [`KeyParts`] changes: every old entry becomes a miss.
/// v1: first format.
/// v1, issue 23: a `vars` value is `{"sha256": "<hex>"}` instead of its text, so no value (a
/// passed-through `pass_env` variable in particular) is stored in an entry, a lock or a
/// record. Not bumped, on purpose: a key without variables is byte for byte what it was, and
/// one with variables cannot equal any earlier key (a v1 value was always a JSON string, now
/// it is an object), which is all a bump would guarantee. Bumping would have made every cached
/// instance of every team (and every committed lock) a miss for a change that touches only
/// stages with variables.
pub const KEY_VERSION: &str = "heddle/action/v1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyParts {
    pub version: String,
    pub stage: String,
    /// The command rendered with the container layout (`/heddle/in/...`), so no host path enters.
    pub command: Command,
    /// `{"kind":"host"}` or the container's image id and device/GPU/limit settings: an
    /// [`ExecutorIdentity`] as JSON. Kept as data because parts are also read back from entries
    /// and lock files written by other heddle versions, and compared field by field.
    pub executor: Value,
    /// Relative path → digest of every file in the `uses` folder.
    pub definition: BTreeMap<String, String>,
    /// Input name → digest, or for a gather the members' digests and statuses.
    pub inputs: BTreeMap<String, Value>,
    pub params: BTreeMap<String, Value>,
    pub matrix: BTreeMap<String, Value>,
    /// Declared variables (`NAME`) and passed-through host variables (`$NAME`), each with the
    /// digest of its value ([`var_identity`]). Entries written before issue 23 hold the text.
    pub vars: BTreeMap<String, Value>,
    /// The python environment's identity (its resolved package set), if any.
    pub env: Option<String>,
    pub outputs: BTreeMap<String, String>,
}

impl KeyParts {
    /// The key of instance `id` of `ctx`'s plan, given its resolved inputs (a preview's, or a
    /// test's: a run builds the [`Launch`] once and keys it with [`KeyView::for_launch`]).
    pub fn for_instance(ctx: &Context, id: usize, inputs: &BTreeMap<String, Resolved>) -> KeyParts {
        let view = KeyView::for_launch(ctx, id, inputs, &Launch::for_instance(ctx, id));
        let parts = view.to_parts();
        // A run keys the view, the pins below check these parts: they must be one key.
        debug_assert_eq!(
            view.digest_and_text().1.get(),
            parts.digest_and_text().1.get()
        );
        parts
    }

    pub fn digest(&self) -> Digest {
        self.digest_and_text().0
    }

    /// The key and the JSON text it is the hash of (`KEY_VERSION`, a NUL, then this text),
    /// serialised once for both: a run keeps the text in each instance's record, and a second
    /// serialisation per instance was a visible share of a no-op run of a large matrix.
    pub fn digest_and_text(&self) -> (Digest, Box<serde_json::value::RawValue>) {
        digest_and_text(self)
    }
}

/// An instance's [`KeyParts`] as a run keys it: borrowed from the plan and the context where
/// they hold the value already. A no-op run keys every instance and keeps none of the parts
/// (its record keeps their text), so copying each instance's params, matrix, outputs and
/// definition into an owned [`KeyParts`] only to print them was pure cost. The fields are
/// [`KeyParts`]'s, in its order, each serialising as its owned counterpart does, so the text
/// and the key are the same bytes ([`KeyParts::for_instance`] checks it under the key pins).
#[derive(Serialize)]
pub struct KeyView<'a> {
    version: &'static str,
    stage: &'a str,
    command: Command,
    executor: ExecutorKey,
    definition: &'a BTreeMap<String, String>,
    inputs: VecMap<Box<RawValue>>,
    params: &'a BTreeMap<String, Value>,
    matrix: &'a VecMap<Value>,
    vars: BTreeMap<String, Value>,
    env: Option<&'a str>,
    outputs: &'a BTreeMap<String, String>,
}

/// What a stage without a `uses` folder keys as its definition.
static NO_DEFINITION: BTreeMap<String, String> = BTreeMap::new();

impl<'a> KeyView<'a> {
    /// The key of instance `id`, launched with `launch`: the same value its command is run
    /// with.
    pub fn for_launch(
        ctx: &'a Context,
        id: usize,
        inputs: &BTreeMap<String, Resolved>,
        launch: &Launch,
    ) -> KeyView<'a> {
        let plan = &ctx.plan;
        let inst = &plan.instances[id];
        let stage = plan.stage_of(id);
        let ok = member_ok_fn(inputs);
        let command = render(plan, inst, &PathLayout::virtual_root(), &ok)
            .expect("templates were checked at plan time");
        let mut vars: BTreeMap<String, Value> = stage
            .settings
            .vars
            .iter()
            .map(|(k, v)| (k.clone(), var_identity(v)))
            .collect();
        for (k, v) in &launch.passed_env {
            // An unset variable is keyed as empty, as it has been since the first key format
            // (the command runs without it): keying it apart would move every such key.
            vars.insert(format!("${k}"), var_identity(v.as_deref().unwrap_or("")));
        }
        // `secret_env` never enters the key: a stage's result must not depend on its secret.
        let executor = match launch.container.as_ref() {
            None => ExecutorKey::Host,
            c => ExecutorKey::Other(
                serde_json::to_value(ExecutorIdentity::of(c))
                    .expect("executor identity serialises"),
            ),
        };
        KeyView {
            version: KEY_VERSION,
            stage: &stage.name,
            command,
            executor,
            definition: stage
                .def
                .as_ref()
                .and_then(|d| ctx.definitions.get(&d.uses))
                .unwrap_or(&NO_DEFINITION),
            inputs: inputs
                .iter()
                .map(|(k, r)| (k.clone(), input_identity(r)))
                .collect(),
            params: &inst.params,
            matrix: &inst.matrix,
            vars,
            env: stage
                .settings
                .env
                .as_ref()
                .and_then(|e| ctx.envs.get(e))
                .map(|e| e.identity.as_str()),
            outputs: &stage.outputs,
        }
    }

    /// The key and its text, as [`KeyParts::digest_and_text`].
    pub fn digest_and_text(&self) -> (Digest, Box<serde_json::value::RawValue>) {
        digest_and_text(self)
    }

    /// The owned parts (a miss explains itself with them and stores them in its entry).
    pub fn to_parts(&self) -> KeyParts {
        KeyParts {
            version: self.version.into(),
            stage: self.stage.into(),
            command: self.command.clone(),
            executor: match &self.executor {
                ExecutorKey::Host => serde_json::to_value(ExecutorIdentity::Host)
                    .expect("executor identity serialises"),
                ExecutorKey::Other(v) => v.clone(),
            },
            definition: self.definition.clone(),
            inputs: self
                .inputs
                .iter()
                .map(|(k, v)| {
                    let v = serde_json::from_str(v.get()).expect("an identity is JSON");
                    (k.clone(), v)
                })
                .collect(),
            params: self.params.clone(),
            matrix: self.matrix.to_btree(),
            vars: self.vars.clone(),
            env: self.env.map(str::to_string),
            outputs: self.outputs.clone(),
        }
    }

    /// The inputs' identities, moved into the record of a hit (whose parts are not kept).
    pub fn into_inputs(self) -> VecMap<Box<RawValue>> {
        self.inputs
    }

    /// The python environment's identity, if the stage has one.
    pub fn env(&self) -> Option<&'a str> {
        self.env
    }
}

/// [`ExecutorIdentity`] as a run keys it: the host's printed without building a JSON object
/// per instance, a container's as the `Value` the owned parts hold (its fields sorted, as the
/// key has always printed them).
enum ExecutorKey {
    Host,
    Other(Value),
}

impl Serialize for ExecutorKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ExecutorKey::Host => ExecutorIdentity::Host.serialize(s),
            ExecutorKey::Other(v) => v.serialize(s),
        }
    }
}

/// The key (sha256 of `KEY_VERSION`, a NUL, then the JSON text of `parts`) and that text.
fn digest_and_text(parts: &impl Serialize) -> (Digest, Box<serde_json::value::RawValue>) {
    use sha2::Digest as _;
    thread_local! {
        /// Printed into a buffer that is reused, then copied out at its exact length: a run
        /// record keeps every instance's key text to its end, and a `String` grown by doubling
        /// holds up to half as much again.
        static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    BUF.with_borrow_mut(|buf| {
        buf.clear();
        serde_json::to_writer(&mut *buf, parts).expect("key parts serialise");
        let mut hasher = sha2::Sha256::new();
        hasher.update(KEY_VERSION.as_bytes());
        hasher.update([0]);
        hasher.update(&buf[..]);
        let text = std::str::from_utf8(buf)
            .expect("serde_json writes UTF-8")
            .to_owned();
        let raw = serde_json::value::RawValue::from_string(text).expect("serde_json wrote JSON");
        // A gather's key lists every member: do not keep a buffer that size for good.
        if buf.capacity() > 64 * 1024 {
            *buf = Vec::new();
        }
        (Digest::from_bytes(hasher.finalize().into()), raw)
    })
}

/// A variable's value as it enters the key: `{"sha256": "<hex>"}`, never the text. A digest
/// of a guessable value can be guessed; a secret belongs in `secret_env`, which is not in the
/// key at all.
pub fn var_identity(value: &str) -> Value {
    json!({ "sha256": Digest::of_bytes(value.as_bytes()).to_string() })
}

/// The family an action entry is filed under, `<pipeline>/<stage>`: misses are explained
/// against earlier entries of the same family.
pub fn family(plan: &Plan, stage: &Stage) -> String {
    format!("{}/{}", plan.pipeline.name, stage.name)
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
fn input_identity(r: &Resolved) -> Box<RawValue> {
    match r {
        Resolved::Path { digest, .. } => raw_json(&Hex(digest)),
        Resolved::One { entry, .. } => raw_json(&Hex(&entry.digest())),
        Resolved::Gather { members, .. } => {
            let identities = members.iter().map(|m| match &m.entry {
                Some(e) => MemberIdentity::Ok {
                    digest: Hex(&e.digest()).to_string(),
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
        digest: String,
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

/// A digest printed as its hex string.
struct Hex<'a>(&'a Digest);

impl Serialize for Hex<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self.0)
    }
}

impl std::fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

fn raw_json(v: &impl Serialize) -> Box<RawValue> {
    serde_json::value::to_raw_value(v).expect("an identity serialises")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// A host instance's parts, shared by the key and explanation tests.
    pub(crate) fn parts() -> KeyParts {
        KeyParts {
            version: KEY_VERSION.into(),
            stage: "opt".into(),
            command: Command::Exec(vec!["python3".into()]),
            executor: json!({"kind": "host"}),
            definition: [("optimize.py".to_string(), "aa".to_string())].into(),
            inputs: [("calib".to_string(), json!("11"))].into(),
            params: [("precision".to_string(), json!("a16_w16"))].into(),
            matrix: BTreeMap::new(),
            vars: BTreeMap::new(),
            env: None,
            outputs: BTreeMap::new(),
        }
    }

    #[test]
    fn key_is_stable_and_sensitive() {
        let a = parts();
        assert_eq!(a.digest(), parts().digest());
        let mut b = parts();
        b.params.insert("precision".into(), json!("a8_w8"));
        assert_ne!(a.digest(), b.digest());
    }
}

/// Pins the exact key bytes of host and Docker instances (plain, matrix, gather, every container
/// setting), so moving key assembly around provably changes no key.
#[cfg(test)]
mod key_pins {
    use std::path::Path;
    use std::sync::Arc;

    use heddle_cache::{OutputEntry, StatCache, Store};
    use heddle_containers::ImageIdentity;

    use super::*;
    use crate::inputs::{resolve_inputs, Upstream};
    use crate::record::{Status, StatusRecord};

    const PIPELINE: &str = r#"
[pipeline]
name = "pins"

[params]
level = 3

[stages.make]
matrix = { k = [1, 2] }
vars = { MODE = "fast" }
run = "echo {{ matrix.k }} {{ params.level }} > {{ out.t }}"
outputs = { t = "t.txt" }

[stages.up]
image = "heddle-pin:latest"
gpus = 2
devices = ["/dev/null:/dev/hailo0"]
network = "bridge"
shm_size = "64m"
memory = "1g"
cpus = 1.5
user = "1000:1000"
workdir = "/w"
inputs = { t = "make[k=1].t" }
run = "tr a-z A-Z < {{ in.t }} > {{ out.u }}"
outputs = { u = "u.txt" }

[stages.bare]
image = "heddle-pin:latest"
run = "true > {{ out.b }}"
outputs = { b = "b.txt" }

[stages.all]
inputs = { ts = "make[*].t" }
allow_failure = true
run = "cat {{ in.ts }} > {{ out.a }}"
outputs = { a = "a.txt" }
"#;

    fn context(dir: &Path) -> Context {
        let file = dir.join("p.toml");
        std::fs::write(&file, PIPELINE).unwrap();
        let opts = crate::model::LoadOptions {
            root: Some(dir.to_path_buf()),
            ..Default::default()
        };
        let pipeline = crate::model::load(&file, &opts).expect("pipeline loads");
        let plan = Arc::new(crate::plan::build(Arc::new(pipeline)).expect("plan builds"));
        let store = Arc::new(Store::open(&dir.join("cache")).unwrap());
        let image = ImageIdentity {
            reference: "heddle-pin:latest".into(),
            id: "sha256:0123456789abcdef".into(),
            repo_digests: vec![],
        };
        Context {
            plan,
            store,
            stats: Arc::new(StatCache::load(&dir.join("stats"))),
            definitions: BTreeMap::new(),
            repo_inputs: BTreeMap::new(),
            envs: BTreeMap::new(),
            images: [("heddle-pin:latest".to_string(), image)].into(),
            unresolved: BTreeMap::new(),
            host: Arc::new(crate::exec::host::HostExecutor),
            docker: None,
            placement: Default::default(),
            engines: Default::default(),
        }
    }

    /// Every instance's key, in plan order, with `make[k=2]` failed so the gather sees a
    /// failed member.
    fn keys(ctx: &Context) -> Vec<(String, String, Value)> {
        let plan = &ctx.plan;
        let mut done: Vec<Option<Up>> = vec![None; plan.instances.len()];
        let mut out = Vec::new();
        for &id in &plan.order {
            let inst = &plan.instances[id];
            let inputs = resolve_inputs(ctx, id, &done).expect("inputs resolve");
            let parts = KeyParts::for_instance(ctx, id, &inputs);
            // A run keys the borrowed view, a miss stores the owned parts: the pins below hold
            // for both only if they print the same bytes. (`for_instance` checks it too, but
            // with a `debug_assert`, which the release test build CI runs leaves out.)
            let launch = Launch::for_instance(ctx, id);
            let view = KeyView::for_launch(ctx, id, &inputs, &launch);
            assert_eq!(
                view.digest_and_text().1.get(),
                parts.digest_and_text().1.get(),
                "{}: the view and the parts print different keys",
                inst.label
            );
            out.push((
                inst.label.clone(),
                parts.digest().to_string(),
                parts.executor.clone(),
            ));
            let mut status = StatusRecord::ok(&inst.label, inst.matrix.clone());
            let mut outputs = BTreeMap::new();
            if inst.label == "make[k=2]" {
                status.status = Status::Failed;
                status.tolerated = true;
                status.error = Some("ExitCode: exit code 1".into());
                status.error_class = Some(crate::record::ErrorClass::ExitCode);
            } else {
                for name in plan.stage_of(id).outputs.keys() {
                    let entry = OutputEntry::File {
                        digest: Digest::of_bytes(inst.label.as_bytes()),
                        size: 3,
                        executable: false,
                    };
                    outputs.insert(name.clone(), entry);
                }
            }
            done[id] = Some(Up {
                status,
                outputs: outputs.into(),
            });
        }
        out
    }

    /// A finished upstream: how it ended and what it produced.
    #[derive(Clone)]
    struct Up {
        status: StatusRecord,
        outputs: heddle_schema::VecMap<OutputEntry>,
    }

    impl Upstream for Up {
        fn status(&self) -> &StatusRecord {
            &self.status
        }
        fn outputs(&self) -> &heddle_schema::VecMap<OutputEntry> {
            &self.outputs
        }
    }

    #[test]
    fn key_bytes_are_pinned() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        let got = keys(&ctx);
        let text: Vec<String> = got
            .iter()
            .map(|(l, k, e)| format!("{l} {k} {}", serde_json::to_string(e).unwrap()))
            .collect();
        let docker = r#"{"cpus":1.5,"devices":["/dev/null:/dev/hailo0"],"gpus":2,"image_id":"sha256:0123456789abcdef","kind":"docker","memory":"1g","network":"bridge","shm_size":"64m","user":"1000:1000","workdir":"/w"}"#;
        let bare = r#"{"cpus":null,"devices":[],"gpus":null,"image_id":"sha256:0123456789abcdef","kind":"docker","memory":null,"network":"none","shm_size":null,"user":null,"workdir":null}"#;
        let host = r#"{"kind":"host"}"#;
        assert_eq!(
            text,
            [
                format!("bare d0e8f9b95300e7d4a26f3aa0740bb762570bd91a1e695f9955230043300aeba1 {bare}"),
                // `make` has `vars`: its keys changed when values became digests (issue 23);
                // every key without variables is the same as before.
                format!("make[k=1] 119ba7c332381894eb7ac3ccfe6b55665d38171ed235607a401dde3efa1fb1d2 {host}"),
                format!("make[k=2] 1403fc65fa63c556d2dedf331682ce5f6ac9db1ebeb8028605bbb7f4ac744601 {host}"),
                format!("all 080c4d1e4d138f3665c382b3d641e34469d506f67f6706839a7eda317bb8a096 {host}"),
                format!("up 39ad2534e15f85d6853274a98e87153148bb51b5881ad5e10b360d339d60f7e2 {docker}"),
            ]
        );
    }
}
