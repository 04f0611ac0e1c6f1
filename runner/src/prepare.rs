//! Everything resolved between planning and running: digests of `uses` folders and repo inputs
//! (through the stat cache, so unchanged files are not read), python envs, and each image
//! reference's id, gathered in one [`Context`] that keys, previews and the scheduler read.
//! Problems here — no engine, a missing image, an env that will not build — stop the run before
//! any stage starts.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use heddle_cache::{CacheError, Digest, StatCache, Store};
use heddle_containers::{ContainerError, Engine, ImageIdentity, PullPolicy};

use crate::exec::docker::DockerExecutor;
use crate::exec::host::HostExecutor;
use crate::exec::Executor;
use crate::hosts::{place, Hosts, Placement, PlacementError};
use crate::model::Stage;
use crate::plan::{BoundInput, Plan};
use crate::pyenv::{self, EnvError, EnvInfo};

/// Everything resolved before the walk: definition and repo-file digests, envs, images.
pub struct Context {
    pub plan: Arc<Plan>,
    pub store: Arc<Store>,
    pub stats: Arc<StatCache>,
    /// `uses` → relative file → digest.
    pub definitions: BTreeMap<String, BTreeMap<String, String>>,
    /// Repo input path (relative) → digest.
    pub repo_inputs: BTreeMap<String, Digest>,
    pub envs: BTreeMap<String, EnvInfo>,
    /// Image reference → identity.
    pub images: BTreeMap<String, ImageIdentity>,
    /// Image reference → why it could not be resolved (plan/status only; `run` stops instead).
    pub unresolved: BTreeMap<String, String>,
    pub host: Arc<dyn Executor>,
    pub docker: Option<Arc<dyn Executor>>,
    /// Which configured hosts may run each container stage (`hosts.toml`).
    pub placement: Placement,
    /// Every engine connected, by address (`None`: the default one); the Docker executor runs
    /// containers on them, and the scheduler takes engine-wide units there.
    pub engines: BTreeMap<Option<String>, Engine>,
}

impl Context {
    /// The executor a stage runs on: Docker for a container stage when an engine is connected.
    pub fn executor(&self, stage: &Stage) -> Arc<dyn Executor> {
        match (&stage.container, &self.docker) {
            (Some(_), Some(d)) => d.clone(),
            _ => self.host.clone(),
        }
    }
}

/// A file of a stage definition's folder that cannot be read or hashed.
#[derive(Debug, thiserror::Error)]
pub enum DefinitionHashError {
    #[error("failed to list folder {}", path.display())]
    List {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Cache(#[from] CacheError),
}

#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// Boxed: bollard's error carries TLS causes, and every `Result` of a prepare step would
    /// otherwise be as large as the largest of them.
    #[error(transparent)]
    Container(Box<ContainerError>),
    #[error(transparent)]
    Env(#[from] EnvError),
    #[error(transparent)]
    Placement(#[from] PlacementError),
    /// A configured host whose engine does not answer: named with where it is defined.
    #[error("cannot reach host `{name}` (defined at {defined_at})")]
    HostUnreachable {
        name: String,
        defined_at: String,
        #[source]
        source: Box<ContainerError>,
    },
    /// A stage definition's folder (its files enter the key of every stage that uses it).
    #[error("failed to hash stage definition {}", dir.display())]
    HashDefinition {
        dir: PathBuf,
        #[source]
        source: DefinitionHashError,
    },
    /// A repo file or folder an instance reads; the cache's error names the path and why.
    #[error(transparent)]
    HashInput(CacheError),
    /// Run records and cache keys name an image by its reference, so one reference must mean
    /// one build across every engine a pipeline talks to.
    #[error(
        "image {reference} is {first_id} on {first_host} but {second_id} on {second_host}; \
         tag the two builds differently"
    )]
    ImageConflict {
        reference: String,
        first_host: String,
        first_id: String,
        second_host: String,
        second_id: String,
    },
}

impl From<ContainerError> for PrepareError {
    fn from(e: ContainerError) -> Self {
        PrepareError::Container(Box::new(e))
    }
}

pub struct PrepareOptions {
    /// Build missing python envs (run) or leave them unresolved (plan).
    pub provision_envs: bool,
    /// Connect to the engine and resolve images (needed for keys of container stages).
    pub resolve_images: bool,
    /// `run`: a missing engine or image stops everything (exit 2), and `pull` policies apply.
    /// `plan`/`status`/`lock`: never pull, and an image that cannot be resolved is reported
    /// per instance instead (`Context::unresolved`).
    pub strict_images: bool,
    /// The configured hosts; container stages that ask for resources are placed on them.
    pub hosts: Hosts,
    /// Where python envs live, when not in `store` (a private cache for `logbook verify
    /// --fresh` still reuses the user's envs: an env is a tool, not a result).
    pub env_store: Option<Arc<Store>>,
}

pub async fn prepare(
    plan: Arc<Plan>,
    store: Arc<Store>,
    stats: Arc<StatCache>,
    opts: PrepareOptions,
    log: &(dyn Fn(&str) + Sync),
) -> Result<Context, PrepareError> {
    let definitions = hash_definitions(&plan, &stats)?;
    let repo_inputs = hash_repo_inputs(&plan, &stats)?;
    let envs = resolve_envs(&plan, &store, &opts, log).await?;
    let placement = place(&plan.pipeline, &opts.hosts)?;
    let (images, unresolved, engines) = resolve_images(&plan, &placement, &opts).await?;
    let docker = engines
        .as_ref()
        .map(|e| Arc::new(DockerExecutor { engines: e.clone() }) as Arc<dyn Executor>);
    Ok(Context {
        placement,
        engines: engines.unwrap_or_default(),
        unresolved,
        plan,
        store,
        stats,
        definitions,
        repo_inputs,
        envs,
        images,
        host: Arc::new(HostExecutor),
        docker,
    })
}

/// `uses` → relative file → digest, for every stage definition the pipeline uses.
fn hash_definitions(
    plan: &Plan,
    stats: &StatCache,
) -> Result<BTreeMap<String, BTreeMap<String, String>>, PrepareError> {
    let mut definitions = BTreeMap::new();
    for s in &plan.pipeline.stages {
        if let Some(d) = &s.def {
            if !definitions.contains_key(&d.uses) {
                let files = definition_digests(stats, &d.dir).map_err(|source| {
                    PrepareError::HashDefinition {
                        dir: d.dir.clone(),
                        source,
                    }
                })?;
                definitions.insert(d.uses.clone(), files);
            }
        }
    }
    Ok(definitions)
}

/// Repo input path (relative) → digest, for every repo file or folder an instance reads.
fn hash_repo_inputs(
    plan: &Plan,
    stats: &StatCache,
) -> Result<BTreeMap<String, Digest>, PrepareError> {
    let mut repo_inputs = BTreeMap::new();
    for inst in &plan.instances {
        for b in inst.inputs.values() {
            if let BoundInput::Path { rel, abs } = b {
                if repo_inputs.contains_key(rel) {
                    continue;
                }
                let d = if abs.is_dir() {
                    stats.hash_dir(abs)
                } else {
                    stats.hash(abs)
                };
                let d = d.map_err(PrepareError::HashInput)?;
                repo_inputs.insert(rel.clone(), d);
            }
        }
    }
    Ok(repo_inputs)
}

/// Each python env a stage uses: built if missing (`provision_envs`), else left out when not
/// built yet.
async fn resolve_envs(
    plan: &Plan,
    store: &Arc<Store>,
    opts: &PrepareOptions,
    log: &(dyn Fn(&str) + Sync),
) -> Result<BTreeMap<String, EnvInfo>, PrepareError> {
    let p = &plan.pipeline;
    let env_store = opts.env_store.clone().unwrap_or_else(|| store.clone());
    let used_envs: BTreeSet<&String> = p
        .stages
        .iter()
        .filter_map(|s| s.settings.env.as_ref())
        .collect();
    let mut envs = BTreeMap::new();
    for name in used_envs {
        let def = &p.envs[name];
        let info = if opts.provision_envs {
            let (store, def) = (env_store.clone(), def.clone());
            let found = pyenv::lookup(&store, &def)?;
            match found {
                Some(i) => Some(i),
                None => {
                    log(&format!(
                        "provisioning python env `{}` (once per requirements content)",
                        def.name
                    ));
                    Some(
                        tokio::task::spawn_blocking(move || {
                            pyenv::provision(&store, &def, &|_| {})
                        })
                        .await
                        .expect("env task")?,
                    )
                }
            }
        } else {
            pyenv::lookup(&env_store, def)?
        };
        if let Some(i) = info {
            envs.insert(name.clone(), i);
        }
    }
    Ok(envs)
}

/// Identities found (reference → id), references that could not be resolved (with why; only
/// when not `strict_images`), and every engine connected (`None` when none was asked for).
type ResolvedImages = (
    BTreeMap<String, ImageIdentity>,
    BTreeMap<String, String>,
    Option<BTreeMap<Option<String>, Engine>>,
);

/// Resolve each image reference on its stage's engine (`docker_host`), or on every host a
/// placed stage may run on, pulling per its `pull` policy when strict; one reference must be
/// one image id across engines (so the key, which holds the id, does not depend on which host
/// an instance lands on).
async fn resolve_images(
    plan: &Plan,
    placement: &Placement,
    opts: &PrepareOptions,
) -> Result<ResolvedImages, PrepareError> {
    let p = &plan.pipeline;
    let mut images = BTreeMap::new();
    let mut connected = None;
    let mut wanted: BTreeSet<(Option<String>, String, String)> = BTreeSet::new();
    for i in &plan.instances {
        let (Some(c), Some(image)) = (p.stages[i.stage].container.as_ref(), i.image.as_ref())
        else {
            continue;
        };
        let pull = c.pull.to_string();
        let on = placement.candidates(i.stage);
        if on.is_empty() {
            wanted.insert((c.docker_host.clone(), image.clone(), pull.clone()));
        }
        for name in on {
            let host = placement
                .host(name)
                .expect("candidates are configured hosts");
            wanted.insert((Some(host.docker.clone()), image.clone(), pull.clone()));
        }
    }
    let mut unresolved = BTreeMap::new();
    if opts.resolve_images && !wanted.is_empty() {
        let mut engines: BTreeMap<Option<String>, Engine> = BTreeMap::new();
        // Which engine each reference was first resolved on, to name it in a conflict.
        let mut resolved_on: BTreeMap<&str, String> = BTreeMap::new();
        for (host, image, pull) in &wanted {
            if !engines.contains_key(host) {
                let configured = host.as_deref().and_then(|h| opts.hosts.by_address(h));
                let tls = configured.and_then(|h| h.tls.as_ref());
                match Engine::connect_with(host.as_deref(), tls).await {
                    Ok(e) => {
                        engines.insert(host.clone(), e);
                    }
                    Err(e) if !opts.strict_images => {
                        unresolved.insert(image.clone(), heddle_cache::error_chain(&e));
                        continue;
                    }
                    Err(source) => {
                        return Err(match configured {
                            Some(h) => PrepareError::HostUnreachable {
                                name: h.name.clone(),
                                defined_at: h.defined_at.clone(),
                                source: Box::new(source),
                            },
                            None => source.into(),
                        })
                    }
                }
            }
            let policy: PullPolicy = if opts.strict_images {
                pull.parse().unwrap_or_default()
            } else {
                PullPolicy::Never
            };
            let id = match engines[host].resolve_image(image, policy).await {
                Ok(id) => id,
                Err(e) if !opts.strict_images => {
                    unresolved.insert(image.clone(), e.to_string());
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let on = engines[host].host().to_string();
            if let Some(first) = images.get(image).filter(|f: &&ImageIdentity| f.id != id.id) {
                return Err(PrepareError::ImageConflict {
                    reference: image.clone(),
                    first_host: resolved_on[image.as_str()].clone(),
                    first_id: first.id.clone(),
                    second_host: on,
                    second_id: id.id,
                });
            }
            resolved_on.entry(image).or_insert(on);
            images.insert(image.clone(), id);
        }
        connected = Some(engines);
    }
    Ok((images, unresolved, connected))
}

/// Digest every file of a `uses` folder (skipping Python caches and dot files), through the
/// stat cache: relative path (with `/`) → digest.
pub fn definition_digests(
    stats: &StatCache,
    dir: &Path,
) -> Result<BTreeMap<String, String>, DefinitionHashError> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let list = |source| DefinitionHashError::List {
            path: d.clone(),
            source,
        };
        for e in std::fs::read_dir(&d).map_err(list)? {
            let e = e.map_err(list)?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name == "__pycache__" || name.ends_with(".pyc") || name.starts_with(".") {
                continue;
            }
            let p = e.path();
            let ft = e.file_type().map_err(|source| DefinitionHashError::Read {
                path: p.clone(),
                source,
            })?;
            if ft.is_dir() {
                stack.push(p);
            } else {
                let rel = p
                    .strip_prefix(dir)
                    .unwrap_or(&p)
                    .to_string_lossy()
                    .replace('\\', "/");
                let dg = if rel == "stage.toml" {
                    stage_toml_digest(&p)?
                } else {
                    stats.hash(&p)?
                };
                out.insert(rel, dg.to_string());
            }
        }
    }
    Ok(out)
}

/// A definition's `stage.toml` hashed without its `#:schema …` first line: the line tells an
/// editor where the file's JSON Schema is and means nothing to heddle, so adding or changing it
/// keeps every key (a definition with the line hashes exactly as it did before the line was
/// written). Read directly, not through the stat cache: the file is small and read anyway.
fn stage_toml_digest(path: &Path) -> Result<Digest, DefinitionHashError> {
    let bytes = std::fs::read(path).map_err(|source| DefinitionHashError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(Digest::of_bytes(crate::spec::without_schema_directive(
        &bytes,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digests(stage_toml: &str) -> BTreeMap<String, String> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("stage.toml"), stage_toml).unwrap();
        std::fs::write(dir.path().join("run.py"), "#:schema not a directive here\n").unwrap();
        let stats = StatCache::load(&dir.path().join("no-stats"));
        definition_digests(&stats, dir.path()).unwrap()
    }

    #[test]
    fn a_schema_directive_does_not_change_the_definition_digest() {
        let body = "[stage]\nrun = \"true\"\n";
        let plain = digests(body);
        // The digest of the bytes as they were before the line existed: keys stay identical.
        assert_eq!(
            plain["stage.toml"],
            Digest::of_bytes(body.as_bytes()).to_string()
        );
        assert_eq!(
            digests(&format!(
                "#:schema ../../../schemas/stage.schema.json\n{body}"
            )),
            plain
        );
        assert_eq!(
            digests(&format!(
                "#:schema https://example.invalid/s.json\r\n{body}"
            )),
            plain
        );
        // Any other comment is part of the file, as before.
        assert_ne!(digests(&format!("# a note\n{body}")), plain);
        assert_ne!(digests(&format!("{body}#:schema x\n")), plain);
    }
}
