//! The S3 backend against moto's server on 127.0.0.1, started and killed by each test.

mod common;

use std::time::Instant;

use common::*;
use heddle_remote::{fetch_action, push_action, RemoteError, Timeouts};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_into_an_empty_store() {
    let Some(server) = start_moto() else { return };
    case_round_trip(s3_remote(&server, "team/cache", short_timeouts())).await;
    // The objects really are in the bucket, under the prefix.
    boto(
        &server,
        &format!("keys = [o['Key'] for o in s3.list_objects_v2(Bucket='{BUCKET}')['Contents']]\nassert all(k.startswith('team/cache/cas/') or k.startswith('team/cache/ac/') for k in keys), keys\nassert len(keys) == 6, keys"),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_blob_is_never_served() {
    let Some(server) = start_moto() else { return };
    let remote = s3_remote(&server, "c", short_timeouts());
    let dir = server.dir.path().to_path_buf();
    case_corrupt_blob(remote, |digest, bytes| {
        // Overwrite the object directly in the bucket.
        let f = dir.join("evil");
        std::fs::write(&f, bytes).unwrap();
        boto(
            &server,
            &format!(
                "s3.put_object(Bucket='{BUCKET}', Key='c/cas/{digest}', Body=open('{}', 'rb').read())",
                f.display()
            ),
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_of_one_key() {
    let Some(server) = start_moto() else { return };
    case_concurrent_writers(|| s3_remote(&server, "w", short_timeouts())).await;
}

/// The server dies between the push and the fetch: the fetch fails with an error that says
/// the remote is unavailable, within the timeout, and the local store is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_killed_gives_a_typed_error_without_hanging() {
    let Some(mut server) = start_moto() else {
        return;
    };
    let t = short_timeouts();
    let remote = s3_remote(&server, "k", t);
    let a = local();
    let entry = make_action(&a, 11, 100_000);
    push_action(&*remote, &a.store, &entry).await.unwrap();
    server.kill();
    let b = local();
    let started = Instant::now();
    let err = fetch_action(&*remote, b.store.clone(), entry.key)
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < hang_bound(t),
        "took {:?}",
        started.elapsed()
    );
    assert!(err.is_unavailable(), "{err:?}");
    assert!(b.store.lookup_action(&entry.key).unwrap().is_none());
    let err = push_action(&*remote, &a.store, &entry).await.unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
}

/// A server that accepts connections but never answers (SIGSTOP): a timeout, not a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_server_times_out() {
    let Some(server) = start_moto() else { return };
    let t = Timeouts {
        request: std::time::Duration::from_secs(2),
        idle: std::time::Duration::from_secs(2),
    };
    let remote = s3_remote(&server, "f", t);
    let a = local();
    let entry = make_action(&a, 12, 100_000);
    push_action(&*remote, &a.store, &entry).await.unwrap();
    server.stop();
    let b = local();
    let started = Instant::now();
    let err = fetch_action(&*remote, b.store.clone(), entry.key)
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < hang_bound(t),
        "took {:?}",
        started.elapsed()
    );
    assert!(
        matches!(err, RemoteError::Timeout { .. }),
        "expected a timeout, got {err:?}"
    );
    assert!(err.to_string().contains("no answer within 2 s"), "{err}");
    server.resume();
}
