//! Which of the three routes to a real DFC the `[dfc]` settings choose, and what each does to a
//! loaded pipeline (README, "Bring your DFC"):
//!
//! - (a) `image`: the AI Software Suite image the user loaded; its `python` and `user`.
//! - (b) `wheel`: an image heddle builds from the recipe in the stage library
//!   (`stages/dfc/image/Dockerfile`) with the wheel in its context, tagged by the wheel's and the
//!   recipe's sha256 ([`super::recipe`]); its id then enters every DFC stage's key.
//! - (c) `wheel` + `run_on = "host"`: the DFC stages run on the host, in a python env heddle
//!   provisions from the wheel (its resolved package set enters their keys).
//!
//! The DFC stages are the container stages whose image is the pipeline's `dfc_image` param,
//! written in the stage (`image = "{{ params.dfc_image }}"`) or passed to a definition's image
//! param (`with = { image = "{{ params.dfc_image }}" }`, as every `dfc/*` stage is used). Routes
//! (a) and (b) set `dfc_image` and `dfc_python` as a `--set` would, for pipelines that declare
//! them; `--set` still wins.

use std::path::{Path, PathBuf};

use heddle_runner::model::{EnvDef, Pipeline, Stage, WithValue};
use heddle_runner::template::Template;

use super::config::{DfcConfig, Setting};

/// Where the README explains the routes; every "no DFC" message names it.
pub const DOCS: &str = "README.md, section \"Bring your DFC\"";

/// The env route (c) provisions; a pipeline may not declare its own env of that name.
pub const HOST_ENV: &str = "hailo-dfc";

#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    #[error("{at}: [dfc] sets both `image` (route a) and `wheel` (routes b and c); keep one")]
    Both { at: String },
    #[error("{at}: [dfc] run_on = \"host\" needs `wheel` (the DFC wheel the host env installs)")]
    HostWithoutWheel { at: String },
    #[error(
        "{at}: [dfc] `{key}` has no effect with run_on = \"host\" (the DFC stages run on the host)"
    )]
    NotOnHost { key: &'static str, at: String },
    #[error("{at}: [dfc] wheel {} does not exist", path.display())]
    NoWheel { path: PathBuf, at: String },
    #[error("failed to read the DFC wheel {}", path.display())]
    ReadWheel {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{at}: [dfc] wheel `{name}` is not a wheel file name (NAME-VERSION-...-PLATFORM.whl)")]
    WheelName { name: String, at: String },
    #[error("failed to write {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the pipeline declares its own env `{HOST_ENV}`, the name [dfc] run_on = \"host\" uses; rename it"
    )]
    EnvClash,
    #[error("{}", absent_message(stages))]
    Absent { stages: Vec<String> },
}

/// The "no DFC configured" error: what is missing, the three routes and where they are explained.
fn absent_message(stages: &[String]) -> String {
    format!(
        "no Hailo Dataflow Compiler configured for the DFC stages ({}): `dfc_image` is empty\n  \
         bring your DFC one of three ways, in .heddle/config.toml (or ~/.config/heddle/config.toml):\n  \
         (a) the AI Software Suite image you loaded:  [dfc] image = \"hailo_ai_sw_suite_2025-10:1\"  \
         (and python = \"/local/workspace/hailo_virtualenv/bin/python\", user = \"hailo\")\n  \
         (b) the DFC wheel, in an image heddle builds:  [dfc] wheel = \"hailo_dataflow_compiler-<version>-py3-none-linux_x86_64.whl\"\n  \
         (c) the DFC wheel, in a python env on this host:  [dfc] wheel = \"...\" and run_on = \"host\"\n  \
         or once: --set dfc_image=IMAGE. `heddle init --example compile-onnx-dfc --dfc-image|--dfc-wheel ...` writes \
         the config; see {DOCS}",
        stages.join(", ")
    )
}

/// The route chosen, with what it needs.
#[derive(Debug, Clone, PartialEq)]
pub enum Route {
    /// No `[dfc]`: the pipeline's own `dfc_image` (or `--set`), if any.
    Unset,
    Image {
        image: String,
        python: Option<String>,
        user: Option<String>,
    },
    WheelImage(super::recipe::Recipe),
    HostEnv {
        wheel: PathBuf,
        /// The generated requirements file the env is provisioned from.
        requirements: PathBuf,
    },
}

impl Route {
    /// Decide the route from the merged settings, hashing a wheel (route b's tag) and writing
    /// route (c)'s requirements file under `<root>/.heddle/dfc/`.
    pub fn resolve(c: &DfcConfig, root: &Path) -> Result<Route, RouteError> {
        if c.is_empty() {
            return Ok(Route::Unset);
        }
        let host = c.run_on.as_ref().filter(|r| r.value == "host");
        if let (Some(_), Some((_, at))) = (&c.image, &c.wheel) {
            return Err(RouteError::Both { at: at.clone() });
        }
        let Some((wheel, at)) = &c.wheel else {
            if let Some(h) = host {
                return Err(RouteError::HostWithoutWheel { at: h.at.clone() });
            }
            let image = c
                .image
                .as_ref()
                .map(|s| s.value.clone())
                .unwrap_or_default();
            return Ok(Route::Image {
                image,
                python: value(&c.python),
                user: value(&c.user),
            });
        };
        if !wheel.is_file() {
            return Err(RouteError::NoWheel {
                path: wheel.clone(),
                at: at.clone(),
            });
        }
        let (name, version) = wheel_name_version(wheel).ok_or_else(|| RouteError::WheelName {
            name: wheel
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            at: at.clone(),
        })?;
        let digest = super::recipe::file_sha256(wheel).map_err(|source| RouteError::ReadWheel {
            path: wheel.clone(),
            source,
        })?;
        if host.is_some() {
            for (key, s) in [("user", &c.user), ("base", &c.base), ("image", &c.image)] {
                if let Some(s) = s {
                    return Err(RouteError::NotOnHost {
                        key,
                        at: s.at.clone(),
                    });
                }
            }
            let requirements = host_requirements(root, wheel, &name, &version, &digest)?;
            return Ok(Route::HostEnv {
                wheel: wheel.clone(),
                requirements,
            });
        }
        Ok(Route::WheelImage(super::recipe::Recipe::new(
            wheel.clone(),
            digest,
            value(&c.base),
            value(&c.python),
        )))
    }

    /// Param values this route sets (as `--set` would), for the params `declared`.
    pub fn overrides(&self, declared: &[String]) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let (image, python) = match self {
            Route::Unset => return out,
            Route::Image { image, python, .. } => (Some(image.clone()), python.clone()),
            Route::WheelImage(r) => (Some(r.tag()), r.python.clone()),
            // On the host the env's bin/ comes first on PATH: its python3 has the DFC.
            Route::HostEnv { .. } => (None, Some("python3".into())),
        };
        for (k, v) in [("dfc_image", image), ("dfc_python", python)] {
            if let Some(v) = v.filter(|v| !v.is_empty()) {
                if declared.iter().any(|d| d == k) {
                    out.push((k.to_string(), v));
                }
            }
        }
        out
    }

    /// What the route changes in the loaded pipeline: route (a)'s user on each DFC stage;
    /// route (c) moves each DFC stage to the host, in the env it provisions. Then, with no route
    /// and an empty `dfc_image`, the error that names the routes.
    pub fn apply(&self, p: &mut Pipeline) -> Result<(), RouteError> {
        let dfc: Vec<usize> = (0..p.stages.len())
            .filter(|&i| is_dfc_stage(&p.stages[i]))
            .collect();
        if dfc.is_empty() {
            return Ok(());
        }
        match self {
            Route::Image {
                user: Some(user), ..
            } => {
                for &i in &dfc {
                    if let Some(c) = p.stages[i].container.as_mut() {
                        c.user.get_or_insert_with(|| user.clone());
                    }
                }
            }
            Route::HostEnv { requirements, .. } => {
                if p.envs.contains_key(HOST_ENV) {
                    return Err(RouteError::EnvClash);
                }
                p.envs.insert(
                    HOST_ENV.to_string(),
                    EnvDef {
                        name: HOST_ENV.to_string(),
                        requirements: requirements.clone(),
                        python: "python3".into(),
                    },
                );
                for &i in &dfc {
                    let s = &mut p.stages[i];
                    s.container = None;
                    s.settings.env = Some(HOST_ENV.to_string());
                }
            }
            _ => {}
        }
        let empty = p
            .params
            .get("dfc_image")
            .is_some_and(|v| v.as_str().is_some_and(|s| s.trim().is_empty()));
        if empty && !matches!(self, Route::HostEnv { .. }) {
            return Err(RouteError::Absent {
                stages: dfc.iter().map(|&i| p.stages[i].name.clone()).collect(),
            });
        }
        Ok(())
    }
}

fn value(s: &Option<Setting>) -> Option<String> {
    s.as_ref().map(|s| s.value.clone())
}

/// Whether the stage's container image is the pipeline's `dfc_image` param, directly or through
/// a definition param its `with` fills from it.
pub fn is_dfc_stage(s: &Stage) -> bool {
    let Some(c) = &s.container else {
        return false;
    };
    let names_dfc_image = |t: &Template| t.vars().any(|(path, _)| path == ["params", "dfc_image"]);
    if !c.image_in_def {
        return names_dfc_image(&c.image);
    }
    c.image.vars().any(|(path, _)| {
        path.len() == 2
            && path[0] == "params"
            && matches!(s.with.get(&path[1]), Some((WithValue::Template(t), _)) if names_dfc_image(t))
    })
}

/// `NAME-VERSION-...whl` → (NAME, VERSION), as PEP 427 spells a wheel's file name.
fn wheel_name_version(wheel: &Path) -> Option<(String, String)> {
    let name = wheel.file_name()?.to_str()?.strip_suffix(".whl")?;
    let mut parts = name.split('-');
    let (n, v) = (parts.next()?, parts.next()?);
    (parts.count() >= 3).then(|| (n.to_string(), v.to_string()))
}

/// Route (c)'s requirements: the wheel's folder as a find-links source and the DFC pinned to the
/// wheel's version, so the env's package set (which enters keys) reads `NAME==VERSION` and holds
/// no machine path. The wheel's sha256 is in the file, so a new wheel is a new env.
fn host_requirements(
    root: &Path,
    wheel: &Path,
    name: &str,
    version: &str,
    digest: &str,
) -> Result<PathBuf, RouteError> {
    let dir = root.join(".heddle").join("dfc");
    let path = dir.join(format!("requirements-{}.txt", &digest[..16]));
    let folder = std::path::absolute(wheel)
        .unwrap_or_else(|_| wheel.to_path_buf())
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let text = format!(
        "# Written by heddle for [dfc] run_on = \"host\" (route c): the DFC wheel\n\
         # {} (sha256 {digest}).\n\
         --find-links {}\n\
         {name}=={version}\n",
        wheel.display(),
        folder.display()
    );
    let fail = |source| RouteError::Write {
        path: path.clone(),
        source,
    };
    if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
        std::fs::create_dir_all(&dir).map_err(fail)?;
        std::fs::write(&path, &text).map_err(fail)?;
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wheel_names_split_as_pep_427_spells_them() {
        assert_eq!(
            wheel_name_version(Path::new(
                "/d/hailo_dataflow_compiler-3.33.0-py3-none-linux_x86_64.whl"
            )),
            Some(("hailo_dataflow_compiler".into(), "3.33.0".into()))
        );
        assert_eq!(wheel_name_version(Path::new("dfc.whl")), None);
        assert_eq!(wheel_name_version(Path::new("a-1-py3-none.zip")), None);
    }
}
