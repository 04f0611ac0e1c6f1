//! A temp project (its own folder, `.heddle/` and cache) and the real `heddle` binary run in it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

pub struct Project {
    pub dir: tempfile::TempDir,
    pub cache: PathBuf,
}

/// What one `heddle` invocation did.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn ok(self) -> Run {
        assert_eq!(
            self.code, 0,
            "expected success\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }
    pub fn code(self, code: i32) -> Run {
        assert_eq!(
            self.code, code,
            "expected exit {code}\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }
    pub fn all(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }

    /// The line of this `heddle plan` output that is about instance `label` (its second word).
    pub fn plan_line(&self, label: &str) -> &str {
        self.stdout
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(label))
            .unwrap_or_else(|| panic!("no plan line for {label}:\n{}", self.stdout))
    }
}

impl From<Output> for Run {
    fn from(o: Output) -> Run {
        Run {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_heddle")
}

/// The repository this test binary was built from.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

impl Project {
    /// A project folder (with `.heddle/`) and a cache dir inside it.
    pub fn new() -> Project {
        let p = Project::empty();
        std::fs::create_dir_all(p.path(".heddle")).unwrap();
        p
    }

    /// An empty folder, as before `heddle init`.
    pub fn empty() -> Project {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        Project { dir, cache }
    }

    /// A project whose `p.toml` is `pipeline`.
    pub fn with_pipeline(pipeline: &str) -> Project {
        let p = Project::new();
        p.file("p.toml", pipeline);
        p
    }

    /// A project whose `.heddle/hosts.toml` (the engines stages may be placed on) is `hosts`,
    /// trusted (`heddle trust`) so its engines are used.
    pub fn with_hosts(hosts: &str) -> Project {
        let p = Project::new();
        p.file(".heddle/hosts.toml", hosts);
        p.trust();
        p
    }

    /// `heddle trust`: the project's `.heddle/config.toml` and `hosts.toml`, as they are now,
    /// may choose the remote cache and the engines.
    pub fn trust(&self) -> &Project {
        let r = self.heddle(&["trust"]).ok();
        assert!(r.stdout.starts_with("trusted "), "{}", r.stdout);
        self
    }

    /// A project whose `p.toml` is `pipeline` with every `__LOG__` replaced by the snippet of
    /// [`Project::log`], so the text needs no `format!` (and no doubled braces).
    pub fn with_logged_pipeline(pipeline: &str) -> Project {
        let p = Project::new();
        p.file("p.toml", &pipeline.replace("__LOG__", &p.log()));
        p
    }

    /// A temp project holding copies of these repository paths (e.g. `stages`,
    /// `pipelines/x.toml`), so a test runs the real stage library without writing into the
    /// repository's out/.
    pub fn from_repo(paths: &[&str]) -> Project {
        let p = Project::new();
        for rel in paths {
            copy_tree(&repo_root().join(rel), &p.path(rel));
        }
        p
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn file(&self, rel: &str, text: &str) -> &Project {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
        self
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
    }

    /// `heddle ARGS` in this project with its cache, not yet started.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(bin());
        c.current_dir(self.root())
            .env("HEDDLE_CACHE_DIR", &self.cache)
            // The user's own hosts.toml (remote engines) must not place a test's stages.
            .env("HEDDLE_CONFIG_DIR", self.path(".user-config"))
            .args(args);
        c
    }

    pub fn heddle(&self, args: &[&str]) -> Run {
        self.cmd(args).output().unwrap().into()
    }

    /// `heddle run --progress plain` with extra args.
    pub fn run(&self, pipeline: &str, extra: &[&str]) -> Run {
        let mut args = vec!["run", pipeline, "--progress", "plain"];
        args.extend_from_slice(extra);
        self.heddle(&args)
    }

    /// `heddle run PIPELINE --progress plain EXTRA…` started in the background, its output
    /// discarded: for tests that signal or kill it.
    pub fn spawn_run(&self, pipeline: &str, extra: &[&str]) -> Child {
        let mut args = vec!["run", pipeline, "--progress", "plain"];
        args.extend_from_slice(extra);
        self.cmd(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }

    /// `heddle show last --json`, parsed.
    pub fn last_record(&self) -> serde_json::Value {
        let r = self.heddle(&["show", "last", "--json"]).ok();
        serde_json::from_str(&r.stdout)
            .unwrap_or_else(|e| panic!("show last --json: {e}\n{}", r.stdout))
    }

    /// `heddle cache verify` passes and says the cache is clean.
    pub fn assert_cache_clean(&self) {
        let verify = self.heddle(&["cache", "verify"]).ok();
        assert!(
            verify.stdout.contains("cache is clean"),
            "{}",
            verify.stdout
        );
    }

    /// Lines appended by stages to the side-effect log `ran.log`, sorted.
    pub fn ran(&self) -> Vec<String> {
        let p = self.path("ran.log");
        let mut v: Vec<String> = std::fs::read_to_string(&p)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect();
        v.sort();
        v
    }

    pub fn clear_ran(&self) {
        let _ = std::fs::remove_file(self.path("ran.log"));
    }

    /// Shell snippet that appends the running instance's label to the side-effect log.
    pub fn log(&self) -> String {
        // Escaped quotes: the snippet goes inside a TOML basic string.
        format!(
            "echo \\\"$HEDDLE_INSTANCE\\\" >> '{}'",
            self.path("ran.log").display()
        )
    }

    /// Writes `p.toml`: one stage `long` whose shell starts a `sleep` in the background, writes
    /// its pid to the returned file and waits for it; `extra` adds keys to the stage (e.g. a
    /// timeout). For tests that check the stage's processes end with it.
    pub fn sleeper(&self, extra: &str) -> PathBuf {
        let pidfile = self.path("pid");
        self.file(
            "p.toml",
            &format!(
                "[pipeline]\nname = \"sleeper\"\n[stages.long]\nrun = \"sleep 300 & echo $! > '{}'; wait\"\noutputs = {{ o = \"o\" }}\n{extra}\n",
                pidfile.display()
            ),
        );
        pidfile
    }

    /// Folders left in the cache's scratch/ (a finished or cleaned-up run leaves none).
    pub fn scratch_entries(&self) -> Vec<String> {
        std::fs::read_dir(self.cache.join("scratch"))
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Copy a file or folder tree (skipping `__pycache__` and `.pyc`) from `from` to `to`.
pub fn copy_tree(from: &Path, to: &Path) {
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            let name = e.file_name();
            let n = name.to_string_lossy();
            if n == "__pycache__" || n.ends_with(".pyc") {
                continue;
            }
            copy_tree(&e.path(), &to.join(&name));
        }
    } else {
        if let Some(p) = to.parent() {
            std::fs::create_dir_all(p).unwrap();
        }
        std::fs::copy(from, to).unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
    }
}

/// `template` with each `__NAME__` replaced by the value of `NAME` in `vars`: how a pipeline kept
/// as a fixture file names its run-time parts (paths, image names, commands).
pub fn fill(template: &str, vars: &[(&str, &str)]) -> String {
    vars.iter()
        .fold(template.to_string(), |text, (name, value)| {
            text.replace(&format!("__{name}__"), value)
        })
}
