//! Explaining a miss within a budget.
//!
//! A miss is explained by diffing the instance's key parts against earlier entries of the same
//! instance. Earlier parts can be huge (a 10 MB param, a gather of 100k members), and a whole
//! matrix can miss at once, so explaining works on *condensed* parts: values small enough to
//! show are kept, everything else is a fingerprint (size and sha256 of its JSON), and only the
//! newest [`ENTRIES_PER_INSTANCE`] entries of an instance are kept. A large value that changed
//! is reported as "changed (too large to show)". Before this, a 10k matrix planned after one run
//! with a 10 MB param re-parsed and diffed the 10 MB entry per instance: 0.05 s became 14 s.
//!
//! The family's entries are still read whole, once per run, by the store
//! (`Store::actions_in_family`); the budget bounds what is kept and compared, not that read.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{self, Write};

use heddle_cache::ActionEntry;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::key::{Change, KeyParts, Reason};
use crate::model::value_text;

/// Earlier entries compared per instance: the newest ones. A tenth older one rarely explains a
/// miss better, and a family with thousands of entries per instance must not cost thousands of
/// diffs per instance.
pub const ENTRIES_PER_INSTANCE: usize = 8;

/// A param or matrix value whose JSON is longer than this is compared by fingerprint and shown
/// as "too large to show": a reason is one line a person reads.
pub const SHOWN_VALUE_BYTES: u64 = 256;

/// Size and sha256 of a value's JSON: equality without keeping the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fingerprint {
    bytes: u64,
    sha256: [u8; 32],
}

struct FingerprintWriter {
    hasher: Sha256,
    bytes: u64,
}

impl Write for FingerprintWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.hasher.update(buf);
        self.bytes += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Fingerprint {
    fn of<T: Serialize + ?Sized>(v: &T) -> Fingerprint {
        let mut w = FingerprintWriter {
            hasher: Sha256::new(),
            bytes: 0,
        };
        serde_json::to_writer(&mut w, v).expect("key parts serialise");
        Fingerprint {
            bytes: w.bytes,
            sha256: w.hasher.finalize().into(),
        }
    }
}

/// A value to show in a reason, or the fingerprint of one too large to show.
#[derive(Debug, Clone, PartialEq)]
enum Shown {
    Value(Value),
    Large(Fingerprint),
}

impl Shown {
    fn of(v: &Value) -> Shown {
        // Cheap upper bound first: most values are short scalars.
        let small = match v {
            Value::Null | Value::Bool(_) | Value::Number(_) => true,
            Value::String(s) => (s.len() as u64) * 6 + 2 <= SHOWN_VALUE_BYTES,
            _ => false,
        };
        if small {
            return Shown::Value(v.clone());
        }
        let f = Fingerprint::of(v);
        if f.bytes <= SHOWN_VALUE_BYTES {
            Shown::Value(v.clone())
        } else {
            Shown::Large(f)
        }
    }

    fn value(&self) -> Option<&Value> {
        match self {
            Shown::Value(v) => Some(v),
            Shown::Large(_) => None,
        }
    }
}

/// Key parts as explaining needs them: what a reason shows, kept; the rest, fingerprinted.
#[derive(Debug, Clone, PartialEq)]
struct Condensed {
    version: String,
    params: BTreeMap<String, Shown>,
    matrix: BTreeMap<String, Shown>,
    inputs: BTreeMap<String, Fingerprint>,
    definition: BTreeMap<String, Fingerprint>,
    image_id: Option<Shown>,
    executor: Fingerprint,
    vars: BTreeMap<String, Fingerprint>,
    env: Option<Fingerprint>,
    outputs: Fingerprint,
    command: Fingerprint,
}

fn shown_map(m: &BTreeMap<String, Value>) -> BTreeMap<String, Shown> {
    m.iter().map(|(k, v)| (k.clone(), Shown::of(v))).collect()
}

fn fingerprints<V: Serialize>(m: &BTreeMap<String, V>) -> BTreeMap<String, Fingerprint> {
    m.iter()
        .map(|(k, v)| (k.clone(), Fingerprint::of(v)))
        .collect()
}

impl Condensed {
    fn of(p: &KeyParts) -> Condensed {
        Condensed {
            version: p.version.clone(),
            params: shown_map(&p.params),
            matrix: shown_map(&p.matrix),
            inputs: fingerprints(&p.inputs),
            definition: fingerprints(&p.definition),
            image_id: p.executor.get("image_id").map(Shown::of),
            executor: Fingerprint::of(&p.executor),
            vars: fingerprints(&p.vars),
            env: p.env.as_ref().map(Fingerprint::of),
            outputs: Fingerprint::of(&p.outputs),
            command: Fingerprint::of(&p.command),
        }
    }
}

/// Everything that differs between an earlier entry's parts and the current ones.
pub fn diff(old: &KeyParts, new: &KeyParts) -> Vec<Change> {
    diff_condensed(&Condensed::of(old), &Condensed::of(new))
}

fn diff_condensed(old: &Condensed, new: &Condensed) -> Vec<Change> {
    let mut out = Vec::new();
    if old.version != new.version {
        out.push(Change::Version);
    }
    diff_shown(
        &old.params,
        &new.params,
        "param",
        &mut out,
        |name, old, new| Change::Param { name, old, new },
    );
    diff_shown(
        &old.matrix,
        &new.matrix,
        "matrix",
        &mut out,
        |name, old, new| Change::Matrix { name, old, new },
    );
    for name in changed_keys(&old.inputs, &new.inputs) {
        out.push(Change::Input { name });
    }
    let files = changed_keys(&old.definition, &new.definition);
    if !files.is_empty() {
        out.push(Change::Definition { files });
    }
    match (&old.image_id, &new.image_id) {
        (Some(Shown::Value(o)), Some(Shown::Value(n))) if o != n => out.push(Change::Image {
            old: value_text(o),
            new: value_text(n),
        }),
        _ if old.executor != new.executor => out.push(Change::Executor),
        _ => {}
    }
    for name in changed_keys(&old.vars, &new.vars) {
        out.push(Change::Var { name });
    }
    if old.env != new.env {
        out.push(Change::Env);
    }
    if old.outputs != new.outputs {
        out.push(Change::Outputs);
    }
    // The command embeds params and paths; report it only when nothing above explains it.
    if out.is_empty() && old.command != new.command {
        out.push(Change::Command);
    }
    out
}

fn changed_keys<V: PartialEq>(old: &BTreeMap<String, V>, new: &BTreeMap<String, V>) -> Vec<String> {
    let keys: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    keys.into_iter()
        .filter(|k| old.get(*k) != new.get(*k))
        .cloned()
        .collect()
}

fn diff_shown(
    old: &BTreeMap<String, Shown>,
    new: &BTreeMap<String, Shown>,
    what: &str,
    out: &mut Vec<Change>,
    shown: impl Fn(String, Option<Value>, Option<Value>) -> Change,
) {
    for name in changed_keys(old, new) {
        let (o, n) = (old.get(&name), new.get(&name));
        let large = |s: Option<&Shown>| matches!(s, Some(Shown::Large(_)));
        out.push(if large(o) || large(n) {
            Change::TooLarge {
                what: what.to_string(),
                name,
            }
        } else {
            shown(
                name,
                o.and_then(Shown::value).cloned(),
                n.and_then(Shown::value).cloned(),
            )
        });
    }
}

/// Earlier entries of one family, condensed once and grouped by matrix values, so explaining a
/// miss costs a few diffs of condensed parts against the same instance's newest entries.
#[derive(Debug, Default)]
pub struct Earlier {
    by_matrix: HashMap<String, Vec<Condensed>>,
}

/// The matrix part of stored key parts, as parsed from the entry (a bad one is skipped).
#[derive(Deserialize)]
struct MatrixOnly {
    matrix: BTreeMap<String, Value>,
}

impl Earlier {
    /// From a family's entries, newest first (as `Store::actions_in_family` returns them).
    pub fn new(entries: &[ActionEntry]) -> Earlier {
        let mut by_matrix: HashMap<String, Vec<Condensed>> = HashMap::new();
        for e in entries {
            let Ok(m) = MatrixOnly::deserialize(&e.key_parts) else {
                continue;
            };
            let same = by_matrix.entry(matrix_key(&m.matrix)).or_default();
            if same.len() >= ENTRIES_PER_INSTANCE {
                continue;
            }
            if let Ok(p) = KeyParts::deserialize(&e.key_parts) {
                same.push(Condensed::of(&p));
            }
        }
        by_matrix.retain(|_, v| !v.is_empty());
        Earlier { by_matrix }
    }
}

fn matrix_key(m: &BTreeMap<String, Value>) -> String {
    serde_json::to_string(m).expect("matrix serialises")
}

/// Explain a miss: diff against the nearest earlier entry of the same instance (same stage,
/// same matrix values). A stage that ran before but never with these matrix values is a new
/// instance; comparing it with a sibling would mislead.
pub fn explain_with(parts: &KeyParts, earlier: &Earlier) -> Reason {
    let Some(same) = earlier.by_matrix.get(&matrix_key(&parts.matrix)) else {
        return if earlier.by_matrix.is_empty() {
            Reason::NeverRun
        } else {
            Reason::NewInstance
        };
    };
    let current = Condensed::of(parts);
    let mut best: Option<Vec<Change>> = None;
    for old in same {
        let changes = diff_condensed(old, &current);
        if !changes.is_empty() && best.as_ref().is_none_or(|b| changes.len() < b.len()) {
            best = Some(changes);
        }
    }
    match best {
        Some(changes) => Reason::Changed { changes },
        None => Reason::NeverRun,
    }
}

/// [`explain_with`] over raw entries (condenses them; use [`Earlier`] when explaining many).
pub fn explain(parts: &KeyParts, earlier: &[ActionEntry]) -> Reason {
    explain_with(parts, &Earlier::new(earlier))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::KEY_VERSION;
    use crate::render::Command;
    use serde_json::json;

    fn parts(blob: &str, k: i64) -> KeyParts {
        KeyParts {
            version: KEY_VERSION.into(),
            stage: "big".into(),
            command: Command::Exec(vec!["sh".into()]),
            executor: json!({"kind": "host"}),
            definition: BTreeMap::new(),
            inputs: [("x".to_string(), json!("11"))].into(),
            params: [
                ("blob".to_string(), json!(blob)),
                ("seed".to_string(), json!(1)),
            ]
            .into(),
            matrix: [("k".to_string(), json!(k))].into(),
            vars: BTreeMap::new(),
            env: None,
            outputs: BTreeMap::new(),
        }
    }

    fn entry(p: &KeyParts, created: u64) -> ActionEntry {
        ActionEntry {
            key: p.digest(),
            family: "f".into(),
            key_parts: serde_json::to_value(p).unwrap(),
            outputs: BTreeMap::new(),
            duration_ms: 0,
            created_unix_ms: created,
            meta: json!({}),
        }
    }

    #[test]
    fn a_large_value_that_changed_is_named_not_shown() {
        let big = "x".repeat(10 << 20);
        let earlier = Earlier::new(&[entry(&parts(&big, 0), 0)]);
        let reason = explain_with(&parts("small", 0), &earlier);
        assert_eq!(reason.to_string(), "param blob changed (too large to show)");
        // Both sides large and different: compared by digest, same words.
        let other = "y".repeat(10 << 20);
        assert_eq!(
            explain_with(&parts(&other, 0), &earlier).to_string(),
            "param blob changed (too large to show)"
        );
        // Large and unchanged while something small changed: only the small change is named.
        let mut seed = parts(&big, 0);
        seed.params.insert("seed".into(), json!(2));
        assert_eq!(
            explain_with(&seed, &earlier).to_string(),
            "param seed 1 → 2"
        );
    }

    #[test]
    fn the_earlier_history_keeps_no_large_value() {
        let big = "x".repeat(1 << 20);
        let earlier = Earlier::new(&[entry(&parts(&big, 0), 0)]);
        let kept = &earlier.by_matrix.values().next().unwrap()[0];
        assert_eq!(
            kept.params["blob"],
            Shown::Large(Fingerprint::of(&json!(big))),
            "a 1 MiB param is kept as its fingerprint"
        );
        assert_eq!(kept.params["seed"], Shown::Value(json!(1)));
        // The boundary: a value whose JSON is exactly the budget is shown.
        let edge = "e".repeat(SHOWN_VALUE_BYTES as usize - 2);
        assert_eq!(Shown::of(&json!(edge)), Shown::Value(json!(edge)));
        let over = "e".repeat(SHOWN_VALUE_BYTES as usize - 1);
        assert!(matches!(Shown::of(&json!(over)), Shown::Large(_)));
    }

    #[test]
    fn only_the_newest_entries_of_an_instance_are_compared() {
        // 50 earlier entries of one instance, newest first; 3 of another.
        let mut entries: Vec<ActionEntry> = (0..50)
            .map(|i| {
                let mut p = parts("a", 0);
                p.params.insert("seed".into(), json!(100 + i));
                entry(&p, 1000 - i as u64)
            })
            .collect();
        entries.extend((0..3).map(|i| entry(&parts(&format!("b{i}"), 1), 0)));
        let earlier = Earlier::new(&entries);
        let m0 = matrix_key(&parts("a", 0).matrix);
        let m1 = matrix_key(&parts("a", 1).matrix);
        assert_eq!(earlier.by_matrix[&m0].len(), ENTRIES_PER_INSTANCE);
        assert_eq!(earlier.by_matrix[&m1].len(), 3);
        // Seed 149 is in the 50th (oldest) entry: beyond the budget, so it is not the match;
        // each kept entry differs by the seed only, and the newest (seed 100) is named.
        let mut p = parts("a", 0);
        p.params.insert("seed".into(), json!(149));
        let Reason::Changed { changes } = explain_with(&p, &earlier) else {
            panic!("a changed instance")
        };
        assert_eq!(
            changes,
            vec![Change::Param {
                name: "seed".into(),
                old: Some(json!(100)),
                new: Some(json!(149))
            }]
        );
    }

    #[test]
    fn a_torn_entry_is_skipped_not_fatal() {
        let mut bad = entry(&parts("a", 0), 0);
        bad.key_parts = json!({"matrix": {"k": 0}, "version": 3});
        let mut no_matrix = entry(&parts("a", 0), 0);
        no_matrix.key_parts = json!("text");
        let earlier = Earlier::new(&[bad, no_matrix]);
        assert_eq!(explain_with(&parts("a", 0), &earlier), Reason::NeverRun);
    }

    use crate::key::tests::parts as opt_parts;

    #[test]
    fn reasons_read_like_a_person_would_say_them() {
        let old = opt_parts();
        let mut new = opt_parts();
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
        let mut a = opt_parts();
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
        let mut old = opt_parts();
        old.executor = json!({"kind": "docker", "image_id": "sha256:aaaaaaaaaaaaaaaa"});
        let mut new = opt_parts();
        new.executor = json!({"kind": "docker", "image_id": "sha256:bbbbbbbbbbbbbbbb"});
        assert_eq!(
            diff(&old, &new)[0].to_string(),
            "image changed (aaaaaaaaaaaa → bbbbbbbbbbbb)"
        );
    }
}
