//! What travels through the shared cache and what does not: a secret reaches the node but
//! never the cache, an output holding one is refused on the node, and a stage kept here by
//! `cluster = false` takes its input from a job.

use serde_json::Value;

use super::{setup, SERIAL};
use crate::support::{assert_contains, instance, Run};

/// A `secret_env` value reaches the stage on the node (the job inherits the submitting heddle's
/// environment) but never the shared cache, which is the only path between driver and worker:
/// the description there names the variable, not its value.
#[test]
fn a_secret_reaches_the_worker_but_never_the_shared_cache() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(s) = setup("a secret through SLURM", "gpu:2,hailo:1", "") else {
        return;
    };
    // The stage checks the value's length only: the canary must appear in no file of ours.
    let canary = "c4n4ry-s3cr3t-7f1e";
    s.p.file(
        "secret.toml",
        "[pipeline]\nname = \"secret\"\n[stages.use]\nsecret_env = [\"HEDDLE_TEST_TOKEN\"]\n\
         run = [\"sh\", \"-c\", \"test ${#HEDDLE_TEST_TOKEN} -eq 18 && echo had it > \\\"$0\\\"\", \"{{ out.o }}\"]\n\
         outputs = { o = \"o.txt\" }\n",
    );
    let out: Run = s
        .run_cmd("secret.toml")
        .env("HEDDLE_TEST_TOKEN", canary)
        .output()
        .unwrap()
        .into();
    let out = out.ok();
    assert_contains(&out.stderr, "cluster hpc (slurm): 1 jobs submitted (");
    assert_eq!(s.p.read("out/secret/use/o.txt"), "had it\n");
    s.assert_nowhere(canary);
}

/// A stage that writes its secret into an output on a node is refused there, as `heddle run`
/// refuses it here: the worker stores and uploads nothing of it, and the record names why.
#[test]
fn an_output_holding_a_secret_is_refused_on_the_node_before_anything_is_uploaded() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(s) = setup("a leaked secret through SLURM", "gpu:2,hailo:1", "") else {
        return;
    };
    let canary = "c4n4ry-l34k-90ab";
    s.p.file(
        "leak.toml",
        "[pipeline]\nname = \"leak\"\n[stages.leak]\nsecret_env = [\"HEDDLE_TEST_TOKEN\"]\n\
         run = [\"sh\", \"-c\", \"echo \\\"$HEDDLE_TEST_TOKEN\\\" > \\\"$0\\\"\", \"{{ out.o }}\"]\n\
         outputs = { o = \"o.txt\" }\n",
    );
    let run: Run = s
        .run_cmd("leak.toml")
        .env("HEDDLE_TEST_TOKEN", canary)
        .output()
        .unwrap()
        .into();
    let run = run.code(1);
    assert_contains(&run.stderr, "FAILED  leak");
    let rec = s.record();
    let i = instance(&rec, "leak");
    assert_eq!(i["status"]["error_class"], "SecretInOutput");
    assert_eq!(
        i["status"]["error"],
        "output `o` holds the value of a `secret_env` variable (HEDDLE_TEST_TOKEN); it is not stored"
    );
    assert_eq!(
        i["job"]["submissions"], 1,
        "a refusal is the stage's, not retried"
    );
    s.assert_nowhere(canary);
}

/// `cluster = false` keeps a stage on the driver's machine (a device plugged in here, say)
/// while the rest of the run goes to the cluster; its input still comes from a job.
#[test]
fn a_stage_with_cluster_false_runs_here_and_the_rest_on_the_cluster() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(s) = setup("a mixed run through SLURM", "gpu:2,hailo:1", "") else {
        return;
    };
    s.p.file(
        "mixed.toml",
        "[pipeline]\nname = \"mixed\"\n\
         [stages.compile]\nrun = [\"sh\", \"-c\", \"echo hef > \\\"$0\\\"\", \"{{ out.hef }}\"]\n\
         outputs = { hef = \"m.hef\" }\n\
         [stages.probe]\ncluster = false\ninputs = { hef = \"compile.hef\" }\n\
         run = [\"sh\", \"-c\", \"cat \\\"$0\\\" > \\\"$1\\\"; hostname >> \\\"$1\\\"\", \"{{ in.hef }}\", \"{{ out.fps }}\"]\n\
         outputs = { fps = \"fps.txt\" }\n",
    );
    let run = s.run("mixed.toml", &[]).ok();
    assert_contains(&run.stderr, "cluster hpc (slurm): 1 jobs submitted (");
    let rec = s.record();
    assert_eq!(instance(&rec, "compile")["job"]["engine"], "slurm");
    assert!(
        instance(&rec, "probe")
            .get("job")
            .is_none_or(Value::is_null),
        "probe ran here: {}",
        instance(&rec, "probe")
    );
    assert!(s.p.read("out/mixed/probe/fps.txt").starts_with("hef\n"));
}
