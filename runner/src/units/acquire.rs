//! Everything one instance holds while it runs, taken in one fixed order so that two waiters
//! can never each hold what the other waits for: per pool in name order, this run's units and
//! then the machine's; then, for a placed stage, the units of one candidate host and that
//! engine's shared units; then a job slot, unless placed.
//!
//! Each wait races the run's graceful cancellation: an interrupt drops what was taken so far
//! (permits return, lock files unlock, lock containers are removed) and says so with
//! [`AcquireError::Interrupted`], so the instance ends as interrupted before it started.

use std::collections::BTreeMap;
use std::sync::Arc;

use heddle_containers::Engine;
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio_util::sync::CancellationToken;

use super::engine::{self, EngineHost, EngineUnitError, EngineUnits};
use super::machine::{self, MachineUnitError, MachineUnits};
use super::placed::HostSlots;
use super::run::RunPools;

/// How the units code says what it waits for, or that a held unit was lost. Shared, because
/// a held engine unit may report its loss after [`acquire`] has returned.
pub type Say = Arc<dyn Fn(String) + Send + Sync>;

/// A configured host a placed instance may run on.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    pub host: EngineHost<'a>,
    /// Its engine, when heddle connected to it before the run.
    pub engine: Option<&'a Engine>,
}

/// What one instance asks for and where its units come from, borrowed from the run.
pub struct Request<'a> {
    /// Who asks, as lock files and lock containers name their holder.
    pub run_id: &'a str,
    pub instance: &'a str,
    /// Pool name → units the stage needs.
    pub wants: &'a BTreeMap<String, u32>,
    pub run_pools: &'a RunPools,
    /// The hosts it may be placed on, in order of preference; empty when it runs here (or the
    /// cluster places it).
    pub candidates: Vec<Candidate<'a>>,
    pub host_slots: &'a HostSlots,
    /// The image engine lock containers are made from: the instance's, as resolved before
    /// the run (already on every candidate's engine).
    pub image: Option<&'a str>,
    /// `--jobs`, taken unless the instance is placed; `None` when a cluster bounds the work.
    pub jobs: Option<&'a Semaphore>,
    /// The run's graceful stop.
    pub cancel: &'a CancellationToken,
    pub say: Say,
}

/// What a running instance holds until it ends. Dropping it gives everything back; engine
/// units are better released with [`EngineUnits::release`] as soon as the stage ends.
pub struct Held<'a> {
    _run: Vec<SemaphorePermit<'a>>,
    _machine: Vec<MachineUnits>,
    _placed: Vec<SemaphorePermit<'a>>,
    /// The engine-wide units of the host it was placed on.
    pub engine_units: EngineUnits,
    /// The configured host it runs on, for a placed stage.
    pub host: Option<String>,
    _job: Option<SemaphorePermit<'a>>,
}

#[derive(Debug, thiserror::Error)]
pub enum AcquireError {
    /// The run was stopped while the instance waited.
    #[error("interrupted while waiting for resource units")]
    Interrupted,
    #[error(transparent)]
    Machine(#[from] MachineUnitError),
    #[error(transparent)]
    Engine(#[from] EngineUnitError),
}

/// Take everything `req` asks for, waiting as long as it takes or until the run is stopped.
pub async fn acquire<'a>(req: Request<'a>) -> Result<Held<'a>, AcquireError> {
    let stopped = req.cancel;
    let mut run = Vec::new();
    let mut machine_units = Vec::new();
    for (name, n) in req.wants {
        let pool = req.run_pools.get(name);
        tokio::select! {
            p = pool.semaphore.acquire_many(*n) => run.push(p.expect("pool open")),
            _ = stopped.cancelled() => return Err(AcquireError::Interrupted),
        }
        if pool.machine_wide {
            let who = (req.run_id, req.instance);
            tokio::select! {
                u = machine::take(name, pool.units, *n, who, &*req.say) => machine_units.push(u?),
                _ = stopped.cancelled() => return Err(AcquireError::Interrupted),
            }
        }
    }
    let (host, placed, engine_units) = if req.candidates.is_empty() {
        (None, Vec::new(), EngineUnits::default())
    } else {
        let names: Vec<&str> = req.candidates.iter().map(|c| c.host.name).collect();
        let (name, placed) = tokio::select! {
            got = req.host_slots.take_on_some_host(&names, req.wants) => got,
            _ = stopped.cancelled() => return Err(AcquireError::Interrupted),
        };
        let on = req
            .candidates
            .iter()
            .find(|c| c.host.name == name)
            .expect("placed on a candidate");
        // On the host just picked, even if another frees up meanwhile (see super::engine).
        let units = tokio::select! {
            u = take_engine_units(&req, on) => u?,
            _ = stopped.cancelled() => return Err(AcquireError::Interrupted),
        };
        (Some(name), placed, units)
    };
    // `--jobs` bounds what runs here. A placed instance runs on its host's engine, bounded by
    // that host's pools (taken above), so it takes no local slot: a GPU box's stage does not
    // wait behind the laptop's own work. A cluster's job is bounded by the cluster.
    let job = match (&host, req.jobs) {
        (None, Some(jobs)) => tokio::select! {
            p = jobs.acquire() => Some(p.expect("jobs open")),
            _ = stopped.cancelled() => return Err(AcquireError::Interrupted),
        },
        _ => None,
    };
    Ok(Held {
        _run: run,
        _machine: machine_units,
        _placed: placed,
        engine_units,
        host,
        _job: job,
    })
}

/// The units of `on`'s engine-wide pools that the instance asks for, taken with lock
/// containers from the instance's image.
async fn take_engine_units(
    req: &Request<'_>,
    on: &Candidate<'_>,
) -> Result<EngineUnits, EngineUnitError> {
    let host = &on.host;
    let wants = engine::engine_wide_wants(host, req.wants);
    if wants.is_empty() {
        return Ok(EngineUnits::default());
    }
    let engine = on.engine.ok_or_else(|| EngineUnitError::NotConnected {
        host: host.name.to_string(),
    })?;
    let image = req.image.expect("a placed stage runs in a container");
    let taker = engine::Taker {
        run: req.run_id,
        instance: req.instance,
    };
    let mut units = engine::take(engine, host, image, &wants, taker, &*req.say).await?;
    let say = req.say.clone();
    units.on_lost(host.name, move |text| say(text));
    Ok(units)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use super::*;

    fn request<'a>(
        wants: &'a BTreeMap<String, u32>,
        run_pools: &'a RunPools,
        candidates: Vec<Candidate<'a>>,
        host_slots: &'a HostSlots,
        jobs: &'a Semaphore,
        cancel: &'a CancellationToken,
    ) -> Request<'a> {
        Request {
            run_id: "r",
            instance: "probe",
            wants,
            run_pools,
            candidates,
            host_slots,
            image: None,
            jobs: Some(jobs),
            cancel,
            say: Arc::new(|_| {}),
        }
    }

    #[tokio::test]
    async fn an_interrupt_while_waiting_gives_back_what_was_taken() {
        let sizes = BTreeMap::from([("gpu".to_string(), 1), ("hailo".to_string(), 1)]);
        let pools = RunPools::new(&sizes, &BTreeSet::new());
        let busy = pools.get("hailo").semaphore.acquire().await.unwrap();
        let (slots, jobs, cancel) = (
            HostSlots::default(),
            Semaphore::new(1),
            CancellationToken::new(),
        );
        let req = request(&sizes, &pools, Vec::new(), &slots, &jobs, &cancel);
        // Whichever is polled first, the instance is stopped with the gpu unit given back.
        let (got, ()) = tokio::join!(acquire(req), async { cancel.cancel() });
        assert!(matches!(got, Err(AcquireError::Interrupted)));
        assert_eq!(
            pools.get("gpu").semaphore.available_permits(),
            1,
            "gpu given back"
        );
        drop(busy);
    }

    #[tokio::test]
    async fn a_placed_instance_takes_no_job_slot_and_one_here_does() {
        let wants = BTreeMap::from([("gpu".to_string(), 1)]);
        let pools = RunPools::new(&wants, &BTreeSet::new());
        let (engine_wide, cancel) = (BTreeSet::new(), CancellationToken::new());
        let host = EngineHost {
            name: "far",
            docker: "tcp://far:2375",
            tls: None,
            pools: &wants,
            engine_wide: &engine_wide,
        };
        let slots = HostSlots::new([("far", &wants)]);
        let no_jobs = Semaphore::new(0);
        let on = vec![Candidate { host, engine: None }];
        let req = request(&wants, &pools, on, &slots, &no_jobs, &cancel);
        let held = acquire(req).await.unwrap();
        assert_eq!(held.host.as_deref(), Some("far"));
        drop(held);

        let req = request(&wants, &pools, Vec::new(), &slots, &no_jobs, &cancel);
        let here = tokio::time::timeout(Duration::from_millis(50), acquire(req)).await;
        assert!(here.is_err(), "waits for a job slot");
    }
}
