//! Per-stage overhead of the store: put one small output + record its action, for N stages;
//! then N lookups. Prints the cost per stage for each durability mode.
//!
//! Usage: `cargo run --release -p heddle-cache --example store_bench -- [DIR] [N]`

use std::collections::BTreeMap;
use std::time::Instant;

use heddle_cache::{ActionEntry, Digest, Durability, Store, StoreOptions};

fn main() {
    let mut args = std::env::args().skip(1);
    let base = args
        .next()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let n: u32 = args
        .next()
        .map(|s| s.parse().expect("N is a number"))
        .unwrap_or(1000);
    for (name, durability, batch) in [
        ("group-commit", Durability::GroupCommit, 1),
        (
            "group-commit, record_actions of 50",
            Durability::GroupCommit,
            50,
        ),
        ("none", Durability::None, 1),
    ] {
        let dir = base.join(format!(
            "heddle-store-bench-{}-{batch}-{name}",
            std::process::id()
        ));
        let store =
            Store::open_with(&dir.join("store"), StoreOptions { durability }).expect("open store");
        let scratch = dir.join("scratch");
        std::fs::create_dir_all(&scratch).unwrap();
        let mut keys = Vec::new();
        let mut done = Vec::new();
        let mut put_only = std::time::Duration::ZERO;
        let start = Instant::now();
        for i in 0..n {
            let p = scratch.join(format!("out{i}.txt"));
            std::fs::write(&p, format!("output of stage {i}\n")).unwrap();
            let t = Instant::now();
            let out = store.put_output(&p).expect("put");
            put_only += t.elapsed();
            let key = Digest::of_bytes(format!("key {i}").as_bytes());
            keys.push(key);
            let entry = ActionEntry {
                key,
                family: format!("bench/stage{}", i % 10),
                key_parts: serde_json::json!({ "i": i }),
                outputs: BTreeMap::from([("out".to_string(), out)]),
                duration_ms: 1,
                created_unix_ms: i as u64,
                meta: serde_json::Value::Null,
            };
            done.push(entry);
            if done.len() >= batch {
                store.record_actions(&done).expect("record");
                done.clear();
            }
        }
        store.record_actions(&done).expect("record");
        let put = start.elapsed();
        let start = Instant::now();
        for k in &keys {
            assert!(store.lookup_action(k).expect("lookup").is_some());
        }
        let look = start.elapsed();
        println!(
            "{name:>36}: put+record {:.3} ms/stage ({n} stages, {:.2} s; put_output alone {:.3} ms); lookup {:.1} us/key ({n} lookups, {:.1} ms)",
            put.as_secs_f64() * 1e3 / n as f64,
            put.as_secs_f64(),
            put_only.as_secs_f64() * 1e3 / n as f64,
            look.as_secs_f64() * 1e6 / n as f64,
            look.as_secs_f64() * 1e3,
        );
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
