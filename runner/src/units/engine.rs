//! Units of a configured host's engine-wide pools: `pools = { hailo = { units = 1, scope =
//! "engine" } }` in hosts.toml. A plain `hailo = 1` is this run's capacity on the host; an
//! engine-wide pool is one set of units for every heddle, on any machine, that places stages
//! on that engine. Two engineers flashing one device box never run at the same time, and a
//! heddle that dies (kill -9, or its machine leaving the network) does not keep the unit: each
//! unit is a lock container on the engine, which the engine removes when the holder's
//! connection ends ([`heddle_containers::UnitTry`] says how, and what was checked).
//!
//! When: after the scheduler picked the host (and took this run's own units there, so at most
//! the run's share of instances ever ask the engine). The waiter stays on that host while it
//! waits for an engine-wide unit, even if another candidate host frees up: the simplest
//! correct choice, at the price of a wait that another host could have saved.
//!
//! All or nothing, in pool-name order: a try takes what the instance wants of every
//! engine-wide pool or gives back what it took before waiting, so two heddles that each want
//! two units can never each keep one forever.
//!
//! Waiting is not a busy poll of the remote engine: after a try that found units held, the
//! waiter asks the engine to answer when one of the lock containers in its way is removed (a
//! wait with condition `removed`: a release is seen within one round trip) or after
//! [`RECHECK`], whichever comes first, then tries again. A lock container seen not running for
//! [`STALE_AFTER`] by this heddle's own clock (created and never started, or exited and not
//! removed) belongs to a creator that died between create and start; it is removed by id.
//! Measuring by this heddle's clock keeps clock skew between machines out of it, and the delay
//! keeps a live creator, between its create and its start, from being mistaken for a dead one.
//!
//! A free unit is not yet a free device: nothing on the engine stops a stage container when
//! its heddle dies, and a heddle cut off by the network may not be dead at all. Stage
//! containers are labelled with the units held for them, and a new holder waits, holding the
//! units, until no container so labelled is running before its own stage starts.
//!
//! Cost: one create, attach and start and one list per unit taken, one forced removal per unit
//! released (`containers/examples/unit_lock.rs` measures them; benches/RESULTS.md, M4).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::future::{select_all, FutureExt};
use futures_util::stream::{FuturesUnordered, StreamExt};
use heddle_containers::{
    BusyUnit, ContainerError, Engine, EngineUnitHolder, HeldUnit, TlsFiles, UnitTry,
};
use tokio::sync::oneshot::error::TryRecvError;

/// The longest a waiter goes without trying again (the engine's "removed" answer usually
/// comes first).
pub const RECHECK: Duration = Duration::from_secs(1);

/// How long a lock container must be seen not running before it counts as a dead creator's.
/// A live creator goes from create to start in one attach round trip, far under this.
pub const STALE_AFTER: Duration = Duration::from_secs(5);

/// How long a release waits for the engine to remove a lock container. After that heddle
/// closes the connection and goes on: the engine frees the unit when it notices.
const RELEASE_WAIT: Duration = Duration::from_secs(10);

/// How long `heddle status` waits for a host's engine before calling it unreachable.
pub const STATUS_WAIT: Duration = Duration::from_secs(3);

/// The shortest time between two tries, so an engine that answers every wait at once is not
/// asked in a tight loop.
const MIN_GAP: Duration = Duration::from_millis(50);

/// A configured host as its engine-wide units see it. `crate::hosts` declares its pools with
/// [`super::pool_spec`], so this room reads a host through this view rather than import
/// `hosts` back (runner/tests/module_graph.rs keeps the rooms a layering).
#[derive(Debug, Clone, Copy)]
pub struct EngineHost<'a> {
    pub name: &'a str,
    /// The engine's address, as bollard takes it.
    pub docker: &'a str,
    pub tls: Option<&'a TlsFiles>,
    /// Pool name → units the host offers.
    pub pools: &'a BTreeMap<String, u32>,
    /// The pools shared by every heddle that places stages on this engine.
    pub engine_wide: &'a BTreeSet<String>,
}

/// What a taker says about itself on the lock containers (for waiters and `heddle status`).
#[derive(Debug, Clone, Copy)]
pub struct Taker<'a> {
    pub run: &'a str,
    pub instance: &'a str,
}

/// Units held on one engine; released when dropped, or now with [`EngineUnits::release`].
#[derive(Debug, Default)]
pub struct EngineUnits {
    held: Vec<HeldUnit>,
    /// Set once the engine has let go of one of them ([`EngineUnits::on_lost`]).
    lost: Arc<AtomicBool>,
}

#[derive(Debug, thiserror::Error)]
pub enum EngineUnitError {
    #[error("failed to take a unit of `{pool}` on host {host}")]
    Take {
        host: String,
        pool: String,
        #[source]
        source: ContainerError,
    },
    #[error("failed to take units on host {host}: heddle has no connection to its engine")]
    NotConnected { host: String },
}

/// The engine-wide pools among `wants` on `host`, with the units wanted of each, in name order.
pub fn engine_wide_wants(
    host: &EngineHost<'_>,
    wants: &BTreeMap<String, u32>,
) -> BTreeMap<String, u32> {
    wants
        .iter()
        .filter(|(pool, _)| host.engine_wide.contains(*pool))
        .map(|(pool, n)| (pool.clone(), *n))
        .collect()
}

/// Take `wants` (engine-wide pools of `host` → units) on `engine`, with lock containers from
/// `image`, waiting while other heddles hold them; `tell` is called once with whom it waits for.
/// Cancel by dropping the future: whatever a try had taken is released.
pub async fn take(
    engine: &Engine,
    host: &EngineHost<'_>,
    image: &str,
    wants: &BTreeMap<String, u32>,
    taker: Taker<'_>,
    tell: &(dyn Fn(String) + Sync),
) -> Result<EngineUnits, EngineUnitError> {
    let mut not_running_since: HashMap<String, Instant> = HashMap::new();
    let mut told = false;
    let mut rounds = 0;
    loop {
        rounds += 1;
        let tried = Instant::now();
        let busy = match try_all(engine, host, image, wants, taker).await? {
            Ok(units) => {
                wait_for_leftovers(engine, host, &units, tell).await?;
                return Ok(units);
            }
            Err(busy) => busy,
        };
        not_running_since.retain(|id, _| busy.iter().any(|b| &b.id == id && !b.running));
        let mut removed = false;
        for b in busy.iter().filter(|b| !b.running) {
            let first = *not_running_since.entry(b.id.clone()).or_insert(tried);
            if tried.duration_since(first) >= STALE_AFTER {
                engine
                    .remove_unit(&b.id)
                    .await
                    .map_err(|source| take_error(host, &b.pool, source))?;
                removed = true;
            }
        }
        if removed {
            continue;
        }
        // Whom it waits for, once: as soon as the engine can say (a lock container being
        // created or removed has no labels to read for a moment).
        if !told && (busy.iter().all(|b| b.holder.is_some()) || rounds > 3) {
            told = true;
            tell(waiting_for(host, &busy));
        }
        let removals: Vec<_> = busy
            .iter()
            .map(|b| engine.wait_unit_removed(&b.id).boxed())
            .collect();
        let any_removed = async {
            if removals.is_empty() {
                std::future::pending::<()>().await;
            }
            select_all(removals).await;
        };
        tokio::select! {
            _ = any_removed => {}
            _ = tokio::time::sleep(RECHECK) => {}
        }
        tokio::time::sleep(MIN_GAP.saturating_sub(tried.elapsed())).await;
    }
}

/// One try at every wanted unit: all of them, or none and the lock containers in the way.
async fn try_all(
    engine: &Engine,
    host: &EngineHost<'_>,
    image: &str,
    wants: &BTreeMap<String, u32>,
    taker: Taker<'_>,
) -> Result<Result<EngineUnits, Vec<BusyUnit>>, EngineUnitError> {
    let mut taken = EngineUnits::default();
    let mut busy = Vec::new();
    for (pool, want) in wants {
        let units = host.pools.get(pool).copied().unwrap_or(0);
        let mut got = 0;
        for unit in 0..units {
            if got == *want {
                break;
            }
            match engine
                .try_take_unit(image, &holder(taker, pool, unit))
                .await
            {
                Ok(UnitTry::Taken(u)) => {
                    taken.held.push(u);
                    got += 1;
                }
                Ok(UnitTry::Busy(b)) => busy.push(b),
                Err(source) => {
                    taken.release().await;
                    return Err(take_error(host, pool, source));
                }
            }
        }
        if got < *want {
            taken.release().await;
            return Ok(Err(busy));
        }
    }
    Ok(Ok(taken))
}

/// A unit is free once its lock container is gone, but a stage its last holder started may
/// still be running on the device: nothing on the engine stops a container when its heddle
/// dies, and after a network partition the holder may not even be dead. Stage containers are
/// labelled with the units held for them ([`heddle_containers::holds_label`]), so before the
/// new holder runs anything it waits, holding the units, for every such container to stop.
async fn wait_for_leftovers(
    engine: &Engine,
    host: &EngineHost<'_>,
    units: &EngineUnits,
    tell: &(dyn Fn(String) + Sync),
) -> Result<(), EngineUnitError> {
    for u in &units.held {
        let (name, (pool, unit)) = (u.name(), u.unit());
        let mut told = false;
        loop {
            let running = engine
                .running_holders_of(name)
                .await
                .map_err(|source| take_error(host, pool, source))?;
            let Some((id, labels)) = running.into_iter().next() else {
                break;
            };
            if !told {
                told = true;
                let label = |k: &str| labels.get(k).map_or("?", String::as_str);
                tell(format!(
                    "`{pool}`#{unit} is free, but container {} of run {} ({}), pid {} on {}, \
                     is still running on host {}, left by a heddle that lost the unit; waiting \
                     for it to end",
                    short(&id),
                    label("heddle.run"),
                    label("heddle.instance"),
                    label("heddle.pid"),
                    label("heddle.host"),
                    host.name
                ));
            }
            tokio::select! {
                _ = engine.wait_stopped(&id) => {}
                _ = tokio::time::sleep(RECHECK) => {}
            }
        }
    }
    Ok(())
}

fn holder(taker: Taker<'_>, pool: &str, unit: u32) -> EngineUnitHolder {
    EngineUnitHolder {
        pool: pool.to_string(),
        unit,
        pid: Some(std::process::id()),
        hostname: crate::hostname::hostname(),
        run: taker.run.to_string(),
        instance: taker.instance.to_string(),
        since_unix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .ok()
            .map(|d| d.as_secs()),
    }
}

fn take_error(host: &EngineHost<'_>, pool: &str, source: ContainerError) -> EngineUnitError {
    EngineUnitError::Take {
        host: host.name.to_string(),
        pool: pool.to_string(),
        source,
    }
}

impl EngineUnits {
    /// Release every unit now (each lock container removed before this returns). A removal the
    /// engine refuses, or does not answer within [`RELEASE_WAIT`], is only logged: closing the
    /// connection frees the unit anyway.
    pub async fn release(&mut self) {
        for u in self.held.drain(..) {
            let name = u.name().to_string();
            match tokio::time::timeout(RELEASE_WAIT, u.release()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(container = %name, "failed to remove a lock container: {e}")
                }
                Err(_) => tracing::warn!(
                    container = %name,
                    "the engine did not remove a lock container within {}s",
                    RELEASE_WAIT.as_secs()
                ),
            }
        }
    }

    /// Call `say` with a message if the engine lets go of one of these units while they are
    /// held (its connection to heddle ended: see the limits in docs/scale-out.md).
    pub fn on_lost(&mut self, host: &str, say: impl Fn(String) + Send + 'static) {
        let mut signals: Vec<_> = self
            .held
            .iter_mut()
            .filter_map(|u| {
                let (pool, unit) = u.unit();
                let text = format!(
                    "lost `{pool}`#{unit} on host {host}: the connection to its lock container \
                     ended while the unit was held, and another heddle may take it now"
                );
                u.lost().map(|rx| (rx, text))
            })
            .collect();
        // A unit already lost (while it was being taken, e.g. during the wait for leftovers)
        // is flagged now, before the caller goes on to start its stage.
        signals.retain_mut(|(rx, text)| match rx.try_recv() {
            Ok(()) => {
                self.lost.store(true, Ordering::Release);
                say(text.clone());
                false
            }
            Err(TryRecvError::Empty) => true,
            Err(TryRecvError::Closed) => false,
        });
        if signals.is_empty() {
            return;
        }
        let flag = self.lost.clone();
        // Ends once every unit is lost or released (a released unit's signal closes).
        tokio::spawn(async move {
            let mut all: FuturesUnordered<_> = signals
                .into_iter()
                .map(|(rx, text)| async move { rx.await.ok().map(|()| text) })
                .collect();
            while let Some(lost) = all.next().await {
                if let Some(text) = lost {
                    flag.store(true, Ordering::Release);
                    say(text);
                }
            }
        });
    }

    /// Whether the engine has let go of one of these units since they were taken (seen by
    /// [`EngineUnits::on_lost`]'s watch): another heddle may hold it now.
    pub fn any_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// The lock containers' names, for the labels of the stage container they are held for.
    pub fn names(&self) -> Vec<String> {
        self.held.iter().map(|u| u.name().to_string()).collect()
    }
}

/// What `heddle status` shows of one configured host's engine-wide pools.
#[derive(Debug)]
pub enum HostLocks {
    /// The lock containers of its engine-wide pools, in pool and unit order.
    Held(Vec<BusyUnit>),
    /// Its engine did not answer (within [`STATUS_WAIT`]): why.
    Unreachable(LocksUnknown),
}

/// Why a host's engine-wide pools could not be listed.
#[derive(Debug, thiserror::Error)]
pub enum LocksUnknown {
    /// Boxed, as large as bollard's error is.
    #[error(transparent)]
    Engine(Box<heddle_containers::ContainerError>),
    #[error("no answer within {}s", waited.as_secs())]
    Timeout { waited: Duration },
}

/// The lock containers of `host`'s engine-wide pools, asked of its engine with a short limit
/// so a host that is down does not hold up `heddle status`.
pub async fn locks_on(host: EngineHost<'_>) -> HostLocks {
    let ask = async {
        let engine = Engine::connect_with(Some(host.docker), host.tls).await?;
        engine.unit_locks().await
    };
    match tokio::time::timeout(STATUS_WAIT, ask).await {
        Ok(Ok(locks)) => HostLocks::Held(
            locks
                .into_iter()
                .filter(|l| {
                    l.holder
                        .as_ref()
                        .is_some_and(|h| host.engine_wide.contains(&h.pool))
                })
                .collect(),
        ),
        Ok(Err(e)) => HostLocks::Unreachable(LocksUnknown::Engine(Box::new(e))),
        Err(_) => HostLocks::Unreachable(LocksUnknown::Timeout {
            waited: STATUS_WAIT,
        }),
    }
}

/// `waiting for `hailo` on host devbox, held by pid 123 on laptop-2, run R (flash), since
/// unix T`, for every lock container in the way.
fn waiting_for(host: &EngineHost<'_>, busy: &[BusyUnit]) -> String {
    let mut pools: Vec<&str> = busy.iter().map(|b| b.pool.as_str()).collect();
    pools.dedup();
    let whom: Vec<String> = busy.iter().map(describe).collect();
    format!(
        "waiting for {} on host {}, held by {}",
        pools
            .iter()
            .map(|p| format!("`{p}`"))
            .collect::<Vec<_>>()
            .join(", "),
        host.name,
        whom.join("; ")
    )
}

/// One lock container's holder, as `heddle status` and the waiting message say it.
pub fn describe(b: &BusyUnit) -> String {
    let Some(h) = &b.holder else {
        return format!(
            "a container whose labels the engine did not show ({})",
            short(&b.id)
        );
    };
    let mut text = format!(
        "pid {} on {}, run {} ({}), since {}",
        h.pid.map_or("?".into(), |p| p.to_string()),
        h.hostname,
        h.run,
        h.instance,
        h.since_unix.map_or("?".into(), |t| format!("unix {t}")),
    );
    if !b.running {
        text.push_str(", not running");
    }
    text
}

/// An engine id as `docker ps` shortens it; a name stays whole.
fn short(id: &str) -> &str {
    if id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
        &id[..12]
    } else {
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy(pool: &str, running: bool) -> BusyUnit {
        BusyUnit {
            pool: pool.into(),
            unit: 0,
            id: "0123456789abcdef".repeat(4),
            running,
            holder: Some(EngineUnitHolder {
                pool: pool.into(),
                unit: 0,
                pid: Some(123),
                hostname: "laptop-2".into(),
                run: "20260101-120000-ab12".into(),
                instance: "flash".into(),
                since_unix: Some(1_700_000_000),
            }),
        }
    }

    #[test]
    fn the_waiting_message_names_the_holder() {
        let pools = BTreeMap::from([("hailo".into(), 1), ("gpu".into(), 2)]);
        let engine_wide = ["hailo".to_string()].into();
        let host = EngineHost {
            name: "devbox",
            docker: "tcp://devbox:2375",
            tls: None,
            pools: &pools,
            engine_wide: &engine_wide,
        };
        assert_eq!(
            waiting_for(&host, &[busy("hailo", true)]),
            "waiting for `hailo` on host devbox, held by pid 123 on laptop-2, \
             run 20260101-120000-ab12 (flash), since unix 1700000000"
        );
        let mut unlabelled = busy("hailo", false);
        unlabelled.holder = None;
        assert_eq!(
            describe(&unlabelled),
            "a container whose labels the engine did not show (0123456789ab)"
        );
        assert!(describe(&busy("hailo", false)).ends_with(", not running"));
        let wants = BTreeMap::from([("hailo".into(), 1), ("gpu".into(), 1)]);
        assert_eq!(
            engine_wide_wants(&host, &wants),
            BTreeMap::from([("hailo".into(), 1)])
        );
    }
}
