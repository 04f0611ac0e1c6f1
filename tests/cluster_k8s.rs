//! `kind = "kubernetes"` clusters and `[pipeline] cluster` through the binary (no cluster
//! needed: they stop before the API server), and the Kubernetes engine against a real API
//! server: that test runs only where a kubeconfig is
//! (`KUBECONFIG`, or `~/.kube/config`), and otherwise says loudly on stderr that it tested
//! nothing. No API server can run on the machines heddle is developed on, so this test has
//! never run there; the request sequence is tested against kube's mock service in
//! `runner/src/cluster/kube_api.rs`.
//!
//! It creates one Job in `HEDDLE_K8S_NAMESPACE` (default `default`; `HEDDLE_K8S_CONTEXT`
//! picks a kubeconfig context), resubmits it (409, adopted), waits for the watch to see it,
//! deletes it and waits for the watch to see it gone, then sweeps the run's label. The image
//! is a digest no registry holds: the pod never starts, which is all the test needs.

use crate::support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use support::{assert_contains, Project};

use heddle_runner::cluster::engine::{Engine, Submission};
use heddle_runner::cluster::kube_api::Kubernetes;
use heddle_runner::hosts::KubeCluster;

fn kubeconfig() -> Option<String> {
    if let Some(k) = std::env::var_os("KUBECONFIG").filter(|k| !k.is_empty()) {
        return Some(k.to_string_lossy().into_owned());
    }
    let home = std::env::var_os("HOME")?;
    let path = std::path::Path::new(&home).join(".kube/config");
    path.is_file().then(|| path.display().to_string())
}

/// Ask `query` until `done` says yes, for at most `limit`.
async fn until(k: &Kubernetes, name: &str, limit: Duration, done: impl Fn(usize) -> bool) {
    let start = Instant::now();
    loop {
        let rows = k.query(&[name.to_string()]).await.expect("query");
        if done(rows.len()) {
            return;
        }
        assert!(start.elapsed() < limit, "{name}: waited {limit:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test]
async fn a_job_is_created_adopted_watched_and_deleted_on_a_real_cluster() {
    let Some(config) = kubeconfig() else {
        eprintln!(
            "\n==========================================================================\n\
             SKIPPED: no Kubernetes cluster (no KUBECONFIG, no ~/.kube/config).\n\
             tests/cluster_k8s.rs tested NOTHING; only the mock-service tests ran.\n\
             ==========================================================================\n"
        );
        return;
    };
    eprintln!("cluster_k8s: using {config}");
    let settings = KubeCluster {
        namespace: std::env::var("HEDDLE_K8S_NAMESPACE").unwrap_or_else(|_| "default".into()),
        context: std::env::var("HEDDLE_K8S_CONTEXT").ok(),
        image: format!("registry.invalid/heddle@sha256:{}", "0".repeat(64)),
        resource_names: BTreeMap::new(),
    };
    let run = format!("test-{}", std::process::id());
    let k = Kubernetes::new(settings, "real", &run, "file:///nowhere");
    let key = heddle_cache::Digest::of_bytes(run.as_bytes()).to_string();
    let s = Submission {
        name: format!("heddle-{}", &key[..40]),
        comment: format!("run {run} probe"),
        label: "probe".into(),
        resources: BTreeMap::new(),
        timeout: Some(Duration::from_secs(60)),
        worker: "heddle".into(),
        key,
    };
    let first = k.submit(&s).await.expect("create");
    assert!(!first.adopted);
    let again = k.submit(&s).await.expect("resubmit");
    assert!(again.adopted, "a resubmission adopts the live Job");
    assert_eq!(again.id, first.id);
    until(&k, &first.id, Duration::from_secs(30), |n| n == 1).await;
    k.cancel(std::slice::from_ref(&first.id))
        .await
        .expect("delete");
    until(&k, &first.id, Duration::from_secs(60), |n| n == 0).await;
    k.sweep().await.expect("sweep");
}

const IMAGE: &str =
    "registry.lab/heddle@sha256:eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee";

fn project(hosts: &str, pipeline: &str) -> Project {
    let p = Project::new();
    p.file(".heddle/hosts.toml", hosts);
    p.trust();
    p.file("p.toml", pipeline);
    p
}

const PIPELINE: &str =
    "[pipeline]\nname = \"p\"\ncluster = \"gpu\"\n\n[stages.a]\nrun = \"true\"\n";

#[test]
fn the_pipeline_names_its_cluster_and_the_flag_wins() {
    let p = project(
        &format!("[clusters.k8s]\nkind = \"kubernetes\"\nimage = \"{IMAGE}\"\n"),
        PIPELINE,
    );
    let run = p.run("p.toml", &[]).code(2);
    assert_eq!(
        run.stderr,
        "error: cluster = \"gpu\" (p.toml:3:11): no [clusters.gpu] in hosts.toml (clusters: k8s)\n"
    );
    let run = p.run("p.toml", &["--cluster", "cpu"]).code(2);
    assert_eq!(
        run.stderr,
        "error: --cluster cpu: no [clusters.cpu] in hosts.toml (clusters: k8s)\n"
    );
}

#[test]
fn a_kubernetes_cluster_with_a_tagged_image_points_at_it() {
    let p = project(
        "[clusters.k8s]\nkind = \"kubernetes\"\nimage = \"heddle:latest\"\n",
        PIPELINE,
    );
    let run = p.run("p.toml", &["--cluster", "k8s"]).code(2);
    assert_eq!(
        run.stderr,
        format!(
            "error: cluster `k8s`: `image` must name a digest, not \"heddle:latest\"\n  \
             --> {}/.heddle/hosts.toml:3:9\n  |\n3 | image = \"heddle:latest\"\n  \
             |         ^^^^^^^^^^^^^^^\n  = help: write REGISTRY/REPO@sha256:DIGEST (a tag could \
             move between submit and start)\n",
            p.root().display()
        )
    );
}

#[test]
fn a_kubernetes_run_without_a_kubeconfig_stops_before_any_job() {
    let p = project(
        &format!("[clusters.k8s]\nkind = \"kubernetes\"\nimage = \"{IMAGE}\"\n"),
        PIPELINE,
    );
    // This user as a trusted writer of the shared cache, as the SLURM tests do.
    let out = p.heddle(&["cache", "keygen"]).ok().stdout;
    let line = out.lines().find(|l| l.starts_with("ed25519:")).unwrap();
    p.file(".user-config/trusted-writers", &format!("{line}\n"));
    let remote = tempfile::tempdir().unwrap();
    let url = format!("file://{}", remote.path().display());
    let run: support::Run = p
        .cmd(&["run", "p.toml", "--cluster", "k8s", "--progress", "plain"])
        .env("HEDDLE_REMOTE_CACHE", &url)
        .env("HEDDLE_REMOTE_CACHE_MODE", "readwrite")
        .env("KUBECONFIG", p.path("no-such-kubeconfig"))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap()
        .into();
    let err = run.code(2).stderr;
    assert!(
        err.starts_with(
            "error: --cluster k8s: failed to load a Kubernetes config (KUBECONFIG, \
             ~/.kube/config, or in a pod): failed to infer config"
        ),
        "{err}"
    );
    assert_contains(&err, "no-such-kubeconfig");
    assert_eq!(err.lines().count(), 1);
}
