//! Hash a file with `heddle_cache::hash_file` and print the throughput.
//!
//! Usage: `cargo run --release -p heddle-cache --example hash_bench -- FILE [REPEAT]`

use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        eprintln!("usage: hash_bench FILE [REPEAT]");
        std::process::exit(2);
    };
    let repeat: u32 = args
        .next()
        .map(|r| r.parse().expect("REPEAT is a number"))
        .unwrap_or(3);
    let len = std::fs::metadata(&path).expect("stat FILE").len();
    let mut best = f64::INFINITY;
    for _ in 0..repeat.max(1) {
        let start = Instant::now();
        let d = heddle_cache::hash_file(std::path::Path::new(&path)).expect("hash FILE");
        let secs = start.elapsed().as_secs_f64();
        best = best.min(secs);
        println!("{d}  {path}  {secs:.3} s");
    }
    let gib = len as f64 / (1u64 << 30) as f64;
    println!("best {best:.3} s for {gib:.3} GiB: {:.3} GiB/s", gib / best);
}
