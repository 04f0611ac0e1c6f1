//! A unit of an engine-wide resource pool, locked by a container on that engine.
//!
//! Two heddles on different machines that place device stages on one Docker engine share
//! nothing but the engine, so the lock lives there: one *lock container* per unit, named
//! `heddle-unit-<pool>-<unit>`. Container names are unique per engine, so creating it is an
//! atomic test-and-set: one heddle's create succeeds, every other one gets 409 Conflict.
//!
//! The lock container runs `cat` from the stage's image (already on that engine) with its stdin
//! open to the holder only (OpenStdin, StdinOnce, AutoRemove). heddle attaches to that stdin
//! (and stdout, see [`HeldUnit::lost`]) before it starts the container and keeps the
//! connection open for as long as it holds the unit. When heddle dies, kill -9 included, its
//! kernel closes the connection, the engine closes the container's stdin, `cat` ends and
//! AutoRemove deletes the container: the engine frees the unit as the kernel frees a flock.
//! Checked on Docker 20.10 before building on it, over the unix socket and over a TCP proxy:
//! the container is gone within half a second of the holder's kill -9. Releasing on purpose is
//! a forced removal, which frees the name before it returns.
//!
//! Lock containers carry `heddle.unit.*` labels saying who holds the unit (for the waiter's
//! message and `heddle status`) and deliberately not `heddle.managed`: `heddle gc --containers`
//! must never remove a live lock (its holder may be another machine's heddle), and a dead
//! holder's lock container removes itself.
//!
//! A stage container that outlives its heddle still uses the device, so stage containers carry
//! a label per unit held for them ([`holds_label`]) for the next holder to wait on.
//!
//! Not decided here: how long to wait, in what order pools are taken, and when a lock container
//! that is not running is stale. A holder between create and start looks exactly like one that
//! died there, so only a caller that has seen it not running for a while may remove it
//! ([`Engine::remove_unit`], by id, so a newer holder's container is never the one removed).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Mutex;

use bollard::models::{ContainerCreateBody, ContainerStateStatusEnum, HostConfig};
use bollard::query_parameters::{
    AttachContainerOptions, CreateContainerOptions, InspectContainerOptions, ListContainersOptions,
    WaitContainerOptions,
};
use futures_util::StreamExt;
use tokio::io::AsyncWrite;
use tokio::sync::oneshot;

use crate::engine::{force_remove, is_conflict, is_not_found, Engine};
use crate::error::ContainerError;
use crate::run::{AbortOnDrop, RemovalGuard};

/// The label every lock container carries (its pool); listing by it finds them all.
pub const UNIT_POOL_LABEL: &str = "heddle.unit.pool";

/// The label a stage container carries for each unit its heddle held while it ran it
/// (`heddle.holds.heddle-unit-hailo-0=true`): a container that outlives its heddle (kill -9
/// stops nothing on the engine) still says which device it is using, so the next holder can
/// wait for it ([`Engine::running_holders_of`]).
pub fn holds_label(lock_name: &str) -> String {
    format!("heddle.holds.{lock_name}")
}

/// Who holds (or held) a unit, as its lock container's labels say. The labels are a
/// diagnostic only: nothing trusts them, the container's name is the lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineUnitHolder {
    pub pool: String,
    pub unit: u32,
    pub pid: Option<u32>,
    /// The machine the holding heddle runs on (not the engine's).
    pub hostname: String,
    pub run: String,
    pub instance: String,
    pub since_unix: Option<u64>,
}

/// A unit's lock container that this heddle did not get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BusyUnit {
    pub pool: String,
    pub unit: u32,
    /// The container's id (its name while the engine cannot say more): a stale one is
    /// removed by id, never by name.
    pub id: String,
    /// Running (or paused, restarting, being removed): a holder has it. False for a container
    /// that was created and not started, or has exited: its holder is between create and start,
    /// or died there.
    pub running: bool,
    /// `None` when its labels do not say (not made by heddle).
    pub holder: Option<EngineUnitHolder>,
}

/// The outcome of one try at a unit.
#[derive(Debug)]
pub enum UnitTry {
    Taken(HeldUnit),
    Busy(BusyUnit),
}

/// A unit this heddle holds: its running lock container and the attached stdin that keeps it
/// running. Dropping it releases the unit (a removal is spawned, and the closed connection
/// frees the unit even if that removal never runs); [`HeldUnit::release`] does it now.
pub struct HeldUnit {
    pool: String,
    unit: u32,
    name: String,
    guard: RemovalGuard,
    /// Keeps the container's stdin open; never written. Dropped last, after the removal. (In a
    /// mutex only so that a held unit is `Sync`, as the scheduler's futures must be.)
    stdin: Option<Mutex<Pin<Box<dyn AsyncWrite + Send>>>>,
    /// Reads the attach stream until it ends, to say so if it ends while held.
    watch: Option<AbortOnDrop<()>>,
    /// Told by `watch` when that happens ([`HeldUnit::lost`]).
    lost: Option<oneshot::Receiver<()>>,
}

impl std::fmt::Debug for HeldUnit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldUnit")
            .field("name", &self.name)
            .finish()
    }
}

/// The lock container's name for `unit` of `pool` (the pool's name is checked to be one the
/// engine accepts in a name where it is declared).
pub fn unit_container_name(pool: &str, unit: u32) -> String {
    format!("heddle-unit-{pool}-{unit}")
}

/// How many times a 409 whose container cannot be inspected is tried again, a little later
/// each time, before it counts as busy. The engine reserves a name before the container it
/// names can be inspected, and frees it only after the removal, so a create racing another
/// heddle's create or release sees this window.
const RACES: u32 = 4;

impl Engine {
    /// Try once to take the unit `holder` names, with a lock container from `image` (an image
    /// on this engine that has `cat`).
    pub async fn try_take_unit(
        &self,
        image: &str,
        holder: &EngineUnitHolder,
    ) -> Result<UnitTry, ContainerError> {
        let name = unit_container_name(&holder.pool, holder.unit);
        for race in 0..RACES {
            if race > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(10 << race)).await;
            }
            let options = CreateContainerOptions {
                name: Some(name.clone()),
                ..Default::default()
            };
            match self
                .docker
                .create_container(Some(options), lock_body(image, holder))
                .await
            {
                Ok(created) => {
                    if let Some(held) = self.hold(created.id, image, holder).await? {
                        return Ok(UnitTry::Taken(held));
                    }
                }
                Err(e) if is_conflict(&e) => {
                    if let Some(busy) = self.inspect_unit(holder, &name).await? {
                        return Ok(UnitTry::Busy(busy));
                    }
                }
                Err(source) => {
                    return Err(ContainerError::Create {
                        image: image.to_string(),
                        source,
                    })
                }
            }
        }
        Ok(UnitTry::Busy(BusyUnit {
            pool: holder.pool.clone(),
            unit: holder.unit,
            id: name,
            running: true,
            holder: None,
        }))
    }

    /// Attach to the new lock container's stdin, then start it. `None` when it was removed in
    /// between (a waiter took it for a dead creator's): the caller tries again.
    async fn hold(
        &self,
        id: String,
        image: &str,
        holder: &EngineUnitHolder,
    ) -> Result<Option<HeldUnit>, ContainerError> {
        let name = &unit_container_name(&holder.pool, holder.unit);
        // From here on, any early return removes the container.
        let mut held = HeldUnit {
            pool: holder.pool.clone(),
            unit: holder.unit,
            name: name.to_string(),
            guard: RemovalGuard {
                docker: self.docker.clone(),
                id: Some(id.clone()),
            },
            stdin: None,
            watch: None,
            lost: None,
        };
        // Stdout too, though `cat` never writes (nothing is sent to it): with stdin alone the
        // engine keeps the connection after the container is gone, and the holder could not
        // learn that it lost the unit.
        let options = AttachContainerOptions {
            stdin: true,
            stdout: true,
            stream: true,
            ..Default::default()
        };
        let attach = match self.docker.attach_container(&id, Some(options)).await {
            Ok(a) => a,
            Err(e) if is_not_found(&e) => return Ok(None),
            Err(source) => {
                return Err(ContainerError::Attach {
                    container: name.to_string(),
                    source,
                })
            }
        };
        match self.docker.start_container(&id, None).await {
            Ok(()) => {}
            Err(e) if is_not_found(&e) => return Ok(None),
            Err(source) => {
                return Err(ContainerError::StartLock {
                    container: name.to_string(),
                    image: image.to_string(),
                    source,
                })
            }
        }
        let mut output = attach.output;
        let (tell, lost) = oneshot::channel();
        held.watch = Some(AbortOnDrop(tokio::spawn(async move {
            while output.next().await.is_some() {}
            // Aborted on release, so reaching here means the connection ended while held.
            let _ = tell.send(());
        })));
        held.lost = Some(lost);
        held.stdin = Some(Mutex::new(attach.input));
        Ok(Some(held))
    }

    /// The lock container called `name` (of the unit `wanted` asks for), if it exists.
    async fn inspect_unit(
        &self,
        wanted: &EngineUnitHolder,
        name: &str,
    ) -> Result<Option<BusyUnit>, ContainerError> {
        let inspect = match self
            .docker
            .inspect_container(name, None::<InspectContainerOptions>)
            .await
        {
            Ok(i) => i,
            Err(e) if is_not_found(&e) => return Ok(None),
            Err(source) => {
                return Err(ContainerError::Inspect {
                    container: name.to_string(),
                    source,
                })
            }
        };
        let status = inspect.state.and_then(|s| s.status);
        let labels = inspect.config.and_then(|c| c.labels).unwrap_or_default();
        Ok(Some(BusyUnit {
            pool: wanted.pool.clone(),
            unit: wanted.unit,
            id: inspect.id.unwrap_or_else(|| name.to_string()),
            running: !matches!(
                status,
                Some(
                    ContainerStateStatusEnum::CREATED
                        | ContainerStateStatusEnum::EXITED
                        | ContainerStateStatusEnum::DEAD
                )
            ),
            holder: EngineUnitHolder::from_labels(&labels),
        }))
    }

    /// The running containers (stages) labelled as holding the unit whose lock container is
    /// `lock_name` ([`holds_label`]), with their labels.
    pub async fn running_holders_of(
        &self,
        lock_name: &str,
    ) -> Result<Vec<(String, HashMap<String, String>)>, ContainerError> {
        let label = format!("{}=true", holds_label(lock_name));
        let options = ListContainersOptions {
            all: true,
            filters: Some(HashMap::from([
                ("label".to_string(), vec![label.clone()]),
                (
                    "status".to_string(),
                    ["running", "paused", "restarting"]
                        .map(String::from)
                        .to_vec(),
                ),
            ])),
            ..Default::default()
        };
        let list = self
            .docker
            .list_containers(Some(options))
            .await
            .map_err(|source| ContainerError::List { label, source })?;
        Ok(list
            .into_iter()
            .filter_map(|c| Some((c.id?, c.labels.unwrap_or_default())))
            .collect())
    }

    /// Return once container `id` is not running, or the engine cannot say.
    pub async fn wait_stopped(&self, id: &str) {
        let options = WaitContainerOptions {
            condition: "not-running".to_string(),
        };
        let _ = self.docker.wait_container(id, Some(options)).next().await;
    }

    /// Every lock container on this engine, in pool and unit order (for `heddle status`).
    pub async fn unit_locks(&self) -> Result<Vec<BusyUnit>, ContainerError> {
        let options = ListContainersOptions {
            all: true,
            filters: Some(HashMap::from([(
                "label".to_string(),
                vec![UNIT_POOL_LABEL.to_string()],
            )])),
            ..Default::default()
        };
        let list = self
            .docker
            .list_containers(Some(options))
            .await
            .map_err(|source| ContainerError::List {
                label: UNIT_POOL_LABEL.to_string(),
                source,
            })?;
        let mut locks: Vec<BusyUnit> = list
            .into_iter()
            .filter_map(|c| {
                use bollard::models::ContainerSummaryStateEnum as S;
                let running = !matches!(c.state, Some(S::CREATED | S::EXITED | S::DEAD));
                let holder = EngineUnitHolder::from_labels(c.labels.as_ref()?)?;
                Some(BusyUnit {
                    pool: holder.pool.clone(),
                    unit: holder.unit,
                    holder: Some(holder),
                    id: c.id?,
                    running,
                })
            })
            .collect();
        locks.sort_by(|a, b| (&a.pool, a.unit).cmp(&(&b.pool, b.unit)));
        Ok(locks)
    }

    /// Remove lock container `id` (by id: if another heddle has taken the unit since, its
    /// container has another id and stays). Already gone is fine.
    pub async fn remove_unit(&self, id: &str) -> Result<(), ContainerError> {
        match self.docker.remove_container(id, Some(force_remove())).await {
            Ok(()) => Ok(()),
            Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(()),
            Err(source) => Err(ContainerError::Remove {
                container: id.to_string(),
                source,
            }),
        }
    }

    /// Return once container `id` is removed, or the engine cannot say (gone already, or the
    /// request failed): the caller tries again either way.
    pub async fn wait_unit_removed(&self, id: &str) {
        let options = WaitContainerOptions {
            condition: "removed".to_string(),
        };
        let _ = self.docker.wait_container(id, Some(options)).next().await;
    }
}

impl HeldUnit {
    /// The lock container's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The pool and the unit's index in it.
    pub fn unit(&self) -> (&str, u32) {
        (&self.pool, self.unit)
    }

    /// Answers `Ok(())` if the attach connection ends while the unit is held (the engine ended
    /// the lock container, or the network dropped it: another heddle may take the unit now),
    /// and an error once the unit is released or dropped. Given out once.
    pub fn lost(&mut self) -> Option<oneshot::Receiver<()>> {
        self.lost.take()
    }

    /// Release the unit now: remove the lock container (the next waiter's create succeeds as
    /// soon as this returns), then close its stdin.
    pub async fn release(mut self) -> Result<(), ContainerError> {
        self.watch = None;
        let removed = self.guard.remove_now().await;
        self.stdin = None;
        removed
    }
}

impl Drop for HeldUnit {
    fn drop(&mut self) {
        // No warning about a connection this drop closes on purpose. The guard then spawns
        // the removal.
        self.watch = None;
    }
}

/// A lock container: `cat` on stdin that only the holder has, no network, no capabilities, a
/// read-only root, removed by the engine when it exits.
fn lock_body(image: &str, holder: &EngineUnitHolder) -> ContainerCreateBody {
    ContainerCreateBody {
        image: Some(image.to_string()),
        // An entrypoint also keeps the image's own CMD out.
        entrypoint: Some(vec!["cat".to_string()]),
        labels: Some(holder.labels()),
        open_stdin: Some(true),
        stdin_once: Some(true),
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        tty: Some(false),
        host_config: Some(HostConfig {
            auto_remove: Some(true),
            network_mode: Some("none".to_string()),
            cap_drop: Some(vec!["ALL".to_string()]),
            readonly_rootfs: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    }
}

impl EngineUnitHolder {
    fn labels(&self) -> HashMap<String, String> {
        let mut labels = HashMap::from([
            (UNIT_POOL_LABEL.to_string(), self.pool.clone()),
            ("heddle.unit.index".to_string(), self.unit.to_string()),
            ("heddle.unit.hostname".to_string(), self.hostname.clone()),
            ("heddle.unit.run".to_string(), self.run.clone()),
            ("heddle.unit.instance".to_string(), self.instance.clone()),
        ]);
        if let Some(pid) = self.pid {
            labels.insert("heddle.unit.pid".to_string(), pid.to_string());
        }
        if let Some(since) = self.since_unix {
            labels.insert("heddle.unit.since".to_string(), since.to_string());
        }
        labels
    }

    /// The holder a lock container's labels name; `None` without a pool and unit.
    fn from_labels(labels: &HashMap<String, String>) -> Option<EngineUnitHolder> {
        let get = |k: &str| labels.get(&format!("heddle.unit.{k}")).cloned();
        Some(EngineUnitHolder {
            pool: get("pool")?,
            unit: get("index")?.parse().ok()?,
            pid: get("pid").and_then(|p| p.parse().ok()),
            hostname: get("hostname").unwrap_or_else(|| "?".into()),
            run: get("run").unwrap_or_else(|| "?".into()),
            instance: get("instance").unwrap_or_else(|| "?".into()),
            since_unix: get("since").and_then(|s| s.parse().ok()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_say_who_holds_the_unit_and_read_back() {
        let h = EngineUnitHolder {
            pool: "hailo".into(),
            unit: 1,
            pid: Some(42),
            hostname: "laptop-2".into(),
            run: "r1".into(),
            instance: "flash[i=1]".into(),
            since_unix: Some(1_700_000_000),
        };
        let labels = h.labels();
        assert_eq!(labels["heddle.unit.pool"], "hailo");
        assert_eq!(labels["heddle.unit.index"], "1");
        assert!(
            !labels.contains_key("heddle.managed"),
            "`heddle gc` must not find lock containers"
        );
        assert_eq!(EngineUnitHolder::from_labels(&labels), Some(h));
        assert_eq!(unit_container_name("hailo", 1), "heddle-unit-hailo-1");
        assert_eq!(EngineUnitHolder::from_labels(&HashMap::new()), None);
    }
}
