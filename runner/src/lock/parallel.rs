//! Printing a long document on every core, in order: the items are cut into chunks, worker
//! threads print chunks as they come free, and the caller receives the chunks' text in item
//! order, a few chunks ahead at most (memory stays in proportion to the chunk, not the
//! document).
//!
//! The lock of a 100,000-value matrix is 100,000 TOML tables; printed on one thread it was a
//! third of a no-op run's wall time.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::sync_channel;

/// Items per chunk: large enough that handing a chunk over costs nothing next to printing it.
const CHUNK: usize = 512;

/// Call `print` on consecutive ranges covering `0..len` (on worker threads when there is
/// enough to share) and `take` on each range's text, in range order. The first error, from
/// either side, stops the work and is returned.
pub(super) fn print_in_order<E: Send>(
    len: usize,
    print: impl Fn(Range<usize>) -> Result<String, E> + Sync,
    mut take: impl FnMut(String) -> Result<(), E>,
) -> Result<(), E> {
    let chunks = len.div_ceil(CHUNK);
    let range = |c: usize| c * CHUNK..((c + 1) * CHUNK).min(len);
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(chunks);
    if workers < 2 {
        return (0..chunks).try_for_each(|c| take(print(range(c))?));
    }
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        // Bounded: a worker that runs ahead waits, so at most this many chunks are held.
        let (tx, rx) = sync_channel::<(usize, Result<String, E>)>(2 * workers);
        for _ in 0..workers {
            let tx = tx.clone();
            let (next, print) = (&next, &print);
            s.spawn(move || loop {
                let c = next.fetch_add(1, Ordering::Relaxed);
                // A send fails once the receiver stopped on an error: stop too.
                if c >= chunks || tx.send((c, print(range(c)))).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        let mut early: BTreeMap<usize, Result<String, E>> = BTreeMap::new();
        let mut want = 0;
        for (c, text) in rx.iter() {
            early.insert(c, text);
            while let Some(text) = early.remove(&want) {
                take(text?)?;
                want += 1;
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn printed(len: usize) -> String {
        (0..len).map(|i| format!("{i},")).collect()
    }

    #[test]
    fn chunks_arrive_in_order_whatever_the_length() {
        for len in [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 7 * CHUNK + 3] {
            let mut out = String::new();
            print_in_order::<()>(
                len,
                |r| Ok(r.map(|i| format!("{i},")).collect()),
                |t| {
                    out.push_str(&t);
                    Ok(())
                },
            )
            .unwrap();
            assert_eq!(out, printed(len), "len {len}");
        }
    }

    #[test]
    fn the_first_error_stops_the_work() {
        let len = 20 * CHUNK;
        let bad = 5 * CHUNK;
        let mut taken = 0;
        let res = print_in_order(
            len,
            |r| {
                if r.contains(&bad) {
                    Err(format!("item {bad}"))
                } else {
                    Ok(String::new())
                }
            },
            |_| {
                taken += 1;
                Ok(())
            },
        );
        assert_eq!(res, Err(format!("item {bad}")));
        assert_eq!(taken, 5, "the chunks before the bad one, and no more");
        let res = print_in_order(len, |_| Ok(String::new()), |_| Err("full disk"));
        assert_eq!(res, Err("full disk"));
    }
}
