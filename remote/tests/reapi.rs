//! The REAPI backend against BuildGrid 0.4.4 on 127.0.0.1 (CAS, ByteStream and ActionCache),
//! started and killed by each test.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use heddle_cache::{Digest, OutputEntry};
use heddle_remote::{
    fetch_action, fetch_blob, push_action, upload_blob, ReapiCache, ReapiOptions, RemoteError,
    RemoteUrl, Timeouts, CA_FILE_VAR, CLIENT_CERT_VAR, CLIENT_KEY_VAR, REAPI_BATCH_MAX,
    REAPI_HEADERS_VAR,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_into_an_empty_store() {
    let Some(server) = start_buildgrid(BlobStorage::Memory) else {
        return;
    };
    // The model output (3 MiB) is over the batch limit: it takes the ByteStream path, the
    // tree's files and the manifest the batch path.
    const { assert!(REAPI_BATCH_MAX < 3 * 1024 * 1024) };
    case_round_trip(reapi_remote(&server, REAPI_INSTANCE, reapi_timeouts())).await;
}

/// `grpcs://`: the round trip over TLS when the team's CA is named, and a clear failure (the
/// certificate, not a timeout) when the server's certificate chains to nothing trusted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcs_round_trips_with_the_teams_ca_and_refuses_an_untrusted_server() {
    let Some(server) = start_buildgrid_tls() else {
        return;
    };
    let ca = server.dir.path().join("tls/ca.crt");
    let url = format!("grpcs://127.0.0.1:{}/{REAPI_INSTANCE}", server.port);
    let open = |ca: Option<&std::path::Path>| {
        let env = |k: &str| {
            ca.filter(|_| k == CA_FILE_VAR)
                .map(|p| p.display().to_string())
        };
        open_reapi(&url, &env).unwrap()
    };
    case_round_trip(open(Some(&ca))).await;

    let a = local();
    let entry = make_action(&a, 9, 1000);
    let err = push_action(&*open(None), &a.store, &entry, &signer())
        .await
        .unwrap_err();
    let mut chain = err.to_string();
    let mut cause = std::error::Error::source(&err);
    while let Some(c) = cause {
        chain += &format!("\n  caused by: {c}");
        cause = c.source();
    }
    eprintln!("untrusted grpcs server: {chain}");
    assert!(chain.contains("certificate"), "{chain}");
}

/// A server that requires a client certificate (mTLS, BuildGrid's `tls-client-certs`): the
/// round trip with one its CA signed in `HEDDLE_REMOTE_CLIENT_CERT`/`_KEY`; without one, or with
/// one it does not trust, a call fails as unavailable (the caller turns the remote off with one
/// warning); a key that is not the certificate's is refused at open, naming both files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpcs_shows_the_client_certificate_to_a_server_that_requires_one() {
    let Some(server) = start_buildgrid_mtls() else {
        return;
    };
    let tls = server.dir.path().join("tls");
    let url = format!("grpcs://127.0.0.1:{}/{REAPI_INSTANCE}", server.port);
    let open = |client: Option<(&str, &str)>| {
        let file = |name: &str| tls.join(name).display().to_string();
        let env = |k: &str| match k {
            CA_FILE_VAR => Some(file("ca.crt")),
            CLIENT_CERT_VAR => client.map(|(cert, _)| file(cert)),
            CLIENT_KEY_VAR => client.map(|(_, key)| file(key)),
            _ => None,
        };
        open_reapi(&url, &env)
    };
    case_round_trip(open(Some(("client.crt", "client.key"))).unwrap()).await;

    let a = local();
    let entry = make_action(&a, 13, 1000);
    for client in [None, Some(("stranger.crt", "stranger.key"))] {
        let err = push_action(&*open(client).unwrap(), &a.store, &entry, &signer())
            .await
            .unwrap_err();
        let chain = heddle_cache::error_chain(&err);
        eprintln!("mTLS server, client certificate {client:?}: {chain}");
        assert!(err.is_unavailable(), "{chain}");
    }

    let Err(err) = open(Some(("client.crt", "server.key"))) else {
        panic!("a key that is not the certificate's was accepted")
    };
    let chain = heddle_cache::error_chain(&*err);
    eprintln!("mismatched client key: {chain}");
    assert!(matches!(*err, RemoteError::TlsClientPair { .. }), "{chain}");
    assert!(
        chain.contains(&format!(
            "failed to use the client certificate {} with the key {} for remote cache {url}",
            tls.join("client.crt").display(),
            tls.join("server.key").display()
        )),
        "{chain}"
    );
}

/// A server that requires a JWT bearer token: the round trip with `authorization=Bearer …` in
/// `HEDDLE_REMOTE_HEADERS`, and `UNAUTHENTICATED` without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_carry_a_bearer_token_to_a_server_that_requires_one() {
    let Some(server) = start_buildgrid_jwt() else {
        return;
    };
    let url = format!("grpc://127.0.0.1:{}/{REAPI_INSTANCE}", server.port);
    let open = |headers: Option<String>| {
        let env = |k: &str| headers.clone().filter(|_| k == REAPI_HEADERS_VAR);
        open_reapi(&url, &env).unwrap()
    };
    let token = make_test_jwt(JWT_SECRET);
    case_round_trip(open(Some(format!("authorization=Bearer {token}")))).await;

    let a = local();
    let entry = make_action(&a, 10, 1000);
    let err = push_action(&*open(None), &a.store, &entry, &signer())
        .await
        .unwrap_err();
    let RemoteError::Grpc { source, .. } = &err else {
        panic!("expected a gRPC status, got {err:?}")
    };
    assert_eq!(source.code(), tonic::Code::Unauthenticated, "{source:?}");
    let wrong = make_test_jwt("another secret");
    let err = push_action(
        &*open(Some(format!("authorization=Bearer {wrong}"))),
        &a.store,
        &entry,
        &signer(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&err, RemoteError::Grpc { source, .. } if source.code() == tonic::Code::Unauthenticated),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_are_separate_caches() {
    let Some(server) = start_buildgrid(BlobStorage::Memory) else {
        return;
    };
    let team = reapi_remote(&server, REAPI_INSTANCE, reapi_timeouts());
    let default = reapi_remote(&server, "", reapi_timeouts());
    let (_a, entry) = pushed_action(&*team, 5, 1000).await;
    let b = local();
    assert!(
        fetch_action(&*default, b.store.clone(), entry.key, &rules(), None)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        fetch_action(&*team, b.store.clone(), entry.key, &rules(), None)
            .await
            .unwrap()
            .is_some()
    );
}

/// Blobs on both paths (one batch call; ByteStream in 1 MiB requests) go up and come back
/// byte-identical, and a local file that no longer matches its digest never becomes a blob.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blobs_round_trip_on_both_paths_and_a_wrong_upload_is_never_committed() {
    let Some(server) = start_buildgrid(BlobStorage::Memory) else {
        return;
    };
    let remote = reapi_remote(&server, REAPI_INSTANCE, reapi_timeouts());
    let dir = tempfile::tempdir().unwrap();
    for (seed, len) in [(1, 0usize), (2, 1000), (3, 20 * 1024 * 1024 + 5)] {
        let bytes = pseudo_random(seed, len);
        let digest = Digest::of_bytes(&bytes);
        let src = dir.path().join(format!("src-{seed}"));
        std::fs::write(&src, &bytes).unwrap();
        upload_blob(&*remote, digest, &src).await.unwrap();
        assert!(remote.has_blob(digest, len as u64).await.unwrap());
        let dest = dir.path().join(format!("dest-{seed}"));
        let got = fetch_blob(&*remote, digest, Some(len as u64), &dest)
            .await
            .unwrap();
        assert_eq!(got, Some(len as u64));
        assert!(
            std::fs::read(&dest).unwrap() == bytes,
            "blob of {len} bytes"
        );

        // The same file claimed under another digest: the upload is aborted.
        let claimed = Digest::of_bytes(format!("not {seed}").as_bytes());
        let err = upload_blob(&*remote, claimed, &src).await.unwrap_err();
        assert!(
            matches!(err, RemoteError::LocalCorrupt { digest, .. } if digest == claimed),
            "{err:?}"
        );
        if len > 0 {
            assert!(!remote.has_blob(claimed, len as u64).await.unwrap());
        }
    }
    let never = Digest::of_bytes(b"never uploaded");
    assert!(!remote.has_blob(never, 14).await.unwrap());
    let dest = dir.path().join("never");
    assert_eq!(
        fetch_blob(&*remote, never, Some(14), &dest).await.unwrap(),
        None
    );
    assert_eq!(
        fetch_blob(&*remote, never, Some(2 * REAPI_BATCH_MAX), &dest)
            .await
            .unwrap(),
        None
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_blob_is_never_served() {
    let Some((server, remote)) = buildgrid_on_disk() else {
        return;
    };
    let path = |d| buildgrid_blob_path(&server, d);
    case_corrupt_blob(remote, |digest, bytes| {
        let p = path(digest);
        assert!(
            p.exists(),
            "BuildGrid keeps blob {digest} at {}",
            p.display()
        );
        std::fs::write(p, bytes).unwrap();
    })
    .await;
}

/// A blob the entry needs disappears from the server (evicted): the fetch is a miss or a
/// MissingBlob error, never a recorded entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_blob_is_a_miss_not_a_result() {
    let Some((server, remote)) = buildgrid_on_disk() else {
        return;
    };
    let (_a, entry) = pushed_action(&*remote, 6, 200_000).await;
    let OutputEntry::File { digest, .. } = entry.outputs["model"] else {
        panic!("model is a file")
    };
    std::fs::remove_file(buildgrid_blob_path(&server, digest)).unwrap();
    let b = local();
    match fetch_action(&*remote, b.store.clone(), entry.key, &rules(), None).await {
        Ok(None) | Err(RemoteError::MissingBlob { .. }) => {}
        other => panic!("expected a miss, got {other:?}"),
    }
    assert!(b.store.lookup_action(&entry.key).unwrap().is_none());
    assert!(!b.store.has_blob(&digest));
}

/// An entry blob that was altered on the server is refused before it is parsed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_entry_is_refused() {
    let Some((server, remote)) = buildgrid_on_disk() else {
        return;
    };
    let (_a, entry) = pushed_action(&*remote, 7, 1000).await;
    let json = heddle_remote::signed_entry_json(&entry, &signer()).unwrap();
    let entry_blob = Digest::of_bytes(&json);
    let p = buildgrid_blob_path(&server, entry_blob);
    let mut evil = std::fs::read(&p).unwrap();
    assert_eq!(evil, json, "the entry blob is the entry's JSON");
    let at = evil.len() - 3;
    evil[at] ^= 1;
    std::fs::write(&p, evil).unwrap();
    let b = local();
    let err = fetch_action(&*remote, b.store.clone(), entry.key, &rules(), None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, RemoteError::CorruptBlob { digest, .. } if digest == entry_blob),
        "{err:?}"
    );
    assert!(!err.is_unavailable());
    assert!(b.store.lookup_action(&entry.key).unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_of_one_key() {
    let Some(server) = start_buildgrid(BlobStorage::Memory) else {
        return;
    };
    case_concurrent_writers(|| reapi_remote(&server, REAPI_INSTANCE, reapi_timeouts())).await;
}

/// The server dies between the push and the fetch: the fetch fails with an error that says
/// the remote is unavailable, within the timeout, and the local store is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_killed_gives_a_typed_error_without_hanging() {
    let Some(mut server) = start_buildgrid(BlobStorage::Memory) else {
        return;
    };
    let t = short_timeouts();
    let remote = reapi_remote(&server, REAPI_INSTANCE, t);
    let patient = reapi_remote(&server, REAPI_INSTANCE, reapi_timeouts());
    let port = server.port;
    let (err, push) = case_server_gone(patient, remote, t, 11, || server.kill()).await;
    assert!(err.is_unavailable(), "{err:?}");
    assert!(
        heddle_cache::error_chain(&err).contains(&format!("127.0.0.1:{port}")),
        "{}",
        heddle_cache::error_chain(&err)
    );
    let err = push.unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
}

/// A server that accepts connections but never answers (SIGSTOP): a bounded failure that
/// says the remote is unavailable, not a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_server_is_unavailable_within_the_timeout() {
    let Some(server) = start_buildgrid(BlobStorage::Memory) else {
        return;
    };
    let t = Timeouts {
        request: Duration::from_secs(2),
        idle: Duration::from_secs(2),
        retries: 3,
        ..Timeouts::default()
    };
    let remote = reapi_remote(&server, REAPI_INSTANCE, t);
    // Pushed with patient timeouts (a loaded machine), fetched with the short ones.
    let patient = reapi_remote(&server, REAPI_INSTANCE, reapi_timeouts());
    let (err, _) = case_server_gone(patient, remote, t, 12, || server.stop()).await;
    assert!(err.is_unavailable(), "{err:?}");
    server.resume();
}

/// Not a performance assertion: prints the throughput of a 100 MB blob up and down against
/// BuildGrid (in memory), for the record. Run with --ignored --nocapture.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a test; run with --ignored --nocapture"]
async fn hundred_mb_round_trip_throughput() {
    let Some(server) = start_buildgrid(BlobStorage::Memory) else {
        return;
    };
    let remote = reapi_remote(&server, REAPI_INSTANCE, Timeouts::default());
    let dir = tempfile::tempdir().unwrap();
    let len = 100 * 1000 * 1000;
    let bytes = pseudo_random(42, len);
    let digest = Digest::of_bytes(&bytes);
    let src = dir.path().join("src");
    std::fs::write(&src, &bytes).unwrap();
    drop(bytes);
    let t = Instant::now();
    upload_blob(&*remote, digest, &src).await.unwrap();
    let up = t.elapsed();
    let t = Instant::now();
    let got = fetch_blob(&*remote, digest, Some(len as u64), &dir.path().join("dest"))
        .await
        .unwrap();
    let down = t.elapsed();
    assert_eq!(got, Some(len as u64));
    let mbps = |d: Duration| len as f64 / 1e6 / d.as_secs_f64();
    eprintln!(
        "100 MB vs BuildGrid 0.4.4: upload {:.1} s ({:.0} MB/s), download {:.1} s ({:.0} MB/s)",
        up.as_secs_f64(),
        mbps(up),
        down.as_secs_f64(),
        mbps(down)
    );
}

/// The REAPI cache at `url` (`grpc://` or `grpcs://`) with the options the environment `env`
/// gives, opened as heddle opens one. Boxed error: `RemoteError` is large for a closure's `Err`
/// (clippy's `result_large_err`).
fn open_reapi(
    url: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Arc<dyn heddle_remote::RemoteBackend>, Box<RemoteError>> {
    let RemoteUrl::Grpc {
        authority,
        instance,
        tls,
    } = RemoteUrl::parse(url).unwrap()
    else {
        panic!("{url} is not a REAPI URL")
    };
    let options = ReapiOptions::from_env(tls, env, url).map_err(Box::new)?;
    ReapiCache::open(
        &authority,
        &instance,
        options,
        url.to_string(),
        reapi_timeouts(),
    )
    .map(|c| Arc::new(c) as Arc<dyn heddle_remote::RemoteBackend>)
    .map_err(Box::new)
}
