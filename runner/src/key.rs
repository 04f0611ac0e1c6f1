//! Cache keys and the reasons an instance must run.
//!
//! A key is sha256 over a domain tag and the canonical JSON of [`KeyParts`]: one field per thing
//! that can change a result, maps as `BTreeMap` so the encoding is canonical. The expanded parts
//! are stored beside every action entry, so a miss is explained by diffing against the nearest
//! earlier entry of the same stage ([`explain`], within a budget: see [`crate::explain`]).

use std::collections::BTreeMap;
use std::fmt;

use heddle_cache::Digest;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::explain::{diff, explain, explain_with, Earlier};
use crate::model::value_text;
use crate::render::Command;

/// Bump when the encoding of [`KeyParts`] changes: every old entry becomes a miss.
/// v1: first format.
pub const KEY_VERSION: &str = "heddle/action/v1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyParts {
    pub version: String,
    pub stage: String,
    /// The command rendered with the container layout (`/heddle/in/...`), so no host path enters.
    pub command: Command,
    /// `{"kind":"host"}` or the container's image id and device/GPU/limit settings.
    pub executor: Value,
    /// Relative path → digest of every file in the `uses` folder.
    pub definition: BTreeMap<String, String>,
    /// Input name → digest, or for a gather the members' digests and statuses.
    pub inputs: BTreeMap<String, Value>,
    pub params: BTreeMap<String, Value>,
    pub matrix: BTreeMap<String, Value>,
    /// Declared variables and passed-through host variables, with their values.
    pub vars: BTreeMap<String, String>,
    /// The python environment's identity (its resolved package set), if any.
    pub env: Option<String>,
    pub outputs: BTreeMap<String, String>,
}

impl KeyParts {
    pub fn digest(&self) -> Digest {
        let mut bytes = Vec::with_capacity(1024);
        bytes.extend_from_slice(KEY_VERSION.as_bytes());
        bytes.push(0);
        serde_json::to_writer(&mut bytes, self).expect("key parts serialise");
        Digest::of_bytes(&bytes)
    }
}

/// Why an instance runs (or doesn't).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Reason {
    Cached,
    NeverRun,
    Forced,
    NoCache,
    /// `cache = false`: a measurement, always taken.
    NotCacheable,
    UpstreamRuns {
        upstream: String,
    },
    /// The stage ran before, but never with these matrix values.
    NewInstance,
    /// Its image could not be resolved (absent, or no engine); `run` would stop with this.
    ImageUnavailable {
        image: String,
        error: String,
    },
    EnvNotProvisioned {
        env: String,
    },
    Changed {
        changes: Vec<Change>,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Change {
    Param {
        name: String,
        old: Option<Value>,
        new: Option<Value>,
    },
    Matrix {
        name: String,
        old: Option<Value>,
        new: Option<Value>,
    },
    Input {
        name: String,
    },
    Definition {
        files: Vec<String>,
    },
    Command,
    Image {
        old: String,
        new: String,
    },
    Executor,
    Var {
        name: String,
    },
    Env,
    Outputs,
    Version,
    /// A param or matrix value too large to show changed (compared by size and digest).
    TooLarge {
        what: String,
        name: String,
    },
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Cached => write!(f, "cached"),
            Reason::NeverRun => write!(f, "never run"),
            Reason::Forced => write!(f, "forced"),
            Reason::NoCache => write!(f, "--no-cache"),
            Reason::NotCacheable => write!(f, "not cacheable (cache = false)"),
            Reason::UpstreamRuns { upstream } => write!(f, "upstream {upstream} will run"),
            Reason::NewInstance => write!(f, "new instance (never run with these matrix values)"),
            Reason::ImageUnavailable { image, error } => {
                write!(f, "image {image} unavailable: {error}")
            }
            Reason::EnvNotProvisioned { env } => write!(f, "env {env} not provisioned yet"),
            Reason::Changed { changes } => {
                let parts: Vec<String> = changes.iter().map(|c| c.to_string()).collect();
                write!(f, "{}", parts.join("; "))
            }
        }
    }
}

fn opt(v: &Option<Value>) -> String {
    v.as_ref()
        .map(value_text)
        .unwrap_or_else(|| "(unset)".into())
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::Param { name, old, new } => {
                write!(f, "param {name} {} → {}", opt(old), opt(new))
            }
            Change::Matrix { name, old, new } => {
                write!(f, "matrix {name} {} → {}", opt(old), opt(new))
            }
            Change::Input { name } => write!(f, "input {name} changed"),
            Change::Definition { files } => write!(f, "definition changed: {}", files.join(", ")),
            Change::Command => write!(f, "command changed"),
            Change::Image { old, new } => {
                write!(f, "image changed ({} → {})", short_id(old), short_id(new))
            }
            Change::Executor => write!(f, "executor settings changed"),
            Change::Var { name } => write!(f, "variable {name} changed"),
            Change::Env => write!(f, "env changed"),
            Change::Outputs => write!(f, "outputs changed"),
            Change::Version => write!(f, "key format changed"),
            Change::TooLarge { what, name } => {
                write!(f, "{what} {name} changed (too large to show)")
            }
        }
    }
}

fn short_id(id: &str) -> String {
    let s = id.strip_prefix("sha256:").unwrap_or(id);
    s.chars().take(12).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use heddle_cache::ActionEntry;
    use serde_json::json;

    fn parts() -> KeyParts {
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

    #[test]
    fn reasons_read_like_a_person_would_say_them() {
        let old = parts();
        let mut new = parts();
        new.params.insert("precision".into(), json!("a8_w8"));
        new.inputs.insert("calib".into(), json!("22"));
        new.definition.insert("optimize.py".into(), "bb".into());
        new.env = Some("e".into());
        let text: Vec<String> = diff(&old, &new).iter().map(|c| c.to_string()).collect();
        assert_eq!(
            text,
            vec![
                "param precision a16_w16 → a8_w8",
                "input calib changed",
                "definition changed: optimize.py",
                "env changed"
            ]
        );
    }

    #[test]
    fn misses_are_explained_against_the_same_instance_only() {
        let entry = |p: &KeyParts| ActionEntry {
            key: p.digest(),
            family: "f".into(),
            key_parts: serde_json::to_value(p).unwrap(),
            outputs: BTreeMap::new(),
            duration_ms: 0,
            created_unix_ms: 0,
            meta: json!({}),
        };
        let mut a = parts();
        a.matrix.insert("k".into(), json!(1));
        let earlier = Earlier::new(&[entry(&a)]);
        let mut changed = a.clone();
        changed.params.insert("precision".into(), json!("a8_w8"));
        assert_eq!(
            explain_with(&changed, &earlier).to_string(),
            "param precision a16_w16 → a8_w8"
        );
        let mut sibling = a.clone();
        sibling.matrix.insert("k".into(), json!(2));
        assert_eq!(explain_with(&sibling, &earlier), Reason::NewInstance);
        assert_eq!(explain_with(&a, &Earlier::default()), Reason::NeverRun);
    }

    #[test]
    fn image_change_names_both_ids() {
        let mut old = parts();
        old.executor = json!({"kind": "docker", "image_id": "sha256:aaaaaaaaaaaaaaaa"});
        let mut new = parts();
        new.executor = json!({"kind": "docker", "image_id": "sha256:bbbbbbbbbbbbbbbb"});
        assert_eq!(
            diff(&old, &new)[0].to_string(),
            "image changed (aaaaaaaaaaaa → bbbbbbbbbbbb)"
        );
    }
}
