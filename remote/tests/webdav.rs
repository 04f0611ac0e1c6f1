//! The WebDAV backend against nginx (dav + dav-ext modules) on 127.0.0.1.

mod common;

use std::collections::HashMap;

use common::*;

fn url(server: &Server, path: &str) -> String {
    format!("webdav+http://127.0.0.1:{}/{path}", server.port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_into_an_empty_store() {
    let Some(server) = start_nginx() else { return };
    case_round_trip(open(
        &url(&server, "heddle"),
        &HashMap::new(),
        short_timeouts(),
    ))
    .await;
    assert!(server.dir.path().join("dav/heddle/ac").is_dir());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_blob_is_never_served() {
    let Some(server) = start_nginx() else { return };
    let dav = server.dir.path().join("dav/c");
    case_corrupt_blob(
        open(&url(&server, "c"), &HashMap::new(), short_timeouts()),
        |digest, bytes| std::fs::write(dav.join(format!("cas/{digest}")), bytes).unwrap(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_of_one_key() {
    let Some(server) = start_nginx() else { return };
    let u = url(&server, "w");
    case_concurrent_writers(|| open(&u, &HashMap::new(), short_timeouts())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_killed_gives_a_typed_error_without_hanging() {
    let Some(mut server) = start_nginx() else {
        return;
    };
    let t = short_timeouts();
    let remote = open(&url(&server, "k"), &HashMap::new(), t);
    let (err, _) = case_server_gone(remote.clone(), remote, t, 21, || server.kill()).await;
    assert!(err.is_unavailable(), "{err:?}");
}

/// The streamed PUT is aborted when the local blob no longer hashes to its name: nothing
/// appears under the blob's name, no temp upload is left, and no entry is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locally_corrupted_blob_is_not_uploaded() {
    let Some(server) = start_nginx() else { return };
    let remote = open(&url(&server, "lc"), &HashMap::new(), short_timeouts());
    // Several MiB, so the PUT is under way when the mismatch is found at the end.
    let (entry, model) = case_locally_corrupted_blob(remote, 22, 5 * 1024 * 1024).await;
    let dav = server.dir.path().join("dav/lc");
    assert!(!dav.join(format!("cas/{model}")).exists());
    assert!(!dav.join(format!("ac/{}.json", entry.key)).exists());
    let leftovers: Vec<_> = std::fs::read_dir(dav.join("tmp"))
        .map(|rd| rd.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
