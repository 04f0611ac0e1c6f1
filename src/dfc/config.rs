//! `[dfc]` in `~/.config/heddle/config.toml` and `<project>/.heddle/config.toml`: where this
//! machine's Hailo Dataflow Compiler is, set once instead of on every command (README, "Bring
//! your DFC"). The project's file wins key by key over the user's; `--set` wins over both.
//!
//! ```toml
//! [dfc]
//! image  = "hailo_ai_sw_suite_2025-10:1"                  # (a) the suite image, as `docker load` named it
//! python = "/local/workspace/hailo_virtualenv/bin/python" #     its interpreter with hailo_sdk_client
//! user   = "hailo"                                        #     the user the suite's files belong to
//! wheel  = "hailo_dataflow_compiler-3.33.0-py3-none-linux_x86_64.whl"   # (b) an image heddle builds
//! base   = "nvidia/cuda:12.5.1-cudnn-runtime-ubuntu22.04" #     (b) the recipe's base image
//! run_on = "host"                                         # (c) with `wheel`: a host python env instead
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

/// A mistake in a `[dfc]` section: the file, line and column, and what to write instead.
#[derive(Debug, thiserror::Error)]
pub enum DfcConfigError {
    #[error("failed to read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}:{line}:{col}: {message}", path.display())]
    Invalid {
        path: PathBuf,
        line: usize,
        col: usize,
        message: String,
    },
}

#[derive(Deserialize, Default)]
struct ConfigFile {
    /// Other tables (`[cache]`) belong to other readers.
    #[serde(default)]
    dfc: Option<Section>,
}

#[derive(Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
struct Section {
    image: Option<Spanned<String>>,
    python: Option<Spanned<String>>,
    user: Option<Spanned<String>>,
    wheel: Option<Spanned<String>>,
    base: Option<Spanned<String>>,
    run_on: Option<Spanned<String>>,
}

/// One setting and the place it was written, for errors that point at it.
#[derive(Debug, Clone, PartialEq)]
pub struct Setting {
    pub value: String,
    pub at: String,
}

/// The merged `[dfc]` settings (each `None` when no file sets it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DfcConfig {
    pub image: Option<Setting>,
    pub python: Option<Setting>,
    pub user: Option<Setting>,
    /// Resolved: `~/` expanded, a relative path taken from the project root.
    pub wheel: Option<(PathBuf, String)>,
    pub base: Option<Setting>,
    pub run_on: Option<Setting>,
}

impl DfcConfig {
    pub fn is_empty(&self) -> bool {
        *self == DfcConfig::default()
    }
}

/// The config files, lowest precedence first (the same two `[cache]` is read from).
pub fn files(project_root: &Path, env: &dyn Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let user = env("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| Path::new(&h).join(".config")))
        .map(|dir| dir.join("heddle").join("config.toml"));
    user.into_iter()
        .chain([project_root.join(".heddle").join("config.toml")])
        .collect()
}

/// Read and merge `[dfc]` from `files` (a missing file is no settings).
pub fn load(
    files: &[PathBuf],
    project_root: &Path,
    home: Option<&Path>,
) -> Result<DfcConfig, DfcConfigError> {
    let mut out = DfcConfig::default();
    for path in files {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            // Absent, or in a folder this user cannot search (a stage run as another user
            // with the caller's HOME): there is nothing of this user's to read, as for the
            // remote's config layers.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound || !path.exists() => continue,
            Err(source) => {
                return Err(DfcConfigError::Read {
                    path: path.clone(),
                    source,
                })
            }
        };
        let invalid = |offset: usize, message: String| {
            let (line, col) = line_col(&text, offset);
            DfcConfigError::Invalid {
                path: path.clone(),
                line,
                col,
                message,
            }
        };
        let file: ConfigFile = toml::from_str(&text).map_err(|e| {
            let at = e.span().map(|s| s.start).unwrap_or(0);
            invalid(at, format!("[dfc]: {}", e.message().trim_end()))
        })?;
        let Some(s) = file.dfc else { continue };
        let setting = |v: Spanned<String>| {
            let (line, col) = line_col(&text, v.span().start);
            Setting {
                at: format!("{}:{line}:{col}", path.display()),
                value: v.into_inner(),
            }
        };
        if let Some(v) = &s.run_on {
            if !["container", "host"].contains(&v.get_ref().as_str()) {
                return Err(invalid(
                    v.span().start,
                    format!(
                        "[dfc] run_on must be \"container\" or \"host\", not {:?}",
                        v.get_ref()
                    ),
                ));
            }
        }
        for (slot, v) in [
            (&mut out.image, s.image),
            (&mut out.python, s.python),
            (&mut out.user, s.user),
            (&mut out.base, s.base),
            (&mut out.run_on, s.run_on),
        ] {
            if let Some(v) = v {
                *slot = Some(setting(v));
            }
        }
        if let Some(w) = s.wheel {
            let at = setting(w.clone()).at;
            out.wheel = Some((resolve_path(w.get_ref(), project_root, home), at));
        }
    }
    Ok(out)
}

/// `~/x` under the home folder; a relative path under the project root.
fn resolve_path(p: &str, root: &Path, home: Option<&Path>) -> PathBuf {
    if let (Some(rest), Some(h)) = (p.strip_prefix("~/"), home) {
        return h.join(rest);
    }
    root.join(p)
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.len() - before.rfind('\n').map(|i| i + 1).unwrap_or(0) + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, rel: &str, text: &str) -> PathBuf {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn the_project_file_wins_key_by_key_and_paths_resolve() {
        let d = tempfile::tempdir().unwrap();
        let user = write(
            d.path(),
            "user/config.toml",
            "[dfc]\nimage = \"u:1\"\nuser = \"hailo\"\n",
        );
        let project = write(
            d.path(),
            "p/.heddle/config.toml",
            "[cache]\nremote = \"file:///x\"\n[dfc]\nimage = \"p:1\"\nwheel = \"w/dfc.whl\"\n",
        );
        let c = load(&[user, project.clone()], &d.path().join("p"), None).unwrap();
        assert_eq!(c.image.unwrap().value, "p:1");
        assert_eq!(c.user.unwrap().value, "hailo");
        let (wheel, at) = c.wheel.unwrap();
        assert_eq!(wheel, d.path().join("p/w/dfc.whl"));
        assert_eq!(at, format!("{}:5:9", project.display()));
    }

    #[test]
    fn an_unknown_key_or_value_points_at_its_line() {
        let d = tempfile::tempdir().unwrap();
        let p = write(d.path(), "c.toml", "[dfc]\nimgae = \"x\"\n");
        let e = load(std::slice::from_ref(&p), d.path(), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!(
                "{}:2:1: [dfc]: unknown field `imgae`",
                p.display()
            )),
            "{e}"
        );
        let p = write(d.path(), "c.toml", "[dfc]\nrun_on = \"gpu\"\n");
        let e = load(std::slice::from_ref(&p), d.path(), None)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!(
                "{}:2:10: [dfc] run_on must be \"container\" or \"host\", not \"gpu\"",
                p.display()
            )
        );
    }
}
