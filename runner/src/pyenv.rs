//! Python environments provisioned once per content and shared by every pipeline.
//!
//! An env lives at `<cache>/envs/<key>/` where the key hashes the requirements file's bytes and
//! the interpreter's name; its identity — the digest of the resolved package set (`pip freeze`)
//! and the interpreter version — is written to `heddle-env.json` and enters cache keys. Creation
//! happens under the cache's per-key lock, in place (venvs hard-code their path), and
//! `heddle-env.json` is written last: a folder without it is a crashed build and is rebuilt.

use std::path::{Path, PathBuf};
use std::process::Command;

use heddle_cache::{Digest, Store};
use serde::{Deserialize, Serialize};

use crate::model::EnvDef;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EnvInfo {
    pub name: String,
    pub dir: PathBuf,
    /// Digest of the resolved package set and interpreter version.
    pub identity: String,
    pub python_version: String,
    pub packages: Vec<String>,
}

impl EnvInfo {
    pub fn bin_dir(&self) -> PathBuf {
        if cfg!(windows) {
            self.dir.join("Scripts")
        } else {
            self.dir.join("bin")
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    #[error("failed to read requirements {}", path.display())]
    Requirements {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("failed to create python env `{env}`: `{command}` {detail}")]
    Create {
        env: String,
        command: String,
        detail: String,
    },
    #[error("failed to provision python env `{env}`")]
    Io { env: String, source: std::io::Error },
    #[error(transparent)]
    Cache(#[from] heddle_cache::CacheError),
}

fn env_key(def: &EnvDef) -> Result<Digest, EnvError> {
    let req = std::fs::read(&def.requirements).map_err(|source| EnvError::Requirements {
        path: def.requirements.clone(),
        source,
    })?;
    let mut bytes = b"heddle/env/v1\0".to_vec();
    bytes.extend_from_slice(def.python.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(&req);
    Ok(Digest::of_bytes(&bytes))
}

fn env_dir(store: &Store, key: &Digest) -> PathBuf {
    store.root().join("envs").join(key.to_string())
}

/// The env if it is already provisioned (cheap: one small file read).
pub fn lookup(store: &Store, def: &EnvDef) -> Result<Option<EnvInfo>, EnvError> {
    let dir = env_dir(store, &env_key(def)?);
    Ok(read_info(&dir).filter(|i| i.bin_dir().exists()))
}

fn read_info(dir: &Path) -> Option<EnvInfo> {
    let text = std::fs::read_to_string(dir.join("heddle-env.json")).ok()?;
    let mut info: EnvInfo = serde_json::from_str(&text).ok()?;
    info.dir = dir.to_path_buf();
    Some(info)
}

/// Provision the env if needed (blocking; run it on a blocking thread). `log` receives progress.
pub fn provision(store: &Store, def: &EnvDef, log: &dyn Fn(&str)) -> Result<EnvInfo, EnvError> {
    let key = env_key(def)?;
    let dir = env_dir(store, &key);
    if let Some(info) = read_info(&dir).filter(|i| i.bin_dir().exists()) {
        return Ok(info);
    }
    let lock_key = Digest::of_bytes(format!("heddle/env-lock/{key}").as_bytes());
    let _lock = store.lock_key(&lock_key)?;
    if let Some(info) = read_info(&dir).filter(|i| i.bin_dir().exists()) {
        return Ok(info);
    }
    let parent = dir.parent().expect("envs dir");
    std::fs::create_dir_all(parent).map_err(|source| io_error(def, source))?;
    // A half-built env from a crash is just removed.
    let _ = std::fs::remove_dir_all(&dir);
    let py = create(def, &dir, log)?;
    let info = describe(def, &py, &dir)?;
    write_info(def, &dir, &info)?;
    Ok(info)
}

fn io_error(def: &EnvDef, source: std::io::Error) -> EnvError {
    EnvError::Io {
        env: def.name.clone(),
        source,
    }
}

/// A venv in `dir` with the requirements installed; returns its python.
fn create(def: &EnvDef, dir: &Path, log: &dyn Fn(&str)) -> Result<PathBuf, EnvError> {
    log(&format!(
        "creating python env `{}` ({})",
        def.name,
        def.requirements.display()
    ));
    run(def, Command::new(&def.python).args(["-m", "venv"]).arg(dir))?;
    let py = if cfg!(windows) {
        dir.join("Scripts").join("python.exe")
    } else {
        dir.join("bin").join("python")
    };
    log(&format!(
        "installing {} into env `{}`",
        def.requirements.display(),
        def.name
    ));
    run(
        def,
        Command::new(&py)
            .args([
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--no-input",
                "-q",
                "-r",
            ])
            .arg(&def.requirements),
    )?;
    Ok(py)
}

/// What the env holds: its python version and frozen packages, and the identity they hash to.
fn describe(def: &EnvDef, py: &Path, dir: &Path) -> Result<EnvInfo, EnvError> {
    let freeze = output(def, Command::new(py).args(["-m", "pip", "freeze", "--all"]))?;
    let version = output(
        def,
        Command::new(py).args(["-c", "import sys; print(sys.version.split()[0])"]),
    )?;
    let mut packages: Vec<String> = freeze
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect();
    packages.sort();
    let identity =
        Digest::of_bytes(format!("python {}\n{}", version.trim(), packages.join("\n")).as_bytes())
            .to_string();
    Ok(EnvInfo {
        name: def.name.clone(),
        dir: dir.to_path_buf(),
        identity,
        python_version: version.trim().to_string(),
        packages,
    })
}

/// The marker that makes the env provisioned, written last and renamed into place.
fn write_info(def: &EnvDef, dir: &Path, info: &EnvInfo) -> Result<(), EnvError> {
    let io = |source| io_error(def, source);
    let marker = dir.join("heddle-env.json");
    let part = dir.join("heddle-env.json.part");
    std::fs::write(&part, serde_json::to_vec_pretty(info).expect("json")).map_err(io)?;
    std::fs::rename(&part, &marker).map_err(io)
}

fn run(def: &EnvDef, cmd: &mut Command) -> Result<(), EnvError> {
    let out = cmd.output().map_err(|e| EnvError::Create {
        env: def.name.clone(),
        command: format!("{cmd:?}"),
        detail: e.to_string(),
    })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err
            .lines()
            .rev()
            .take(15)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        return Err(EnvError::Create {
            env: def.name.clone(),
            command: format!("{cmd:?}"),
            detail: format!("exited with {}:\n{}", out.status, tail.join("\n")),
        });
    }
    Ok(())
}

fn output(def: &EnvDef, cmd: &mut Command) -> Result<String, EnvError> {
    let out = cmd.output().map_err(|e| EnvError::Create {
        env: def.name.clone(),
        command: format!("{cmd:?}"),
        detail: e.to_string(),
    })?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
