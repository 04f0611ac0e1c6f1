//! SLURM through its own commands: `sbatch --parsable` (the job script on stdin), one `squeue`
//! per poll tick for every job of the run, `scancel` of many ids at once. Without slurmdbd
//! `sacct` prints "accounting storage is disabled" and still exits 0, so it is never asked;
//! `squeue --states=all` lists ended jobs for `MinJobAge` (300 s by default), and the cache,
//! not the engine, says whether a job did its work ([`super::driver`]).
//!
//! Measured on the single-node test cluster (Debian's 22.05): `sbatch` returns in ~10 ms, and
//! a job starts 0.25–1.1 s after it with `SchedulerParameters=batch_sched_delay=0`.

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use futures_util::future::BoxFuture;

use super::engine::{Engine, EngineError, JobRow, JobState, Submission, Submitted};
use crate::hosts::Cluster;

/// SLURM as the poller's [`Engine`]: the cluster's settings and the functions below.
pub struct Slurm {
    pub cluster: Cluster,
}

impl Engine for Slurm {
    /// `heddle run` checks that `sbatch` runs before it builds the driver.
    fn ready(&self) -> BoxFuture<'_, Result<(), EngineError>> {
        Box::pin(async { Ok(()) })
    }

    fn array_shape(&self, s: &Submission) -> Option<Vec<String>> {
        let mut shape = sbatch_args(&self.cluster, s);
        shape.retain(|a| !a.starts_with("--job-name=") && !a.starts_with("--comment="));
        Some(shape)
    }

    /// As [`script`] and [`array_script`] write it (array tasks are `ID_i`).
    fn outcome_tag(&self, id: &str) -> String {
        format!("slurm:{}:{id}", self.cluster.name)
    }

    fn submit<'a>(&'a self, s: &'a Submission) -> BoxFuture<'a, Result<Submitted, EngineError>> {
        Box::pin(async move {
            let args = sbatch_args(&self.cluster, s);
            let id = submit(&args, &script(&self.cluster, s)).await?;
            Ok(Submitted {
                id,
                adopted: false,
                state: JobState::Submitted,
            })
        })
    }

    fn submit_array<'a>(
        &'a self,
        subs: &'a [&'a Submission],
        name: &'a str,
    ) -> BoxFuture<'a, Result<String, EngineError>> {
        Box::pin(async move {
            let args = array_args(&self.cluster, subs[0], subs.len(), name);
            submit(&args, &array_script(&self.cluster, subs)).await
        })
    }

    fn query<'a>(&'a self, names: &'a [String]) -> BoxFuture<'a, Result<Vec<JobRow>, EngineError>> {
        Box::pin(query(names))
    }

    fn cancel<'a>(&'a self, ids: &'a [String]) -> BoxFuture<'a, Result<(), EngineError>> {
        Box::pin(cancel(ids))
    }

    /// Every job of the run was cancelled by id already; SLURM keeps no labels to sweep by.
    fn sweep(&self) -> BoxFuture<'_, Result<(), EngineError>> {
        Box::pin(async { Ok(()) })
    }
}

/// The `sbatch` arguments for one submission, after `--parsable`.
pub fn sbatch_args(cluster: &Cluster, s: &Submission) -> Vec<String> {
    let mut a = vec![
        format!("--job-name={}", s.name),
        // heddle owns retries: a requeued job would run a second time behind its back.
        "--no-requeue".to_string(),
        // The worker's results travel through the shared cache; SLURM's own output file is
        // for debugging the worker, and a user who wants it names one in `sbatch_args`.
        "--output=/dev/null".to_string(),
        format!("--comment=heddle {}", s.comment),
    ];
    if let Some(p) = &cluster.partition {
        a.push(format!("--partition={p}"));
    }
    if let Some(acc) = &cluster.account {
        a.push(format!("--account={acc}"));
    }
    let gres: Vec<String> = s
        .resources
        .iter()
        .filter(|(pool, _)| cluster.gres.contains(*pool))
        .map(|(pool, n)| format!("{pool}:{n}"))
        .collect();
    if !gres.is_empty() {
        a.push(format!("--gres={}", gres.join(",")));
    }
    if let Some(t) = s.timeout {
        a.push(format!("--time={}", time_limit_minutes(t)));
    }
    a.extend(cluster.sbatch_args.iter().cloned());
    a
}

/// The job script of one submission: `heddle worker` for its action, the job named in the tag
/// so the worker and the driver derive the same outcome key.
pub fn script(cluster: &Cluster, s: &Submission) -> String {
    format!(
        "#!/bin/sh\n# {}\nexec {} worker --action {} --tag \"slurm:{}:$SLURM_JOB_ID\"\n",
        s.comment.replace('\n', " "),
        s.worker,
        s.key,
        cluster.name
    )
}

/// One array job for submissions of one shape (resources, timeout): task `i` runs the `i`th
/// action. Its tasks are `ID_i` in `squeue -r`, and in the workers' tags.
pub fn array_script(cluster: &Cluster, subs: &[&Submission]) -> String {
    let mut text = String::from("#!/bin/sh\ncase \"$SLURM_ARRAY_TASK_ID\" in\n");
    for (i, s) in subs.iter().enumerate() {
        text.push_str(&format!(
            "{i}) KEY={} ;; # {}\n",
            s.key,
            s.comment.replace('\n', " ")
        ));
    }
    text.push_str(
        "*) echo \"heddle: no action for task $SLURM_ARRAY_TASK_ID\" >&2; exit 75 ;;\nesac\n",
    );
    text.push_str(&format!(
        "exec {} worker --action \"$KEY\" --tag \"slurm:{}:${{SLURM_ARRAY_JOB_ID}}_${{SLURM_ARRAY_TASK_ID}}\"\n",
        subs[0].worker, cluster.name
    ));
    text
}

/// `sbatch` arguments for an array of `n` tasks shaped like `first`, named `name`.
pub fn array_args(cluster: &Cluster, first: &Submission, n: usize, name: &str) -> Vec<String> {
    let mut a = sbatch_args(cluster, first);
    a[0] = format!("--job-name={name}");
    a[3] = format!("--comment=heddle array of {n}");
    let cap = cluster
        .array_limit
        .map(|c| format!("%{c}"))
        .unwrap_or_default();
    a.insert(1, format!("--array=0-{}{cap}", n - 1));
    a
}

/// `--time` in whole minutes: the stage's timeout (the worker enforces it, and says so in the
/// record) plus five minutes for fetching inputs and uploading outputs, so SLURM's kill is the
/// backstop, never the first word.
pub fn time_limit_minutes(timeout: Duration) -> u64 {
    timeout.as_secs().div_ceil(60) + 5
}

/// `squeue --format` fields, `|`-separated: id, name, state, reason, nodes.
const FORMAT: &str = "%i|%j|%T|%r|%N";

/// The rows of `squeue --noheader --format=FORMAT` output.
pub fn parse_rows(text: &str) -> Vec<JobRow> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.trim().splitn(5, '|');
            let id = f.next()?.trim().to_string();
            let name = f.next()?.to_string();
            let state = f.next()?.to_string();
            let reason = f.next().unwrap_or("").to_string();
            let node = f.next().unwrap_or("").to_string();
            if id.is_empty() {
                return None;
            }
            Some(JobRow {
                id,
                name,
                state: classify_state(&state, &reason, &node),
            })
        })
        .collect()
}

/// SLURM's job state names, as heddle reads them.
pub fn classify_state(state: &str, reason: &str, node: &str) -> JobState {
    let node = (!node.is_empty() && node != "(null)").then(|| node.to_string());
    match state {
        "PENDING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" | "SUSPENDED" | "RESV_DEL_HOLD" => {
            JobState::Pending {
                reason: reason.to_string(),
            }
        }
        "CONFIGURING" | "RUNNING" | "COMPLETING" | "SIGNALING" | "STAGE_OUT" | "RESIZING" => {
            JobState::Running { node }
        }
        other => JobState::Ended {
            state: other.to_string(),
            node,
        },
    }
}

/// Submit `script` with `args`; the job id `--parsable` prints (`ID` or `ID;CLUSTER`).
pub async fn submit(args: &[String], script: &str) -> Result<String, EngineError> {
    let mut child = Command::new("sbatch")
        .arg("--parsable")
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| EngineError::spawn("sbatch", e))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .await
            .map_err(|e| EngineError::spawn("sbatch", e))?;
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| EngineError::spawn("sbatch", e))?;
    if !out.status.success() {
        return Err(EngineError::refused("sbatch", &out.stderr));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let id = text
        .trim()
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_digit() || c == '_') {
        return Err(EngineError::Refused {
            program: "sbatch",
            message: format!("printed no job id: {:?}", text.trim()),
        });
    }
    Ok(id)
}

/// Every job named in `names`, ended ones too: one `squeue` call.
pub async fn query(names: &[String]) -> Result<Vec<JobRow>, EngineError> {
    let out = Command::new("squeue")
        .arg("--noheader")
        // One row per array task, pending ones included.
        .arg("--array")
        .arg("--states=all")
        .arg(format!("--format={FORMAT}"))
        .arg(format!("--name={}", names.join(",")))
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| EngineError::spawn("squeue", e))?;
    if !out.status.success() {
        return Err(EngineError::refused("squeue", &out.stderr));
    }
    Ok(parse_rows(&String::from_utf8_lossy(&out.stdout)))
}

/// Cancel every job in `ids` with one `scancel`.
pub async fn cancel(ids: &[String]) -> Result<(), EngineError> {
    let out = Command::new("scancel")
        .args(ids)
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| EngineError::spawn("scancel", e))?;
    // scancel exits 1 when a job has ended already; that is what cancelling wanted.
    if !out.status.success() && !String::from_utf8_lossy(&out.stderr).contains("already completed")
    {
        return Err(EngineError::refused("scancel", &out.stderr));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    fn cluster() -> Cluster {
        Cluster {
            name: "hpc".into(),
            kind: crate::hosts::ClusterKind::Slurm,
            partition: Some("gpu".into()),
            account: None,
            sbatch_args: vec!["--qos=low".into()],
            gres: BTreeSet::from(["gpu".into(), "hailo".into()]),
            poll_interval: Duration::from_secs(1),
            pending_limit: Duration::from_secs(600),
            unreachable_limit: Duration::from_secs(600),
            retries: 1,
            heddle: None,
            worker_cache: None,
            array_limit: Some(4),
            defined_at: "hosts.toml:1:1".into(),
        }
    }

    #[test]
    fn pools_the_cluster_enforces_become_gres_and_a_timeout_becomes_time() {
        let s = Submission {
            name: "heddle-0123".into(),
            comment: "run r1 probe[x=1]".into(),
            label: "probe[x=1]".into(),
            resources: BTreeMap::from([("gpu".into(), 1), ("hailo".into(), 1), ("cpu".into(), 4)]),
            timeout: Some(Duration::from_secs(90)),
            worker: "heddle --remote-cache file:///c".into(),
            key: "ab".repeat(32),
        };
        assert_eq!(
            sbatch_args(&cluster(), &s),
            vec![
                "--job-name=heddle-0123",
                "--no-requeue",
                "--output=/dev/null",
                "--comment=heddle run r1 probe[x=1]",
                "--partition=gpu",
                "--gres=gpu:1,hailo:1",
                "--time=7",
                "--qos=low",
            ]
        );
        let array = array_args(&cluster(), &s, 20, "heddle-array-x");
        assert_eq!(array[0], "--job-name=heddle-array-x");
        assert_eq!(array[1], "--array=0-19%4");
        assert_eq!(array[4], "--comment=heddle array of 20");
        assert_eq!(
            array_script(&cluster(), &[&s, &s]),
            format!(
                "#!/bin/sh\ncase \"$SLURM_ARRAY_TASK_ID\" in\n\
                 0) KEY={k} ;; # run r1 probe[x=1]\n1) KEY={k} ;; # run r1 probe[x=1]\n\
                 *) echo \"heddle: no action for task $SLURM_ARRAY_TASK_ID\" >&2; exit 75 ;;\nesac\n\
                 exec heddle --remote-cache file:///c worker --action \"$KEY\" \
                 --tag \"slurm:hpc:${{SLURM_ARRAY_JOB_ID}}_${{SLURM_ARRAY_TASK_ID}}\"\n",
                k = "ab".repeat(32)
            )
        );
    }

    #[test]
    fn squeue_rows_become_states() {
        let rows = parse_rows(
            "1|heddle-a|PENDING|Resources|\n2|heddle-b|RUNNING|None|node1\n3|heddle-c|CANCELLED|None|node1\n",
        );
        assert_eq!(
            rows.iter().map(|r| r.state.clone()).collect::<Vec<_>>(),
            vec![
                JobState::Pending {
                    reason: "Resources".into()
                },
                JobState::Running {
                    node: Some("node1".into())
                },
                JobState::Ended {
                    state: "CANCELLED".into(),
                    node: Some("node1".into())
                },
            ]
        );
        assert_eq!(rows[1].name, "heddle-b");
    }
}
