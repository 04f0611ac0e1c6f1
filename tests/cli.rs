//! The real `heddle` binary against temp projects: caching, invalidation, matrices, errors,
//! failures, crashes and concurrency.

mod support;

use support::{alive, Project};

fn chain(p: &Project) -> String {
    let log = p.log();
    format!(
        r#"
[pipeline]
name = "t"

[params]
greeting = "hello"
unused = 1

[stages.a]
inputs = {{ src = {{ path = "data/a.txt" }} }}
run = "{log}; tr a-z A-Z < {{{{ in.src }}}} > {{{{ out.up }}}}"
outputs = {{ up = "up.txt" }}

[stages.a2]
inputs = {{ up = "a.up" }}
run = "{log}; wc -c < {{{{ in.up }}}} > {{{{ out.n }}}}"
outputs = {{ n = "n.txt" }}

[stages.b]
inputs = {{ src = {{ path = "data/b.txt" }} }}
run = "{log}; cat {{{{ in.src }}}} > {{{{ out.copy }}}}; echo {{{{ params.greeting }}}} >> {{{{ out.copy }}}}"
outputs = {{ copy = "copy.txt" }}

[stages.b2]
inputs = {{ c = "b.copy" }}
run = "{log}; cat {{{{ in.c }}}} {{{{ in.c }}}} > {{{{ out.twice }}}}"
outputs = {{ twice = "twice.txt" }}
"#
    )
}

fn chain_project() -> Project {
    let p = Project::new();
    let text = chain(&p);
    p.file("p.toml", &text)
        .file("data/a.txt", "abc\n")
        .file("data/b.txt", "b\n");
    p
}

#[test]
fn second_run_executes_nothing() {
    let p = chain_project();
    p.run("p.toml", &[]).ok();
    assert_eq!(p.ran(), ["a", "a2", "b", "b2"]);
    assert_eq!(p.read("out/t/a/up.txt"), "ABC\n");
    assert_eq!(p.read("out/t/b2/twice.txt"), "b\nhello\nb\nhello\n");
    p.clear_ran();
    // The lock file of a no-op run is the same: it is left alone, not rewritten.
    let lock = p.path("p.lock");
    let lock_mtime = || std::fs::metadata(&lock).unwrap().modified().unwrap();
    let before = lock_mtime();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let r = p.run("p.toml", &[]).ok();
    assert!(p.ran().is_empty(), "nothing may run: {:?}", p.ran());
    assert!(r.stderr.contains("0 ran, 4 cached"), "{}", r.stderr);
    assert_eq!(lock_mtime(), before, "an unchanged lock was rewritten");
    let plan = p.heddle(&["plan", "p.toml"]).ok();
    assert!(
        plan.stdout.contains("4 instances: 4 cached, 0 to run"),
        "{}",
        plan.stdout
    );
}

#[test]
fn deleted_output_is_restored_from_the_cache_without_running() {
    let p = chain_project();
    p.run("p.toml", &[]).ok();
    std::fs::remove_file(p.path("out/t/a/up.txt")).unwrap();
    std::fs::write(p.path("out/t/b/copy.txt"), "edited by hand\n").unwrap();
    p.clear_ran();
    p.run("p.toml", &[]).ok();
    assert!(p.ran().is_empty(), "{:?}", p.ran());
    assert_eq!(p.read("out/t/a/up.txt"), "ABC\n");
    assert_eq!(p.read("out/t/b/copy.txt"), "b\nhello\n");
}

#[test]
fn one_changed_input_byte_reruns_exactly_its_cone() {
    let p = chain_project();
    p.run("p.toml", &[]).ok();
    p.clear_ran();
    p.file("data/a.txt", "abd\n");
    let plan = p.heddle(&["plan", "p.toml"]).ok();
    assert!(
        plan.stdout.contains("a   input src changed") || plan.stdout.contains("input src changed"),
        "{}",
        plan.stdout
    );
    p.run("p.toml", &[]).ok();
    // a's output changed bytes but not length, so a2's key changes (its input digest moved).
    assert_eq!(p.ran(), ["a", "a2"]);
    assert_eq!(p.read("out/t/a/up.txt"), "ABD\n");
}

#[test]
fn identical_upstream_bytes_cut_off_downstream_work() {
    let p = chain_project();
    p.run("p.toml", &[]).ok();
    p.clear_ran();
    // Different input, same uppercase output: a reruns, a2 is a hit.
    p.file("data/a.txt", "ABC\n");
    p.run("p.toml", &[]).ok();
    assert_eq!(p.ran(), ["a"]);
}

#[test]
fn changed_param_reruns_only_instances_that_use_it() {
    let p = chain_project();
    p.run("p.toml", &[]).ok();
    p.clear_ran();
    let plan = p.heddle(&["plan", "p.toml", "--set", "greeting=hi"]).ok();
    assert!(
        plan.stdout.contains("param greeting hello → hi"),
        "{}",
        plan.stdout
    );
    p.run("p.toml", &["--set", "greeting=hi"]).ok();
    assert_eq!(p.ran(), ["b", "b2"]);
    p.clear_ran();
    p.run("p.toml", &["--set", "unused=2"]).ok();
    assert!(p.ran().is_empty(), "{:?}", p.ran());
    // Going back to an earlier value is a hit: every key ever seen is kept.
    p.run("p.toml", &[]).ok();
    assert!(p.ran().is_empty(), "{:?}", p.ran());
    assert_eq!(p.read("out/t/b/copy.txt"), "b\nhello\n");
}

fn uses_project() -> Project {
    let p = Project::new();
    let log = p.log();
    p.file(
        "stages/text/shout/stage.toml",
        &format!(
            r#"
[stage]
description = "uppercase a file, n times"
run = "{log}; sh {{{{ stage.dir }}}}/shout.sh {{{{ in.src }}}} {{{{ params.times }}}} > {{{{ out.loud }}}}"

[params]
times = {{ type = "int", default = 1 }}

[inputs]
src = {{ description = "text" }}

[outputs]
loud = "loud.txt"
"#
        ),
    )
    .file("stages/text/shout/shout.sh", "for i in $(seq $2); do tr a-z A-Z < $1; done\n")
    .file("data/in.txt", "hey\n")
    .file(
        "p.toml",
        &format!(
            r#"
[pipeline]
name = "u"
[params]
n = 2
[stages.shout]
uses = "text/shout"
inputs = {{ src = {{ path = "data/in.txt" }} }}
with = {{ times = "{{{{ params.n }}}}" }}
[stages.after]
inputs = {{ l = "shout.loud" }}
run = "{log}; cat {{{{ in.l }}}} > {{{{ out.o }}}}"
outputs = {{ o = "o.txt" }}
[stages.other]
run = "{log}; echo x > {{{{ out.o }}}}"
outputs = {{ o = "o.txt" }}
"#
        ),
    );
    p
}

#[test]
fn edited_stage_script_reruns_that_stage_and_its_cone() {
    let p = uses_project();
    p.run("p.toml", &[]).ok();
    assert_eq!(p.read("out/u/after/o.txt"), "HEY\nHEY\n");
    p.clear_ran();
    p.file(
        "stages/text/shout/shout.sh",
        "for i in $(seq $2); do tr a-z A-Z < $1; echo; done\n",
    );
    let plan = p.heddle(&["plan", "p.toml"]).ok();
    assert!(
        plan.stdout.contains("definition changed: shout.sh"),
        "{}",
        plan.stdout
    );
    p.run("p.toml", &[]).ok();
    assert_eq!(p.ran(), ["after", "shout"]);
}

#[test]
fn templated_with_values_are_type_checked() {
    let p = uses_project();
    let r = p.heddle(&["plan", "p.toml", "--set", "n=x"]).code(2);
    assert!(
        r.stderr.contains("param `n` is a int") || r.stderr.contains("n"),
        "{}",
        r.stderr
    );
    let text = p.read("p.toml").replace(
        "with = { times = \"{{ params.n }}\" }",
        "with = { times = \"many\" }",
    );
    p.file("p.toml", &text);
    let r = p.heddle(&["plan", "p.toml"]).code(2);
    assert!(r.stderr.contains("p.toml:9:18"), "{}", r.stderr);
    assert!(r.stderr.contains("expected int"), "{}", r.stderr);
}

#[test]
fn matrix_3x2_joins_and_gathers() {
    let p = Project::new();
    let log = p.log();
    p.file(
        "p.toml",
        &format!(
            r#"
[pipeline]
name = "m"
[stages.gen]
matrix = {{ k = [1, 2, 3] }}
run = "{log}; echo k{{{{ matrix.k }}}} > {{{{ out.v }}}}"
outputs = {{ v = "v.txt" }}
[stages.mul]
matrix = {{ j = ["x", "y"] }}
inputs = {{ v = "gen.v" }}
run = "{log}; echo $(cat {{{{ in.v }}}})-{{{{ matrix.j }}}}-{{{{ matrix.k }}}} > {{{{ out.w }}}}"
outputs = {{ w = "w.txt" }}
[stages.pick]
inputs = {{ one = "mul[k=2,j=y].w", ys = "mul[j=y].w" }}
run = "{log}; cat {{{{ in.one }}}} {{{{ in.ys }}}} > {{{{ out.p }}}}"
outputs = {{ p = "p.txt" }}
[stages.all]
inputs = {{ ws = "mul[*].w" }}
run = "{log}; cat {{{{ in.ws }}}} | sort > {{{{ out.t }}}}; ls {{{{ in.ws.dir }}}} > {{{{ out.dirs }}}}"
outputs = {{ t = "t.txt", dirs = "dirs.txt" }}
"#
        ),
    );
    p.run("p.toml", &[]).ok();
    let ran = p.ran();
    assert_eq!(
        ran.iter().filter(|l| l.starts_with("mul[")).count(),
        6,
        "{ran:?}"
    );
    assert!(ran.contains(&"mul[j=x,k=3]".to_string()), "{ran:?}");
    // pick maps over k (the selector fixed j=y; one=k=2 fixed both) → 3 instances.
    assert_eq!(
        ran.iter().filter(|l| l.starts_with("pick[")).count(),
        3,
        "{ran:?}"
    );
    assert_eq!(p.read("out/m/pick[k=1]/p.txt"), "k2-y-2\nk1-y-1\n");
    assert_eq!(
        p.read("out/m/all/t.txt"),
        "k1-x-1\nk1-y-1\nk2-x-2\nk2-y-2\nk3-x-3\nk3-y-3\n"
    );
    assert_eq!(
        p.read("out/m/all/dirs.txt"),
        "j=x,k=1\nj=x,k=2\nj=x,k=3\nj=y,k=1\nj=y,k=2\nj=y,k=3\n"
    );
    let dag = p.heddle(&["dag", "p.toml"]).ok();
    assert!(
        dag.stdout.contains("mul[j=y,k=2] <- gen[k=2]"),
        "{}",
        dag.stdout
    );
}

#[test]
fn paths_with_spaces_are_quoted() {
    let p = Project::new();
    p.file("my data/in put.txt", "spaced\n").file(
        "p.toml",
        r#"
[pipeline]
name = "s"
[stages.a]
inputs = { f = { path = "my data/in put.txt" } }
run = "cat {{ in.f }} > {{ out.o }}"
outputs = { o = "o u t.txt" }
[stages.b]
inputs = { f = "a.o" }
run = ["cp", "{{ in.f }}", "{{ out.o }}"]
outputs = { o = "copy.txt" }
"#,
    );
    p.run("p.toml", &[]).ok();
    assert_eq!(p.read("out/s/a/o u t.txt"), "spaced\n");
    assert_eq!(p.read("out/s/b/copy.txt"), "spaced\n");
}

/// Each class of invalid pipeline exits 2 and names file:line:col.
#[test]
fn invalid_pipelines_exit_2_with_positions() {
    let cases: &[(&str, &str, &str)] = &[
        ("syntax", "[pipeline]\nname = \"x\"\n[stages.a\nrun = \"x\"\n", "bad.toml:3:"),
        ("unknown key", "[pipeline]\nname = \"x\"\n[stages.a]\nrun = \"x\"\nrnu = 1\n", "bad.toml:5:1"),
        ("duplicate stage", "[pipeline]\nname = \"x\"\n[stages.a]\nrun = \"x\"\n[stages.a]\nrun = \"y\"\n", "bad.toml:5:"),
        ("unknown stage", "[pipeline]\nname = \"x\"\n[stages.a]\ninputs = { i = \"nope.o\" }\nrun = \"x\"\n", "bad.toml:4:16"),
        ("unknown output", "[pipeline]\nname = \"x\"\n[stages.a]\nrun = \"x\"\noutputs = { o = \"o\" }\n[stages.b]\ninputs = { i = \"a.p\" }\nrun = \"x\"\n", "bad.toml:7:16"),
        ("cycle", "[pipeline]\nname = \"x\"\n[stages.a]\ninputs = { i = \"b.o\" }\nrun = \"x\"\noutputs = { o = \"o\" }\n[stages.b]\ninputs = { i = \"a.o\" }\nrun = \"x\"\noutputs = { o = \"o\" }\n", "cycle: a → b → a"),
        ("missing file", "[pipeline]\nname = \"x\"\n[stages.a]\ninputs = { i = { path = \"no/such.txt\" } }\nrun = \"x\"\n", "bad.toml:4:16"),
        ("unknown template var", "[pipeline]\nname = \"x\"\n[stages.a]\nrun = \"echo {{ params.nope }}\"\n", "bad.toml:4:13"),
        ("unknown matrix key", "[pipeline]\nname = \"x\"\n[stages.a]\nmatrix = { k = [1] }\nrun = \"echo {{ matrix.j }}\"\n", "unknown matrix key `j`"),
        ("bad timeout", "[pipeline]\nname = \"x\"\n[stages.a]\nrun = \"x\"\ntimeout = \"soon\"\n", "bad.toml:5:11"),
        ("unknown resource", "[pipeline]\nname = \"x\"\n[stages.a]\nrun = \"x\"\nresources = { gpu = 1 }\n", "unknown resource pool `gpu`"),
        ("no run", "[pipeline]\nname = \"x\"\n[stages.a]\noutputs = { o = \"o\" }\n", "has no `run`"),
        ("unknown uses", "[pipeline]\nname = \"x\"\n[stages.a]\nuses = \"no/such\"\n", "bad.toml:4:8"),
        ("wrong type", "[pipeline]\nname = \"x\"\n[stages.a]\nrun = \"x\"\nretries = \"two\"\n", "bad.toml:5:11"),
    ];
    for (what, text, want) in cases {
        let p = Project::new();
        p.file("bad.toml", text);
        let r = p.heddle(&["plan", "bad.toml"]);
        assert_eq!(r.code, 2, "{what}: {}", r.all());
        assert!(
            r.stderr.contains(want),
            "{what}: want `{want}` in:\n{}",
            r.stderr
        );
        assert!(!r.stderr.contains("panicked"), "{what}: {}", r.stderr);
    }
}

#[test]
fn ill_typed_and_unknown_params_of_a_definition() {
    let p = uses_project();
    let text = p.read("p.toml").replace(
        "with = { times = \"{{ params.n }}\" }",
        "with = { times = 1.5, loud = true }",
    );
    p.file("p.toml", &text);
    let r = p.heddle(&["plan", "p.toml"]).code(2);
    assert!(
        r.stderr
            .contains("param `times` of `text/shout`: expected int"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("`text/shout` has no param `loud`"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("p.toml:9:18"), "{}", r.stderr);
}

#[test]
fn usage_errors_exit_2() {
    let p = chain_project();
    p.heddle(&["run", "p.toml", "--set", "nope=1"]).code(2);
    p.heddle(&["run", "p.toml", "--force", "nope"]).code(2);
    p.heddle(&["run", "missing.toml"]).code(2);
    p.heddle(&["frobnicate"]).code(2);
}

#[test]
fn allow_failure_delivers_status_records_downstream() {
    let p = Project::new();
    p.file(
        "p.toml",
        r#"
[pipeline]
name = "f"
[stages.work]
matrix = { precision = ["a16_w16", "a16_w4", "a8_w8"] }
allow_failure = true
run = """
if [ {{ matrix.precision }} = a16_w4 ]; then
  echo 'Traceback (most recent call last):' >&2
  echo "AttributeError: 'function' object has no attribute 'set_wraparound_loss'" >&2
  exit 1
fi
echo ok-{{ matrix.precision }} > {{ out.r }}
"""
outputs = { r = "r.txt" }
[stages.probe]
inputs = { r = "work.r" }
run = "cat {{ in.r }} > {{ out.p }}"
outputs = { p = "p.txt" }
[stages.compare]
inputs = { all = "probe[*].p" }
run = """
for d in {{ in.all.dir }}/*; do
  if [ -f "$d/p.txt" ]; then echo "$(basename $d) ran"; else echo "$(basename $d) $(grep -o '"status": "[a-z]*"' $d/status.json) $(grep -o "AttributeError[^\\"]*" $d/status.json)"; fi
done > {{ out.table }}
"""
outputs = { table = "table.txt" }
"#,
    );
    let r = p.run("p.toml", &[]).ok();
    assert!(r.stderr.contains("FAILED  work[precision=a16_w4]  AttributeError: 'function' object has no attribute 'set_wraparound_loss'"), "{}", r.stderr);
    let table = p.read("out/f/compare/table.txt");
    assert!(table.contains("precision=a16_w16 ran"), "{table}");
    assert!(table.contains("precision=a16_w4 \"status\": \"skipped\" AttributeError: 'function' object has no attribute 'set_wraparound_loss'"), "{table}");
    let show = p.heddle(&["show", "last", "--json"]).ok();
    let v: serde_json::Value = serde_json::from_str(&show.stdout).unwrap();
    let inst = v["instances"].as_array().unwrap();
    let failed = inst
        .iter()
        .find(|i| i[0] == "work[precision=a16_w4]")
        .unwrap();
    assert_eq!(failed[1]["status"]["status"], "failed");
    assert_eq!(failed[1]["status"]["error_class"], "AttributeError");
    assert_eq!(failed[1]["status"]["exit_code"], 1);
}

#[test]
fn a_failure_skips_its_cone_and_exits_1_keep_going_finishes_the_rest() {
    let p = Project::new();
    let log = p.log();
    p.file(
        "p.toml",
        &format!(
            r#"
[pipeline]
name = "k"
[stages.bad]
run = "echo doomed >&2; exit 3"
outputs = {{ o = "o" }}
[stages.after]
inputs = {{ i = "bad.o" }}
run = "{log}; cp {{{{ in.i }}}} {{{{ out.o }}}}"
outputs = {{ o = "o" }}
[stages.slow]
run = "sleep 0.5; {log}; echo > {{{{ out.o }}}}"
outputs = {{ o = "o" }}
"#
        ),
    );
    let r = p.run("p.toml", &["--keep-going"]).code(1);
    assert!(r.stderr.contains("bad FAILED exit code 3"), "{}", r.stderr);
    assert_eq!(p.ran(), ["slow"]);
    let show = p.heddle(&["show", "last", "--json"]).ok();
    let v: serde_json::Value = serde_json::from_str(&show.stdout).unwrap();
    let after = v["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i[0] == "after")
        .unwrap();
    assert_eq!(after[1]["status"]["status"], "skipped");
    assert_eq!(after[1]["status"]["cause"]["label"], "bad");
    let bad = v["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i[0] == "bad")
        .unwrap();
    assert!(bad[1]["status"]["stderr_tail"]
        .as_str()
        .unwrap()
        .contains("doomed"));
}

#[test]
fn timeout_kills_the_group_and_reports() {
    let p = Project::new();
    p.file(
        "p.toml",
        r#"
[pipeline]
name = "to"
[stages.hang]
run = "sleep 60 & echo $! > '__PID__'; wait"
timeout = "1s"
retries = 1
outputs = { o = "o" }
"#
        .replace("__PID__", &p.path("pid").display().to_string())
        .as_str(),
    );
    let t = std::time::Instant::now();
    let r = p.run("p.toml", &[]).code(1);
    assert!(r.stderr.contains("timed out after 1s"), "{}", r.stderr);
    assert!(
        r.stderr.contains("attempt 1 failed"),
        "retry announced: {}",
        r.stderr
    );
    assert!(t.elapsed().as_secs() < 30);
    let pid = p.read("pid").trim().to_string();
    assert!(!alive(&pid), "sleep {pid} survived");
}

#[test]
fn ctrl_c_stops_children_and_exits_130() {
    let p = Project::new();
    p.file(
        "p.toml",
        &r#"
[pipeline]
name = "int"
[stages.long]
run = "sleep 60 & echo $! > '__PID__'; wait"
outputs = { o = "o" }
"#
        .replace("__PID__", &p.path("pid").display().to_string()),
    );
    let child = p
        .cmd(&["run", "p.toml", "--progress", "plain"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pidfile = p.path("pid");
    let t = std::time::Instant::now();
    while !pidfile.exists() || std::fs::read_to_string(&pidfile).unwrap().trim().is_empty() {
        assert!(t.elapsed().as_secs() < 20, "stage never started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    unsafe {
        libc_kill(child.id() as i32, 2);
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pid = p.read("pid").trim().to_string();
    assert!(!alive(&pid), "sleep {pid} survived");
    let show = p.heddle(&["show", "last", "--json"]).ok();
    assert!(show.stdout.contains("\"interrupted\""), "{}", show.stdout);
    // An interrupted stage did not fail: it did not finish.
    let v: serde_json::Value = serde_json::from_str(&show.stdout).unwrap();
    assert_eq!(v["instances"][0][1]["status"]["status"], "skipped");
    assert_eq!(v["instances"][0][1]["status"]["error_class"], "Interrupted");
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

#[test]
fn kill_9_mid_run_leaves_a_clean_cache_and_the_next_run_completes() {
    let p = Project::new();
    let mut text = String::from("[pipeline]\nname = \"crash\"\n");
    for i in 0..40 {
        text.push_str(&format!(
            "[stages.s{i}]\nrun = \"head -c 200000 /dev/urandom > {{{{ out.o }}}}; sleep 0.05\"\noutputs = {{ o = \"o.bin\" }}\n"
        ));
    }
    p.file("p.toml", &text);
    let mut child = p
        .cmd(&["run", "p.toml", "--progress", "quiet", "-j", "2"])
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(700));
    child.kill().unwrap();
    child.wait().unwrap();
    let v = p.heddle(&["cache", "verify"]);
    assert_eq!(v.code, 0, "{}", v.all());
    assert!(v.stdout.contains("cache is clean"), "{}", v.stdout);
    p.run("p.toml", &[]).ok();
    for i in 0..40 {
        assert_eq!(
            std::fs::metadata(p.path(&format!("out/crash/s{i}/o.bin")))
                .unwrap()
                .len(),
            200000
        );
    }
    p.heddle(&["cache", "verify"]).ok();
}

#[test]
fn concurrent_runs_share_one_cache_and_compute_each_key_once() {
    let p = Project::new();
    let log = p.log();
    p.file(
        "p.toml",
        &format!(
            r#"
[pipeline]
name = "cc"
[stages.slow]
matrix = {{ i = [1, 2, 3, 4] }}
run = "{log}; sleep 0.4; echo {{{{ matrix.i }}}} > {{{{ out.o }}}}"
outputs = {{ o = "o.txt" }}
[stages.sum]
inputs = {{ all = "slow[*].o" }}
run = "cat {{{{ in.all }}}} > {{{{ out.s }}}}"
outputs = {{ s = "s.txt" }}
"#
        ),
    );
    let a = p
        .cmd(&["run", "p.toml", "--progress", "quiet"])
        .spawn()
        .unwrap();
    let b = p
        .cmd(&["run", "p.toml", "--progress", "quiet"])
        .spawn()
        .unwrap();
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    assert!(a.status.success() && b.status.success());
    assert_eq!(p.read("out/cc/sum/s.txt"), "1\n2\n3\n4\n");
    assert_eq!(p.ran().len(), 4, "each key computed once: {:?}", p.ran());
    p.heddle(&["cache", "verify"]).ok();
}

#[test]
fn runs_and_show_list_what_happened() {
    let p = chain_project();
    p.run("p.toml", &[]).ok();
    p.run("p.toml", &[]).ok();
    let runs = p.heddle(&["runs"]).ok();
    assert_eq!(runs.stdout.lines().count(), 2, "{}", runs.stdout);
    let show = p.heddle(&["show", "last"]).ok();
    assert!(show.stdout.contains("cached 4"), "{}", show.stdout);
    let j = p.heddle(&["show", "last", "--json"]).ok();
    let v: serde_json::Value = serde_json::from_str(&j.stdout).unwrap();
    assert_eq!(v["status"], "completed");
    let a = &v["instances"][0][1];
    assert_eq!(a["cache_key"].as_str().unwrap().len(), 64);
    assert!(a["inputs"]["src"].as_str().unwrap().len() == 64);
}

#[test]
fn cache_keys_do_not_depend_on_checkout_or_cache_dir() {
    let p1 = chain_project();
    let p2 = chain_project();
    let keys = |p: &Project| {
        let r = p.heddle(&["plan", "p.toml", "--json"]).ok();
        let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .map(|r| r["key"].clone())
            .collect::<Vec<_>>()
    };
    // The chain logs to a project-specific path, so compare a pipeline without one.
    let _ = (keys(&p1), keys(&p2));
    let text = "[pipeline]\nname = \"k\"\n[stages.a]\ninputs = { i = { path = \"d.txt\" } }\nrun = \"cat {{ in.i }} > {{ out.o }}\"\noutputs = { o = \"o\" }\n";
    p1.file("k.toml", text).file("d.txt", "same\n");
    p2.file("k.toml", text).file("d.txt", "same\n");
    let k1 = p1.heddle(&["plan", "k.toml", "--json"]).ok().stdout;
    let k2 = p2.heddle(&["plan", "k.toml", "--json"]).ok().stdout;
    assert_eq!(k1, k2);
}

#[test]
fn facts_a_stage_reports_land_in_the_run_record() {
    let p = Project::new();
    p.file(
        "p.toml",
        r#"
[pipeline]
name = "facts"
[stages.deploy]
run = "echo '{\"device\": {\"architecture\": \"HAILO10H\", \"firmware\": \"5.3.2\"}}' > \"$HEDDLE_FACTS_FILE\"; echo ok > {{ out.o }}"
outputs = { o = "o.txt" }
"#,
    );
    p.run("p.toml", &[]).ok();
    let show = p.heddle(&["show", "last", "--json"]).ok();
    let v: serde_json::Value = serde_json::from_str(&show.stdout).unwrap();
    assert_eq!(v["instances"][0][1]["facts"]["device"]["firmware"], "5.3.2");
}
