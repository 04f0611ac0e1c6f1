//! Why an instance runs (or doesn't): typed, as `heddle plan --json` prints it and as the run
//! record keeps it (`why`, beside the `reason` sentence every reader already shows).

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A value as it appears in a label or a rendered command: strings bare, the rest as JSON.
pub fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
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
