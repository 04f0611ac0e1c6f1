//! Secrets are never stored: a `secret_env` value reaches the stage and nothing heddle writes,
//! `pass_env` and `vars` values enter the key as digests, and a `pass_env` name that looks
//! like a secret is refused. Checked with canary values against every file under the project
//! and the cache and everything every command printed.

use std::path::Path;

use crate::support::{assert_contains, assert_lacks, instance, Project, Run};

const SECRET: &str = "canary-secret-3f9a1c";
const PASSED: &str = "canary-passenv-77b2e";
const VAR: &str = "canary-vars-5d1e0";

const PIPELINE: &str = r#"[pipeline]
name = "s"

[stages.use]
secret_env = ["HEDDLE_TEST_TOKEN"]
pass_env = ["HEDDLE_TEST_PASSED"]
vars = { MODE = "canary-vars-5d1e0" }
run = '''
echo "token $HEDDLE_TEST_TOKEN"
echo "err $HEDDLE_TEST_TOKEN" >&2
printf '{"device": "%s"}' "$HEDDLE_TEST_TOKEN" > "$HEDDLE_FACTS_FILE"
printf %s "$HEDDLE_TEST_TOKEN" | wc -c | tr -d ' ' > {{ out.len }}
printf %s "$HEDDLE_TEST_PASSED$MODE" | wc -c | tr -d ' ' >> {{ out.len }}
echo "| k | n |" > {{ out.table }}
echo "|---|---|" >> {{ out.table }}
echo "| a | 1 |" >> {{ out.table }}
'''
outputs = { len = "len.txt", table = "table.md" }
report = true

[stages.fails]
secret_env = ["HEDDLE_TEST_TOKEN"]
allow_failure = true
run = '''
echo "RuntimeError: bad token $HEDDLE_TEST_TOKEN" >&2
printf '{"class": "TokenError%s", "message": "token %s"}' "$HEDDLE_TEST_TOKEN" "$HEDDLE_TEST_TOKEN" > "$HEDDLE_ERROR_FILE"
exit 3
'''

[stages.leaks]
secret_env = ["HEDDLE_TEST_TOKEN"]
allow_failure = true
run = "echo x $HEDDLE_TEST_TOKEN y > {{ out.o }}"
outputs = { o = "o.txt" }
"#;

/// `heddle ARGS` with the canaries in the environment, and heddle's own debug log on.
fn heddle(p: &Project, args: &[&str], secret: &str, passed: &str) -> Run {
    p.cmd(args)
        .env("HEDDLE_LOG", "debug")
        .env("HEDDLE_TEST_TOKEN", secret)
        .env("HEDDLE_TEST_PASSED", passed)
        .output()
        .unwrap()
        .into()
}

/// Every file under `dir` (links not followed) whose bytes hold `needle`, but `skip`.
fn files_holding(dir: &Path, needle: &str, skip: &Path, found: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let path = e.path();
        let ft = e.file_type().unwrap();
        if ft.is_dir() {
            files_holding(&path, needle, skip, found);
        } else if ft.is_file() && path != skip {
            let bytes = std::fs::read(&path).unwrap_or_default();
            if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                found.push(path.display().to_string());
            }
        }
    }
}

#[test]
fn secrets_and_variable_values_are_stored_nowhere() {
    let p = Project::with_pipeline(PIPELINE);
    let remote = p.path("shared-remote");
    std::fs::create_dir_all(&remote).unwrap();
    let remote_flag = format!("--remote-cache=file://{}", remote.display());
    let mut printed = String::new();
    let mut keep = |r: Run| {
        printed.push_str(&r.stdout);
        printed.push_str(&r.stderr);
        r
    };

    let run = keep(heddle(
        &p,
        &["run", "p.toml", "--progress", "plain", &remote_flag],
        SECRET,
        PASSED,
    ));
    // The stage got the value (its length), and its log shows `***` in its place.
    assert_eq!(
        p.read("out/s/use/len.txt"),
        format!("{}\n{}\n", SECRET.len(), PASSED.len() + VAR.len())
    );
    let rec = p.last_record();
    let logs = instance(&rec, "use")["logs"].as_array().unwrap().clone();
    let out_log = std::fs::read_to_string(logs[0].as_str().unwrap()).unwrap();
    assert_eq!(out_log, "token ***\n");
    let err_log = std::fs::read_to_string(logs[1].as_str().unwrap()).unwrap();
    assert_eq!(err_log, "err ***\n");
    assert_eq!(instance(&rec, "use")["facts"]["device"], "***");
    let fails = &instance(&rec, "fails")["status"];
    assert_eq!(fails["error"], "TokenError***: token ***");
    assert_eq!(fails["error_class"], "TokenError***");
    let leaks = &instance(&rec, "leaks")["status"];
    assert_eq!(leaks["error_class"], "SecretInOutput");
    assert_eq!(
        leaks["error"],
        "output `o` holds the value of a `secret_env` variable (HEDDLE_TEST_TOKEN); it is not stored"
    );
    assert!(
        !p.path("out/s/leaks/o.txt").exists(),
        "a leaking output is not materialised"
    );
    assert_contains(&run.stderr, "FAILED");

    // A changed secret reruns nothing; a changed `pass_env` value does, by name only.
    let plan = keep(heddle(
        &p,
        &["plan", "p.toml"],
        "another-secret-value",
        PASSED,
    ))
    .ok();
    assert_contains(&plan.stdout, "cached  use");
    let plan = keep(heddle(
        &p,
        &["plan", "p.toml"],
        SECRET,
        "another-passed-value",
    ))
    .ok();
    assert_contains(&plan.stdout, "variable $HEDDLE_TEST_PASSED changed");

    // Every command that prints or writes what a run left.
    for args in [
        &["plan", "p.toml", "--json"][..],
        &["status", "p.toml"],
        &["status", "p.toml", "--json"],
        &["lock", "p.toml"],
        &["show"],
        &["show", "--json"],
        &["runs"],
        &["runs", "--json"],
        &["dag", "p.toml"],
        &["logbook", "new", "-o", "logbook/e.md"],
        &["report", "-o", "report.html"],
        &["cache", "du"],
        &["cache", "verify"],
    ] {
        keep(heddle(&p, args, SECRET, PASSED));
    }
    keep(heddle(&p, &["cache", "push", &remote_flag], SECRET, PASSED));
    keep(heddle(
        &p,
        &["run", "p.toml", "--progress", "plain", "--force", "use"],
        SECRET,
        PASSED,
    ));
    keep(heddle(&p, &["diff"], SECRET, PASSED));
    keep(heddle(&p, &["diff", "--json"], SECRET, PASSED));
    keep(heddle(
        &p,
        &["logbook", "verify", "logbook/e.md"],
        SECRET,
        PASSED,
    ));

    assert_lacks(&printed, SECRET);
    assert_lacks(&printed, PASSED);
    assert_lacks(&printed, VAR);
    let pipeline = p.path("p.toml");
    for canary in [SECRET, PASSED, VAR] {
        let mut found = Vec::new();
        files_holding(p.root(), canary, &pipeline, &mut found);
        assert_eq!(found, Vec::<String>::new(), "{canary} is stored");
    }
    // What was checked is there: the lock, the records, the remote's entries, the logs.
    assert!(p.path("p.lock").is_file());
    assert!(p.path("logbook/e.md").is_file());
    assert!(std::fs::read_dir(&remote).unwrap().next().is_some());
    assert_contains(&p.read("p.lock"), "sha256");
}

/// `pass_env` with a name that looks like a credential is refused where it is written, with
/// the way to pass it instead.
#[test]
fn a_secret_looking_pass_env_name_is_refused() {
    let p = Project::with_pipeline(
        "[pipeline]\nname = \"s\"\n[defaults]\npass_env = [\"HOME\", \"aws_region\"]\n[stages.a]\npass_env = [\"GITHUB_TOKEN\"]\nrun = \"true\"\n[stages.b]\nrun = \"true\"\nsecret_env = [\"HOME\", \"X Y\"]\n",
    );
    let r = p.heddle(&["plan", "p.toml"]).code(2);
    assert_eq!(
        r.stderr.replace(&p.root().display().to_string(), "[PROJECT]"),
        "error: `aws_region` looks like a secret: a `pass_env` value enters the cache key, the lock file and the run record
  --> p.toml:4:21
  |
4 | pass_env = [\"HOME\", \"aws_region\"]
  |                     ^^^^^^^^^^^^
  = help: pass it with `secret_env = [\"aws_region\"]`: the stage gets the value and heddle stores it nowhere

error: `GITHUB_TOKEN` looks like a secret: a `pass_env` value enters the cache key, the lock file and the run record
  --> p.toml:6:13
  |
6 | pass_env = [\"GITHUB_TOKEN\"]
  |             ^^^^^^^^^^^^^^
  = help: pass it with `secret_env = [\"GITHUB_TOKEN\"]`: the stage gets the value and heddle stores it nowhere

error: `HOME` is in both `pass_env` and `secret_env`
  --> p.toml:10:15
   |
10 | secret_env = [\"HOME\", \"X Y\"]
   |               ^^^^^^
  = help: a secret is passed by `secret_env` alone

error: `secret_env` entry `X Y` is not a variable name
  --> p.toml:10:23
   |
10 | secret_env = [\"HOME\", \"X Y\"]
   |                       ^^^^^

4 errors
"
    );
}
