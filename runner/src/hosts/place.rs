//! Which hosts may run each container stage, decided once before the walk.
//!
//! The rule (docs/scale-out.md, "Stages on other machines"): with at least one host
//! configured, a container stage that asks for `resources` runs on a host whose pools cover
//! every unit it asks for; when several do, the scheduler takes whichever has the units free
//! first. A stage without resources, a stage that names its own `docker_host`, and every host
//! (non-container) stage run where they ran before: the default engine, their `docker_host`,
//! this machine. A stage whose resources no host covers is an error here, before anything
//! runs, naming what it asks for and what each host offers. Without hosts nothing is placed
//! and nothing changes.

use std::collections::BTreeMap;

use super::{Host, Hosts};
use crate::model::Pipeline;

/// Candidate hosts per placed stage.
#[derive(Debug, Clone, Default)]
pub struct Placement {
    hosts: BTreeMap<String, Host>,
    /// Stage index → names of the hosts that may run it (never empty).
    stages: BTreeMap<usize, Vec<String>>,
}

#[derive(Debug, thiserror::Error)]
pub enum PlacementError {
    #[error("stage `{stage}` asks for {wanted}, which no configured host offers (hosts: {hosts})")]
    NoHostOffers {
        stage: String,
        wanted: String,
        hosts: String,
    },
}

impl Placement {
    /// The hosts that may run stage `stage` (an index into the pipeline's stages); empty when
    /// the stage is not placed.
    pub fn candidates(&self, stage: usize) -> &[String] {
        self.stages.get(&stage).map_or(&[], Vec::as_slice)
    }

    pub fn host(&self, name: &str) -> Option<&Host> {
        self.hosts.get(name)
    }

    /// Every configured host, placed on or not.
    pub fn hosts(&self) -> impl Iterator<Item = &Host> {
        self.hosts.values()
    }
}

/// Place every container stage of `pipeline` that asks for resources.
pub fn place(pipeline: &Pipeline, hosts: &Hosts) -> Result<Placement, PlacementError> {
    if hosts.is_empty() {
        return Ok(Placement::default());
    }
    let mut stages = BTreeMap::new();
    for (i, stage) in pipeline.stages.iter().enumerate() {
        let Some(c) = &stage.container else { continue };
        if stage.settings.resources.is_empty() || c.docker_host.is_some() {
            continue;
        }
        let fits: Vec<String> = hosts
            .hosts
            .values()
            .filter(|h| {
                stage
                    .settings
                    .resources
                    .iter()
                    .all(|(pool, n)| h.pools.get(pool).is_some_and(|have| have >= n))
            })
            .map(|h| h.name.clone())
            .collect();
        if fits.is_empty() {
            return Err(PlacementError::NoHostOffers {
                stage: stage.name.clone(),
                wanted: list(&stage.settings.resources),
                hosts: hosts
                    .hosts
                    .values()
                    .map(|h| {
                        if h.pools.is_empty() {
                            format!("{} offers no pools", h.name)
                        } else {
                            format!("{} offers {}", h.name, list(&h.pools))
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("; "),
            });
        }
        stages.insert(i, fits);
    }
    Ok(Placement {
        hosts: hosts.hosts.clone(),
        stages,
    })
}

/// `gpu = 2, hailo = 1`, as the files spell it.
fn list(pools: &BTreeMap<String, u32>) -> String {
    pools
        .iter()
        .map(|(k, v)| format!("{k} = {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Transfer;

    /// Configured hosts on made-up TCP engines, each offering its pools.
    fn hosts(list: &[(&str, &[(&str, u32)])]) -> Hosts {
        let host = |name: &str, pools: &[(&str, u32)]| Host {
            name: name.into(),
            docker: format!("tcp://{name}:2375"),
            tls: None,
            pools: pools.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            engine_wide: Default::default(),
            transfer: Transfer::Auto,
            defined_at: "hosts.toml:1:1".into(),
        };
        Hosts {
            hosts: list
                .iter()
                .map(|(name, pools)| (name.to_string(), host(name, pools)))
                .collect(),
            clusters: Default::default(),
        }
    }

    /// PIPELINE, loaded from a file in `dir`.
    fn pipeline(dir: &std::path::Path) -> Pipeline {
        let file = dir.join("p.toml");
        std::fs::write(&file, PIPELINE).unwrap();
        let opts = crate::model::LoadOptions {
            root: Some(dir.to_path_buf()),
            ..Default::default()
        };
        crate::model::load(&file, &opts).expect("pipeline loads")
    }

    const PIPELINE: &str = r#"
[pipeline]
name = "p"
[resources]
gpu = 2
hailo = 1
[stages.train]
image = "x"
resources = { gpu = 1 }
run = "true"
[stages.flash]
image = "x"
resources = { hailo = 1 }
run = "true"
[stages.plain]
image = "x"
run = "true"
[stages.local]
resources = { gpu = 1 }
run = "true"
"#;

    #[test]
    fn each_stage_goes_where_its_resources_are() {
        let dir = tempfile::tempdir().unwrap();
        let p = pipeline(dir.path());
        let hosts = hosts(&[("a", &[("gpu", 2)]), ("b", &[("gpu", 1), ("hailo", 1)])]);
        let placed = place(&p, &hosts).unwrap();
        let idx = |n: &str| p.stages.iter().position(|s| s.name == n).unwrap();
        assert_eq!(placed.candidates(idx("train")), ["a", "b"]);
        assert_eq!(placed.candidates(idx("flash")), ["b"]);
        assert!(placed.candidates(idx("plain")).is_empty(), "no resources");
        assert!(placed.candidates(idx("local")).is_empty(), "a host stage");
    }

    #[test]
    fn a_resource_no_host_offers_names_it_and_the_hosts() {
        let dir = tempfile::tempdir().unwrap();
        let p = pipeline(dir.path());
        let hosts = hosts(&[("a", &[("gpu", 2)]), ("c", &[])]);
        let e = place(&p, &hosts).unwrap_err();
        assert_eq!(
            e.to_string(),
            "stage `flash` asks for hailo = 1, which no configured host offers \
             (hosts: a offers gpu = 2; c offers no pools)"
        );
    }

    #[test]
    fn without_hosts_nothing_is_placed() {
        let dir = tempfile::tempdir().unwrap();
        let p = pipeline(dir.path());
        let placed = place(&p, &Hosts::default()).unwrap();
        assert!((0..p.stages.len()).all(|i| placed.candidates(i).is_empty()));
    }
}
