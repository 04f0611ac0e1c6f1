//! A placed instance's units on the host that runs it ([`crate::hosts`]): each host's pools
//! are its own capacity, so `gpu = 2` on two hosts runs four GPU instances at once.
//!
//! The instance waits on every candidate host at the same time and takes the first whose
//! units are all free; the waits it drops release whatever they had taken (tokio's semaphore
//! permits are returned on drop, and a dropped `acquire` leaves the queue). Within one host the
//! pools are taken in name order, as the run's own pools are, so two waiters cannot deadlock.

use std::collections::BTreeMap;

use futures_util::future::{select_all, BoxFuture, FutureExt};
use tokio::sync::{Semaphore, SemaphorePermit};

/// This run's units on every configured host: one semaphore per (host, pool) the hosts offer.
#[derive(Debug, Default)]
pub struct HostSlots(BTreeMap<(String, String), Semaphore>);

impl HostSlots {
    /// The units of every configured host: (host name, its pools).
    pub fn new<'a>(hosts: impl IntoIterator<Item = (&'a str, &'a BTreeMap<String, u32>)>) -> Self {
        let slots = hosts.into_iter().flat_map(|(host, pools)| {
            pools
                .iter()
                .map(move |(pool, n)| (host, pool.as_str(), *n as usize))
        });
        Self::of_sizes(slots)
    }

    fn of_sizes<'a>(sizes: impl IntoIterator<Item = (&'a str, &'a str, usize)>) -> Self {
        HostSlots(
            sizes
                .into_iter()
                .map(|(h, p, n)| ((h.to_string(), p.to_string()), Semaphore::new(n)))
                .collect(),
        )
    }

    /// Wait until one of `candidates` has all of `wants` free; take them there. Returns the
    /// host and its permits (held until the instance ends).
    pub async fn take_on_some_host<'a>(
        &'a self,
        candidates: &[&str],
        wants: &'a BTreeMap<String, u32>,
    ) -> (String, Vec<SemaphorePermit<'a>>) {
        let waits: Vec<BoxFuture<'a, (String, Vec<SemaphorePermit<'a>>)>> = candidates
            .iter()
            .map(|host| {
                let host = host.to_string();
                async move {
                    let mut permits = Vec::new();
                    for (pool, n) in wants {
                        let sem = &self.0[&(host.clone(), pool.clone())];
                        permits.push(sem.acquire_many(*n).await.expect("host pool open"));
                    }
                    (host, permits)
                }
                .boxed()
            })
            .collect();
        select_all(waits).await.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn units(spec: &[(&str, &str, usize)]) -> HostSlots {
        HostSlots::of_sizes(spec.iter().copied())
    }

    #[tokio::test]
    async fn units_are_taken_per_host_and_a_full_host_is_passed_over() {
        let units = units(&[("a", "gpu", 1), ("b", "gpu", 1)]);
        let hosts = ["a", "b"];
        let wants = BTreeMap::from([("gpu".to_string(), 1)]);
        let (first, _p1) = units.take_on_some_host(&hosts, &wants).await;
        assert_eq!(first, "a");
        let (second, p2) = units.take_on_some_host(&hosts, &wants).await;
        assert_eq!(second, "b", "a is full");
        drop(p2);
        let (again, _p3) = units.take_on_some_host(&hosts, &wants).await;
        assert_eq!(again, "b");
        assert_eq!(units.0[&("a".into(), "gpu".into())].available_permits(), 0);
    }

    #[tokio::test]
    async fn what_a_losing_host_had_taken_is_given_back() {
        let units = units(&[
            ("a", "gpu", 1),
            ("a", "hailo", 1),
            ("b", "gpu", 1),
            ("b", "hailo", 1),
        ]);
        let busy = units.0[&("a".into(), "hailo".into())]
            .acquire()
            .await
            .unwrap();
        let hosts = ["a", "b"];
        let wants = BTreeMap::from([("gpu".to_string(), 1), ("hailo".to_string(), 1)]);
        let (on, _held) = units.take_on_some_host(&hosts, &wants).await;
        assert_eq!(on, "b");
        assert_eq!(
            units.0[&("a".into(), "gpu".into())].available_permits(),
            1,
            "a's gpu, taken while waiting for a's hailo, is free again"
        );
        drop(busy);
    }
}
