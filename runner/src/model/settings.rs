//! The settings a stage inherits (stage > definition > `[defaults]`, see [`super::layers`]):
//! `timeout`, `retries`, `allow_failure`, `cache`, `cluster`, `report`, `resources`, `env`, and the
//! merged `vars`, `pass_env` and `secret_env`. Each error points at the file the value was
//! written in.

use std::collections::BTreeMap;
use std::time::Duration;

use super::layers::Layers;
use super::loader::{Loader, Scope};
use crate::diag::did_you_mean;

/// A stage's run settings, after layering stage > definition > `[defaults]`.
#[derive(Debug)]
pub struct Settings {
    pub timeout: Option<Duration>,
    pub retries: u32,
    pub allow_failure: bool,
    pub cache: bool,
    /// `cluster = false`: runs here even when the run uses a cluster.
    pub cluster: bool,
    pub report: bool,
    pub resources: BTreeMap<String, u32>,
    pub env: Option<String>,
    pub vars: BTreeMap<String, String>,
    pub pass_env: Vec<String>,
    /// Host variables passed as secrets: never in a key, a record, a log or an output.
    pub secret_env: Vec<String>,
}

/// `none` when a list is empty, as the help texts say.
fn list_or_none<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let known: Vec<&str> = names.map(String::as_str).collect();
    if known.is_empty() {
        "none".into()
    } else {
        known.join(", ")
    }
}

impl Loader {
    pub(super) fn settings(&mut self, layers: &Layers, scope: &Scope) -> Settings {
        let timeout = self.timeout(layers);
        let retries = self.retries(layers);
        let resources = self.stage_resources(layers, scope.resources);
        let env = self.env(layers, scope);
        let mut vars = BTreeMap::new();
        let mut pass_env: Vec<String> = Vec::new();
        for s in layers.merge_order() {
            if let Some(v) = &s.vars {
                vars.extend(v.clone());
            }
        }
        for s in layers.merge_order() {
            for v in s.pass_env.iter().flatten() {
                if !pass_env.contains(v.get_ref()) {
                    pass_env.push(v.get_ref().clone());
                }
            }
        }
        let secret_env = self.secret_env(layers, &vars, &pass_env);
        Settings {
            timeout,
            retries,
            allow_failure: layers.value(|s| s.allow_failure.as_ref()).unwrap_or(false),
            cache: layers.value(|s| s.cache.as_ref()).unwrap_or(true),
            cluster: layers.value(|s| s.cluster.as_ref()).unwrap_or(true),
            report: layers.value(|s| s.report.as_ref()).unwrap_or(false),
            resources,
            env,
            vars,
            pass_env,
            secret_env,
        }
    }

    fn timeout(&mut self, layers: &Layers) -> Option<Duration> {
        let t = layers.find(|s| s.timeout.as_ref())?;
        match humantime::parse_duration(t.get()) {
            Ok(d) => Some(d),
            Err(e) => {
                self.errors.push(t.error(format!(
                    "timeout `{}`: {e} (write e.g. \"90s\", \"10m\", \"2h\")",
                    t.get()
                )));
                None
            }
        }
    }

    fn retries(&mut self, layers: &Layers) -> u32 {
        match layers.find(|s| s.retries.as_ref()) {
            Some(n) => match u32::try_from(*n.get()) {
                Ok(n) if n <= 100 => n,
                _ => {
                    self.errors
                        .push(n.error("retries must be between 0 and 100"));
                    0
                }
            },
            None => 0,
        }
    }

    /// The units a stage holds of each pool; every pool must be declared and large enough.
    fn stage_resources(
        &mut self,
        layers: &Layers,
        pools: &BTreeMap<String, u32>,
    ) -> BTreeMap<String, u32> {
        let mut res = BTreeMap::new();
        let Some(found) = layers.find(|s| s.resources.as_ref()) else {
            return res;
        };
        let pool_names: Vec<&String> = pools.keys().collect();
        for (k, v) in found.value {
            let Some(pool) = pools.get(k.get_ref()) else {
                let d = found
                    .error_at(k.span(), format!("unknown resource pool `{}`", k.get_ref()))
                    .with_help(did_you_mean(k.get_ref(), &pool_names, || {
                        format!(
                            "declare it under [resources]; pools: {}",
                            list_or_none(pools.keys())
                        )
                    }));
                self.errors.push(d);
                continue;
            };
            match u32::try_from(*v.get_ref()) {
                Ok(n) if n >= 1 && n <= *pool => {
                    res.insert(k.get_ref().clone(), n);
                }
                _ => self.errors.push(found.error_at(
                    v.span(),
                    format!(
                        "stage asks for {} of `{}`, whose pool has {pool}",
                        v.get_ref(),
                        k.get_ref()
                    ),
                )),
            }
        }
        res
    }

    fn env(&mut self, layers: &Layers, scope: &Scope) -> Option<String> {
        let e = layers.find(|s| s.env.as_ref())?;
        if scope.envs.contains_key(e.get()) {
            return Some(e.get().clone());
        }
        let names: Vec<&String> = scope.envs.keys().collect();
        let d = e
            .error(format!("unknown env `{}`", e.get()))
            .with_help(did_you_mean(e.get(), &names, || {
                format!(
                    "declare it as [envs.{}]; envs: {}",
                    e.get(),
                    list_or_none(scope.envs.keys())
                )
            }));
        self.errors.push(d);
        None
    }
}
