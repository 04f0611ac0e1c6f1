//! A team sharing a cache, for the trust and hostile-remote tests: engineers (projects with
//! their own caches and user config folders), a writer's signing key made by the real
//! `heddle cache keygen`, trust files, and a `file://` remote the tests can tamper with. The
//! entries a test crafts are signed with the writer's own key file through heddle-remote,
//! as a careless or hostile teammate holding a trusted key would.
#![allow(dead_code)]

pub mod loopback;

use std::path::{Path, PathBuf};
use std::process::Command;

use heddle_cache::{ActionEntry, Digest};
use heddle_remote::SigningKey;

use crate::support::{instance, Project, Run};

/// Two stages, a file and a folder output (tests/fixtures/remote_cache/shared.toml).
pub const PIPELINE: &str = include_str!("../fixtures/remote_cache/shared.toml");

/// One engineer with the shared pipeline at `pipelines/shared.toml`.
pub fn engineer() -> Project {
    let p = Project::new();
    p.file("pipelines/shared.toml", PIPELINE);
    p
}

/// A shared cache in a folder, as on NFS: what a test tampers with.
pub struct Remote {
    pub dir: tempfile::TempDir,
    pub url: String,
}

pub fn remote() -> Remote {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().display());
    Remote { dir, url }
}

impl Remote {
    pub fn entry_path(&self, key: &Digest) -> PathBuf {
        self.dir.path().join(format!("ac/{key}.json"))
    }

    pub fn blob_path(&self, digest: &Digest) -> PathBuf {
        self.dir.path().join(format!("cas/{digest}"))
    }

    /// The entry for `key` as the remote holds it, signature aside.
    pub fn entry(&self, key: &Digest) -> ActionEntry {
        serde_json::from_slice(&std::fs::read(self.entry_path(key)).unwrap()).unwrap()
    }

    /// Replace the entry for its key with `entry` signed by `key` (what a writer holding a
    /// trusted key can always do).
    pub fn put_signed(&self, entry: &ActionEntry, key: &SigningKey) {
        let path = self.entry_path(&entry.key);
        let _ = std::fs::remove_file(&path);
        std::fs::write(path, heddle_remote::signed_entry_json(entry, key).unwrap()).unwrap();
    }
}

/// `heddle ARGS` in `p` against `remote`, with `env` added.
pub fn cmd(p: &Project, url: &str, env: &[(&str, &str)], args: &[&str]) -> Command {
    let mut c = p.cmd(args);
    c.env("HEDDLE_REMOTE_CACHE", url);
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

pub fn heddle(p: &Project, url: &str, env: &[(&str, &str)], args: &[&str]) -> Run {
    cmd(p, url, env, args).output().unwrap().into()
}

/// A reader's run (the default mode, read).
pub fn read_run(p: &Project, url: &str, env: &[(&str, &str)]) -> Run {
    heddle(p, url, env, &["run", "--progress", "plain"])
}

/// A writer's run: readwrite mode, signed with the key `keygen` made in `p`.
pub fn write_run(p: &Project, url: &str) -> Run {
    heddle(
        p,
        url,
        &[("HEDDLE_REMOTE_CACHE_MODE", "readwrite")],
        &["run", "--progress", "plain"],
    )
}

/// `heddle cache keygen --name NAME` in `p` (the key goes to p's user config folder); the
/// trust line it prints.
pub fn keygen(p: &Project, name: &str) -> String {
    let r = p.heddle(&["cache", "keygen", "--name", name]).ok();
    r.stdout.lines().last().unwrap().to_string()
}

/// Where `keygen` put `p`'s key.
pub fn key_file(p: &Project) -> PathBuf {
    p.path(".user-config/signing.key")
}

pub fn signing_key(p: &Project) -> SigningKey {
    SigningKey::load(&key_file(p)).unwrap()
}

/// `p`'s project trust file lists `lines`, and the user trusts the project (a project's
/// trusted-writers counts only then, docs/scale-out.md).
pub fn trust(p: &Project, lines: &[&str]) {
    p.file(
        ".heddle/trusted-writers",
        &format!("{}\n", lines.join("\n")),
    );
    p.trust();
}

/// A writer (alice, with a key) and a reader trusting her, after alice's run filled `remote`.
pub fn team(remote: &Remote) -> (Project, Project, String) {
    let alice = engineer();
    let line = keygen(&alice, "alice");
    write_run(&alice, &remote.url).ok();
    let bob = engineer();
    trust(&bob, &[&line]);
    (alice, bob, line)
}

/// The cache key of instance `label` in `p`'s last run.
pub fn key_of(p: &Project, label: &str) -> Digest {
    instance(&p.last_record(), label)["cache_key"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// (cached, remote) of instance `label` in `p`'s last run.
pub fn served(p: &Project, label: &str) -> (bool, bool) {
    let rec = p.last_record();
    let i = instance(&rec, label);
    (
        i["cached"].as_bool().unwrap_or(false),
        i["remote"].as_bool().unwrap_or(false),
    )
}

/// The lines of `text` that are warnings about the remote cache.
pub fn remote_warnings(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.starts_with("warning: remote cache"))
        .collect()
}

/// Every regular file under `dir`.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}
