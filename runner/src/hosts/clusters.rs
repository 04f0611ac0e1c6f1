//! `[clusters.NAME]` in `hosts.toml`: a batch scheduler heddle hands instances to
//! (`heddle run --cluster NAME`): `kind = "slurm"` or `kind = "kubernetes"`. The keys of one
//! kind are errors on the other, so a misplaced key is never silently ignored. Read beside `[hosts.NAME]` by
//! [`super::file`], with the same diagnostics (file:line:col, did-you-mean for unknown keys).

use std::collections::{BTreeMap, BTreeSet};
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
    /// Status queries failing without a break for this long (the controller down, the API
    /// server unreachable) end every live job's wait as an infrastructure fault.
    pub unreachable_limit: Duration,
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

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterKind {
    Slurm,
    Kubernetes(KubeCluster),
}

impl ClusterKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            ClusterKind::Slurm => "slurm",
            ClusterKind::Kubernetes(_) => "kubernetes",
        }
    }
}

/// What `kind = "kubernetes"` adds: where the Jobs go and what their pods run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeCluster {
    /// Default `default`.
    pub namespace: String,
    /// The kubeconfig context (default: the current one).
    pub context: Option<String>,
    /// The worker image, by digest (`repo@sha256:…`): it holds `heddle`, and a tag could
    /// move between submit and start.
    pub image: String,
    /// Pool → extended resource (`gpu` → `nvidia.com/gpu`, the default; `hailo` → a device
    /// plugin's name). Pools not named stay the driver's own limits.
    pub resource_names: BTreeMap<String, String>,
}

/// Keys only SLURM reads, and keys only Kubernetes reads.
const SLURM_KEYS: [&str; 5] = ["partition", "account", "sbatch_args", "gres", "array_limit"];
const KUBE_KEYS: [&str; 4] = ["namespace", "context", "image", "resource_names"];

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
    unreachable_limit: Option<Spanned<String>>,
    retries: Option<u32>,
    heddle: Option<String>,
    worker_cache: Option<String>,
    array_limit: Option<u32>,
    namespace: Option<Spanned<String>>,
    context: Option<Spanned<String>>,
    image: Option<Spanned<String>>,
    resource_names: Option<Spanned<BTreeMap<String, String>>>,
}

impl RawCluster {
    /// Where each key given sits, by name, for "this key belongs to the other kind".
    fn given(&self) -> Vec<(&'static str, bool)> {
        vec![
            ("partition", self.partition.is_some()),
            ("account", self.account.is_some()),
            ("sbatch_args", !self.sbatch_args.is_empty()),
            ("gres", self.gres.is_some()),
            ("array_limit", self.array_limit.is_some()),
            ("namespace", self.namespace.is_some()),
            ("context", self.context.is_some()),
            ("image", self.image.is_some()),
            ("resource_names", self.resource_names.is_some()),
        ]
    }
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
        Some("kubernetes") => check_kube(src, name, &raw, &mut errors).map(ClusterKind::Kubernetes),
        Some(other) => {
            let k = raw.kind.as_ref().expect("matched Some");
            errors.push(
                src.error(
                    Some(k.span()),
                    format!("cluster `{n}`: kind \"{other}\" is not supported"),
                )
                .with_help("write kind = \"slurm\" or kind = \"kubernetes\""),
            );
            None
        }
        None => {
            errors.push(
                src.error(Some(name.span()), format!("cluster `{n}` has no `kind`"))
                    .with_help(
                        "add kind = \"slurm\" or kind = \"kubernetes\" (see docs/scale-out.md)",
                    ),
            );
            None
        }
    };
    if let Some(k) = &kind {
        let (others, theirs) = match k {
            ClusterKind::Slurm => (&KUBE_KEYS[..], "kubernetes"),
            ClusterKind::Kubernetes(_) => (&SLURM_KEYS[..], "slurm"),
        };
        for (key, given) in raw.given() {
            if given && others.contains(&key) {
                let span = raw.kind.as_ref().map(|k| k.span());
                errors.push(
                    src.error(
                        span,
                        format!(
                            "cluster `{n}`: `{key}` is a {theirs} key, and this cluster is {}",
                            k.as_str()
                        ),
                    )
                    .with_help(format!("remove `{key}`")),
                );
            }
        }
    }
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
    let unreachable_limit = duration(
        raw.unreachable_limit.as_ref(),
        "unreachable_limit",
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
                unreachable_limit,
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

/// The Kubernetes settings of `raw`, or `None` with the reasons in `errors`.
fn check_kube(
    src: &Source,
    name: &Spanned<String>,
    raw: &RawCluster,
    errors: &mut Vec<Diagnostic>,
) -> Option<KubeCluster> {
    let n = name.get_ref();
    let image = match &raw.image {
        None => {
            errors.push(
                src.error(
                    Some(name.span()),
                    format!("cluster `{n}` (kubernetes) has no `image`"),
                )
                .with_help(
                    "add image = \"REGISTRY/REPO@sha256:DIGEST\", an image that holds heddle",
                ),
            );
            None
        }
        Some(i) if !is_by_digest(i.get_ref()) => {
            errors.push(
                src.error(
                    Some(i.span()),
                    format!(
                        "cluster `{n}`: `image` must name a digest, not {:?}",
                        i.get_ref()
                    ),
                )
                .with_help(
                    "write REGISTRY/REPO@sha256:DIGEST (a tag could move between submit and start)",
                ),
            );
            None
        }
        Some(i) => Some(i.get_ref().clone()),
    };
    if let Some(ns) = &raw.namespace {
        if !is_dns_label(ns.get_ref()) {
            errors.push(
                src.error(
                    Some(ns.span()),
                    format!(
                        "cluster `{n}`: namespace {:?} is not a DNS label",
                        ns.get_ref()
                    ),
                )
                .with_help("at most 63 of a-z, 0-9 and -, starting and ending alphanumeric"),
            );
        }
    }
    let resource_names = match &raw.resource_names {
        Some(r) => r.get_ref().clone(),
        None => BTreeMap::from([("gpu".to_string(), "nvidia.com/gpu".to_string())]),
    };
    Some(KubeCluster {
        namespace: raw
            .namespace
            .as_ref()
            .map(|n| n.get_ref().clone())
            .unwrap_or_else(|| "default".into()),
        context: raw.context.as_ref().map(|c| c.get_ref().clone()),
        image: image?,
        resource_names,
    })
}

/// `…@sha256:` and 64 hex digits.
fn is_by_digest(image: &str) -> bool {
    image.split_once("@sha256:").is_some_and(|(repo, hex)| {
        !repo.is_empty() && hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}
