//! The host executor through the real binary: commands that skip `sh` behave as they would
//! under it, commands too long for one argument still run, reused sandboxes start empty, and a
//! `kill -9` of heddle takes its running stages with it.

mod support;

use support::{alive, Project};

/// Shell-form commands run without `sh` when they need none; the result must be what `sh -c`
/// gives, including redirection order, appends, stdin, stderr and exit codes.
#[test]
fn commands_without_shell_syntax_behave_as_under_sh() {
    let p = Project::new();
    p.file("data/in.txt", "b\na\n").file(
        "p.toml",
        r#"
[pipeline]
name = "d"
[stages.sorted]
inputs = { f = { path = "data/in.txt" } }
run = "sort < {{ in.f }} > {{ out.o }}"
outputs = { o = "o.txt" }
[stages.both]
inputs = { f = "sorted.o" }
run = "ls {{ in.f }} /no/such/file > {{ out.o }} 2>&1"
outputs = { o = "o.txt" }
allow_failure = true
[stages.append]
inputs = { f = "sorted.o" }
run = "cat {{ in.f }} {{ in.f }} >> {{ out.o }} 2> err.txt"
outputs = { o = "o.txt" }
[stages.env]
run = "env > {{ out.o }}"
outputs = { o = "o.txt" }
[stages.missing]
run = "no-such-program-xyz > {{ out.o }}"
outputs = { o = "o.txt" }
allow_failure = true
"#,
    );
    let run = p.run("p.toml", &["--keep-going"]);
    assert_eq!(p.read("out/d/sorted/o.txt"), "a\nb\n");
    assert_eq!(p.read("out/d/append/o.txt"), "a\nb\na\nb\n");
    let rec = p.last_record();
    let inst = |l: &str| {
        rec["instances"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i[0] == l)
            .unwrap()[1]
            .clone()
    };
    // `ls` exits 2 for the missing file; its complaint went to the output file, not the log.
    assert_eq!(inst("both")["status"]["exit_code"], 2, "{}", run.all());
    // The program is not on PATH: sh reports it, exit 127, as before the fast path existed.
    assert_eq!(inst("missing")["status"]["exit_code"], 127, "{}", run.all());
    // Logs exist only for streams a stage wrote to: `sorted` printed nothing, sh complained
    // about `missing` on stderr.
    let log = |l: &str, i: usize| std::path::PathBuf::from(inst(l)["logs"][i].as_str().unwrap());
    assert!(!log("sorted", 0).exists() && !log("sorted", 1).exists());
    let complaint = std::fs::read_to_string(log("missing", 1)).unwrap();
    assert!(complaint.contains("no-such-program-xyz"), "{complaint}");
    let env = p.read("out/d/env/o.txt");
    assert!(env.contains("PWD="), "{env}");
    assert!(env.contains("HEDDLE_INSTANCE=env"), "{env}");
}

/// Linux caps one argument at 128 KiB; `sh -c` of a longer script must still run.
#[test]
fn a_shell_command_longer_than_one_argument_still_runs() {
    let p = Project::new();
    let long = "x".repeat(200_000);
    p.file(
        "p.toml",
        &format!(
            r#"
[pipeline]
name = "long"
[stages.s]
run = "printf '%s' '{long}' | wc -c > {{{{ out.o }}}}"
outputs = {{ o = "o.txt" }}
"#
        ),
    );
    p.run("p.toml", &[]).ok();
    assert_eq!(p.read("out/long/s/o.txt").trim(), "200000");
}

/// One sandbox serves one stage after another: nothing a stage leaves in `work/`, `in/` or
/// `out/` is visible to the next one, and nothing is left in scratch after the run.
#[test]
fn a_reused_sandbox_shows_the_next_stage_only_its_own_inputs() {
    let p = Project::new();
    p.file(
        "p.toml",
        r#"
[pipeline]
name = "r"
[stages.a]
run = "echo a > {{ out.o }}; echo junk > left-behind; mkdir -p ../in/extra"
outputs = { o = "o.txt" }
[stages.b]
inputs = { x = "a.o" }
run = "ls -A . ../in ../out > {{ out.o }}"
outputs = { o = "o.txt" }
"#,
    );
    p.run("p.toml", &["-j", "1"]).ok();
    // `work/` is empty, `in/` holds `x`, `out/` holds `o`.
    assert_eq!(p.read("out/r/b/o.txt"), ".:\n\n../in:\nx\n\n../out:\no\n");
    let scratch = p.cache.join("scratch");
    let left: Vec<_> = std::fs::read_dir(&scratch)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "scratch still holds {left:?}");
}

/// A heddle killed with SIGKILL cannot stop its stages itself; its watchdog must.
#[cfg(target_os = "linux")]
#[test]
fn kill_9_of_heddle_kills_the_running_stage_groups() {
    let p = Project::new();
    p.file(
        "p.toml",
        &r#"
[pipeline]
name = "orphans"
[stages.long]
run = "sleep 120 & echo $! > '__PID__'; wait"
outputs = { o = "o" }
"#
        .replace("__PID__", &p.path("pid").display().to_string()),
    );
    let mut child = p
        .cmd(&["run", "p.toml", "--progress", "quiet"])
        .spawn()
        .unwrap();
    let pidfile = p.path("pid");
    let t = std::time::Instant::now();
    while std::fs::read_to_string(&pidfile).map_or(true, |s| s.trim().is_empty()) {
        assert!(t.elapsed().as_secs() < 20, "stage never started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let pid = p.read("pid").trim().to_string();
    child.kill().unwrap();
    child.wait().unwrap();
    let t = std::time::Instant::now();
    while alive(&pid) {
        assert!(
            t.elapsed().as_secs() < 10,
            "the stage's `sleep` ({pid}) outlived heddle"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
