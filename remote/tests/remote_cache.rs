//! [`RemoteCache`], the scheduler's face of the crate, on the plain-directory backend (no
//! server needed; the S3, WebDAV and REAPI tests run the same transfers through the trait).

mod common;

use std::collections::HashMap;

use common::*;
use heddle_cache::{encode_tree, ActionEntry, Digest, OutputEntry, TreeEntry};
use heddle_remote::{resolve_remote, PushOutcome, RemoteCache, RemoteError, RemoteMode};

/// Settings resolved the way the CLI does, from the environment layer.
fn remote_for(dir: &std::path::Path, mode: &str) -> RemoteCache {
    let project = tempfile::tempdir().unwrap();
    let env: HashMap<&str, String> = [
        ("HEDDLE_REMOTE_CACHE", format!("file://{}", dir.display())),
        ("HEDDLE_REMOTE_CACHE_MODE", mode.to_string()),
        ("HOME", project.path().display().to_string()),
    ]
    .into_iter()
    .collect();
    let settings = resolve_remote(project.path(), &|k| env.get(k).cloned(), None, None)
        .unwrap()
        .expect("configured");
    RemoteCache::open(&settings, &|_| None, short_timeouts())
        .unwrap()
        .with_rules(rules())
        .with_signer(std::sync::Arc::new(signer()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_back_then_read_through_by_key() {
    let dir = tempfile::tempdir().unwrap();
    let remote = remote_for(dir.path(), "readwrite");
    assert_eq!(remote.mode(), RemoteMode::ReadWrite);
    let a = local();
    let entry = make_action(&a, 31, 2_000_000);
    let PushOutcome::Pushed(report) = remote.push_action(entry.key, &a.store).await.unwrap() else {
        panic!("readwrite pushes")
    };
    assert_eq!(report.blobs_uploaded, 5);

    let b = local();
    let fetched = remote
        .fetch_action(entry.key, &b.store, None)
        .await
        .unwrap()
        .expect("pushed");
    assert_fetched(&a, &b, &entry, fetched);
    // A second fetch finds every blob local.
    let c_entry = remote
        .fetch_action(entry.key, &b.store, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(c_entry.1.blobs_present, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_mode_never_uploads_and_unknown_keys_are_not_local() {
    let dir = tempfile::tempdir().unwrap();
    let a = local();
    let entry = make_action(&a, 32, 1000);
    let ro = remote_for(dir.path(), "read");
    assert_eq!(
        ro.push_action(entry.key, &a.store).await.unwrap(),
        PushOutcome::ReadOnly
    );
    assert!(
        !dir.path().join("ac").exists(),
        "read mode wrote to the remote"
    );
    let rw = remote_for(dir.path(), "readwrite");
    let unknown = Digest::of_bytes(b"never recorded");
    assert_eq!(
        rw.push_action(unknown, &a.store).await.unwrap(),
        PushOutcome::NotLocal
    );
}

/// A manifest on the remote that hashes right but holds a symlink out of the tree is
/// refused before anything it lists is fetched, and nothing reaches the local store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escaping_tree_manifest_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let remote = remote_for(dir.path(), "readwrite");
    let listed = Digest::of_bytes(b"a file the manifest lists");
    let manifest = encode_tree(&mut [
        TreeEntry::File {
            path: "a".into(),
            digest: listed,
            size: 25,
            executable: false,
        },
        TreeEntry::Symlink {
            path: "etc".into(),
            target: "../../../etc".into(),
        },
    ]);
    let digest = Digest::of_bytes(&manifest);
    std::fs::create_dir_all(dir.path().join("cas")).unwrap();
    std::fs::create_dir_all(dir.path().join("ac")).unwrap();
    std::fs::write(dir.path().join(format!("cas/{digest}")), &manifest).unwrap();
    std::fs::write(
        dir.path().join(format!("cas/{listed}")),
        b"a file the manifest lists",
    )
    .unwrap();
    let key = Digest::of_bytes(b"evil action");
    let entry = ActionEntry {
        key,
        family: "evil".into(),
        key_parts: serde_json::json!({}),
        outputs: [(
            "tree".to_string(),
            OutputEntry::Dir {
                digest,
                size: 25,
                files: 1,
            },
        )]
        .into_iter()
        .collect(),
        duration_ms: 0,
        created_unix_ms: 0,
        meta: serde_json::json!({}),
    };
    std::fs::write(
        dir.path().join(format!("ac/{key}.json")),
        heddle_remote::signed_entry_json(&entry, &signer()).unwrap(),
    )
    .unwrap();

    let b = local();
    let err = remote.fetch_action(key, &b.store, None).await.unwrap_err();
    match &err {
        RemoteError::BadTree { digest: d, .. } => assert_eq!(*d, digest),
        other => panic!("expected BadTree, got {other:?}"),
    }
    assert!(!err.is_unavailable());
    assert!(
        heddle_cache::error_chain(&err).contains("points outside the tree"),
        "{}",
        heddle_cache::error_chain(&err)
    );
    assert!(!b.store.has_blob(&digest));
    assert!(!b.store.has_blob(&listed));
    assert!(b.store.lookup_action(&key).unwrap().is_none());
    assert!(tmp_leftovers(&b.store).is_empty());
}

/// A remote that refuses connections is unavailable, in bounded time, through the facade too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_remote_is_unavailable() {
    let port = free_port();
    let env: HashMap<String, String> = s3_env(port);
    let backend = open(&format!("s3://{BUCKET}/x"), &env, short_timeouts());
    let remote = RemoteCache::with_backend(backend, RemoteMode::ReadWrite);
    let b = local();
    let started = std::time::Instant::now();
    let err = remote
        .fetch_action(Digest::of_bytes(b"k"), &b.store, None)
        .await
        .unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    assert!(started.elapsed() < hang_bound(short_timeouts()));
}
