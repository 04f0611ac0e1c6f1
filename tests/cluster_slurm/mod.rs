//! `heddle run --cluster NAME` against a real single-node SLURM started by the test (root,
//! Debian's slurmctld/slurmd/munge; skipped without them unless HEDDLE_REQUIRE_SLURM=1). The
//! shared cache is a plain folder (`file://`), the only path between the driver and the
//! workers: each worker has a cache of its own (`worker_cache`).

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::Value;
use support::process::{signal, wait_ended, wait_for, SIGINT};
use support::slurm::Slurm;
use support::{assert_contains, instance, Project, Run};

mod containers;
mod data_paths;

/// One cluster at a time: two cores run every daemon and job.
static SERIAL: Mutex<()> = Mutex::new(());

fn fixture(name: &str) -> String {
    std::fs::read_to_string(
        support::repo_root()
            .join("tests/fixtures/cluster")
            .join(name),
    )
    .unwrap()
}

/// A project whose hosts.toml names `slurm` as cluster `hpc` (extra keys appended), and a
/// shared cache folder beside it.
struct Setup {
    p: Project,
    slurm: Slurm,
    remote: tempfile::TempDir,
}

fn setup(what: &str, gres: &str, extra: &str) -> Option<Setup> {
    let slurm = Slurm::start(what, gres)?;
    let p = Project::new();
    // A node cache per job, as if each ran on a node of its own: nothing reaches a worker
    // but through the shared cache.
    let worker_cache = slurm.path().join("worker-cache/$SLURM_JOB_ID");
    p.file(
        ".heddle/hosts.toml",
        &format!(
            "[clusters.hpc]\nkind = \"slurm\"\npoll_interval = \"200ms\"\nworker_cache = \"{}\"\n{extra}",
            worker_cache.display()
        ),
    );
    // The project's hosts.toml names the cluster: it is used only once the user trusts it.
    p.trust();
    writer(&p);
    let remote = tempfile::tempdir().unwrap();
    Some(Setup { p, slurm, remote })
}

/// This user as a trusted writer of the shared cache (the driver uploads each action, the
/// worker its result): a signing key from `heddle cache keygen` in the user's config folder,
/// and its line in the user's own trusted-writers. The jobs inherit the environment, so the
/// worker signs with the same key.
fn writer(p: &Project) {
    let out = p.heddle(&["cache", "keygen"]).ok().stdout;
    let line = out
        .lines()
        .find(|l| l.starts_with("ed25519:"))
        .unwrap_or_else(|| panic!("no key line in\n{out}"));
    p.file(".user-config/trusted-writers", &format!("{line}\n"));
}

impl Setup {
    fn cmd(&self, args: &[&str]) -> std::process::Command {
        let mut c = self.p.cmd(args);
        c.env("SLURM_CONF", &self.slurm.conf)
            .env("HEDDLE_REMOTE_CACHE_MODE", "readwrite")
            .env(
                "HEDDLE_REMOTE_CACHE",
                format!("file://{}", self.remote.path().display()),
            );
        c
    }

    /// `heddle run PIPELINE --progress plain --cluster hpc`, to spawn or run.
    fn run_cmd(&self, pipeline: &str) -> std::process::Command {
        self.cmd(&["run", pipeline, "--progress", "plain", "--cluster", "hpc"])
    }

    fn run(&self, pipeline: &str, extra: &[&str]) -> Run {
        self.run_cmd(pipeline).args(extra).output().unwrap().into()
    }

    fn record(&self) -> Value {
        self.p.last_record()
    }

    /// The first job SLURM holds (`--hold`) whose id is not in `seen`, as `squeue` prints it
    /// (id, name, state, reason, comment), once there is one (a minute at most).
    fn next_held(&self, seen: &[String]) -> Vec<String> {
        let mut held = None;
        wait_for("a held job", Duration::from_secs(60), || {
            held = self
                .slurm
                .jobs()
                .into_iter()
                .find(|j| j[2] == "PENDING" && j[3] == "JobHeldUser" && !seen.contains(&j[0]));
            held.is_some()
        });
        held.unwrap()
    }

    /// No file of the shared cache or the project holds `canary`.
    fn assert_nowhere(&self, canary: &str) {
        for (root, what) in [
            (self.remote.path().to_path_buf(), "the shared cache"),
            (self.p.root().to_path_buf(), "the project"),
        ] {
            for (path, bytes) in tree(&root) {
                assert!(
                    !bytes.windows(canary.len()).any(|w| w == canary.as_bytes()),
                    "{what} holds the secret in {path}"
                );
            }
        }
    }
}

/// Every file under `dir`, relative path → bytes.
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

#[test]
fn a_matrix_of_20_runs_through_slurm_byte_identical_to_a_local_run_and_reruns_as_hits() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(s) = setup("the sweep through SLURM", "gpu:2,hailo:1", "") else {
        return;
    };
    s.p.file("sweep.toml", &fixture("sweep.toml"));
    let run = s.run("sweep.toml", &[]).ok();
    assert_contains(&run.stderr, "cluster hpc (slurm): 22 jobs submitted (");
    // Each worker stored its action on the shared cache: the driver's write-back adds nothing.
    assert_contains(&run.stderr, " fetched, 0 uploaded");
    let rec = s.record();
    let score = instance(&rec, "score[i=7]");
    assert_eq!(score["job"]["engine"], "slurm");
    assert_eq!(score["job"]["cluster"], "hpc");
    assert_eq!(score["job"]["node"], "localhost");
    assert_eq!(score["job"]["submissions"], 1);
    assert!(score["job"]["job_id"]
        .as_str()
        .is_some_and(|j| !j.is_empty()));

    let local = Project::new();
    local.file("sweep.toml", &fixture("sweep.toml"));
    local.run("sweep.toml", &[]).ok();
    let (cluster_out, local_out) = (tree(&s.p.path("out/sweep")), tree(&local.path("out/sweep")));
    assert_eq!(cluster_out.len(), 24, "{:?}", cluster_out.keys());
    assert_eq!(cluster_out, local_out);

    // Every key is in the caches now: nothing is submitted.
    let again = s.run("sweep.toml", &[]).ok();
    assert_contains(
        &again.stderr,
        "cluster hpc (slurm): 0 jobs submitted (0 arrays), 0 adopted, 0 status queries",
    );
    assert_contains(&again.stderr, "22 cached");
}

#[test]
fn hailo_instances_never_overlap_on_a_one_device_node() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(s) = setup(
        "hailo:1 through SLURM",
        "gpu:2,hailo:1",
        "gres = [\"gpu\", \"hailo\"]\n",
    ) else {
        return;
    };
    let lock = s.slurm.path().join("device");
    std::fs::create_dir_all(&lock).unwrap();
    s.p.file(
        "device.toml",
        &fixture("device.toml").replace("__LOCK__", &lock.to_string_lossy()),
    );
    s.run("device.toml", &[]).ok();
    let rec = s.record();
    for i in 1..=4 {
        let label = format!("flash[i={i}]");
        assert_eq!(instance(&rec, &label)["status"]["status"], "ok", "{label}");
        assert_eq!(
            s.p.read(&format!("out/device/{label}/r.txt")),
            format!("flashed {i}\n")
        );
    }
}

#[test]
fn a_failed_stage_s_error_line_reaches_the_run_record() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(s) = setup("a failing stage through SLURM", "gpu:2,hailo:1", "") else {
        return;
    };
    s.p.file("fail.toml", &fixture("fail.toml"));
    let run = s.run("fail.toml", &[]).code(1);
    assert_contains(
        &run.stderr,
        "FAILED  calibrate  ValueError: calibration set is empty",
    );
    let rec = s.record();
    let i = instance(&rec, "calibrate");
    assert_eq!(i["status"]["error"], "ValueError: calibration set is empty");
    assert_eq!(i["status"]["error_class"], "ValueError");
    assert_eq!(i["status"]["exit_code"], 3);
    assert_eq!(i["job"]["submissions"], 1);
    // The worker's logs came back through the shared cache.
    let [out, err] = [0, 1].map(|n| i["logs"][n].as_str().unwrap().to_string());
    assert_eq!(
        std::fs::read_to_string(out).unwrap(),
        "reading the calibration set\n"
    );
    assert_contains(
        &std::fs::read_to_string(err).unwrap(),
        "ValueError: calibration set is empty",
    );
}

#[test]
fn ctrl_c_cancels_every_job_of_the_run() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(s) = setup("Ctrl-C through SLURM", "gpu:2,hailo:1", "") else {
        return;
    };
    s.p.file("slow.toml", &fixture("slow.toml"));
    let mut child = s
        .run_cmd("slow.toml")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let running = |s: &Setup| s.slurm.jobs().iter().filter(|j| j[2] == "RUNNING").count();
    wait_for("three running jobs", Duration::from_secs(60), || {
        running(&s) == 3
    });
    signal(child.id(), SIGINT);
    let status = wait_ended(&mut child, Duration::from_secs(60), "heddle after Ctrl-C");
    assert_eq!(status.code(), Some(130));
    let jobs = s.slurm.jobs();
    assert_eq!(jobs.len(), 3, "{jobs:?}");
    for j in &jobs {
        assert_eq!(j[2], "CANCELLED", "{jobs:?}");
    }
}

#[test]
fn a_job_cancelled_from_outside_is_retried_once_then_reported() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Held jobs wait for the test: it cancels or releases each one.
    let Some(s) = setup(
        "scancel from outside",
        "gpu:2,hailo:1",
        "sbatch_args = [\"--hold\"]\n",
    ) else {
        return;
    };
    s.p.file(
        "fail.toml",
        &fixture("chain.toml").replace("__NONCE__", "x"),
    );
    let mut child = s
        .run_cmd("fail.toml")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut acted: Vec<String> = Vec::new();
    // `make`: cancelled once, then released; `use`: cancelled twice.
    let mut plan = vec!["cancel", "release", "cancel", "cancel"].into_iter();
    while acted.len() < 4 {
        let id = s.next_held(&acted)[0].clone();
        let step = plan.next().unwrap();
        let mut c = match step {
            "cancel" => s.slurm.cmd("scancel"),
            _ => {
                let mut c = s.slurm.cmd("scontrol");
                c.arg("release");
                c
            }
        };
        assert!(c.arg(&id).status().unwrap().success());
        acted.push(id);
    }
    let status = wait_ended(&mut child, Duration::from_secs(60), "heddle");
    assert_eq!(status.code(), Some(2));
    let rec = s.record();
    let make = instance(&rec, "make");
    assert_eq!(make["status"]["status"], "ok");
    assert_eq!(make["job"]["submissions"], 2);
    let used = instance(&rec, "use");
    assert_eq!(used["status"]["status"], "failed");
    assert_eq!(used["job"]["submissions"], 2);
    let err = used["status"]["error"].as_str().unwrap();
    assert_contains(
        err,
        &format!(
            "gave up after 2 job(s) on cluster hpc: job {} ended CANCELLED without a result in \
             the shared cache (a lost job)",
            acted[3]
        ),
    );
}

/// Processes started for this cluster (their environment names its `SLURM_CONF`) other than
/// its daemons: the driver, a worker, a client command still waiting on the controller.
fn leftovers(s: &Setup) -> Vec<String> {
    let needle = format!("SLURM_CONF={}\0", s.slurm.conf.display());
    let mut left = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid = e.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) || pid == std::process::id().to_string() {
            continue;
        }
        let Ok(env) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        let comm = comm.trim();
        let daemon = comm.starts_with("slurm") || comm.starts_with("munge");
        if !daemon && String::from_utf8_lossy(&env).contains(&needle) {
            left.push(format!("{pid} {comm}"));
        }
    }
    left
}

#[test]
fn a_controller_that_stops_answering_fails_the_run_instead_of_hanging_it() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Held, the job waits for the test, which then stops slurmctld: every status query fails.
    let Some(s) = setup(
        "slurmctld stopped mid-run",
        "gpu:2,hailo:1",
        "sbatch_args = [\"--hold\"]\nunreachable_limit = \"2s\"\n",
    ) else {
        return;
    };
    s.p.file(
        "chain.toml",
        &fixture("chain.toml").replace("__NONCE__", "ctld"),
    );
    let mut child = s
        .run_cmd("chain.toml")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let id = s.next_held(&[])[0].clone();
    s.slurm.stop_controller();
    let status = wait_ended(
        &mut child,
        Duration::from_secs(180),
        "heddle without slurmctld",
    );
    assert_ne!(status.code(), Some(0));
    let rec = s.record();
    let make = instance(&rec, "make");
    assert_eq!(make["status"]["status"], "failed");
    let err = make["status"]["error"].as_str().unwrap();
    assert_contains(
        err,
        &format!("job {id}: cluster hpc (slurm) did not answer status queries for "),
    );
    assert_contains(err, "; the last error: ");
    assert_ne!(instance(&rec, "use")["status"]["status"], "ok");
    wait_for(
        "no process of the run left",
        Duration::from_secs(30),
        || leftovers(&s).is_empty(),
    );
}

#[test]
fn an_evicted_input_is_an_infrastructure_fault_and_is_retried() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(s) = setup(
        "an evicted input",
        "gpu:2,hailo:1",
        "sbatch_args = [\"--hold\"]\n",
    ) else {
        return;
    };
    let text = "evictable input y";
    s.p.file(
        "chain.toml",
        &fixture("chain.toml").replace("__NONCE__", "y"),
    );
    let mut child = s
        .run_cmd("chain.toml")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let blob = s
        .remote
        .path()
        .join("cas")
        .join(heddle_cache::Digest::of_bytes(text.as_bytes()).to_string());
    let mut released: Vec<String> = Vec::new();
    while released.len() < 3 {
        let job = s.next_held(&released);
        // The first job of `use`: its input leaves the shared cache before it starts.
        if released.len() == 1 {
            assert_contains(&job[4], " use");
            std::fs::remove_file(&blob).unwrap();
        }
        assert!(s
            .slurm
            .cmd("scontrol")
            .args(["release", &job[0]])
            .status()
            .unwrap()
            .success());
        released.push(job[0].clone());
    }
    let status = wait_ended(&mut child, Duration::from_secs(60), "heddle");
    assert_eq!(status.code(), Some(0));
    let rec = s.record();
    let used = instance(&rec, "use");
    assert_eq!(used["status"]["status"], "ok");
    assert_eq!(used["job"]["submissions"], 2);
    assert_eq!(s.p.read("out/chain/use/r.txt"), text);
}

#[test]
fn a_cluster_run_without_a_shared_cache_is_refused_with_how_to_set_one() {
    let p = Project::new();
    p.file(".heddle/hosts.toml", "[clusters.hpc]\nkind = \"slurm\"\n");
    p.trust();
    writer(&p);
    p.file("fail.toml", &fixture("fail.toml"));
    let run = p.run("fail.toml", &["--cluster", "hpc"]).code(2);
    assert_eq!(
        run.stderr,
        "error: --cluster hpc needs a shared cache the nodes can reach, to carry inputs and results: \
         set HEDDLE_REMOTE_CACHE (or --remote-cache, or [cache] remote in .heddle/config.toml) to \
         s3://BUCKET/PREFIX, webdav+https://HOST/PATH, grpc://HOST:PORT or file:///SHARED/DIR\n"
    );
    let remote = tempfile::tempdir().unwrap();
    let url = format!("file://{}", remote.path().display());
    let run: Run = p
        .cmd(&[
            "run",
            "fail.toml",
            "--cluster",
            "hpc",
            "--remote-cache",
            &url,
            "--remote-cache-mode",
            "read",
        ])
        .output()
        .unwrap()
        .into();
    assert_eq!(
        run.code(2).stderr,
        format!(
            "error: --cluster hpc: the shared cache {url} is read-only (--remote-cache-mode read); \
             the driver must upload each action's inputs\n"
        )
    );
    let run = p.run("fail.toml", &["--cluster", "gpu"]).code(2);
    assert_eq!(
        run.stderr,
        "error: --cluster gpu: no [clusters.gpu] in hosts.toml (clusters: hpc)\n"
    );
}

#[test]
fn a_job_pending_past_the_limit_is_reported_with_slurm_s_reason() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(s) = setup(
        "a long pending job",
        "gpu:2,hailo:1",
        "sbatch_args = [\"--hold\"]\npending_limit = \"1s\"\n",
    ) else {
        return;
    };
    s.p.file("fail.toml", &fixture("fail.toml"));
    let err_file = s.p.path("run.err");
    let mut child = s
        .run_cmd("fail.toml")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err_file).unwrap())
        .spawn()
        .unwrap();
    let said = || std::fs::read_to_string(&err_file).unwrap_or_default();
    wait_for("the pending report", Duration::from_secs(60), || {
        said().contains("pending for")
    });
    let held = s.slurm.jobs();
    assert_eq!(held.len(), 1, "{held:?}");
    let line = said()
        .lines()
        .find(|l| l.contains("pending for"))
        .unwrap()
        .to_string();
    assert!(
        line.starts_with(&format!(
            "calibrate: job {} on cluster hpc pending for ",
            held[0][0]
        )) && line.ends_with(" s: JobHeldUser"),
        "{line}"
    );
    signal(child.id(), SIGINT);
    let status = wait_ended(&mut child, Duration::from_secs(60), "heddle after Ctrl-C");
    assert_eq!(status.code(), Some(130));
    assert_eq!(s.slurm.jobs()[0][2], "CANCELLED");
}
