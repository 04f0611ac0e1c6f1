//! The connection to the engine and the operations that are not "run a container".

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use bollard::errors::Error as BollardError;
use bollard::query_parameters::{
    BuildImageOptions, CreateImageOptions, ListContainersOptions, RemoveContainerOptions,
    TagImageOptions,
};
use bollard::Docker;
use futures_util::stream::{self, StreamExt, TryStreamExt};

use crate::error::{ContainerError, Unreachable};
use crate::spec::{ImageIdentity, PullPolicy};

/// The label every container heddle creates carries; `heddle gc --containers` keys on it.
pub const MANAGED_LABEL: (&str, &str) = ("heddle.managed", "true");

/// How long `connect` waits for the engine to answer before calling it unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// bollard's own default for every request on a connection (its `DEFAULT_TIMEOUT`).
const REQUEST_TIMEOUT_SECS: u64 = 120;

/// Client certificate files for an engine that requires TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A negotiated connection to one Docker Engine. Cheap to clone (the HTTP client is shared).
#[derive(Debug, Clone)]
pub struct Engine {
    pub(crate) docker: Docker,
    host: String,
}

impl Engine {
    /// Connect to `docker_host` (`unix:///...`, `tcp://...`, `npipe:////./pipe/...`), or with
    /// `None` to bollard's defaults (`DOCKER_HOST`, else the platform's local socket or pipe).
    ///
    /// Negotiates the API version down to what the engine speaks (heddle must work with older
    /// engines than bollard targets), which doubles as the ping.
    pub async fn connect(docker_host: Option<&str>) -> Result<Engine, ContainerError> {
        Engine::connect_with(docker_host, None).await
    }

    /// Like [`Engine::connect`], with client certificates for a `tcp://` engine that requires
    /// TLS (`dockerd --tlsverify`): the engine's certificate must chain to `tls.ca`, and heddle
    /// presents `tls.cert` / `tls.key`.
    pub async fn connect_with(
        docker_host: Option<&str>,
        tls: Option<&TlsFiles>,
    ) -> Result<Engine, ContainerError> {
        let host = match docker_host {
            Some(h) => h.to_string(),
            None => default_host(),
        };
        let unreachable = |cause: Unreachable| ContainerError::EngineUnreachable {
            host: host.clone(),
            cause,
        };
        let docker = match (docker_host, tls) {
            (Some(h), Some(t)) => {
                for f in [&t.ca, &t.cert, &t.key] {
                    if !f.is_file() {
                        return Err(unreachable(Unreachable::MissingTlsFile { path: f.clone() }));
                    }
                }
                Docker::connect_with_ssl(
                    h,
                    &t.key,
                    &t.cert,
                    &t.ca,
                    REQUEST_TIMEOUT_SECS,
                    bollard::API_DEFAULT_VERSION,
                )
            }
            (Some(h), None) => Docker::connect_with_host(h),
            (None, _) => Docker::connect_with_defaults(),
        }
        .map_err(|e| match e {
            BollardError::SocketNotFoundError(path) => unreachable(Unreachable::NoSocket { path }),
            e => unreachable(Unreachable::Address(e)),
        })?;
        let docker = match tokio::time::timeout(CONNECT_TIMEOUT, docker.negotiate_version()).await {
            Ok(Ok(docker)) => docker,
            Ok(Err(e)) => return Err(unreachable(Unreachable::Request(e))),
            Err(_) => {
                return Err(unreachable(Unreachable::Timeout {
                    waited: CONNECT_TIMEOUT,
                }))
            }
        };
        Ok(Engine { docker, host })
    }

    /// The address this engine was reached at.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The negotiated API version, e.g. `1.41`.
    pub fn api_version(&self) -> String {
        self.docker.client_version().to_string()
    }

    /// Resolve `reference` to the image it names now.
    pub async fn resolve_image(
        &self,
        reference: &str,
        pull: PullPolicy,
    ) -> Result<ImageIdentity, ContainerError> {
        match pull {
            PullPolicy::Never => {}
            PullPolicy::Missing => {
                if let Some(identity) = self.inspect_image(reference).await? {
                    return Ok(identity);
                }
                self.pull(reference).await?;
            }
            PullPolicy::Always => self.pull(reference).await?,
        }
        self.inspect_image(reference)
            .await?
            .ok_or_else(|| ContainerError::ImageMissing {
                reference: reference.to_string(),
            })
    }

    async fn inspect_image(
        &self,
        reference: &str,
    ) -> Result<Option<ImageIdentity>, ContainerError> {
        match self.docker.inspect_image(reference).await {
            Ok(image) => Ok(Some(ImageIdentity {
                reference: reference.to_string(),
                id: image.id.unwrap_or_default(),
                repo_digests: image.repo_digests.unwrap_or_default(),
            })),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(source) => Err(ContainerError::InspectImage {
                reference: reference.to_string(),
                source,
            }),
        }
    }

    async fn pull(&self, reference: &str) -> Result<(), ContainerError> {
        // Like the docker CLI: name and tag go separately, and an untagged name means
        // `latest` (an empty tag would pull every tag of the repository).
        let (name, tag) = split_reference(reference);
        let options = CreateImageOptions {
            from_image: Some(name.to_string()),
            tag: Some(tag.to_string()),
            ..Default::default()
        };
        self.docker
            .create_image(Some(options), None, None)
            .try_for_each(|_| async { Ok(()) })
            .await
            .map_err(|source| ContainerError::Pull {
                reference: reference.to_string(),
                source,
            })
    }

    /// Build an image from a tar build context (a `Dockerfile` at its root) and tag it `tag`.
    /// Uses the classic builder, which every engine has. Returns the new image's identity.
    pub async fn build_image(
        &self,
        tag: &str,
        context_tar: Vec<u8>,
    ) -> Result<ImageIdentity, ContainerError> {
        self.build_image_with_args(tag, context_tar, &[]).await
    }

    /// [`Engine::build_image`] with `--build-arg NAME=VALUE` values (a recipe's `ARG`s).
    pub async fn build_image_with_args(
        &self,
        tag: &str,
        context_tar: Vec<u8>,
        build_args: &[(&str, &str)],
    ) -> Result<ImageIdentity, ContainerError> {
        let options = BuildImageOptions {
            t: Some(tag.to_string()),
            rm: true,
            forcerm: true,
            buildargs: (!build_args.is_empty()).then(|| {
                build_args
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            }),
            ..Default::default()
        };
        self.docker
            .build_image(options, None, Some(bollard::body_full(context_tar.into())))
            .try_for_each(|info| async move {
                if let Some(line) = info.stream {
                    tracing::debug!(target: "heddle_containers::build", "{}", line.trim_end());
                }
                Ok(())
            })
            .await
            .map_err(|source| ContainerError::Build {
                tag: tag.to_string(),
                source,
            })?;
        self.resolve_image(tag, PullPolicy::Never).await
    }

    /// Point `reference` (`repo[:tag]`) at `image` (an id or another reference).
    pub async fn tag_image(&self, image: &str, reference: &str) -> Result<(), ContainerError> {
        let (repo, tag) = split_reference(reference);
        let options = TagImageOptions {
            repo: Some(repo.to_string()),
            tag: Some(tag.to_string()),
        };
        self.docker
            .tag_image(image, Some(options))
            .await
            .map_err(|source| ContainerError::Tag {
                image: image.to_string(),
                reference: reference.to_string(),
                source,
            })
    }

    /// Remove every container labelled `heddle.managed=true` (and `extra_label`, if given),
    /// running or not. Returns how many were removed.
    pub async fn remove_labelled(
        &self,
        extra_label: Option<(&str, &str)>,
    ) -> Result<usize, ContainerError> {
        self.remove_labelled_unless(extra_label, |_| false).await
    }

    /// Like [`Engine::remove_labelled`], but spare containers for which `keep(labels)` is true
    /// (`heddle gc --containers` spares those whose owning heddle process is still alive).
    pub async fn remove_labelled_unless(
        &self,
        extra_label: Option<(&str, &str)>,
        keep: impl Fn(&HashMap<String, String>) -> bool,
    ) -> Result<usize, ContainerError> {
        let mut labels = vec![MANAGED_LABEL];
        labels.extend(extra_label);
        let ids: Vec<String> = self
            .list_labelled_full(&labels)
            .await?
            .into_iter()
            .filter(|(_, l)| !keep(l))
            .map(|(id, _)| id)
            .collect();
        let removed = stream::iter(ids)
            .map(|id| async move {
                match self
                    .docker
                    .remove_container(&id, Some(force_remove()))
                    .await
                {
                    Ok(()) => Ok(1),
                    // Gone in the meantime (its own run removed it): not ours to count.
                    Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(0),
                    Err(source) => Err(ContainerError::Remove {
                        container: id,
                        source,
                    }),
                }
            })
            .buffer_unordered(8)
            .try_fold(0, |n, one| async move { Ok(n + one) })
            .await?;
        Ok(removed)
    }

    /// Count containers in any state that carry `label`.
    pub async fn count_labelled(&self, label: (&str, &str)) -> Result<usize, ContainerError> {
        Ok(self.list_labelled(&[label]).await?.len())
    }

    async fn list_labelled(&self, labels: &[(&str, &str)]) -> Result<Vec<String>, ContainerError> {
        Ok(self
            .list_labelled_full(labels)
            .await?
            .into_iter()
            .map(|(id, _)| id)
            .collect())
    }

    async fn list_labelled_full(
        &self,
        labels: &[(&str, &str)],
    ) -> Result<Vec<(String, HashMap<String, String>)>, ContainerError> {
        let filter: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let options = ListContainersOptions {
            all: true,
            filters: Some(HashMap::from([("label".to_string(), filter.clone())])),
            ..Default::default()
        };
        let containers = self
            .docker
            .list_containers(Some(options))
            .await
            .map_err(|source| ContainerError::List {
                label: filter.join(","),
                source,
            })?;
        Ok(containers
            .into_iter()
            .filter_map(|c| Some((c.id?, c.labels.unwrap_or_default())))
            .collect())
    }
}

pub(crate) fn force_remove() -> RemoveContainerOptions {
    RemoveContainerOptions {
        force: true,
        // Anonymous volumes declared by the image would otherwise pile up.
        v: true,
        ..Default::default()
    }
}

pub(crate) fn is_not_found(e: &BollardError) -> bool {
    matches!(
        e,
        BollardError::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

pub(crate) fn is_conflict(e: &BollardError) -> bool {
    // 409: "removal of container ... is already in progress".
    matches!(
        e,
        BollardError::DockerResponseServerError {
            status_code: 409,
            ..
        }
    )
}

/// The address bollard's defaults resolve to, for messages.
fn default_host() -> String {
    if let Ok(h) = std::env::var("DOCKER_HOST") {
        if !h.is_empty() {
            return h;
        }
    }
    if cfg!(windows) {
        "npipe:////./pipe/docker_engine".to_string()
    } else {
        "unix:///var/run/docker.sock".to_string()
    }
}

/// The innermost cause, which is the one a user can act on ("permission denied",
/// "connection refused"), rather than bollard's "error in the hyper legacy client".
/// `repo[:tag]` or `repo@digest` → (name, tag-or-digest), defaulting the tag to `latest`.
/// The tag separator is a `:` after the last `/`, so `localhost:5000/img` keeps its port.
pub(crate) fn split_reference(reference: &str) -> (&str, &str) {
    if let Some((name, digest)) = reference.split_once('@') {
        return (name, digest);
    }
    let last_slash = reference.rfind('/').map_or(0, |i| i + 1);
    match reference[last_slash..].rfind(':') {
        Some(i) => (
            &reference[..last_slash + i],
            &reference[last_slash + i + 1..],
        ),
        None => (reference, "latest"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_split_like_the_cli() {
        assert_eq!(split_reference("busybox"), ("busybox", "latest"));
        assert_eq!(split_reference("busybox:1.36"), ("busybox", "1.36"));
        assert_eq!(
            split_reference("localhost:5000/a/b"),
            ("localhost:5000/a/b", "latest")
        );
        assert_eq!(
            split_reference("localhost:5000/a/b:v2"),
            ("localhost:5000/a/b", "v2")
        );
        assert_eq!(
            split_reference("ghcr.io/x/y@sha256:abc"),
            ("ghcr.io/x/y", "sha256:abc")
        );
    }
}
