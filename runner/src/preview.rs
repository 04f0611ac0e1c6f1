//! The dry run: what `run` would do, per instance, without running anything (`heddle plan`,
//! `heddle status`, `heddle lock`). It walks the plan in order, predicting each instance from a
//! [`History`] (the action cache, or a lock file), and says for each whether it is cached or
//! the reason it must run.

use std::collections::BTreeMap;

use heddle_cache::{Digest, OutputEntry, Store};

use crate::explain::{explain_with, Earlier};
use crate::inputs::{resolve_inputs, Upstream};
use crate::key::{family, KeyParts, Reason};
use crate::prepare::Context;
use crate::record::StatusRecord;
use crate::run_options::RunOptions;

/// A preview of what `run` would do: per instance, cached or the reason it must run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PlanRow {
    pub label: String,
    pub cached: bool,
    /// The hit is on the shared cache (a run would fetch it).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub remote: bool,
    pub reason: Reason,
    pub key: Option<String>,
    /// The expanded key, when it could be computed.
    #[serde(skip)]
    pub parts: Option<Box<KeyParts>>,
    /// The outputs the history knows for this key (a hit).
    #[serde(skip)]
    pub outputs: Option<BTreeMap<String, OutputEntry>>,
    /// The configured hosts a run would place it on (`hosts.toml`), when it would run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
}

impl PlanRow {
    /// A row whose key could not be computed (its inputs are not known yet).
    fn keyless(label: &str, reason: Reason) -> PlanRow {
        PlanRow {
            label: label.to_string(),
            cached: false,
            remote: false,
            reason,
            key: None,
            parts: None,
            outputs: None,
            hosts: Vec::new(),
        }
    }

    fn keyed(label: &str, cached: bool, reason: Reason, key: &Digest, parts: KeyParts) -> PlanRow {
        PlanRow {
            cached,
            key: Some(key.to_string()),
            parts: Some(Box::new(parts)),
            ..PlanRow::keyless(label, reason)
        }
    }
}

/// Where a preview learns what was computed before: the action cache (`heddle plan`) or a lock
/// file (`heddle status`).
pub trait History {
    /// The outputs recorded for this instance under this key, if any.
    fn lookup(
        &self,
        label: &str,
        family: &str,
        key: &Digest,
    ) -> Option<BTreeMap<String, OutputEntry>>;
    /// Why this instance's key is not in the history.
    fn explain(&self, label: &str, family: &str, parts: &KeyParts) -> Reason;
    /// An allowed failure recorded under this key (a lock remembers them; the cache does not
    /// store failures, so they rerun).
    fn recorded_failure(&self, _label: &str, _key: &Digest) -> Option<StatusRecord> {
        None
    }
    /// Whether a hit [`History::lookup`] returned came from the shared cache.
    fn is_remote(&self, _key: &Digest) -> bool {
        false
    }
}

/// The action cache as history: every key ever recorded.
pub struct CacheHistory<'a> {
    pub store: &'a Store,
    families: std::sync::Mutex<BTreeMap<String, Earlier>>,
}

impl<'a> CacheHistory<'a> {
    pub fn new(store: &'a Store) -> Self {
        CacheHistory {
            store,
            families: Default::default(),
        }
    }
}

impl History for CacheHistory<'_> {
    fn lookup(
        &self,
        _label: &str,
        _family: &str,
        key: &Digest,
    ) -> Option<BTreeMap<String, OutputEntry>> {
        self.store.lookup_outputs(key).ok().flatten()
    }
    fn explain(&self, _label: &str, family: &str, parts: &KeyParts) -> Reason {
        let mut fams = self.families.lock().expect("families");
        // Condensed once per family: a whole matrix can miss at once.
        let earlier = fams.entry(family.to_string()).or_insert_with(|| {
            Earlier::new(&self.store.actions_in_family(family).unwrap_or_default())
        });
        explain_with(parts, earlier)
    }
}

/// How a predicted instance would end, as its dependents' keys see it.
struct Known {
    status: StatusRecord,
    outputs: heddle_schema::VecMap<OutputEntry>,
}

impl Upstream for Known {
    fn status(&self) -> &StatusRecord {
        &self.status
    }
    fn outputs(&self) -> &heddle_schema::VecMap<OutputEntry> {
        &self.outputs
    }
}

/// A preview of every instance. `keep_parts` keeps each row's expanded key and a hit's outputs
/// (`heddle lock` writes them); without it a row holds its digest only, so a million-instance
/// preview does not hold a million expanded keys, nor a second copy of every hit's outputs
/// (a one-entry `BTreeMap` allocates a whole node, about 1 KiB).
pub fn preview(
    ctx: &Context,
    opts: &RunOptions,
    history: &dyn History,
    keep_parts: bool,
) -> Vec<PlanRow> {
    let plan = &ctx.plan;
    // Boxed: most slots stay empty in a large preview.
    let mut known: Vec<Option<Box<Known>>> = Vec::new();
    known.resize_with(plan.instances.len(), || None);
    let mut rows = Vec::with_capacity(plan.instances.len());
    for &id in &plan.order {
        let (mut row, k) = match blocker(ctx, &known, id) {
            Some(reason) => (PlanRow::keyless(&plan.instances[id].label, reason), None),
            None => predict(ctx, opts, history, &known, id),
        };
        if keep_parts {
            row.outputs = k
                .as_ref()
                .filter(|_| row.cached)
                .map(|k| k.outputs.to_btree());
        } else {
            row.parts = None;
        }
        if !row.cached {
            row.hosts = ctx.placement.candidates(plan.instances[id].stage).to_vec();
        }
        known[id] = k.map(Box::new);
        rows.push(row);
    }
    rows
}

/// What keeps an instance's key from being computed, in the order a run would meet it: an
/// image that cannot be resolved, an upstream that will run, an env not built yet.
fn blocker(ctx: &Context, known: &[Option<Box<Known>>], id: usize) -> Option<Reason> {
    let plan = &ctx.plan;
    let inst = &plan.instances[id];
    if let Some(image) = inst
        .image
        .as_ref()
        .filter(|i| ctx.unresolved.contains_key(*i))
    {
        return Some(Reason::ImageUnavailable {
            image: image.clone(),
            error: ctx.unresolved[image].clone(),
        });
    }
    if let Some(&d) = inst.deps.iter().find(|d| known[**d].is_none()) {
        let upstream = plan.instances[d].label.clone();
        return Some(Reason::UpstreamRuns { upstream });
    }
    let stage = plan.stage_of(id);
    if let Some(e) = stage
        .settings
        .env
        .as_ref()
        .filter(|e| !ctx.envs.contains_key(*e))
    {
        return Some(Reason::EnvNotProvisioned { env: e.clone() });
    }
    None
}

/// The row of an instance whose upstreams are all known, and how it would end if it would not
/// run (a hit, or an allowed failure the history remembers).
fn predict(
    ctx: &Context,
    opts: &RunOptions,
    history: &dyn History,
    known: &[Option<Box<Known>>],
    id: usize,
) -> (PlanRow, Option<Known>) {
    let plan = &ctx.plan;
    let inst = &plan.instances[id];
    let stage = plan.stage_of(id);
    let Ok(inputs) = resolve_inputs(ctx, id, known) else {
        return (PlanRow::keyless(&inst.label, Reason::NeverRun), None);
    };
    let parts = KeyParts::for_instance(ctx, id, &inputs);
    let key = parts.digest();
    let fam = family(plan, stage);
    let regardless = opts.runs_regardless(stage);
    let hit = match regardless {
        None => history.lookup(&inst.label, &fam, &key),
        Some(_) => None,
    };
    if let Some(outputs) = hit {
        let k = Known {
            // Without its matrix: a preview only feeds statuses to keys, which do not hold it,
            // and a copy per instance adds up in a large preview.
            status: StatusRecord::ok(&inst.label, Default::default()),
            outputs: outputs.into(),
        };
        let mut row = PlanRow::keyed(&inst.label, true, Reason::Cached, &key, parts);
        row.remote = history.is_remote(&key);
        return (row, Some(k));
    }
    if let Some(mut status) = history.recorded_failure(&inst.label, &key) {
        status.matrix = inst.matrix.clone();
        let k = Known {
            status,
            outputs: Default::default(),
        };
        return (
            PlanRow::keyed(&inst.label, true, Reason::Cached, &key, parts),
            Some(k),
        );
    }
    let reason = regardless.unwrap_or_else(|| history.explain(&inst.label, &fam, &parts));
    (
        PlanRow::keyed(&inst.label, false, reason, &key, parts),
        None,
    )
}
