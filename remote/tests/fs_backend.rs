//! The plain-directory backend (`file:///path`, as on NFS): no server needed.

mod common;

use std::collections::HashMap;
use std::time::Instant;

use common::*;
use heddle_remote::RemoteError;

fn fs_url(dir: &std::path::Path) -> String {
    format!("file://{}", dir.display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_into_an_empty_store() {
    let dir = tempfile::tempdir().unwrap();
    case_round_trip(open(&fs_url(dir.path()), &HashMap::new(), short_timeouts())).await;
    // The layout other machines read: cas/<hex>, ac/<hex>.json, nothing half-written.
    let mut top: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    top.sort();
    assert!(
        top == ["ac", "cas"] || top == ["ac", "cas", "tmp"],
        "{top:?}"
    );
    if let Ok(rd) = std::fs::read_dir(dir.path().join("tmp")) {
        assert_eq!(rd.count(), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_blob_is_never_served() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    case_corrupt_blob(
        open(&fs_url(&root), &HashMap::new(), short_timeouts()),
        |digest, bytes| std::fs::write(root.join(format!("cas/{digest}")), bytes).unwrap(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_of_one_key() {
    let dir = tempfile::tempdir().unwrap();
    let url = fs_url(dir.path());
    case_concurrent_writers(|| open(&url, &HashMap::new(), short_timeouts())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbage_entry_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let remote = open(&fs_url(dir.path()), &HashMap::new(), short_timeouts());
    let (a, entry) = pushed_action(&*remote, 5, 1000).await;
    std::fs::write(
        dir.path().join(format!("ac/{}.json", entry.key)),
        b"{\"not\": \"an entry\"}",
    )
    .unwrap();
    let b = local();
    let err = heddle_remote::fetch_action(&*remote, b.store.clone(), entry.key, &rules(), None)
        .await
        .unwrap_err();
    assert!(matches!(err, RemoteError::BadEntry { .. }), "{err:?}");
    assert!(b.store.lookup_action(&entry.key).unwrap().is_none());

    // An entry stored under another action's key is refused too.
    let other = make_action(&a, 6, 1000);
    heddle_remote::push_action(&*remote, &a.store, &other, &signer())
        .await
        .unwrap();
    std::fs::copy(
        dir.path().join(format!("ac/{}.json", other.key)),
        dir.path().join(format!("ac/{}.json", entry.key)),
    )
    .unwrap();
    let err = heddle_remote::fetch_action(&*remote, b.store.clone(), entry.key, &rules(), None)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "failed to read action entry {} from remote cache file://{}: it is the entry of action {}",
            entry.key,
            dir.path().display(),
            other.key
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_naming_a_missing_blob_is_not_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let remote = open(&fs_url(dir.path()), &HashMap::new(), short_timeouts());
    let (_a, entry) = pushed_action(&*remote, 7, 1000).await;
    let model = entry.outputs["model"].digest();
    std::fs::remove_file(dir.path().join(format!("cas/{model}"))).unwrap();
    let b = local();
    let started = Instant::now();
    let err = heddle_remote::fetch_action(&*remote, b.store.clone(), entry.key, &rules(), None)
        .await
        .unwrap_err();
    assert!(started.elapsed() < hang_bound(short_timeouts()));
    assert!(
        matches!(err, RemoteError::MissingBlob { digest, .. } if digest == model),
        "{err:?}"
    );
    assert!(b.store.lookup_action(&entry.key).unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locally_corrupted_blob_is_not_uploaded() {
    let dir = tempfile::tempdir().unwrap();
    let remote = open(&fs_url(dir.path()), &HashMap::new(), short_timeouts());
    let (entry, model) = case_locally_corrupted_blob(remote, 8, 500_000).await;
    assert!(!dir.path().join(format!("cas/{model}")).exists());
    assert!(!dir.path().join(format!("ac/{}.json", entry.key)).exists());
}

/// A trusted writer's entry that lies about what it names is refused before its files are
/// fetched: a folder output whose totals are not its manifest's, one blob given two sizes, an
/// entry lacking an output the action declares. Nothing is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_whose_sizes_or_outputs_lie_are_refused() {
    use heddle_cache::OutputEntry;
    let dir = tempfile::tempdir().unwrap();
    let remote = open(&fs_url(dir.path()), &HashMap::new(), short_timeouts());
    let (_a, entry) = pushed_action(&*remote, 11, 5000).await;
    let model_digest = entry.outputs["model"].digest();
    let put = |e: &heddle_cache::ActionEntry| {
        let path = dir.path().join(format!("ac/{}.json", e.key));
        std::fs::write(
            path,
            heddle_remote::signed_entry_json(e, &signer()).unwrap(),
        )
        .unwrap();
    };
    let refused = |reason: &str| {
        format!(
            "failed to read action entry {} from remote cache file://{}: {reason}",
            entry.key,
            dir.path().display()
        )
    };
    let fetch = |declared: Option<std::collections::BTreeSet<String>>| {
        let remote = remote.clone();
        let key = entry.key;
        async move {
            let b = local();
            let err = heddle_remote::fetch_action(
                &*remote,
                b.store.clone(),
                key,
                &rules(),
                declared.as_ref(),
            )
            .await
            .unwrap_err();
            assert!(b.store.lookup_action(&key).unwrap().is_none());
            // The tree manifest may have been fetched, no file blob.
            assert!(!b.store.has_blob(&model_digest));
            err.to_string()
        }
    };

    let mut bigger = entry.clone();
    let OutputEntry::Dir {
        digest,
        size,
        files,
    } = entry.outputs["tree"]
    else {
        panic!("tree is a folder")
    };
    bigger.outputs.insert(
        "tree".into(),
        OutputEntry::Dir {
            digest,
            size: size + 1,
            files,
        },
    );
    put(&bigger);
    assert_eq!(
        fetch(None).await,
        refused(&format!("it gives output \"tree\" {files} files of {} bytes; its manifest lists {files} of {size}", size + 1))
    );

    let mut twice = entry.clone();
    let model = entry.outputs["model"].clone();
    let OutputEntry::File { digest, size, .. } = model else {
        panic!("model is a file")
    };
    twice.outputs.insert(
        "again".into(),
        OutputEntry::File {
            digest,
            size: size + 7,
            executable: false,
        },
    );
    put(&twice);
    assert_eq!(
        fetch(None).await,
        // Outputs in name order: "again" (with the wrong size) is listed first.
        refused(&format!(
            "it gives blob {digest} both {} and {size} bytes",
            size + 7
        ))
    );

    put(&entry);
    let declared = ["model", "tree", "weights"]
        .map(String::from)
        .into_iter()
        .collect();
    assert_eq!(
        fetch(Some(declared)).await,
        refused("it lacks outputs the action declares (\"weights\"); nothing was downloaded")
    );
}
