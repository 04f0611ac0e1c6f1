//! Engine-wide pools (issue 10): a configured host's pool declared `{ units = 1, scope =
//! "host" }` in hosts.toml is one unit for every heddle that places stages on that engine, not
//! one per run. Here the "device host" is the local engine over TCP (as another machine's
//! engine would be), and two separate projects, each with its own cache, stand for two
//! engineers' heddles: their device stages never overlap, a holder killed with SIGKILL frees
//! the unit (its lock container disappears) and its orphaned stage still finishes before the
//! next one starts, a holder whose unit is taken from it says so, and `heddle status` names the
//! holder.
//!
//! Each test uses its own pool name, so its lock containers (`heddle-unit-<pool>-<unit>`) are
//! its own even when other tests or test processes share the engine.

use std::io::Read;
use std::process::{Child, Stdio};
use std::time::Duration;

use crate::support::process::{signal, wait_ended, wait_for, Running, StderrLines, SIGKILL};
use crate::support::{assert_contains, docker, fill, Project};
use crate::{unique, BUSYBOX};

/// A project (its own folder and cache) whose hosts.toml configures `far` at `engine` with
/// the engine-wide pool `pool`, and whose pipeline `name` has one device stage on it that
/// sleeps `sleep` seconds.
fn device_project(engine: &str, pool: &str, name: &str, sleep: &str) -> Project {
    let p = Project::with_hosts(&hosts(engine, pool));
    p.file(
        "p.toml",
        &fill(
            include_str!("fixtures/engine_unit.toml"),
            &[
                ("NAME", name),
                ("POOL", pool),
                ("SLEEP", sleep),
                ("BUSYBOX", BUSYBOX),
            ],
        ),
    );
    p
}

fn hosts(engine: &str, pool: &str) -> String {
    format!("[hosts.far]\ndocker = \"{engine}\"\npools = {{ {pool} = {{ units = 1, scope = \"engine\" }} }}\n")
}

/// `heddle run p.toml` in `p`, in the background, its output kept for later.
fn spawn_run(p: &Project) -> Child {
    p.cmd(&["run", "p.toml", "--progress", "plain"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Wait for `child` (bounded), then its exit status and stderr.
fn finish(child: &mut Child, what: &str) -> (std::process::ExitStatus, String) {
    let status = wait_ended(child, Duration::from_secs(90), what);
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (status, stderr)
}

/// The device stage's (start, end) in kernel uptime seconds.
fn interval(p: &Project, name: &str) -> (f64, f64) {
    let at = |edge: &str| -> f64 {
        p.read(&format!("out/{name}/probe/{edge}"))
            .trim()
            .parse()
            .unwrap()
    };
    (at("start"), at("end"))
}

/// Wait until a stage container holding `pool`'s unit 0 runs (its `heddle.holds` label).
fn wait_for_stage_of(pool: &str, holder: &mut Child) {
    let label = format!("label=heddle.holds.heddle-unit-{pool}-0=true");
    wait_for(
        "the holder's stage container",
        Duration::from_secs(30),
        || {
            assert!(
                holder.try_wait().unwrap().is_none(),
                "the holder ended first"
            );
            let running =
                docker::cli(&["ps", "-q", "--filter", &label, "--filter", "status=running"]);
            !running.trim().is_empty()
        },
    );
}

/// The lock containers of `pool` on the engine, running or not: `name id` lines.
fn lock_containers(pool: &str) -> Vec<String> {
    let out = docker::cli(&[
        "ps",
        "-a",
        "--filter",
        &format!("name=heddle-unit-{pool}-"),
        "--format",
        "{{.Names}} {{.ID}}",
    ]);
    out.lines().map(str::to_string).collect()
}

/// The engine's id of the running lock container of `pool`'s unit 0, once there is one.
fn wait_for_lock(pool: &str, holder: &mut Child) -> String {
    let mut id = String::new();
    wait_for("the lock container", Duration::from_secs(30), || {
        assert!(
            holder.try_wait().unwrap().is_none(),
            "the holder ended first"
        );
        let o = std::process::Command::new("docker")
            .args([
                "inspect",
                "-f",
                "{{.State.Running}} {{.Id}}",
                &format!("heddle-unit-{pool}-0"),
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        match text.trim().strip_prefix("true ") {
            Some(i) => {
                id = i.to_string();
                true
            }
            None => false,
        }
    });
    id
}

fn kernel_uptime() -> f64 {
    std::fs::read_to_string("/proc/uptime")
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn two_heddles_never_run_a_device_stage_of_one_engine_wide_unit_at_once() {
    let (_d, _gc) = engine!();
    let tcp = docker::engine_over_tcp();
    let pool = unique("hailo");
    let a = device_project(&tcp, &pool, "dev-a", "2");
    let b = device_project(&tcp, &pool, "dev-b", "2");
    let (mut ra, mut rb) = (spawn_run(&a), spawn_run(&b));
    let (sa, ea) = finish(&mut ra, "run a");
    let (sb, eb) = finish(&mut rb, "run b");
    assert!(sa.success(), "{ea}");
    assert!(sb.success(), "{eb}");
    let (ia, ib) = (interval(&a, "dev-a"), interval(&b, "dev-b"));
    let (first, second) = if ia.0 <= ib.0 { (ia, ib) } else { (ib, ia) };
    assert!(first.1 <= second.0, "overlap: {first:?} and {second:?}");
    let waited = format!("probe: waiting for `{pool}` on host far, held by pid ");
    assert!(
        ea.contains(&waited) || eb.contains(&waited),
        "one run says whom it waits for:\n{ea}\n{eb}"
    );
    assert_eq!(lock_containers(&pool), Vec::<String>::new(), "none left");
}

#[test]
fn a_holder_killed_with_sigkill_frees_the_unit_and_its_stage_ends_first() {
    let (d, _gc) = engine!();
    let tcp = docker::engine_over_tcp();
    let pool = unique("hailo");
    let a = device_project(&tcp, &pool, "kill-a", "6");
    let b = device_project(&tcp, &pool, "kill-b", "0");
    let mut ra = spawn_run(&a);
    let pid_a = ra.id();
    let lock_a = wait_for_lock(&pool, &mut ra);
    // a's stage has started (its container printed its start edge) before a is killed.
    wait_for("a's stage to start", Duration::from_secs(30), || {
        let id = docker::cli(&["ps", "-q", "--filter", &format!("label=heddle.pid={pid_a}")]);
        !id.trim().is_empty() && !docker::cli(&["logs", id.trim()]).trim().is_empty()
    });
    let mut rb = spawn_run(&b);
    // b says whom it waits for; a's stage holds the unit for 6 s, so b cannot have ended.
    let b_err = StderrLines::watch(&mut rb);
    let waiting = format!("probe: waiting for `{pool}` on host far, held by pid {pid_a} on ");
    b_err.wait_for(&waiting, &mut rb, Duration::from_secs(60));
    assert!(rb.try_wait().unwrap().is_none(), "b waits for the unit");

    signal(pid_a, SIGKILL);
    let _ = ra.wait();
    let killed_at = kernel_uptime();
    // The engine removes a dead holder's lock container (b's own may already be there).
    wait_for("a's lock container to go", Duration::from_secs(5), || {
        !lock_containers(&pool)
            .iter()
            .any(|l| lock_a.starts_with(l.split(' ').nth(1).unwrap_or("-")))
    });
    let gone_after = kernel_uptime() - killed_at;

    let sb = wait_ended(&mut rb, Duration::from_secs(90), "run b after a died");
    let eb = b_err.finish();
    assert!(sb.success(), "{eb}");
    // a's stage container outlived a (nothing stops it when its heddle dies): b's stage ran
    // only after it ended, though the unit was free before.
    let orphan = docker::cli(&[
        "ps",
        "-a",
        "-q",
        "--filter",
        &format!("label=heddle.pid={pid_a}"),
    ]);
    assert_eq!(orphan.lines().count(), 1, "a's stage container");
    let logs = docker::cli(&["logs", orphan.trim()]);
    let edges: Vec<f64> = logs.lines().map(|l| l.trim().parse().unwrap()).collect();
    assert_eq!(edges.len(), 2, "b ended while a's stage still ran: {logs}");
    let orphan_end = edges[1];
    let (b_start, _) = interval(&b, "kill-b");
    assert!(
        b_start >= orphan_end,
        "b started at {b_start}, a's stage ended at {orphan_end}"
    );
    assert_contains(
        &eb,
        "still running on host far, left by a heddle that lost the unit",
    );
    d.rt.block_on(
        d.engine
            .remove_labelled(Some(("heddle.pid", &pid_a.to_string()))),
    )
    .unwrap();

    assert!(gone_after < 5.0, "{gone_after}");
    wait_for("no lock container left", Duration::from_secs(5), || {
        lock_containers(&pool).is_empty()
    });
}

/// A unit taken from its live holder (its lock container removed by hand, as the engine does
/// when a network partition ends the holder's connection): the holder says it lost the unit,
/// and the heddle that takes it next still waits for the holder's stage to end.
#[test]
fn a_unit_lost_by_its_holder_is_reported_and_its_stage_still_ends_first() {
    let (_d, _gc) = engine!();
    let tcp = docker::engine_over_tcp();
    let pool = unique("hailo");
    let a = device_project(&tcp, &pool, "lost-a", "4");
    let b = device_project(&tcp, &pool, "lost-b", "0");
    let mut ra = spawn_run(&a);
    wait_for_lock(&pool, &mut ra);
    // a's stage container is running before its unit is taken: taken between a's lock and
    // its stage's start, b would find nothing to wait for (CI saw that once under load).
    wait_for_stage_of(&pool, &mut ra);
    let mut rb = spawn_run(&b);
    // b is waiting for the unit when it is taken from a (not a guess at how long that takes),
    // so b takes it while a's stage still runs.
    let b_err = StderrLines::watch(&mut rb);
    let waiting = format!("probe: waiting for `{pool}` on host far, held by ");
    b_err.wait_for(&waiting, &mut rb, Duration::from_secs(60));
    docker::cli(&["rm", "-f", &format!("heddle-unit-{pool}-0")]);
    let (sa, ea) = finish(&mut ra, "run a");
    let sb = wait_ended(&mut rb, Duration::from_secs(90), "run b");
    let eb = b_err.finish();
    assert!(sa.success(), "{ea}");
    assert!(sb.success(), "{eb}");
    assert_contains(
        &ea,
        &format!(
            "probe: lost `{pool}`#0 on host far: the connection to its lock container ended \
             while the unit was held, and another heddle may take it now"
        ),
    );
    assert_contains(
        &eb,
        "is still running on host far, left by a heddle that lost the unit; waiting for it to end",
    );
    let (ia, ib) = (interval(&a, "lost-a"), interval(&b, "lost-b"));
    assert!(ia.1 <= ib.0, "overlap: a {ia:?}, b {ib:?}");
    assert_eq!(lock_containers(&pool), Vec::<String>::new(), "none left");
}

/// A unit taken from its holder before the holder's stage has started (here: while the holder
/// waits for a leftover stage container of an earlier holder) is taken again, not used: the
/// heddle that took it meanwhile runs its stage first, and the two never overlap.
#[test]
fn a_unit_lost_before_its_stage_started_is_taken_again_not_used() {
    let (_d, _gc) = engine!();
    let tcp = docker::engine_over_tcp();
    let pool = unique("hailo");
    // A leftover: a container still running on the device for a holder that is gone.
    let leftover = docker::cli(&[
        "run",
        "-d",
        "--rm",
        "--label",
        &format!("heddle.holds.heddle-unit-{pool}-0=true"),
        BUSYBOX,
        "sleep",
        "8",
    ]);
    let a = device_project(&tcp, &pool, "early-a", "1");
    let b = device_project(&tcp, &pool, "early-b", "1");
    let mut ra = spawn_run(&a);
    let a_err = StderrLines::watch(&mut ra);
    let leftover_wait = "left by a heddle that lost the unit; waiting for it to end";
    a_err.wait_for(leftover_wait, &mut ra, Duration::from_secs(60));
    // a holds the unit and waits for the leftover: take the unit from it.
    docker::cli(&["rm", "-f", &format!("heddle-unit-{pool}-0")]);
    let mut rb = spawn_run(&b);
    let b_err = StderrLines::watch(&mut rb);
    b_err.wait_for(leftover_wait, &mut rb, Duration::from_secs(60));
    // Both wait for the leftover; b holds the unit now. When the leftover ends, a must not
    // start its stage beside b's.
    let sa = wait_ended(&mut ra, Duration::from_secs(90), "run a");
    let sb = wait_ended(&mut rb, Duration::from_secs(90), "run b");
    let (ea, eb) = (a_err.finish(), b_err.finish());
    assert!(sa.success(), "{ea}");
    assert!(sb.success(), "{eb}");
    assert_contains(&ea, &format!("probe: lost `{pool}`#0 on host far"));
    let (ia, ib) = (interval(&a, "early-a"), interval(&b, "early-b"));
    assert!(ib.1 <= ia.0, "a ran beside b: a {ia:?}, b {ib:?}");
    // Gone by now (`--rm`) unless the test failed early.
    let _ = std::process::Command::new("docker")
        .args(["rm", "-f", leftover.trim()])
        .output();
    assert_eq!(lock_containers(&pool), Vec::<String>::new(), "none left");
}

/// `heddle status` in another project configured with the same host names the holder of the
/// engine-wide unit (who, where, which run and instance, since when) and says which host did
/// not answer.
#[test]
fn status_names_the_holder_of_an_engine_wide_unit() {
    let (_d, _gc) = engine!();
    let tcp = docker::engine_over_tcp();
    let pool = unique("hailo");
    let a = device_project(&tcp, &pool, "held", "60");
    let mut holder = Running(spawn_run(&a));
    let pid = holder.0.id();
    wait_for_lock(&pool, &mut holder.0);

    let observer = Project::with_hosts(&format!(
        "{}[hosts.dead]\ndocker = \"tcp://127.0.0.1:1\"\npools = {{ npu = {{ units = 2, scope = \"engine\" }} }}\n",
        hosts(&tcp, &pool)
    ));
    observer.file(
        "p.toml",
        "[pipeline]\nname = \"observer\"\n[stages.noop]\nrun = \"true\"\n",
    );
    observer.run("p.toml", &[]).ok();
    let status = observer.heddle(&["status", "p.toml"]).ok();
    let text = status
        .stdout
        .replace(&pool, "[POOL]")
        .replace(&format!("pid {pid} "), "pid [PID] ")
        .replace(
            &format!(" on {},", heddle_runner::hostname::hostname()),
            " on [HOSTNAME],",
        );
    assert_eq!(
        normalise_run_and_since(&text),
        "unknown  units on host dead: unreachable (cannot reach the Docker Engine at \
         tcp://127.0.0.1:1: connection refused — is the daemon running and listening at that \
         address?)\n\
         held     [POOL]#0 on host far by pid [PID] on [HOSTNAME], run [RUN] (probe), since unix [T]\n\
         same     noop\n\
         1 instances against p.lock: 1 as locked, 0 changed, 0 removed\n"
    );
}

/// `run X (` and `since unix N` with their values replaced.
fn normalise_run_and_since(text: &str) -> String {
    text.lines()
        .map(|l| {
            let mut l = l.to_string();
            if let (Some(a), Some(b)) = (l.find(", run "), l.find(" (probe)")) {
                l.replace_range(a + ", run ".len()..b, "[RUN]");
            }
            if let Some(a) = l.find("since unix ") {
                l.replace_range(a + "since unix ".len().., "[T]");
            }
            l + "\n"
        })
        .collect()
}
