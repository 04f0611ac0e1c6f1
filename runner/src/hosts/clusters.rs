//! `[clusters.NAME]` in `hosts.toml`: a batch scheduler heddle hands instances to
//! (`heddle run --cluster NAME`). Only `kind = "slurm"` exists. Read beside `[hosts.NAME]` by
//! [`super::file`], with the same diagnostics (file:line:col, did-you-mean for unknown keys).

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use crate::diag::{Diagnostic, Source};

/// One `[clusters.NAME]` entry, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Cluster {
    pub name: String,
    pub kind: ClusterKind,
    /// `--partition`, when set.
    pub partition: Option<String>,
    /// `--account`, when set.
    pub account: Option<String>,
    /// Passed to `sbatch` as they are, after heddle's own arguments.
    pub sbatch_args: Vec<String>,
    /// The pipeline pools the cluster enforces as generic resources (`--gres=NAME:N`); the
    /// others stay the driver's own limits. Default: `gpu`.
    pub gres: BTreeSet<String>,
    /// Time between two status queries (one `squeue` for the whole run).
    pub poll_interval: Duration,
    /// A job pending longer than this is reported with the scheduler's reason.
    pub pending_limit: Duration,
    /// Resubmissions after an infrastructure fault (a lost or cancelled job, an evicted input,
    /// an unreachable cache). A stage's own failure follows its `retries` instead.
    pub retries: u32,
    /// The heddle binary the job runs (default: this one's path, for a shared filesystem or
    /// the same install path on every node).
    pub heddle: Option<String>,
    /// The worker's own cache on the node (default `/tmp/heddle-worker-$(id -u)`).
    pub worker_cache: Option<String>,
    /// At most this many tasks of one job array run at once (`--array=0-N%LIMIT`).
    pub array_limit: Option<u32>,
    /// `file:line:col` of the `[clusters.NAME]` key.
    pub defined_at: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterKind {
    Slurm,
}

impl ClusterKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ClusterKind::Slurm => "slurm",
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCluster {
    kind: Option<Spanned<String>>,
    partition: Option<String>,
    account: Option<String>,
    #[serde(default)]
    sbatch_args: Vec<String>,
    gres: Option<Vec<String>>,
    poll_interval: Option<Spanned<String>>,
    pending_limit: Option<Spanned<String>>,
    retries: Option<u32>,
    heddle: Option<String>,
    worker_cache: Option<String>,
    array_limit: Option<u32>,
}

/// Check one `[clusters.NAME]` table.
pub(super) fn check_cluster(
    src: &Source,
    name: &Spanned<String>,
    raw: RawCluster,
) -> Result<Cluster, Vec<Diagnostic>> {
    let mut errors = Vec::new();
    let n = name.get_ref();
    let kind = match raw.kind.as_ref().map(|k| k.get_ref().as_str()) {
        Some("slurm") => Some(ClusterKind::Slurm),
        Some(other) => {
            let k = raw.kind.as_ref().expect("matched Some");
            errors.push(
                src.error(
                    Some(k.span()),
                    format!("cluster `{n}`: kind \"{other}\" is not supported"),
                )
                .with_help("write kind = \"slurm\""),
            );
            None
        }
        None => {
            errors.push(
                src.error(Some(name.span()), format!("cluster `{n}` has no `kind`"))
                    .with_help("add kind = \"slurm\" (see docs/scale-out.md)"),
            );
            None
        }
    };
    let mut duration = |raw: Option<&Spanned<String>>, key: &str, default: Duration| match raw {
        None => default,
        Some(d) => match humantime::parse_duration(d.get_ref()) {
            Ok(v) if !v.is_zero() => v,
            _ => {
                errors.push(
                    src.error(
                        Some(d.span()),
                        format!(
                            "cluster `{n}`: `{key}` must be a positive duration, not {:?}",
                            d.get_ref()
                        ),
                    )
                    .with_help("write e.g. \"500ms\", \"2s\" or \"10m\""),
                );
                default
            }
        },
    };
    let poll_interval = duration(
        raw.poll_interval.as_ref(),
        "poll_interval",
        Duration::from_secs(1),
    );
    let pending_limit = duration(
        raw.pending_limit.as_ref(),
        "pending_limit",
        Duration::from_secs(600),
    );
    match kind {
        Some(kind) if errors.is_empty() => {
            let (line, col) = src.line_col(name.span().start);
            Ok(Cluster {
                name: n.clone(),
                kind,
                partition: raw.partition,
                account: raw.account,
                sbatch_args: raw.sbatch_args,
                gres: raw
                    .gres
                    .map(|g| g.into_iter().collect())
                    .unwrap_or_else(|| BTreeSet::from(["gpu".to_string()])),
                poll_interval,
                pending_limit,
                retries: raw.retries.unwrap_or(1),
                heddle: raw.heddle,
                worker_cache: raw.worker_cache,
                array_limit: raw.array_limit.filter(|l| *l > 0),
                defined_at: format!("{}:{line}:{col}", src.path.display()),
            })
        }
        _ => Err(errors),
    }
}
