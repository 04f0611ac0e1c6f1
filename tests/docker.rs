//! The real `heddle` binary against the real Docker Engine: container stages store and restore
//! their outputs, a cache hit creates no container, the image id (not the tag) enters the key,
//! Ctrl-C, timeouts and crashes leave no container behind, inputs are read-only, the network is
//! off by default, outputs belong to the invoking user, and environment problems stop a run
//! before any stage starts.
//!
//! Containers are counted through the engine: `docker events` (created containers, matched to
//! a run by their `heddle.run` label) and `Engine::count_labelled` (containers that exist now).
//!
//! Every test needs a reachable engine, the docker CLI and the busybox test images (built here
//! through the Engine API when missing). Without them the tests skip loudly, unless
//! `HEDDLE_REQUIRE_DOCKER=1` (CI), which makes a missing engine a failure.

mod support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, OnceLock, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use heddle_containers::{test_images, Engine, ImageIdentity, PullPolicy};
use serde_json::Value;
use support::{instance, Project};

const BUSYBOX: &str = test_images::BUSYBOX;

/// What every test here needs, set up once per test binary.
struct Docker {
    rt: tokio::runtime::Runtime,
    engine: Engine,
    busybox: ImageIdentity,
    moved: ImageIdentity,
}

static DOCKER: OnceLock<Result<Docker, String>> = OnceLock::new();

/// `heddle gc --containers` removes every heddle container on the engine, running ones
/// included, so the test that runs it holds this lock for writing and every other test holds
/// it for reading.
static GC: RwLock<()> = RwLock::new(());

/// The engine and images, or `None` after a loud skip notice. Panics instead of skipping when
/// `HEDDLE_REQUIRE_DOCKER=1`. The returned guard keeps `heddle gc` out while the test runs.
fn docker(test: &str) -> Option<(&'static Docker, RwLockReadGuard<'static, ()>)> {
    match DOCKER.get_or_init(setup) {
        Ok(d) => Some((d, GC.read().unwrap_or_else(|e| e.into_inner()))),
        Err(why) => {
            if std::env::var("HEDDLE_REQUIRE_DOCKER").as_deref() == Ok("1") {
                panic!("{test}: HEDDLE_REQUIRE_DOCKER=1 but {why}");
            }
            eprintln!("\n*** SKIPPED {test}: {why} ***\n");
            None
        }
    }
}

fn setup() -> Result<Docker, String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a tokio runtime: {e}"))?;
    let engine = rt
        .block_on(Engine::connect(None))
        .map_err(|e| format!("no Docker Engine: {e}"))?;
    match Command::new("docker").arg("version").output() {
        Ok(o) if o.status.success() => {}
        _ => return Err("the docker CLI is missing or cannot reach the engine".into()),
    }
    let moved = rt
        .block_on(test_images::ensure_busybox_moved(&engine))
        .map_err(|e| {
            format!("cannot build the busybox test images ({e}); run `bash tests/images/build-busybox.sh`")
        })?;
    let busybox = rt
        .block_on(engine.resolve_image(BUSYBOX, PullPolicy::Never))
        .map_err(|e| e.to_string())?;
    Ok(Docker {
        rt,
        engine,
        busybox,
        moved,
    })
}

impl Docker {
    /// Containers that exist now (any state) carrying `key=value`.
    fn count(&self, key: &str, value: &str) -> usize {
        self.rt
            .block_on(self.engine.count_labelled((key, value)))
            .expect("count containers")
    }
}

/// A name no other test (or concurrent test process) uses.
fn unique(what: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{what}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Run the docker CLI, panicking with its stderr on failure; returns trimmed stdout.
fn docker_cli(args: &[&str]) -> String {
    let o = Command::new("docker").args(args).output().expect("docker");
    assert!(
        o.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn project(text: &str) -> Project {
    let p = Project::new();
    p.file("p.toml", text);
    p
}

/// `heddle show last --json`.
fn last(p: &Project) -> Value {
    let show = p.heddle(&["show", "last", "--json"]).ok();
    serde_json::from_str(&show.stdout).expect("run record is JSON")
}

fn run_id(record: &Value) -> String {
    record["run_id"].as_str().expect("run_id").to_string()
}

fn short12(id: &str) -> &str {
    &id.trim_start_matches("sha256:")[..12]
}

/// Watches the engine's container `create` events from now on.
struct Creates {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Creates {
    fn watch() -> Creates {
        // A second of slack for clock rounding: events are matched to a run by label anyway.
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
            - 1.0;
        let mut child = Command::new("docker")
            .args(["events", "--since", &format!("{since:.3}")])
            .args(["--filter", "type=container", "--filter", "event=create"])
            .args(["--format", "{{json .Actor.Attributes}}"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("docker events");
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Creates { child, lines }
    }

    /// The labels of every container created since `watch`. Events arrive in order, so once a
    /// marker container created now shows up, every earlier create has been seen.
    fn finish(self) -> Vec<BTreeMap<String, String>> {
        let marker = unique("marker");
        let id = docker_cli(&[
            "create",
            "--label",
            &format!("heddle.test.marker={marker}"),
            BUSYBOX,
            "true",
        ]);
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .expect("docker events never reported the marker container");
            let attrs: BTreeMap<String, String> = serde_json::from_str(&line).unwrap_or_default();
            if attrs.get("heddle.test.marker") == Some(&marker) {
                break;
            }
            seen.push(attrs);
        }
        docker_cli(&["rm", "-f", &id]);
        seen
    }

    /// Instance labels of the containers run `run_id` created, sorted.
    fn of_run(creates: &[BTreeMap<String, String>], run_id: &str) -> Vec<String> {
        let mut v: Vec<String> = creates
            .iter()
            .filter(|a| a.get("heddle.run").map(String::as_str) == Some(run_id))
            .map(|a| a.get("heddle.instance").cloned().unwrap_or_default())
            .collect();
        v.sort();
        v
    }
}

impl Drop for Creates {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Poll `done` every 50 ms until it holds or `limit` passes.
fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let t = Instant::now();
    while !done() {
        assert!(t.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The run id of the single run under `.heddle/logs/` whose `<label>.out` says `started`.
fn started_run(p: &Project, label: &str) -> Option<String> {
    for e in std::fs::read_dir(p.path(".heddle/logs")).ok()?.flatten() {
        let out = e.path().join(format!("{label}.out"));
        if std::fs::read_to_string(out).is_ok_and(|t| t.contains("started")) {
            return Some(e.file_name().to_string_lossy().into_owned());
        }
    }
    None
}

fn signal(child: &Child, sig: i32) {
    extern "C" {
        fn kill(pid: i32, sig: i32) -> i32;
    }
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        kill(child.id() as i32, sig);
    }
}

const SIGINT: i32 = 2;
const SIGKILL: i32 = 9;
const SIGTERM: i32 = 15;

/// Wait for `child` at most `limit`; returns its exit code and how long it took.
fn wait_exit(child: &mut Child, limit: Duration) -> (Option<i32>, Duration) {
    let t = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (status.code(), t.elapsed());
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            panic!("heddle did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn container_outputs_are_stored_and_restored_without_running_again() {
    let Some((_d, _gc)) = docker("container_outputs_are_stored_and_restored") else {
        return;
    };
    let p = project(&format!(
        r#"
[pipeline]
name = "st"

[stages.make]
run = "echo hello > {{{{ out.t }}}}"
outputs = {{ t = "t.txt" }}

[stages.up]
image = "{BUSYBOX}"
inputs = {{ t = "make.t" }}
run = "tr a-z A-Z < {{{{ in.t }}}} > {{{{ out.u }}}}; mkdir {{{{ out.tree }}}}; echo leaf > {{{{ out.tree }}}}/leaf.txt"
outputs = {{ u = "u.txt", tree = "tree" }}
"#
    ));
    let watch = Creates::watch();
    p.run("p.toml", &[]).ok();
    let first = run_id(&last(&p));
    assert_eq!(Creates::of_run(&watch.finish(), &first), ["up"]);
    assert_eq!(p.read("out/st/up/u.txt"), "HELLO\n");
    assert_eq!(p.read("out/st/up/tree/leaf.txt"), "leaf\n");

    std::fs::remove_file(p.path("out/st/up/u.txt")).unwrap();
    std::fs::remove_dir_all(p.path("out/st/up/tree")).unwrap();
    let watch = Creates::watch();
    p.run("p.toml", &[]).ok();
    let rec = last(&p);
    assert!(
        Creates::of_run(&watch.finish(), &run_id(&rec)).is_empty(),
        "a restore must not create a container"
    );
    assert_eq!(instance(&rec, "up")["cached"], true);
    assert_eq!(p.read("out/st/up/u.txt"), "HELLO\n");
    assert_eq!(p.read("out/st/up/tree/leaf.txt"), "leaf\n");
}

#[test]
fn a_cache_hit_creates_no_container() {
    let Some((d, _gc)) = docker("a_cache_hit_creates_no_container") else {
        return;
    };
    let p = project(&format!(
        r#"
[pipeline]
name = "hit"

[stages.gen]
image = "{BUSYBOX}"
matrix = {{ k = [1, 2] }}
run = "echo {{{{ matrix.k }}}} > {{{{ out.v }}}}"
outputs = {{ v = "v.txt" }}

[stages.sum]
inputs = {{ all = "gen[*].v" }}
run = "cat {{{{ in.all }}}} > {{{{ out.s }}}}"
outputs = {{ s = "s.txt" }}
"#
    ));
    let watch = Creates::watch();
    p.run("p.toml", &[]).ok();
    let first = run_id(&last(&p));
    assert_eq!(
        Creates::of_run(&watch.finish(), &first),
        ["gen[k=1]", "gen[k=2]"],
        "the first run creates one container per container instance"
    );
    assert_eq!(
        d.count("heddle.run", &first),
        0,
        "containers are removed after they ran"
    );
    assert_eq!(p.read("out/hit/sum/s.txt"), "1\n2\n");

    let watch = Creates::watch();
    let r = p.run("p.toml", &[]).ok();
    assert!(r.stderr.contains("0 ran, 3 cached"), "{}", r.stderr);
    let second = run_id(&last(&p));
    assert_ne!(first, second);
    assert!(
        Creates::of_run(&watch.finish(), &second).is_empty(),
        "a cache hit must not create a container"
    );
}

/// Untags the reference when the test ends, however it ends.
struct Tag(String);

impl Drop for Tag {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["rmi", &self.0])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

#[test]
fn retagging_an_image_reruns_exactly_the_stages_that_use_it() {
    let Some((d, _gc)) = docker("retagging_an_image_reruns_exactly_the_stages_that_use_it") else {
        return;
    };
    let tag = Tag(format!("heddle-test/retag:{}", unique("docker")));
    docker_cli(&["tag", BUSYBOX, &tag.0]);
    let p = project(&format!(
        r#"
[pipeline]
name = "rt"

[stages.host]
run = "echo h > {{{{ out.o }}}}"
outputs = {{ o = "o.txt" }}

[stages.moving]
image = "{tag}"
run = "ls / > {{{{ out.o }}}}"
outputs = {{ o = "ls.txt" }}

[stages.fixed]
image = "{BUSYBOX}"
run = "ls / > {{{{ out.o }}}}"
outputs = {{ o = "ls.txt" }}
"#,
        tag = tag.0
    ));
    p.run("p.toml", &[]).ok();
    let rec = last(&p);
    let image = &instance(&rec, "moving")["image"];
    assert_eq!(image["reference"], tag.0.as_str(), "{image}");
    assert_eq!(image["id"], d.busybox.id.as_str(), "{image}");
    assert!(!p.read("out/rt/moving/ls.txt").contains("moved.txt"));

    docker_cli(&["tag", test_images::BUSYBOX_MOVED, &tag.0]);
    let plan = p.heddle(&["plan", "p.toml"]).ok();
    let line = |label: &str| {
        plan.stdout
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(label))
            .unwrap_or_else(|| panic!("no plan line for {label}:\n{}", plan.stdout))
            .to_string()
    };
    let want = format!(
        "image changed ({} → {})",
        short12(&d.busybox.id),
        short12(&d.moved.id)
    );
    assert!(line("moving").starts_with("run"), "{}", plan.stdout);
    assert!(
        line("moving").contains(&want),
        "want `{want}`:\n{}",
        plan.stdout
    );
    assert!(line("fixed").starts_with("cached"), "{}", plan.stdout);
    assert!(line("host").starts_with("cached"), "{}", plan.stdout);

    let watch = Creates::watch();
    p.run("p.toml", &[]).ok();
    let rec = last(&p);
    assert_eq!(Creates::of_run(&watch.finish(), &run_id(&rec)), ["moving"]);
    let image = &instance(&rec, "moving")["image"];
    assert_eq!(image["reference"], tag.0.as_str(), "{image}");
    assert_eq!(image["id"], d.moved.id.as_str(), "{image}");
    assert!(p.read("out/rt/moving/ls.txt").contains("moved.txt"));
    assert_eq!(instance(&rec, "fixed")["cached"], true);
    assert_eq!(instance(&rec, "host")["cached"], true);
}

fn long_stage(script: &str) -> Project {
    project(&format!(
        r#"
[pipeline]
name = "int"

[stages.long]
image = "{BUSYBOX}"
run = "{script}"
outputs = {{ o = "o" }}
"#
    ))
}

/// Start `heddle run`, wait until the container stage has printed `started`, return the
/// child and the run id (after checking the container exists).
fn start_long(d: &Docker, p: &Project) -> (Child, String) {
    let child = p
        .cmd(&["run", "p.toml", "--progress", "plain"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut run = None;
    wait_for("the container to start", Duration::from_secs(60), || {
        run = started_run(p, "long");
        run.is_some()
    });
    let run = run.unwrap();
    assert_eq!(d.count("heddle.run", &run), 1, "the stage's container runs");
    assert_eq!(
        d.count("heddle.pid", &child.id().to_string()),
        1,
        "the container names the heddle process that owns it"
    );
    (child, run)
}

#[test]
fn ctrl_c_or_sigterm_during_a_container_stage_removes_it_and_exits_130() {
    let Some((d, _gc)) = docker("ctrl_c_or_sigterm_during_a_container_stage") else {
        return;
    };
    for (sig, name) in [(SIGINT, "SIGINT"), (SIGTERM, "SIGTERM")] {
        let p = long_stage("echo started; sleep 300; echo late > {{ out.o }}");
        let (mut child, run) = start_long(d, &p);
        signal(&child, sig);
        let (code, took) = wait_exit(&mut child, Duration::from_secs(30));
        assert_eq!(code, Some(130), "{name}");
        assert!(took < Duration::from_secs(10), "{name}: took {took:?}");
        assert_eq!(
            d.count("heddle.run", &run),
            0,
            "{name}: a container was left behind"
        );
        let rec = last(&p);
        assert_eq!(rec["status"], "interrupted", "{name}");
        assert_eq!(
            instance(&rec, "long")["status"]["error_class"],
            "Interrupted",
            "{name}"
        );
    }
}

#[test]
fn a_second_ctrl_c_kills_a_container_that_ignores_sigterm() {
    let Some((d, _gc)) = docker("a_second_ctrl_c_kills_a_container_that_ignores_sigterm") else {
        return;
    };
    // SIGTERM is ignored (and stays ignored across exec), so only the grace period's SIGKILL or
    // a forced removal ends it.
    let p = long_stage("trap '' TERM; echo started; sleep 300");
    let (mut child, run) = start_long(d, &p);
    signal(&child, SIGINT);
    std::thread::sleep(Duration::from_millis(300));
    signal(&child, SIGINT);
    let (code, took) = wait_exit(&mut child, Duration::from_secs(30));
    assert_eq!(code, Some(130));
    assert_eq!(
        d.count("heddle.run", &run),
        0,
        "a container was left behind"
    );
    // The graceful stop would wait out its 3 s grace period.
    assert!(took < Duration::from_millis(2500), "took {took:?}");
}

#[test]
fn a_timeout_stops_the_container_and_reports_it() {
    let Some((d, _gc)) = docker("a_timeout_stops_the_container_and_reports_it") else {
        return;
    };
    let p = project(&format!(
        r#"
[pipeline]
name = "to"

[stages.hang]
image = "{BUSYBOX}"
run = "sleep 60; echo late > {{{{ out.o }}}}"
timeout = "2s"
outputs = {{ o = "o" }}
"#
    ));
    let t = Instant::now();
    let r = p.run("p.toml", &[]).code(1);
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    assert!(r.stderr.contains("timed out after 2s"), "{}", r.stderr);
    let rec = last(&p);
    let status = &instance(&rec, "hang")["status"];
    assert_eq!(status["status"], "failed");
    assert_eq!(status["error_class"], "Timeout");
    assert_eq!(d.count("heddle.run", &run_id(&rec)), 0);
    assert!(!p.path("out/to/hang/o").exists());
}

#[test]
fn an_oom_kill_is_its_own_status() {
    let Some((d, _gc)) = docker("an_oom_kill_is_its_own_status") else {
        return;
    };
    // dd allocates its 64 MiB block; the limit is 16 MiB with swap off.
    let p = project(&format!(
        r#"
[pipeline]
name = "oom"

[stages.big]
image = "{BUSYBOX}"
memory = "16m"
run = "dd if=/dev/zero of=/dev/null bs=64M count=1 && echo survived > {{{{ out.o }}}}"
outputs = {{ o = "o" }}
"#
    ));
    let r = p.run("p.toml", &[]).code(1);
    assert!(
        r.stderr.contains("killed by the out-of-memory killer"),
        "{}",
        r.stderr
    );
    let rec = last(&p);
    let status = &instance(&rec, "big")["status"];
    assert_eq!(status["error_class"], "OutOfMemory", "{status}");
    assert_eq!(d.count("heddle.run", &run_id(&rec)), 0);
}

#[test]
fn a_nonzero_exit_reports_the_stderr_tail() {
    let Some((d, _gc)) = docker("a_nonzero_exit_reports_the_stderr_tail") else {
        return;
    };
    let p = project(&format!(
        r#"
[pipeline]
name = "nz"

[stages.bad]
image = "{BUSYBOX}"
run = "echo to stdout; echo first complaint >&2; echo second complaint >&2; exit 3"
outputs = {{ o = "o" }}
"#
    ));
    let r = p.run("p.toml", &[]).code(1);
    assert!(r.stderr.contains("bad FAILED exit code 3"), "{}", r.stderr);
    let rec = last(&p);
    let status = &instance(&rec, "bad")["status"];
    assert_eq!(status["exit_code"], 3, "{status}");
    assert_eq!(status["error_class"], "ExitCode", "{status}");
    assert_eq!(
        status["stderr_tail"], "first complaint\nsecond complaint",
        "{status}"
    );
    let logs = &instance(&rec, "bad")["logs"];
    let out = std::fs::read_to_string(logs[0].as_str().unwrap()).unwrap();
    assert_eq!(out, "to stdout\n");
    assert_eq!(d.count("heddle.run", &run_id(&rec)), 0);
}

#[test]
fn an_input_cannot_be_modified_from_inside() {
    let Some((_d, _gc)) = docker("an_input_cannot_be_modified_from_inside") else {
        return;
    };
    let p = project(&format!(
        r#"
[pipeline]
name = "ro"

[stages.up]
run = "echo original > {{{{ out.t }}}}"
outputs = {{ t = "t.txt" }}

[stages.probe]
image = "{BUSYBOX}"
inputs = {{ t = "up.t" }}
run = """
try() {{ if "$@" 2>/dev/null; then echo "$1: done"; else echo "$1: refused"; fi; }}
{{
  try sh -c 'echo evil >> "$0"' {{{{ in.t }}}}
  try rm -f {{{{ in.t }}}}
  try chmod 666 {{{{ in.t }}}}
  try touch /heddle/in/t/new.txt
}} > {{{{ out.r }}}}
"""
outputs = {{ r = "r.txt" }}

[stages.force]
image = "{BUSYBOX}"
inputs = {{ t = "up.t" }}
run = "echo evil > {{{{ in.t }}}} && echo wrote > {{{{ out.r }}}}"
outputs = {{ r = "r.txt" }}
"#
    ));
    p.run("p.toml", &["--keep-going"]).code(1);
    assert_eq!(
        p.read("out/ro/probe/r.txt"),
        "sh: refused\nrm: refused\nchmod: refused\ntouch: refused\n"
    );
    let rec = last(&p);
    let force = &instance(&rec, "force")["status"];
    assert_eq!(force["status"], "failed", "{force}");
    assert!(
        force["stderr_tail"]
            .as_str()
            .unwrap_or("")
            .contains("Read-only file system"),
        "{force}"
    );
    assert_eq!(p.read("out/ro/up/t.txt"), "original\n");
    let verify = p.heddle(&["cache", "verify"]).ok();
    assert!(
        verify.stdout.contains("cache is clean"),
        "{}",
        verify.stdout
    );
}

#[test]
fn network_none_has_only_loopback() {
    let Some((_d, _gc)) = docker("network_none_has_only_loopback") else {
        return;
    };
    let p = project(&format!(
        r#"
[pipeline]
name = "net"

[stages.default]
image = "{BUSYBOX}"
run = "ls /sys/class/net > {{{{ out.n }}}}"
outputs = {{ n = "n.txt" }}

[stages.none]
image = "{BUSYBOX}"
network = "none"
run = "ls /sys/class/net > {{{{ out.n }}}}; ping -c 1 -W 1 8.8.8.8 >> {{{{ out.n }}}} 2>&1 || echo unreachable >> {{{{ out.n }}}}"
outputs = {{ n = "n.txt" }}

[stages.bridge]
image = "{BUSYBOX}"
network = "bridge"
run = "ls /sys/class/net > {{{{ out.n }}}}"
outputs = {{ n = "n.txt" }}
"#
    ));
    p.run("p.toml", &[]).ok();
    assert_eq!(p.read("out/net/default/n.txt"), "lo\n");
    let none = p.read("out/net/none/n.txt");
    assert!(none.starts_with("lo\n"), "{none}");
    assert!(none.ends_with("unreachable\n"), "{none}");
    // The contrast that makes the check mean something: a bridged container has an interface.
    assert_ne!(p.read("out/net/bridge/n.txt"), "lo\n");
}

/// Output files belong to whoever runs heddle. As root, the test runs heddle as an
/// unprivileged uid (with the docker socket's group) so the check is not trivially true.
#[test]
fn outputs_belong_to_the_invoking_user() {
    let Some((_d, _gc)) = docker("outputs_belong_to_the_invoking_user") else {
        return;
    };
    let p = project(&format!(
        r#"
[pipeline]
name = "own"

[stages.mine]
image = "{BUSYBOX}"
run = "id -u > {{{{ out.uid }}}}; id -g > {{{{ out.gid }}}}; mkdir {{{{ out.dir }}}}; echo x > {{{{ out.dir }}}}/f"
outputs = {{ uid = "uid.txt", gid = "gid.txt", dir = "d" }}

[stages.theirs]
image = "{BUSYBOX}"
user = "1234:1234"
run = "id -u > {{{{ out.uid }}}}; id -g > {{{{ out.gid }}}}"
outputs = {{ uid = "uid.txt", gid = "gid.txt" }}
"#
    ));
    let (uid, gid, r) = match Unprivileged::get() {
        Some(u) => {
            let r = u.heddle(
                &p,
                Some(u.socket_group),
                &["run", "p.toml", "--progress", "plain"],
            );
            (UNPRIVILEGED, UNPRIVILEGED, r)
        }
        None => {
            let m = std::fs::metadata(p.root()).unwrap();
            (m.uid(), m.gid(), p.run("p.toml", &[]))
        }
    };
    r.ok();
    assert_eq!(p.read("out/own/mine/uid.txt"), format!("{uid}\n"));
    assert_eq!(p.read("out/own/mine/gid.txt"), format!("{gid}\n"));
    for f in ["uid.txt", "gid.txt", "d", "d/f"] {
        let m = std::fs::metadata(p.path(&format!("out/own/mine/{f}"))).unwrap();
        assert_eq!((m.uid(), m.gid()), (uid, gid), "owner of {f}");
    }
    // A stage that sets `user` runs as that user (and can still write its outputs).
    assert_eq!(p.read("out/own/theirs/uid.txt"), "1234\n");
    assert_eq!(p.read("out/own/theirs/gid.txt"), "1234\n");
}

/// The uid and gid tests run heddle as when they run as root.
const UNPRIVILEGED: u32 = 4321;

/// Running heddle as [`UNPRIVILEGED`] through `setpriv`, when the test runs as root against the
/// local socket (otherwise the test process is already the user to check).
struct Unprivileged {
    socket_group: u32,
    socket_mode: u32,
}

impl Unprivileged {
    fn get() -> Option<Unprivileged> {
        let root = std::fs::metadata("/proc/self").ok()?.uid() == 0;
        let local = std::env::var("DOCKER_HOST")
            .map(|h| h.is_empty() || h == "unix:///var/run/docker.sock")
            .unwrap_or(true);
        let socket = std::fs::metadata("/var/run/docker.sock").ok()?;
        (root && local && has("setpriv")).then(|| Unprivileged {
            socket_group: socket.gid(),
            socket_mode: socket.mode(),
        })
    }

    /// `heddle ARGS` in `p` (handed over to the user) with `group` as the only supplementary
    /// group.
    fn heddle(&self, p: &Project, group: Option<u32>, args: &[&str]) -> support::Run {
        chown_tree(p.root(), UNPRIVILEGED, UNPRIVILEGED);
        let mut c = Command::new("setpriv");
        c.arg(format!("--reuid={UNPRIVILEGED}"))
            .arg(format!("--regid={UNPRIVILEGED}"));
        match group {
            Some(g) => c.arg(format!("--groups={g}")),
            None => c.arg("--clear-groups"),
        };
        c.arg(support::bin())
            .args(args)
            .current_dir(p.root())
            .env("HEDDLE_CACHE_DIR", &p.cache)
            .output()
            .unwrap()
            .into()
    }
}

fn has(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

fn chown_tree(dir: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::chown(dir, Some(uid), Some(gid)).unwrap();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.file_type().unwrap().is_dir() {
            chown_tree(&e.path(), uid, gid);
        } else {
            std::os::unix::fs::chown(e.path(), Some(uid), Some(gid)).unwrap();
        }
    }
}

/// A host stage that leaves a mark, then a container stage that cannot start.
fn doomed(p: &Project, container_keys: &str) {
    p.file(
        "p.toml",
        &format!(
            r#"
[pipeline]
name = "env"

[stages.first]
run = "touch '{mark}'; echo x > {{{{ out.o }}}}"
outputs = {{ o = "o" }}

[stages.second]
{container_keys}
inputs = {{ i = "first.o" }}
run = "cat {{{{ in.i }}}} > {{{{ out.o }}}}"
outputs = {{ o = "o" }}
"#,
            mark = p.path("mark").display()
        ),
    );
}

#[test]
fn a_missing_image_or_engine_stops_the_run_before_any_stage() {
    let Some((_d, _gc)) = docker("a_missing_image_or_engine_stops_the_run_before_any_stage") else {
        return;
    };
    let p = Project::new();
    let absent = format!("heddle-test/{}:v1", unique("absent"));
    doomed(&p, &format!("image = \"{absent}\""));
    let r = p.heddle(&["run", "p.toml"]).code(2);
    assert_eq!(
        r.stderr.trim().lines().count(),
        1,
        "one line:\n{}",
        r.stderr
    );
    assert!(r.stderr.contains(&absent), "{}", r.stderr);
    assert!(r.stderr.contains("docker load"), "{}", r.stderr);
    assert!(!p.path("mark").exists(), "a stage ran before the check");
    // `plan` only reports: a pipeline for an image this machine lacks still validates.
    let r = p.heddle(&["plan", "p.toml"]).ok();
    assert!(
        r.stdout.contains(&format!("image {absent} unavailable")),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("docker load"), "{}", r.stdout);
    assert!(!p.path("mark").exists(), "plan ran a stage");

    doomed(
        &p,
        &format!("image = \"{BUSYBOX}\"\ndocker_host = \"unix:///nonexistent.sock\""),
    );
    let r = p.run("p.toml", &[]).code(2);
    assert_eq!(
        r.stderr.trim().lines().count(),
        1,
        "one line:\n{}",
        r.stderr
    );
    assert!(r.stderr.contains("/nonexistent.sock"), "{}", r.stderr);
    assert!(!p.path("mark").exists(), "a stage ran before the check");
    assert!(!p.path("out").exists());

    // A socket the user may not open (checked when the test can drop to a user without the
    // socket's group).
    match Unprivileged::get() {
        Some(u) if u.socket_mode & 0o006 == 0 => {
            doomed(&p, &format!("image = \"{BUSYBOX}\""));
            let r = u.heddle(&p, None, &["run", "p.toml"]).code(2);
            assert_eq!(
                r.stderr.trim().lines().count(),
                1,
                "one line:\n{}",
                r.stderr
            );
            assert!(r.stderr.contains("permission denied"), "{}", r.stderr);
            assert!(r.stderr.contains("docker group"), "{}", r.stderr);
            assert!(!p.path("mark").exists(), "a stage ran before the check");
        }
        _ => eprintln!(
            "(unreadable socket case not checked: needs root, setpriv and a private socket)"
        ),
    }
}

#[test]
fn gc_containers_removes_what_a_crashed_run_left() {
    // Exclusive: gc removes every heddle container, including other tests' running ones.
    let _exclusive = GC.write().unwrap_or_else(|e| e.into_inner());
    let Some(d) = DOCKER.get_or_init(setup).as_ref().ok() else {
        let _ = docker("gc_containers_removes_what_a_crashed_run_left");
        return;
    };
    // A run killed with SIGKILL cannot remove its container...
    let p = long_stage("echo started; sleep 300");
    let (mut child, run) = start_long(d, &p);
    signal(&child, SIGKILL);
    let _ = child.wait();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        d.count("heddle.run", &run),
        1,
        "the crashed run's container"
    );
    // ...and one made by hand with the label stands for any other leftover.
    let mark = unique("gc");
    docker_cli(&[
        "run",
        "-d",
        "--label",
        "heddle.managed=true",
        "--label",
        &format!("heddle.test.gc={mark}"),
        BUSYBOX,
        "sleep",
        "300",
    ]);
    assert_eq!(d.count("heddle.test.gc", &mark), 1);

    let r = p.heddle(&["gc", "--containers"]).ok();
    let n: usize = r
        .stdout
        .strip_prefix("removed ")
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{}", r.stdout));
    assert!(n >= 2, "{}", r.stdout);
    assert_eq!(d.count("heddle.run", &run), 0);
    assert_eq!(d.count("heddle.test.gc", &mark), 0);
}

#[test]
fn devices_gpus_none_and_shm_reach_the_container() {
    let Some((_d, _gc)) = docker("devices_gpus_none_and_shm_reach_the_container") else {
        return;
    };
    let p = project(&format!(
        r#"
[pipeline]
name = "dev"

[stages.dev]
image = "{BUSYBOX}"
gpus = "none"
devices = ["/dev/null:/dev/hailo0"]
shm_size = "64m"
run = "[ -c /dev/hailo0 ] && echo char > {{{{ out.d }}}}; echo probe > /dev/hailo0 && echo writable >> {{{{ out.d }}}}; df -k /dev/shm | tail -n 1 | awk '{{ print $2 }}' >> {{{{ out.d }}}}"
outputs = {{ d = "d.txt" }}

# No inputs and no outputs: the mounts must still have sources.
[stages.bare]
image = "{BUSYBOX}"
run = ["true"]
"#
    ));
    p.run("p.toml", &[]).ok();
    assert_eq!(p.read("out/dev/dev/d.txt"), "char\nwritable\n65536\n");
    let rec = last(&p);
    let executor = &instance(&rec, "dev")["key_parts"]["executor"];
    assert_eq!(
        executor["devices"][0], "/dev/null:/dev/hailo0",
        "{executor}"
    );
    assert_eq!(instance(&rec, "bare")["status"]["status"], "ok");

    // `gpus = "all"` becomes a DeviceRequest with the gpu capability: on a machine without
    // the NVIDIA runtime the engine itself refuses it, and the status says why.
    p.file(
        "gpu.toml",
        &format!(
            "[pipeline]\nname = \"gpu\"\n[stages.g]\nimage = \"{BUSYBOX}\"\ngpus = \"all\"\nrun = [\"true\"]\n"
        ),
    );
    let r = p.run("gpu.toml", &[]);
    if r.code != 0 {
        // The engine cannot give what the stage asks: the environment's fault, not the stage's.
        assert_eq!(r.code, 2, "{}", r.all());
        let rec = last(&p);
        let status = &instance(&rec, "g")["status"];
        let error = status["error"].as_str().unwrap_or("");
        assert!(error.contains("capabilities: [[gpu]]"), "{status}");
    }
}

#[test]
fn the_mixed_example_pipeline_runs() {
    let Some((_d, _gc)) = docker("the_mixed_example_pipeline_runs") else {
        return;
    };
    let p = Project::new();
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/pipelines/mixed.toml"))
            .unwrap();
    p.file("pipelines/mixed.toml", &text);
    let r = p.run("pipelines/mixed.toml", &[]).ok();
    assert!(r.stderr.contains("3 ran, 0 cached"), "{}", r.stderr);
    let report = p.read("out/mixed/report/report.md");
    assert!(report.starts_with("# Word counts"), "{report}");
    assert!(report.contains("| the | 2 |"), "{report}");
    let rec = last(&p);
    assert!(instance(&rec, "count")["image"]["id"]
        .as_str()
        .unwrap()
        .starts_with("sha256:"));
    assert_eq!(instance(&rec, "write")["image"], Value::Null);
    let r = p.run("pipelines/mixed.toml", &[]).ok();
    assert!(r.stderr.contains("0 ran, 3 cached"), "{}", r.stderr);
}

/// A container stage (network none) whose output is a symlink to a host folder: the link
/// target means the host's folder once heddle reads the sandbox, so it must not be followed.
#[test]
fn a_container_symlink_output_reaches_no_host_file() {
    let Some((_d, _gc)) = docker("a_container_symlink_output_reaches_no_host_file") else {
        return;
    };
    let p = Project::new();
    let secret_dir = p.path("host-private");
    std::fs::create_dir_all(&secret_dir).unwrap();
    std::fs::write(secret_dir.join("key"), "private").unwrap();
    p.file(
        "p.toml",
        &format!(
            r#"
[pipeline]
name = "clink"
[stages.file]
image = "{BUSYBOX}"
run = "ln -s {dir}/key {{{{ out.o }}}}"
outputs = {{ o = "o.txt" }}
[stages.folder]
image = "{BUSYBOX}"
run = "ln -s {dir} {{{{ out.d }}}}"
outputs = {{ d = "d" }}
[stages.inside]
image = "{BUSYBOX}"
run = "mkdir {{{{ out.d }}}} && ln -s /etc {{{{ out.d }}}}/etc"
outputs = {{ d = "d" }}
"#,
            dir = secret_dir.display()
        ),
    );
    p.run("p.toml", &["--keep-going"]).code(1);
    let rec = last(&p);
    for label in ["file", "folder", "inside"] {
        let s = &instance(&rec, label)["status"];
        assert_eq!(s["error_class"], "UnsafeOutput", "{label}: {s}");
    }
    assert!(!p.path("out/clink/folder/d").exists());
    assert!(!p.path("out/clink/file/o.txt").exists());
    assert_eq!(
        std::fs::read_to_string(secret_dir.join("key")).unwrap(),
        "private"
    );
    let verify = p.heddle(&["cache", "verify"]).ok();
    assert!(
        verify.stdout.contains("cache is clean"),
        "{}",
        verify.stdout
    );
}

/// A container stage on an engine without a shared filesystem: inputs go in and outputs come
/// back through the archive API, the container has no bind mount, and the outputs are byte for
/// byte those of the bind-mount run.
#[test]
fn archive_transfer_runs_without_bind_mounts_and_matches_bind() {
    let Some((_d, _gc)) = docker("archive_transfer_runs_without_bind_mounts_and_matches_bind")
    else {
        return;
    };
    let tcp = support::engine_over_tcp();
    let pipeline = |transfer: &str, host: &str| {
        format!(
            r#"
[pipeline]
name = "xfer"
[stages.make]
run = "head -c 300000 /dev/urandom > {{{{ out.blob }}}}; mkdir -p {{{{ out.tree }}}}/sub; echo hi > {{{{ out.tree }}}}/sub/f"
outputs = {{ blob = "blob.bin", tree = "tree" }}
[stages.use]
image = "{BUSYBOX}"
docker_host = "{host}"
transfer = "{transfer}"
inputs = {{ blob = "make.blob", tree = "make.tree" }}
run = "(grep -c ' /heddle/' /proc/mounts || true) > {{{{ out.mounts }}}}; cat {{{{ in.blob }}}} {{{{ in.tree }}}}/sub/f > {{{{ out.copy }}}}; mkdir {{{{ out.dir }}}}; cp {{{{ in.tree }}}}/sub/f {{{{ out.dir }}}}/g"
outputs = {{ mounts = "mounts.txt", copy = "copy.bin", dir = "dir" }}
"#
        )
    };
    let p = Project::new();
    p.file("p.toml", &pipeline("bind", "unix:///var/run/docker.sock"));
    p.run("p.toml", &[]).ok();
    let bind_copy = std::fs::read(p.path("out/xfer/use/copy.bin")).unwrap();
    assert_ne!(p.read("out/xfer/use/mounts.txt").trim(), "0");

    p.file("p.toml", &pipeline("archive", &tcp));
    p.run("p.toml", &["--force", "use"]).ok();
    assert_eq!(
        p.read("out/xfer/use/mounts.txt").trim(),
        "0",
        "no bind mount"
    );
    assert_eq!(
        std::fs::read(p.path("out/xfer/use/copy.bin")).unwrap(),
        bind_copy
    );
    assert_eq!(p.read("out/xfer/use/dir/g"), "hi\n");
    // `auto` picks the archive for a tcp:// engine.
    p.file("p.toml", &pipeline("auto", &tcp));
    p.run("p.toml", &["--force", "use"]).ok();
    assert_eq!(p.read("out/xfer/use/mounts.txt").trim(), "0");
}

/// Two configured hosts, the local engine over its unix socket (`near`, pool `gpu`) and the
/// same engine over TCP (`far`, pool `hailo`): each stage lands on the host whose pools offer
/// its resource (container labels and the run record agree), the TCP host gets its sandbox
/// through the archive API, a stage without resources stays on the default engine, `heddle
/// plan` says where each would go, and every copy of the input comes back byte for byte.
#[test]
fn stages_land_on_the_host_whose_pools_offer_their_resources() {
    let Some((_d, _gc)) = docker("stages_land_on_the_host_whose_pools_offer_their_resources")
    else {
        return;
    };
    let tcp = support::engine_over_tcp();
    let p = Project::new();
    p.file(
        ".heddle/hosts.toml",
        &format!(
            "[hosts.near]\ndocker = \"unix:///var/run/docker.sock\"\npools = {{ gpu = 1 }}\n\n\
             [hosts.far]\ndocker = \"{tcp}\"\npools = {{ hailo = 1 }}\n"
        ),
    );
    let stage = |name: &str, resources: &str| {
        format!(
            r#"
[stages.{name}]
image = "{BUSYBOX}"
{resources}
inputs = {{ blob = "make.blob" }}
run = "(grep -c ' /heddle/' /proc/mounts || true) > {{{{ out.mounts }}}}; cat {{{{ in.blob }}}} > {{{{ out.copy }}}}"
outputs = {{ mounts = "mounts.txt", copy = "copy.bin" }}
"#
        )
    };
    p.file(
        "p.toml",
        &format!(
            r#"
[pipeline]
name = "placed"
[resources]
gpu = 1
hailo = 1
[stages.make]
run = "head -c 200000 /dev/urandom > {{{{ out.blob }}}}"
outputs = {{ blob = "blob.bin" }}
{}{}{}"#,
            stage("train", "resources = { gpu = 1 }"),
            stage("flash", "resources = { hailo = 1 }"),
            stage("plain", ""),
        ),
    );
    let plan = p.heddle(&["plan", "p.toml"]).ok();
    let line = |label: &str| {
        plan.stdout
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(label))
            .unwrap_or_else(|| panic!("no {label} in\n{}", plan.stdout))
            .to_string()
    };
    assert!(line("train").ends_with("(on near)"), "{}", plan.stdout);
    assert!(line("flash").ends_with("(on far)"), "{}", plan.stdout);
    assert!(!line("plain").contains("(on "), "{}", plan.stdout);

    let creates = Creates::watch();
    p.run("p.toml", &[]).ok();
    let record = last(&p);
    let run = run_id(&record);
    let labels: BTreeMap<String, BTreeMap<String, String>> = creates
        .finish()
        .into_iter()
        .filter(|a| a.get("heddle.run") == Some(&run))
        .map(|a| (a["heddle.instance"].clone(), a))
        .collect();
    assert_eq!(labels.len(), 3, "{labels:#?}");
    let placed = |i: &str| labels[i].get("heddle.placed-on").map(String::as_str);
    assert_eq!(placed("train"), Some("near"));
    assert_eq!(placed("flash"), Some("far"));
    assert_eq!(placed("plain"), None);
    assert_eq!(labels["flash"]["heddle.engine"], tcp);
    assert_eq!(labels["flash"]["heddle.transfer"], "archive");
    assert_eq!(labels["train"]["heddle.transfer"], "bind");
    assert_eq!(instance(&record, "train")["host"], "near");
    assert_eq!(instance(&record, "flash")["host"], "far");
    assert!(instance(&record, "plain").get("host").is_none());

    assert_eq!(
        p.read("out/placed/flash/mounts.txt").trim(),
        "0",
        "no bind mount"
    );
    assert_ne!(p.read("out/placed/train/mounts.txt").trim(), "0");
    let blob = std::fs::read(p.path("out/placed/make/blob.bin")).unwrap();
    for stage in ["train", "flash", "plain"] {
        let copy = std::fs::read(p.path(&format!("out/placed/{stage}/copy.bin"))).unwrap();
        assert!(copy == blob, "{stage}: the copy differs from the input");
    }
}
