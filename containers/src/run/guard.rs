//! Removal on every path: a guard that force-removes the container when dropped, unless the
//! run removed it already, and a task handle that aborts its task when dropped.

use bollard::Docker;

use super::short_id;
use crate::engine::{force_remove, is_conflict, is_not_found};
use crate::error::ContainerError;

/// Force-removes the container when dropped unless `remove_now` already did. Covers the
/// future being dropped mid-run (a `select!` elsewhere, a panic, a runtime shutting down a
/// task): the container must not outlive the run.
pub(crate) struct RemovalGuard {
    pub(crate) docker: Docker,
    pub(crate) id: Option<String>,
}

impl RemovalGuard {
    pub(crate) async fn remove_now(&mut self) -> Result<(), ContainerError> {
        let Some(id) = self.id.take() else {
            return Ok(());
        };
        match self
            .docker
            .remove_container(&id, Some(force_remove()))
            .await
        {
            Ok(()) => Ok(()),
            // Already gone, or someone (`heddle gc`) is removing it right now.
            Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(()),
            Err(source) => Err(ContainerError::Remove {
                container: short_id(&id).to_string(),
                source,
            }),
        }
    }
}

impl Drop for RemovalGuard {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let docker = self.docker.clone();
        let remove = async move {
            if let Err(e) = docker.remove_container(&id, Some(force_remove())).await {
                if !is_not_found(&e) {
                    tracing::warn!(container = %short_id(&id), "failed to remove container: {e}");
                }
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(remove);
            }
            // Dropped outside a runtime: a short-lived one on its own thread does the job.
            Err(_) => {
                let _ = std::thread::spawn(move || {
                    if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        rt.block_on(remove);
                    }
                });
            }
        }
    }
}

/// A spawned task that must not outlive its owner.
pub(crate) struct AbortOnDrop<T>(pub(crate) tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
