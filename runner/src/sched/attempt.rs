//! One execution of an instance's command in a fresh sandbox, in named steps: lay out the
//! inputs, build the request (command, environment, logs, container settings), run it while
//! forwarding its lines, read what it reported, name its failure, check its inputs, and
//! collect its outputs.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use heddle_cache::{error_chain, OutputEntry};
use serde_json::Value;

use crate::exec::{base_env, ExecError, ExecOutcome, ExecRequest, Executor};
use crate::execution;
use crate::inputs::{member_ok_fn, Resolved};
use crate::launch::Launch;
use crate::names::path_segment;
use crate::outputs::{output_dir, relative_paths};
use crate::record::{InstanceRecord, StatusRecord};
use crate::render::render;
use crate::sandbox::{check_inputs, lay_out, Sandbox, SandboxError};

use super::outcome::{cancelled, failed, heddle_error};
use super::{blocking, Event, Inst, Note};

/// Run instance `i.id` once: its stored outputs, or how it failed. `holds` names the lock
/// containers of the engine-wide units held for it. The inputs are shared, not cloned, with
/// the blocking pool that lays them out and checks them.
pub(super) async fn attempt_once(
    i: Inst<'_>,
    inputs: &Arc<BTreeMap<String, Resolved>>,
    launch: &Launch,
    exec: &dyn Executor,
    record: &mut InstanceRecord,
    holds: &[String],
) -> Result<BTreeMap<String, OutputEntry>, StatusRecord> {
    let inst = i.inst;
    let sandbox = open_sandbox(i, inputs)
        .await
        .map_err(|e| heddle_error(inst, error_chain(&e)))?;
    let sb = sandbox.path().to_path_buf();
    let req = request(i, inputs, launch, exec, &sb, record, holds);
    let stderr_log = req.stderr_log.clone();
    let mask = req.mask.clone();
    let t_exec = Instant::now();
    let events = i.sh.events.clone();
    let on_line = move |line| {
        let _ = events.send(Event::Line { id: i.id, line });
    };
    let outcome = execution::run(exec, req, i.sh.cancel.clone(), on_line).await;
    tracing::debug!(label = %inst.label, ms = t_exec.elapsed().as_secs_f64() * 1e3, "executed");
    let t_collect = Instant::now();
    read_facts(i, &execution::facts_file(&sb), record, &mask);
    let outcome = match outcome {
        Ok(o) => o,
        // Refused where the outputs were (a cluster node): a stage failure, as here.
        Err(ExecError::Refused { class, message }) => {
            let refused = execution::Refused { class, message };
            return Err(failed(inst, refused.into_failure(&stderr_log)));
        }
        Err(e) => return Err(heddle_error(inst, error_chain(&e))),
    };
    if let Some(f) = execution::failure(&outcome, &sb, &stderr_log, &mask) {
        return Err(match outcome {
            ExecOutcome::Cancelled => cancelled(inst, f),
            _ => failed(inst, f),
        });
    }
    let collected = check_and_collect(i, inputs, sandbox, mask).await;
    tracing::debug!(label = %inst.label, ms = t_collect.elapsed().as_secs_f64() * 1e3, "collected");
    match collected {
        Ok((outs, paths)) => {
            record.output_paths = relative_paths(&i.sh.ctx.plan.pipeline.root, paths).into();
            Ok(outs)
        }
        Err(refused) => Err(failed(inst, refused.into_failure(&stderr_log))),
    }
}

/// A sandbox from the pool with the inputs laid out in it.
async fn open_sandbox(
    i: Inst<'_>,
    inputs: &Arc<BTreeMap<String, Resolved>>,
) -> Result<Sandbox, SandboxError> {
    let in_names: Vec<String> = inputs.keys().cloned().collect();
    let out_names: Vec<String> = i.stage.outputs.keys().cloned().collect();
    let (pool, store, plan, ins) = (
        i.sh.sandboxes.clone(),
        i.sh.ctx.store.clone(),
        i.sh.ctx.plan.clone(),
        Arc::clone(inputs),
    );
    let open = move || {
        let sandbox = pool.acquire(&in_names, &out_names)?;
        lay_out(&store, &plan, sandbox.path(), &ins)?;
        Ok(sandbox)
    };
    // A few hard links and folder checks cost less than a trip to the blocking pool (two
    // thread switches on the chain's critical path, per stage), as a cache hit's restore does;
    // copies of repo files, folders and gathers still go there. The reset also empties what the
    // sandbox's previous stage left in `work/`, usually nothing.
    if lays_out_quickly(inputs) {
        open()
    } else {
        blocking(open).await
    }
}

/// At most this many inputs are laid out without the blocking pool.
const QUICK_INPUTS: usize = 8;

/// Whether laying out `inputs` is a few system calls: each is one upstream file that is not
/// executable, which [`heddle_cache::Store::link_into`] hard-links from the store (an
/// executable is copied).
fn lays_out_quickly(inputs: &BTreeMap<String, Resolved>) -> bool {
    inputs.len() <= QUICK_INPUTS
        && inputs.values().all(|r| {
            matches!(
                r,
                Resolved::One {
                    entry: OutputEntry::File {
                        executable: false,
                        ..
                    },
                    ..
                }
            )
        })
}

/// The execution request: the command rendered for the executor's layout, its environment,
/// its log files (named in the record) and, for a container stage, the container settings.
#[allow(clippy::too_many_arguments)]
fn request(
    i: Inst<'_>,
    inputs: &BTreeMap<String, Resolved>,
    launch: &Launch,
    exec: &dyn Executor,
    sb: &Path,
    record: &mut InstanceRecord,
    holds: &[String],
) -> ExecRequest {
    let ctx = &i.sh.ctx;
    let inst = i.inst;
    let stage = i.stage;
    let stage_dir = stage.def.as_ref().map(|d| d.dir.clone());
    let layout = exec.layout(sb, stage_dir.as_deref());
    let ok = member_ok_fn(inputs);
    let command =
        render(&ctx.plan, inst, &layout, &ok).expect("templates were checked at plan time");
    record.command = Some(command.display());
    let safe = path_segment(&inst.label);
    let stdout_log = i.sh.logs_dir.join(format!("{safe}.out"));
    let stderr_log = i.sh.logs_dir.join(format!("{safe}.err"));
    record.logs = Some(Box::new([
        stdout_log.to_string_lossy().into_owned(),
        stderr_log.to_string_lossy().into_owned(),
    ]));
    // The request the key was computed from; placement and held units do not enter the key.
    let container = launch.container.clone().map(|req| {
        // Placed: on the configured host whose units it holds.
        let mut req = match record.host.as_deref().and_then(|h| ctx.placement.host(h)) {
            Some(host) => req.on_host(host),
            None => req,
        };
        req.holds = holds.to_vec();
        req
    });
    ExecRequest {
        label: inst.label.clone(),
        run_id: i.sh.opts.run_id.clone(),
        command,
        sandbox: sb.to_path_buf(),
        stage_dir,
        env: environment(i, launch, sb),
        timeout: stage.settings.timeout,
        stdout_log,
        stderr_log,
        mask: crate::secrets::mask_of(&stage.settings.secret_env),
        secret_env: stage.settings.secret_env.clone(),
        container,
    }
}

/// The command's environment: the host's base (not in a container, where the host's PATH and
/// HOME mean nothing), the python env, passed-through and declared variables, and heddle's own.
fn environment(i: Inst<'_>, launch: &Launch, sb: &Path) -> BTreeMap<String, String> {
    let ctx = &i.sh.ctx;
    let stage = i.stage;
    let mut env = if stage.container.is_some() {
        BTreeMap::new()
    } else {
        base_env()
    };
    if let Some(e) = stage.settings.env.as_ref().and_then(|e| ctx.envs.get(e)) {
        let path = env.get("PATH").cloned().unwrap_or_default();
        let joined =
            std::env::join_paths(std::iter::once(e.bin_dir()).chain(std::env::split_paths(&path)))
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or(path);
        env.insert("PATH".into(), joined);
        env.insert("VIRTUAL_ENV".into(), e.dir.to_string_lossy().into_owned());
    }
    // The values the key was computed from, read once.
    for (k, v) in &launch.passed_env {
        if let Some(v) = v {
            env.insert(k.clone(), v.clone());
        }
    }
    // Never keyed (a result must not depend on a secret), so read here only.
    for k in &stage.settings.secret_env {
        if let Ok(v) = std::env::var(k) {
            env.insert(k.clone(), v);
        }
    }
    env.extend(stage.settings.vars.clone());
    env.extend(execution::heddle_vars(sb, &i.inst.label, &i.sh.opts.run_id));
    env
}

/// Facts a stage reports about where it ran (a device's identity and firmware, say).
fn read_facts(
    i: Inst<'_>,
    facts_file: &Path,
    record: &mut InstanceRecord,
    mask: &heddle_containers::Mask,
) {
    let Ok(text) = std::fs::read_to_string(facts_file) else {
        return;
    };
    match serde_json::from_str::<Value>(&mask.apply(&text)) {
        Ok(v) => record.facts = Some(v),
        Err(e) => {
            let _ = i.sh.events.send(Event::Note(Note::FactsNotJson {
                label: i.inst.label.clone(),
                error: e.to_string(),
            }));
        }
    }
}

/// [`execution::check_and_collect`] on the blocking pool, the inputs checked as this sandbox
/// laid them out; the sandbox goes back to its pool after.
async fn check_and_collect(
    i: Inst<'_>,
    inputs: &Arc<BTreeMap<String, Resolved>>,
    sandbox: Sandbox,
    mask: heddle_containers::Mask,
) -> Result<crate::outputs::Collected, execution::Refused> {
    let plan = &i.sh.ctx.plan;
    let (store, stats, ins) = (
        i.sh.ctx.store.clone(),
        i.sh.ctx.stats.clone(),
        Arc::clone(inputs),
    );
    let stage = i.stage;
    let files = stage.outputs.clone();
    let secret_names = stage.settings.secret_env.clone();
    let dir = output_dir(plan, &i.inst.label);
    let quick = lays_out_quickly(inputs) && collects_quickly(sandbox.path(), &files, &secret_names);
    let collect = move || {
        let what = execution::Collect {
            files: &files,
            dir: &dir,
            mask: &mask,
            secret_names: &secret_names,
        };
        let intact = || check_inputs(&store, &ins);
        let collected = execution::check_and_collect(&store, &stats, sandbox.path(), &what, intact);
        drop(sandbox);
        collected
    };
    // As with laying out: a few small files are hashed, stored and restored in less time than
    // the two thread switches of a trip to the blocking pool, which a chain pays per stage.
    if quick {
        collect()
    } else {
        blocking(collect).await
    }
}

/// At most this many bytes per output are collected without the blocking pool.
const QUICK_OUTPUT_BYTES: u64 = 64 * 1024;

/// Whether collecting is a few small reads and writes: at most [`QUICK_INPUTS`] outputs, each a
/// file of at most [`QUICK_OUTPUT_BYTES`], and no secret to look for in them. Anything else
/// (a folder, a large file, a missing output) goes to the blocking pool as before.
fn collects_quickly(
    sandbox: &Path,
    files: &BTreeMap<String, String>,
    secret_names: &[String],
) -> bool {
    secret_names.is_empty()
        && files.len() <= QUICK_INPUTS
        && files.iter().all(|(name, file)| {
            let p = sandbox.join("out").join(name).join(file);
            std::fs::symlink_metadata(p)
                .is_ok_and(|m| m.file_type().is_file() && m.len() <= QUICK_OUTPUT_BYTES)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_few_small_files_without_secrets_are_collected_in_place() {
        let sb = tempfile::tempdir().unwrap();
        let out = |name: &str| sb.path().join("out").join(name);
        for name in ["small", "large", "folder", "missing"] {
            std::fs::create_dir_all(out(name)).unwrap();
        }
        std::fs::write(out("small").join("o.txt"), b"hello\n").unwrap();
        let large = vec![0_u8; QUICK_OUTPUT_BYTES as usize + 1];
        std::fs::write(out("large").join("o.bin"), large).unwrap();
        std::fs::create_dir(out("folder").join("d")).unwrap();
        let files = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            (pairs.iter())
                .map(|(n, f)| (n.to_string(), f.to_string()))
                .collect()
        };
        let small = files(&[("small", "o.txt")]);
        assert!(collects_quickly(sb.path(), &small, &[]));
        assert!(!collects_quickly(sb.path(), &small, &["TOKEN".into()]));
        assert!(!collects_quickly(
            sb.path(),
            &files(&[("large", "o.bin")]),
            &[]
        ));
        assert!(!collects_quickly(
            sb.path(),
            &files(&[("folder", "d")]),
            &[]
        ));
        assert!(!collects_quickly(
            sb.path(),
            &files(&[("missing", "o.txt")]),
            &[]
        ));
        let many: Vec<(String, String)> = (0..=QUICK_INPUTS)
            .map(|i| ("small".repeat(i + 1), "o.txt".to_string()))
            .collect();
        for (n, f) in &many {
            std::fs::create_dir_all(out(n)).unwrap();
            std::fs::write(out(n).join(f), b"x").unwrap();
        }
        let many: BTreeMap<String, String> = many.into_iter().collect();
        assert!(!collects_quickly(sb.path(), &many, &[]));
    }
}
