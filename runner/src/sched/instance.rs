//! One instance's life, in named steps: its key and record, a cache hit, the reason it runs,
//! its resources and job slot, single flight on its key, the attempts, and storing the result.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use heddle_cache::{ActionEntry, Digest, KeyLock, OutputEntry};
use heddle_schema::VecMap;
use serde_json::json;

use crate::explain::{explain_with, Earlier};
use crate::inputs::Resolved;
use crate::key::{family, KeyParts, KeyView, Reason};
use crate::launch::Launch;
use crate::outputs::{output_dir, relative_paths, restore};
use crate::record::{ErrorClass, InstanceRecord, StatusRecord};
use crate::units::{self, AcquireError, Candidate, Held};

use super::attempt::attempt_once;
use super::commit::Commit;
use super::outcome::{conclude, empty_record, heddle_error, interrupted_before_start};
use super::{blocking, now_ms, Event, Inst, Note};

/// One instance, start to end.
pub(super) async fn process(i: Inst<'_>, inputs: BTreeMap<String, Resolved>) -> InstanceRecord {
    let stage = i.stage;
    let t0 = i.sh.started.elapsed();
    // Built once: the key and the command are both read from it.
    let launch = Launch::for_instance(&i.sh.ctx, i.id);
    let view = KeyView::for_launch(&i.sh.ctx, i.id, &inputs, &launch);
    let (key, key_text) = view.digest_and_text();
    let cacheable = i.sh.opts.may_use_cache(stage);
    if cacheable {
        if let Some(hit) = find_hit(i, &key) {
            let env = view.env();
            let record = keyed_record(i, view.into_inputs(), env, &key, key_text, t0);
            return serve_hit(i, record, hit);
        }
        if let Some((hit, signer)) = find_remote_hit(i, &key).await {
            let env = view.env();
            let mut record = keyed_record(i, view.into_inputs(), env, &key, key_text, t0);
            record.remote = true;
            record.remote_signer = Some(Box::new(signer));
            return serve_hit(i, record, hit);
        }
    }
    // Owned only here: a hit, most instances of a no-op run, never needs them.
    let parts = view.to_parts();
    let record = keyed_record(
        i,
        view.into_inputs(),
        parts.env.as_deref(),
        &key,
        key_text,
        t0,
    );
    // Boxed: a task's future is allocated whole when it is spawned, and every ready instance
    // is spawned at once (a whole matrix, in a no-op run), though most end in the hit above.
    Box::pin(miss(i, Arc::new(inputs), launch, parts, key, record, t0)).await
}

/// An instance the cache could not serve: why it runs, its resources, single flight, the
/// attempts, and storing the result.
#[allow(clippy::too_many_arguments)] // the instance's state so far, each computed once
async fn miss(
    i: Inst<'_>,
    inputs: Arc<BTreeMap<String, Resolved>>,
    launch: Launch,
    parts: KeyParts,
    key: Digest,
    mut record: InstanceRecord,
    t0: Duration,
) -> InstanceRecord {
    let stage = i.stage;
    let cacheable = i.sh.opts.may_use_cache(stage);
    let why = why_it_runs(i, &parts).await;
    record.reason = why.to_string();
    record.why = Some(Box::new(why));
    let mut held = match hold_resources(i).await {
        Ok(held) => held,
        Err(status) => return conclude(i, record, status),
    };
    // The attempt reads it to run on that host's engine.
    record.host = held.host.clone();
    let key_lock = if cacheable {
        let lock = match single_flight(i, &key).await {
            Ok(lock) => lock,
            Err(status) => return conclude(i, record, status),
        };
        // Whoever held the key has just computed it.
        if let Some(hit) = find_hit(i, &key) {
            return serve_hit(i, record, hit);
        }
        lock
    } else {
        None
    };
    // A unit the engine let go of while this instance waited (its lock container ended:
    // removed by hand, or its connection dropped) may be another heddle's now, and that
    // heddle found no stage of ours to wait for: take the units again rather than start
    // beside it. What is left is the moment between this check and the container's start.
    while held.engine_units.any_lost() {
        held.engine_units.release().await;
        drop(held);
        held = match hold_resources(i).await {
            Ok(held) => held,
            Err(status) => return conclude(i, record, status),
        };
        record.host = held.host.clone();
    }
    let holds = held.engine_units.names();
    let outputs = execute(i, &inputs, &launch, &mut record, t0, &holds).await;
    // The device is free once the stage has ended: release the engine's lock containers now,
    // not on drop (a spawned removal), so the next heddle's wait ends as early as it can.
    held.engine_units.release().await;
    match outputs {
        Ok(outputs) => {
            if stage.settings.cache {
                commit(i, &parts, key, &outputs, &record, key_lock);
            }
            let inst = i.inst;
            record.outputs = outputs.into();
            let status = StatusRecord::ok(&inst.label, inst.matrix.clone());
            conclude(i, record, status)
        }
        Err(mut status) => {
            status.tolerated =
                stage.settings.allow_failure && status.status == crate::record::Status::Failed;
            conclude(i, record, status)
        }
    }
}

/// The record as far as the key tells: the key, its text, the inputs' identities, env and
/// image.
fn keyed_record(
    i: Inst<'_>,
    inputs: VecMap<Box<serde_json::value::RawValue>>,
    env: Option<&str>,
    key: &Digest,
    key_text: Box<serde_json::value::RawValue>,
    t0: Duration,
) -> InstanceRecord {
    let ctx = &i.sh.ctx;
    let inst = i.inst;
    let mut record = empty_record(i.stage);
    record.cache_key = Some(key.to_string());
    record.key_parts = Some(key_text);
    record.inputs = inputs;
    record.env_identity = env.map(str::to_string);
    record.image = inst.image.as_ref().map(|r| {
        let identity = ctx.images.get(r);
        json!({
            "reference": r,
            "id": identity.map(|i| i.id.clone()),
            "repo_digests": identity.map(|i| i.repo_digests.clone()),
        })
    });
    record.start_ms = t0.as_millis() as u64;
    record
}

/// A cache hit: the action under `key` with its outputs restored (skipping ones already in
/// place). Inline, not on the blocking pool: a hit is a few small reads and stats, and a thread
/// hand-off per instance is what a no-op rerun of a long chain would otherwise spend.
fn find_hit(i: Inst<'_>, key: &Digest) -> Option<Hit> {
    let plan = &i.sh.ctx.plan;
    let dir = output_dir(plan, &i.inst.label);
    let files = &i.stage.outputs;
    restore(&i.sh.ctx.store, &i.sh.ctx.stats, key, &dir, files)
}

/// Read-through: on a local miss, ask the shared cache; what it brings is verified and in the
/// local store before [`find_hit`] serves it from there.
/// With the hit, who signed the remote's entry (the record names them).
async fn find_remote_hit(i: Inst<'_>, key: &Digest) -> Option<(Hit, crate::record::RemoteSigner)> {
    let gate = i.sh.opts.remote.as_ref()?;
    let declared = i.stage.outputs.keys().cloned().collect();
    let signer = gate.fetch(*key, declared).await?;
    Some((find_hit(i, key)?, signer))
}

/// The outputs found and where they were materialised.
type Hit = crate::outputs::Collected;

/// End the instance as served from the cache.
fn serve_hit(i: Inst<'_>, mut record: InstanceRecord, hit: Hit) -> InstanceRecord {
    let plan = &i.sh.ctx.plan;
    let inst = i.inst;
    let (outputs, paths) = hit;
    record.cached = true;
    record.reason = "cached".into();
    record.outputs = outputs.into();
    record.output_paths = relative_paths(&plan.pipeline.root, paths).into();
    record.end_ms = i.sh.started.elapsed().as_millis() as u64;
    let status = StatusRecord::ok(&inst.label, inst.matrix.clone());
    conclude(i, record, status)
}

/// Why a miss runs: forced, `--no-cache`, `cache = false`, or how its key differs from the
/// nearest earlier entry of its family (loaded once per family per run, even when a whole
/// matrix misses at once).
async fn why_it_runs(i: Inst<'_>, parts: &KeyParts) -> Reason {
    let plan = &i.sh.ctx.plan;
    let stage = i.stage;
    if let Some(reason) = i.sh.opts.runs_regardless(stage) {
        return reason;
    }
    let fam = family(plan, stage);
    let cell =
        i.sh.families
            .lock()
            .expect("families")
            .entry(fam.clone())
            .or_default()
            .clone();
    let earlier = cell
        .get_or_init(|| async {
            // A stage's first run has no earlier entries: asked here, not on the blocking pool
            // (two thread switches on a chain's critical path, per stage).
            if !i.sh.ctx.store.family_recorded(&fam) {
                return Earlier::new(&[]);
            }
            let st = i.sh.ctx.store.clone();
            let entries = blocking(move || st.actions_in_family(&fam).unwrap_or_default()).await;
            Earlier::new(&entries)
        })
        .await;
    explain_with(parts, earlier)
}

/// Its resource units and job slot ([`units::acquire`]). An interrupt while waiting ends the
/// instance as interrupted before it started; units that cannot be taken, as a heddle error.
async fn hold_resources(i: Inst<'_>) -> Result<Held<'_>, StatusRecord> {
    let ctx = &i.sh.ctx;
    let inst = i.inst;
    // A run on a cluster leaves placement to the cluster.
    let on_cluster = i.sh.opts.cluster_for(i.stage).is_some();
    let candidates: Vec<Candidate> = match on_cluster {
        true => Vec::new(),
        false => (ctx.placement.candidates(inst.stage).iter())
            .map(|name| {
                let host = ctx
                    .placement
                    .host(name)
                    .expect("placed on a configured host");
                Candidate {
                    host: host.into(),
                    engine: ctx.engines.get(&Some(host.docker.clone())),
                }
            })
            .collect(),
    };
    let (events, label) = (i.sh.events.clone(), inst.label.clone());
    let request = units::Request {
        run_id: &i.sh.opts.run_id,
        instance: &inst.label,
        wants: &i.stage.settings.resources,
        run_pools: &i.sh.run_pools,
        candidates,
        host_slots: &i.sh.host_slots,
        image: (inst.image.as_ref())
            .map(|r| ctx.images.get(r).map_or(r.as_str(), |i| i.id.as_str())),
        // A cluster's job is bounded by the cluster, and takes no local slot.
        jobs: (!on_cluster).then_some(&i.sh.jobs),
        cancel: &i.sh.cancel.graceful,
        say: Arc::new(move |text| {
            let note = Note::Units {
                label: label.clone(),
                text,
            };
            let _ = events.send(Event::Note(note));
        }),
    };
    match units::acquire(request).await {
        Ok(held) => Ok(held),
        Err(AcquireError::Interrupted) => Err(interrupted_before_start(inst)),
        Err(e) => Err(heddle_error(inst, heddle_cache::error_chain(&e))),
    }
}

/// Single flight: whoever holds the key computes it; the others wait, then take the hit. A
/// lock that cannot be taken at all (a read-only cache) is run without.
async fn single_flight(i: Inst<'_>, key: &Digest) -> Result<Option<KeyLock>, StatusRecord> {
    let inst = i.inst;
    match i.sh.ctx.store.try_lock_key(key) {
        Ok(Some(l)) => Ok(Some(l)),
        Ok(None) => {
            let _ = i.sh.events.send(Event::Note(Note::WaitingForKey {
                label: inst.label.clone(),
            }));
            let (st, key) = (i.sh.ctx.store.clone(), *key);
            let wait = blocking(move || st.lock_key(&key));
            tokio::select! {
                l = wait => Ok(l.ok()),
                _ = i.sh.cancel.graceful.cancelled() => Err(interrupted_before_start(inst)),
            }
        }
        Err(_) => Ok(None),
    }
}

/// Run the command, retrying a failure up to the stage's `retries` (never an interrupted one),
/// and time it in the record. `holds` names the engine-wide units' lock containers held for it.
async fn execute(
    i: Inst<'_>,
    inputs: &Arc<BTreeMap<String, Resolved>>,
    launch: &Launch,
    record: &mut InstanceRecord,
    t0: Duration,
    holds: &[String],
) -> Result<BTreeMap<String, OutputEntry>, StatusRecord> {
    let inst = i.inst;
    let stage = i.stage;
    let _ = i.sh.events.send(Event::Started {
        id: i.id,
        label: inst.label.clone(),
        why: *record
            .why
            .clone()
            .expect("a miss has its reason before it executes"),
    });
    let (exec, placed) = super::on_cluster::executor(i, record);
    let mut attempt = 0;
    let result = loop {
        attempt += 1;
        match attempt_once(i, inputs, launch, exec.as_ref(), record, holds).await {
            Err(status)
                if attempt <= stage.settings.retries
                    && status.error_class != Some(ErrorClass::Interrupted)
                    && !i.sh.cancel.graceful.is_cancelled() =>
            {
                let _ = i.sh.events.send(Event::Note(Note::Retrying {
                    label: inst.label.clone(),
                    attempt,
                    error: status.error.clone().unwrap_or_default(),
                }));
            }
            r => break r,
        }
    };
    record.attempts = attempt;
    super::on_cluster::record_job(&placed, record);
    let elapsed = i.sh.started.elapsed();
    record.end_ms = elapsed.as_millis() as u64;
    record.duration_ms = (elapsed - t0).as_millis() as u64;
    result
}

/// Hand the action entry to the group commit, with the key lock held until it is durable.
fn commit(
    i: Inst<'_>,
    parts: &KeyParts,
    key: Digest,
    outputs: &BTreeMap<String, OutputEntry>,
    record: &InstanceRecord,
    key_lock: Option<KeyLock>,
) {
    let plan = &i.sh.ctx.plan;
    let inst = i.inst;
    let entry = ActionEntry {
        key,
        family: family(plan, i.stage),
        key_parts: serde_json::to_value(parts).expect("parts serialise"),
        outputs: outputs.clone(),
        duration_ms: record.duration_ms,
        created_unix_ms: now_ms(),
        meta: json!({"label": inst.label, "pipeline": plan.pipeline.name}),
    };
    let _ = i.sh.commits.send(Commit::Action(Box::new(entry), key_lock));
}
