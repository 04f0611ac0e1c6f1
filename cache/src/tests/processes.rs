//! Other processes: per-key locks across threads and processes, and a writer killed mid-run.

use super::*;

#[test]
fn lock_key_is_single_flight_across_threads() {
    let (_dir, s) = store();
    let s = std::sync::Arc::new(s);
    let key = Digest::of_bytes(b"key");
    let held = s.lock_key(&key).unwrap();
    assert!(s.try_lock_key(&key).unwrap().is_none());
    assert_eq!(s.lock_holder(&key), Some(std::process::id()));
    let (tx, rx) = std::sync::mpsc::channel();
    let s2 = s.clone();
    let waiter = std::thread::spawn(move || {
        let l = s2.lock_key(&key).unwrap();
        tx.send(()).unwrap();
        drop(l);
    });
    assert!(
        rx.recv_timeout(std::time::Duration::from_millis(200))
            .is_err(),
        "waiter got the lock while held"
    );
    drop(held);
    rx.recv_timeout(std::time::Duration::from_secs(10))
        .expect("waiter acquires after release");
    waiter.join().unwrap();
    assert!(s.try_lock_key(&key).unwrap().is_some());
}

/// A released lock leaves no file behind: `locks/` used to keep one per key ever run.
#[cfg(unix)]
#[test]
fn a_released_lock_leaves_no_file_and_a_held_one_names_its_holder() {
    let (_dir, s) = store();
    let locks = s.root().join("locks");
    let lock_files = || {
        fs::read_dir(&locks)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".lock") && n != "store.lock")
            .collect::<Vec<_>>()
    };
    let key = Digest::of_bytes(b"key");
    let held = s.lock_key(&key).unwrap();
    assert_eq!(lock_files(), [format!("{key}.lock")]);
    assert_eq!(s.lock_holder(&key), Some(std::process::id()));
    drop(held);
    assert!(lock_files().is_empty(), "{:?}", lock_files());
    drop(s.try_lock_key(&key).unwrap().expect("free"));
    assert!(lock_files().is_empty(), "{:?}", lock_files());
}

/// Deleting lock files on release must not let two holders in: each thread opens the lock
/// file on its own (as another process would), so a waiter that opened a file its holder then
/// deleted takes a lock on nothing unless it checks. Without the check this fails within a
/// few hundred rounds.
#[test]
fn deleted_lock_files_still_admit_one_holder_at_a_time() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let (_dir, s) = store();
    let s = std::sync::Arc::new(s);
    let inside = std::sync::Arc::new(AtomicBool::new(false));
    let overlaps = std::sync::Arc::new(AtomicUsize::new(0));
    let key = Digest::of_bytes(b"contended");
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (s, inside, overlaps) = (s.clone(), inside.clone(), overlaps.clone());
            std::thread::spawn(move || {
                for round in 0..1500 {
                    let lock = if (t + round) % 3 == 0 {
                        match s.try_lock_key(&key).unwrap() {
                            Some(l) => l,
                            None => continue,
                        }
                    } else {
                        s.lock_key(&key).unwrap()
                    };
                    if inside.swap(true, Ordering::SeqCst) {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    std::thread::yield_now();
                    inside.store(false, Ordering::SeqCst);
                    drop(lock);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders at once");
}

/// Child half of the process tests, started by them with `--ignored`: in a normal run it would
/// check nothing, so it is ignored there rather than counted as a pass.
#[test]
#[ignore = "the child half of the process tests; they run it"]
fn child_process_helper() {
    let Ok(root) = std::env::var("HEDDLE_CACHE_CHILD_ROOT") else {
        return;
    };
    let s = Store::open(Path::new(&root)).unwrap();
    match std::env::var("HEDDLE_CACHE_CHILD_MODE").as_deref() {
        Ok("lock") => {
            let _l = s.lock_key(&Digest::of_bytes(b"key")).unwrap();
            println!("LOCKED");
            std::thread::sleep(std::time::Duration::from_secs(60));
        }
        Ok("write") => {
            let scratch = Path::new(&root).parent().unwrap().join("scratch");
            for i in 0u64.. {
                let f = scratch.join(format!("f{i}"));
                fs::create_dir_all(&scratch).unwrap();
                fs::write(&f, big(10_000 + (i as usize % 7) * 30_000, i as u8)).unwrap();
                let out = s.put_output(&f).unwrap();
                s.record_action(&action(&format!("k{i}"), "crash", &[("o", out)], 1, i))
                    .unwrap();
                if i == 3 {
                    println!("WRITING");
                }
            }
        }
        _ => {}
    }
}

fn spawn_child(
    root: &Path,
    mode: &str,
) -> (
    std::process::Child,
    std::io::BufReader<std::process::ChildStdout>,
) {
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "--ignored",
            "tests::processes::child_process_helper",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("HEDDLE_CACHE_CHILD_ROOT", root)
        .env("HEDDLE_CACHE_CHILD_MODE", mode)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = std::io::BufReader::new(child.stdout.take().unwrap());
    (child, out)
}

fn wait_for_line(out: &mut impl std::io::BufRead, want: &str) {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "child exited before printing {want}"
        );
        if line.contains(want) {
            return;
        }
    }
}

#[test]
fn lock_held_by_a_killed_process_is_released() {
    let (_dir, s) = store();
    let key = Digest::of_bytes(b"key");
    let (mut child, mut out) = spawn_child(s.root(), "lock");
    wait_for_line(&mut out, "LOCKED");
    assert!(s.try_lock_key(&key).unwrap().is_none());
    #[cfg(unix)]
    assert_eq!(s.lock_holder(&key), Some(child.id()));
    child.kill().unwrap();
    child.wait().unwrap();
    let _l = s.lock_key(&key).unwrap();
}

#[test]
fn killed_writer_leaves_a_clean_store() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    Store::open(&root).unwrap();
    let (mut child, mut out) = spawn_child(&root, "write");
    wait_for_line(&mut out, "WRITING");
    std::thread::sleep(std::time::Duration::from_millis(150));
    child.kill().unwrap();
    child.wait().unwrap();
    let s = Store::open(&root).unwrap();
    let r = s.verify().unwrap();
    assert!(r.is_clean(), "{r:?}");
    assert!(r.actions_checked >= 4);
    for e in s.actions_in_family("crash").unwrap() {
        let hit = s
            .lookup_action(&e.key)
            .unwrap()
            .expect("every recorded action is a hit");
        s.materialize(&hit.outputs["o"], &dir.path().join("m"))
            .unwrap();
    }
    assert!(fs::read_dir(root.join("tmp")).unwrap().next().is_none());
}
