//! What signing costs a remote hit and a write-back, per entry (docs/scale-out.md, "Trust";
//! budget: at most 1 ms more per remote hit than without signatures).
//!
//!   cargo run --release -p heddle-remote --example sign_bench [ENTRIES]
//!
//! The entry is shaped like a real one: a file output, a folder output and an expanded key of
//! about 2 KiB (the largest part of an entry). Measured: the reader's added work per hit (parse
//! the signature field, build the signed bytes, verify ed25519, look the key up in the trust
//! list), next to what a hit already spent on the entry before signatures (parse the entry
//! JSON); and the writer's (sign and serialise). The transfers themselves are unchanged: the
//! signature adds ~230 bytes to an entry of a few KiB.

use std::collections::BTreeMap;
use std::time::Instant;

use heddle_cache::{ActionEntry, Digest, OutputEntry};
use heddle_remote::{signed_entry_json, EntrySignature, SigningKey, TrustedWriters};

fn entry(i: u64) -> ActionEntry {
    let mut outputs = BTreeMap::new();
    outputs.insert(
        "hef".to_string(),
        OutputEntry::File {
            digest: Digest::of_bytes(&i.to_le_bytes()),
            size: 12_345_678,
            executable: false,
        },
    );
    outputs.insert(
        "calib".to_string(),
        OutputEntry::Dir {
            digest: Digest::of_bytes(&(i + 1).to_le_bytes()),
            size: 64 * 1024 * 1024,
            files: 512,
        },
    );
    let params: serde_json::Map<String, serde_json::Value> = (0..40)
        .map(|p| {
            (
                format!("param_{p:02}"),
                serde_json::json!(format!("value-{p}-{i}")),
            )
        })
        .collect();
    ActionEntry {
        key: Digest::of_bytes(format!("action {i}").as_bytes()),
        family: "pipelines/flagship/compile".into(),
        key_parts: serde_json::json!({ "params": params, "image": "sha256:".to_string() + &"ab".repeat(32) }),
        outputs,
        duration_ms: 1234,
        created_unix_ms: 1_700_000_000_000,
        meta: serde_json::json!({ "label": format!("compile[{i}]") }),
    }
}

#[derive(serde::Deserialize)]
struct Signed {
    signature: Option<EntrySignature>,
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2000);
    let writer = SigningKey::from_seed([3; 32]);
    // A team's list: the writer among 20 keys.
    let trusted = TrustedWriters::of((0..20u8).map(|s| {
        let k = if s == 7 {
            writer.public()
        } else {
            SigningKey::from_seed([100 + s; 32]).public()
        };
        (k, format!("writer-{s}"))
    }));
    let entries: Vec<ActionEntry> = (0..n).map(entry).collect();

    let t = Instant::now();
    let signed: Vec<Vec<u8>> = entries
        .iter()
        .map(|e| signed_entry_json(e, &writer).unwrap())
        .collect();
    let write_signed = t.elapsed();
    let t = Instant::now();
    let plain: Vec<Vec<u8>> = entries
        .iter()
        .map(|e| serde_json::to_vec_pretty(e).unwrap())
        .collect();
    let write_plain = t.elapsed();

    // What a hit did before signatures: parse the entry.
    let t = Instant::now();
    for bytes in &plain {
        let e: ActionEntry = serde_json::from_slice(bytes).unwrap();
        std::hint::black_box(e);
    }
    let read_plain = t.elapsed();
    // What it does now: parse the entry, parse its signature, check it.
    let t = Instant::now();
    for bytes in &signed {
        let e: ActionEntry = serde_json::from_slice(bytes).unwrap();
        let sig = serde_json::from_slice::<Signed>(bytes).unwrap().signature;
        let w = trusted.check(&e, sig.as_ref()).unwrap();
        std::hint::black_box(w);
    }
    let read_signed = t.elapsed();

    let per = |d: std::time::Duration| d.as_secs_f64() * 1e6 / n as f64;
    let avg_len = |v: &[Vec<u8>]| v.iter().map(Vec::len).sum::<usize>() / v.len();
    println!(
        "{n} entries of ~{} bytes signed (~{} unsigned)",
        avg_len(&signed),
        avg_len(&plain)
    );
    println!(
        "reader, per remote hit: {:7.1} us before signatures, {:7.1} us now: +{:.1} us (budget 1000 us)",
        per(read_plain),
        per(read_signed),
        per(read_signed) - per(read_plain)
    );
    println!(
        "writer, per write-back: {:7.1} us before signatures, {:7.1} us now: +{:.1} us",
        per(write_plain),
        per(write_signed),
        per(write_signed) - per(write_plain)
    );
}
