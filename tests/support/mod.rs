//! A small fluent harness over a temp project and the real `heddle` binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub struct Project {
    pub dir: tempfile::TempDir,
    pub cache: PathBuf,
}

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

impl Project {
    pub fn new() -> Project {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".heddle")).unwrap();
        let cache = dir.path().join("cache");
        Project { dir, cache }
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

    /// Lines appended by stages to the side-effect log `ran.log`.
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
}

/// The repository this test binary was built from.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
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

impl Project {
    /// A temp project holding copies of these repository paths (e.g. `stages`, `pipelines/x.toml`),
    /// so a test runs the real stage library without writing into the repository's out/.
    pub fn from_repo(paths: &[&str]) -> Project {
        let p = Project::new();
        for rel in paths {
            copy_tree(&repo_root().join(rel), &p.path(rel));
        }
        p
    }

    /// `heddle show last --json`, parsed.
    pub fn last_record(&self) -> serde_json::Value {
        let r = self.heddle(&["show", "last", "--json"]).ok();
        serde_json::from_str(&r.stdout)
            .unwrap_or_else(|e| panic!("show last --json: {e}\n{}", r.stdout))
    }
}

/// A process is alive when /proc has it and it is not a zombie (this machine's PID 1 does not
/// reap orphans, so a killed orphan lingers as a zombie).
pub fn alive(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

/// The record of one instance (by label) in a run record (`heddle show last --json`).
pub fn instance<'a>(record: &'a serde_json::Value, label: &str) -> &'a serde_json::Value {
    record["instances"]
        .as_array()
        .and_then(|all| all.iter().find(|i| i[0] == label))
        .map(|i| &i[1])
        .unwrap_or_else(|| panic!("no instance {label} in the run record:\n{record:#}"))
}

/// The local engine exposed on 127.0.0.1 over TCP (a byte proxy to its unix socket), as a
/// remote engine would be: heddle cannot bind-mount there, so the sandbox goes through the
/// archive API. Returns the `tcp://` address; the proxy lives as long as the test process.
#[cfg(unix)]
pub fn engine_over_tcp() -> String {
    use std::os::unix::net::UnixStream;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            let Ok(unix) = UnixStream::connect("/var/run/docker.sock") else {
                continue;
            };
            let (mut t2, mut u2) = (tcp.try_clone().unwrap(), unix.try_clone().unwrap());
            let (mut t1, mut u1) = (tcp, unix);
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut t1, &mut u1);
                let _ = u1.shutdown(std::net::Shutdown::Write);
            });
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut u2, &mut t2);
                let _ = t2.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    format!("tcp://{addr}")
}
