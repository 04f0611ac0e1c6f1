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
use serde_json::Value;

use heddle_schema::VecMap;

use crate::inputs::{member_ok_fn, Resolved};
use crate::launch::Launch;
use crate::model::Stage;
use crate::plan::Plan;
use crate::prepare::Context;
use crate::render::{render, Command, PathLayout};
pub use heddle_schema::{Change, Reason};

mod identity;
use identity::input_identity;
pub use identity::{var_identity, DockerIdentity, ExecutorIdentity, GpuIdentity};

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

/// The family an action entry is filed under, `<pipeline>/<stage>`: misses are explained
/// against earlier entries of the same family.
pub fn family(plan: &Plan, stage: &Stage) -> String {
    format!("{}/{}", plan.pipeline.name, stage.name)
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

#[cfg(test)]
mod pins;
