//! The heddle side of benches/remote/run.sh: push a file as a one-output action, or fetch
//! that action into an empty store (a remote hit), through heddle-remote.
//!
//!   remote_bench push URL STORE FILE    prints the blob's digest
//!   remote_bench fetch URL STORE        fetches the action into STORE (must be empty)
//!
//! S3 endpoint and credentials come from the AWS variables, as in heddle.

use std::path::Path;
use std::sync::Arc;

use heddle_cache::{ActionEntry, Digest, Store};
use heddle_remote::{
    fetch_action, push_action, OpendalCache, ReadRules, RemoteUrl, S3Settings, SigningKey,
    Timeouts, TrustedWriters,
};

// heddle's own allocator: with glibc's, every large chunk buffer was a fresh mmap whose pages
// the kernel zeroed, a cost the heddle binary does not pay.
#[cfg(unix)]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let url = RemoteUrl::parse(&args[2]).unwrap();
    let env = |k: &str| std::env::var(k).ok();
    let remote =
        OpendalCache::open(&url, &S3Settings::default(), &env, Timeouts::default()).unwrap();
    let store = Arc::new(Store::open(Path::new(&args[3])).unwrap());
    let key = Digest::of_bytes(b"heddle remote bench");
    // A fixed key both sides agree on: the bench measures transfers, signed as heddle signs.
    let signer = SigningKey::from_seed([7; 32]);
    let rules = ReadRules {
        writers: TrustedWriters::of([(signer.public(), "bench".to_string())]),
        ..ReadRules::default()
    };
    match args[1].as_str() {
        "push" => {
            let out = store.put_output(Path::new(&args[4])).unwrap();
            let entry = ActionEntry {
                key,
                family: "bench".into(),
                key_parts: serde_json::json!({}),
                outputs: [("big".to_string(), out.clone())].into_iter().collect(),
                duration_ms: 0,
                created_unix_ms: 0,
                meta: serde_json::json!({}),
            };
            store.record_action(&entry).unwrap();
            rt.block_on(push_action(&remote, &store, &entry, &signer))
                .unwrap();
            println!("{}", out.digest());
        }
        "fetch" => {
            let (_, report) = rt
                .block_on(fetch_action(&remote, store.clone(), key, &rules, None))
                .unwrap()
                .expect("pushed first");
            assert_eq!(report.blobs_fetched, 1);
        }
        other => panic!("unknown command {other}"),
    }
}
