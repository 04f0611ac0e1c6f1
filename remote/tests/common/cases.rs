//! The cases every backend must pass, each a function the backend's test file calls.

use super::*;

pub fn short_timeouts() -> Timeouts {
    Timeouts {
        request: Duration::from_secs(3),
        idle: Duration::from_secs(3),
        retries: 3,
        ..Timeouts::default()
    }
}

/// Push from one store, fetch into a second, empty one: the same entry, byte-identical outputs.
pub async fn case_round_trip(remote: Arc<dyn RemoteBackend>) {
    let a = local();
    let entry = make_action(&a, 1, 3 * 1024 * 1024 + 17);
    let pushed = push_action(&*remote, &a.store, &entry, &signer())
        .await
        .unwrap();
    // model, tree manifest, a.txt, b.bin, run.sh.
    assert_eq!(pushed.blobs_uploaded, 5, "{pushed:?}");
    let again = push_action(&*remote, &a.store, &entry, &signer())
        .await
        .unwrap();
    assert_eq!((again.blobs_uploaded, again.blobs_present), (0, 5));

    let b = local();
    assert!(b.store.lookup_action(&entry.key).unwrap().is_none());
    let (fetched, report) = fetch_action(&*remote, b.store.clone(), entry.key, &rules(), None)
        .await
        .unwrap()
        .expect("the remote has the entry");
    assert_fetched(&a, &b, &entry, (fetched, report));
    assert!(tmp_leftovers(&b.store).is_empty());

    let missing = Digest::of_bytes(b"never pushed");
    assert!(
        fetch_action(&*remote, b.store.clone(), missing, &rules(), None)
            .await
            .unwrap()
            .is_none()
    );
}

/// A blob overwritten on the server with other bytes of the same length is detected by
/// hash, never reaches the second store, and the entry is not recorded there. Both import
/// paths: a small blob gathered in memory, and one over 1 MiB streamed in batches.
pub async fn case_corrupt_blob(remote: Arc<dyn RemoteBackend>, corrupt: impl Fn(Digest, Vec<u8>)) {
    for (seed, len) in [(2, 200_000), (3, 3 * 1024 * 1024 + 5)] {
        let (_a, entry) = pushed_action(&*remote, seed, len).await;
        let OutputEntry::File { digest, size, .. } = entry.outputs["model"] else {
            panic!("model is a file")
        };
        let mut evil = pseudo_random(99, size as usize);
        evil[0] ^= 1;
        corrupt(digest, evil);

        let b = local();
        let err = fetch_action(&*remote, b.store.clone(), entry.key, &rules(), None)
            .await
            .unwrap_err();
        match &err {
            RemoteError::CorruptBlob {
                digest: d, size: s, ..
            } => {
                assert_eq!((*d, *s), (digest, size), "{len} bytes");
            }
            other => panic!("{len} bytes: expected CorruptBlob, got {other:?}"),
        }
        assert!(err.to_string().starts_with(&format!(
            "failed to verify blob {digest} from remote cache "
        )));
        assert!(!b.store.has_blob(&digest));
        assert!(b.store.lookup_action(&entry.key).unwrap().is_none());
        assert!(
            tmp_leftovers(&b.store).is_empty(),
            "{:?}",
            tmp_leftovers(&b.store)
        );
    }
}

/// Two writers push the same action at once, each from its own store and client: both
/// succeed, and a third store fetches an entry equal to theirs with identical outputs.
pub async fn case_concurrent_writers(make_remote: impl Fn() -> Arc<dyn RemoteBackend>) {
    let a = local();
    let b = local();
    // 20 MiB: several multipart parts on S3, so the two uploads overlap part by part.
    let ea = make_action(&a, 3, 20 * 1024 * 1024);
    let eb = make_action(&b, 3, 20 * 1024 * 1024);
    assert_eq!(ea, eb);
    let (ra, rb) = (make_remote(), make_remote());
    let key = signer();
    let (pa, pb) = tokio::join!(
        push_action(&*ra, &a.store, &ea, &key),
        push_action(&*rb, &b.store, &eb, &key)
    );
    pa.unwrap();
    pb.unwrap();
    let c = local();
    let (fetched, _) = fetch_action(&*make_remote(), c.store.clone(), ea.key, &rules(), None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(fetched, ea);
    assert_same_outputs(&a, &c, &ea);
}

/// Upper bound for "answered within the timeout": one call's whole retry budget (the first
/// call that fails ends the fetch), plus scheduling slack. Not a performance assertion: it
/// tells a bounded failure from a hang.
pub fn hang_bound(t: Timeouts) -> Duration {
    t.request_budget() + Duration::from_secs(10)
}

/// An action pushed through `pusher` (patient timeouts where the server is slow to take it),
/// then the server goes away (`break_server`: killed, frozen): a fetch through `remote` (with
/// `timeouts`) into an empty store fails within [`hang_bound`] and records nothing. Returns the
/// fetch's error and what a push through `remote` after it gives.
pub async fn case_server_gone(
    pusher: Arc<dyn RemoteBackend>,
    remote: Arc<dyn RemoteBackend>,
    timeouts: Timeouts,
    seed: u64,
    break_server: impl FnOnce(),
) -> (RemoteError, Result<heddle_remote::PushReport, RemoteError>) {
    let (a, entry) = pushed_action(&*pusher, seed, 100_000).await;
    break_server();
    let b = local();
    let started = Instant::now();
    let err = fetch_action(&*remote, b.store.clone(), entry.key, &rules(), None)
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < hang_bound(timeouts),
        "took {:?}",
        started.elapsed()
    );
    assert!(b.store.lookup_action(&entry.key).unwrap().is_none());
    (
        err,
        push_action(&*remote, &a.store, &entry, &signer()).await,
    )
}

/// The local blob of an action's model no longer hashes to its name: the push is refused with
/// `LocalCorrupt` naming it. Returns the entry and the model's digest, so the caller can look
/// for what must not be on the server.
pub async fn case_locally_corrupted_blob(
    remote: Arc<dyn RemoteBackend>,
    seed: u64,
    size: usize,
) -> (ActionEntry, Digest) {
    let a = local();
    let entry = make_action(&a, seed, size);
    let model = entry.outputs["model"].digest();
    let blob = a.store.blob_path(&model);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&blob, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    std::fs::write(&blob, pseudo_random(seed + 1000, size)).unwrap();
    let err = push_action(&*remote, &a.store, &entry, &signer())
        .await
        .unwrap_err();
    assert!(
        matches!(err, RemoteError::LocalCorrupt { digest, .. } if digest == model),
        "{err:?}"
    );
    (entry, model)
}
