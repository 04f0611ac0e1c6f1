//! Kubernetes Jobs, the pure half: an instance as a `batch/v1` Job manifest, and a Job's
//! status as the driver's [`JobState`]. The requests (create, 409 on resubmit, list then
//! watch, 410 then relist, delete on cancel, sweep by the run's label) are
//! [`super::kube_api`]; `kind = "kubernetes"` in `hosts.toml` selects them. No API server can
//! run on the machines this was written on, so none of it has met a real cluster: the mapping
//! is checked against golden files (tests/fixtures/cluster/k8s-*.json) written from the
//! Kubernetes API reference, the requests against kube's mock service, and
//! tests/cluster_k8s.rs runs against a real cluster only where a kubeconfig is.
//!
//! The worker protocol is the same as SLURM's: the pod runs `heddle worker` against the
//! shared cache, the Job's name comes from the key (a resubmission gets 409 and finds it), the
//! cache entry decides the outcome. One difference: the pod runs the cluster's `image` (which
//! holds `heddle`), so only host stages run there; a stage with its own image is refused
//! before submission, since running it would need a container engine inside the pod.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::engine::JobState;

/// What a Job needs that the driver knows.
#[derive(Debug, Clone)]
pub struct PodJob {
    /// The instance key, hex.
    pub key: String,
    pub label: String,
    pub run_id: String,
    pub namespace: String,
    /// The image by digest (`repo@sha256:…`): a tag could move between submit and start.
    pub image: String,
    /// The shared cache's address, as `--remote-cache` takes it.
    pub remote: String,
    pub cluster: String,
    /// Pool → units; mapped to extended resources by `resource_names`.
    pub resources: BTreeMap<String, u32>,
    /// Pool → extended resource (`gpu` → `nvidia.com/gpu`, `hailo` → a device plugin's name).
    pub resource_names: BTreeMap<String, String>,
    pub timeout_secs: Option<u64>,
}

/// Job names are DNS labels (63 characters at most): `heddle-` and 40 hex of the key.
pub fn job_name(key: &str) -> String {
    format!("heddle-{}", &key[..40.min(key.len())])
}

/// What the worker of Job `name` (uid `uid`) on `cluster` stores its outcome under, and the
/// driver reads it back by ([`super::description::outcome_key`]).
pub fn outcome_tag(cluster: &str, name: &str, uid: &str) -> String {
    format!("kubernetes:{cluster}:{name}:{uid}")
}

/// A label value: at most 63 characters of `[A-Za-z0-9._-]`, starting and ending alphanumeric.
pub fn label_value(text: &str) -> String {
    let mut v: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(63)
        .collect();
    while v.ends_with(|c: char| !c.is_ascii_alphanumeric()) {
        v.pop();
    }
    v
}

/// The Job for `j`: no retries of Kubernetes' own (`backoffLimit: 0`, heddle resubmits), a
/// deadline of the stage's timeout plus five minutes for fetching and uploading, removed an
/// hour after it ends (the result is in the cache, not in the Job), labelled with the run and
/// the key so a sweep by label finds every Job of a run.
pub fn job_manifest(j: &PodJob) -> Value {
    let name = job_name(&j.key);
    let labels = json!({
        "app.kubernetes.io/managed-by": "heddle",
        "heddle.dev/run": label_value(&j.run_id),
        "heddle.dev/key": &j.key[..40.min(j.key.len())],
    });
    let limits: serde_json::Map<String, Value> = j
        .resources
        .iter()
        .filter_map(|(pool, n)| {
            j.resource_names
                .get(pool)
                .map(|r| (r.clone(), Value::String(n.to_string())))
        })
        .collect();
    let mut spec = json!({
        "backoffLimit": 0,
        "ttlSecondsAfterFinished": 3600,
        "template": {
            "metadata": { "labels": labels },
            "spec": {
                "restartPolicy": "Never",
                "containers": [{
                    "name": "worker",
                    "image": j.image,
                    "command": [
                        "heddle", "--cache-dir", "/heddle-cache", "--remote-cache", j.remote,
                        "worker", "--action", j.key,
                        "--tag", outcome_tag(&j.cluster, &name, "$(HEDDLE_JOB_UID)"),
                    ],
                    // The Job's uid, which the Job controller puts on its pod: a Job replaced
                    // under the same name is another attempt, with an outcome of its own.
                    // The node, for the outcome and so the run record: the downward API says
                    // it at no request (a pod's hostname is its own name, not the node's).
                    "env": [{
                        "name": "HEDDLE_JOB_UID",
                        "valueFrom": { "fieldRef": {
                            "fieldPath": "metadata.labels['batch.kubernetes.io/controller-uid']",
                        } },
                    }, {
                        "name": "HEDDLE_NODE",
                        "valueFrom": { "fieldRef": { "fieldPath": "spec.nodeName" } },
                    }],
                    "resources": { "limits": limits },
                    "volumeMounts": [{ "name": "heddle-cache", "mountPath": "/heddle-cache" }],
                }],
                "volumes": [{ "name": "heddle-cache", "emptyDir": {} }],
            },
        },
    });
    if let Some(t) = j.timeout_secs {
        spec["activeDeadlineSeconds"] = json!(t + 300);
    }
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": j.namespace,
            "labels": labels,
            "annotations": { "heddle.dev/instance": j.label, "heddle.dev/key": j.key },
        },
        "spec": spec,
    })
}

/// A Job's `status` as the driver's state: a `Complete` or `Failed` condition ends it (the
/// cache then says whether it did its work), an active pod runs, anything else pends (with
/// the newest condition's reason, if any).
pub fn job_state(status: &Value) -> JobState {
    let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
    let holds = |kind: &str| {
        conditions
            .iter()
            .find(|c| c["type"] == kind && c["status"] == "True")
    };
    if holds("Complete").is_some() {
        return JobState::Ended {
            state: "COMPLETED".into(),
            node: None,
        };
    }
    if let Some(c) = holds("Failed") {
        let reason = c["reason"].as_str().unwrap_or("Failed");
        return JobState::Ended {
            state: format!("FAILED ({reason})"),
            node: None,
        };
    }
    if status["active"].as_u64().unwrap_or(0) > 0 {
        return JobState::Running { node: None };
    }
    JobState::Pending {
        reason: conditions
            .last()
            .and_then(|c| c["reason"].as_str())
            .unwrap_or("not yet scheduled")
            .to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn golden(name: &str) -> Value {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/cluster/");
        let text = std::fs::read_to_string(format!("{path}{name}")).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    fn job() -> PodJob {
        PodJob {
            key: "0123456789abcdef".repeat(4),
            label: "optimize[precision=a8_w8]".into(),
            run_id: "20261205-113000000-ab12".into(),
            namespace: "ml".into(),
            image: "registry.lab/dfc@sha256:".to_string() + &"e".repeat(64),
            remote: "s3://team-cache/heddle".into(),
            cluster: "k8s".into(),
            resources: BTreeMap::from([("gpu".into(), 1), ("cpu_slots".into(), 2)]),
            resource_names: BTreeMap::from([("gpu".into(), "nvidia.com/gpu".into())]),
            timeout_secs: Some(3600),
        }
    }

    #[test]
    fn an_instance_becomes_the_golden_job() {
        assert_eq!(job_manifest(&job()), golden("k8s-job.json"));
    }

    #[test]
    fn job_statuses_become_states() {
        let cases = golden("k8s-statuses.json");
        for case in cases.as_array().unwrap() {
            let want = case["state"].as_str().unwrap();
            let got = match job_state(&case["status"]) {
                JobState::Ended { state, .. } => state,
                JobState::Running { .. } => "RUNNING".into(),
                JobState::Pending { reason } => format!("PENDING ({reason})"),
                other => format!("{other:?}"),
            };
            assert_eq!(got, want, "{}", case["status"]);
        }
    }

    #[test]
    fn label_values_are_what_kubernetes_accepts() {
        assert_eq!(label_value("run 1/2-"), "run_1_2");
        assert_eq!(label_value(&"a".repeat(80)).len(), 63);
    }
}
