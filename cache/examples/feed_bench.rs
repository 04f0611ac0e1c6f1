//! What blob verification costs on a large artefact (issue 14): a blob from an earlier run fed
//! to a stage (re-hashed once per process), the same blob fed again (stat only), the check
//! after the stage (stat only), and a plain restore into `out/` (trusted on its stat).
//!
//! Usage: `cargo run --release -p heddle-cache --example feed_bench -- [MIB]` (default 1024).
//! Writes MIB of data under a temp dir on the current filesystem.

use std::io::Write;
use std::time::Instant;

use heddle_cache::Store;

fn main() {
    let mib: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("MIB is a number"))
        .unwrap_or(1024);
    let dir = tempfile::tempdir_in(".").expect("temp dir");
    let src = dir.path().join("artefact.bin");
    {
        let mut f = std::fs::File::create(&src).expect("create");
        let chunk: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
        for _ in 0..mib {
            f.write_all(&chunk).expect("write");
        }
    }
    let root = dir.path().join("store");
    let entry = Store::open(&root)
        .expect("store")
        .adopt_output(&src)
        .expect("store the artefact");

    // A new process: nothing vouched for yet.
    let store = Store::open(&root).expect("store");
    let time = |what: &str, f: &mut dyn FnMut()| {
        let t = Instant::now();
        f();
        let s = t.elapsed().as_secs_f64();
        println!("{what:<34} {:>9.3} ms", s * 1e3);
        s
    };
    let first = time("feed (re-hash, first in process)", &mut || {
        store
            .link_into(&entry, &dir.path().join("in-1"))
            .expect("feed")
    });
    time("feed again (stat only)", &mut || {
        store
            .link_into(&entry, &dir.path().join("in-2"))
            .expect("feed")
    });
    time("check after the stage (stat only)", &mut || {
        store.check_fed(&entry).expect("intact")
    });
    time("restore into out/ (stat only)", &mut || {
        store
            .materialize(&entry, &dir.path().join("out.bin"))
            .expect("restore")
    });
    println!(
        "{mib} MiB: first feed verifies at {:.2} GiB/s",
        mib as f64 / 1024.0 / first
    );
}
