//! A cached result is exactly what ran, and nothing a stage names reaches outside its sandbox
//! or the project (issue 14), through the real binary, the way a careless stage or user would
//! meet it: a root stage editing its input, a symlink output, a `../` matrix value, two
//! concurrent runs of one pipeline with different params.

use crate::support;

use std::collections::BTreeSet;
use std::fs;
use std::process::Stdio;

#[cfg(target_os = "linux")]
use support::fill;
use support::records::error;
use support::tmpfs::Tmpfs;
use support::{assert_contains, assert_lacks, instance, Project};

#[cfg(unix)]
#[test]
fn a_stage_writing_its_input_fails_and_poisons_nothing() {
    let p = Project::with_pipeline(include_str!("fixtures/integrity/poison.toml"));
    let r = p.run("p.toml", &["--keep-going"]).code(1);
    assert_contains(&r.stderr, "FAILED  vandal  input `x` was modified");
    let rec = p.last_record();
    let vandal = instance(&rec, "vandal");
    assert_eq!(vandal["status"]["error_class"], "InputModified");
    assert_contains(error(vandal), "input `x` was modified while the stage ran");
    // The store lost the edited blob ("good\nbad\n") to quarantine: verify says so, in one
    // line, and leaves it there; the upstream output is recomputed, never served edited.
    let v = p.heddle(&["cache", "verify"]).ok();
    assert_contains(
        &v.stdout,
        "quarantine: 1 blob (9 B) that did not match their digest, kept in ",
    );
    assert_contains(
        &v.stdout,
        "; `heddle cache gc` removes them\ncache is clean\n",
    );
    p.file(
        "p.toml",
        &p.read("p.toml")
            .replace("chmod u+w {{ in.x }}; echo bad >> {{ in.x }}; ", ""),
    );
    p.run("p.toml", &[]).ok();
    assert_eq!(p.read("out/poison/make/o.txt"), "good\n");
    assert_eq!(p.read("out/poison/vandal/o.txt"), "good\n");
    assert_eq!(p.read("out/poison/reader/o.txt"), "good\n");
    // gc empties the quarantine, and verify has nothing more to say about it.
    let g = p.heddle(&["cache", "gc"]).ok();
    assert_contains(
        &g.stdout,
        "quarantine: removed 1 blob (9 B) that did not match their digest",
    );
    let v = p.heddle(&["cache", "verify"]).ok();
    assert_lacks(&v.stdout, "quarantine");
}

#[cfg(unix)]
#[test]
fn a_symlink_output_is_an_error_and_the_host_file_is_untouched() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let p = Project::new();
    let host = p.path("host-secret.txt");
    fs::write(&host, "secret").unwrap();
    fs::set_permissions(&host, fs::Permissions::from_mode(0o600)).unwrap();
    // An mtime no write during the run could leave, so the check cannot pass by a coarse clock.
    let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
    fs::File::options()
        .write(true)
        .open(&host)
        .unwrap()
        .set_modified(old)
        .unwrap();
    p.file(
        "p.toml",
        &fill(
            include_str!("fixtures/integrity/symlink_outputs.toml"),
            &[
                ("HOST", &host.display().to_string()),
                ("PROJECT", &p.path("").display().to_string()),
            ],
        ),
    );
    let r = p.run("p.toml", &["--keep-going"]).code(1);
    let rec = p.last_record();
    assert_contains(
        error(instance(&rec, "swap")),
        "output `o` (host-secret.txt) is not read: `o` is a symlink or leaves the folder",
    );
    assert!(!p.path("out/links/swap").exists());
    for label in ["leak", "tree", "swap"] {
        let s = &instance(&rec, label)["status"];
        assert_eq!(s["error_class"], "UnsafeOutput", "{label}: {}", r.stderr);
    }
    assert_contains(error(instance(&rec, "leak")), "it is a symlink");
    assert_contains(
        error(instance(&rec, "tree")),
        "\"etc\" -> \"/etc\" points outside the tree",
    );
    let after = fs::metadata(&host).unwrap();
    assert_eq!(after.permissions().mode() & 0o777, 0o600);
    assert_eq!(after.modified().unwrap(), old);
    assert_eq!(fs::read_to_string(&host).unwrap(), "secret");
    assert_eq!(after.nlink(), 1);
    assert!(!p.path("out/links/tree/d/etc").exists());
}

/// A FIFO output or a file name that is not UTF-8 cannot be stored: the stage fails (exit 1,
/// `UnsafeOutput`), heddle does not hang opening the FIFO, and the run is not heddle's error.
#[cfg(unix)]
#[test]
fn an_output_the_cache_cannot_store_fails_its_stage() {
    let p = Project::with_pipeline(include_str!("fixtures/integrity/unstorable_outputs.toml"));
    let r = p.run("p.toml", &["--keep-going"]).code(1);
    let rec = p.last_record();
    for label in ["fifo", "latin1"] {
        let s = &instance(&rec, label)["status"];
        assert_eq!(s["error_class"], "UnsafeOutput", "{label}: {}", r.stderr);
    }
    assert_contains(
        error(instance(&rec, "fifo")),
        "/out/o/o.txt: it is a FIFO; only regular files, folders and symlinks are stored",
    );
    assert_contains(error(instance(&rec, "latin1")), "not valid UTF-8");
}

/// A FIFO or a device named as a repo input: heddle refused it, saying what it is, instead of
/// hanging on the FIFO's open (it did) or reading /dev/zero forever.
#[cfg(unix)]
#[test]
fn a_fifo_or_a_device_named_as_an_input_is_refused_not_read() {
    use std::time::Duration;
    let p = Project::new();
    fs::create_dir(p.path("data")).unwrap();
    let fifo = p.path("data/fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    for (input, kind) in [("data/fifo", "a FIFO"), ("/dev/zero", "a character device")] {
        p.file(
            "p.toml",
            &fill(
                include_str!("fixtures/integrity/special_input.toml"),
                &[("INPUT", input)],
            ),
        );
        let mut child = p
            .cmd(&["run", "p.toml", "--progress", "plain"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let status = support::process::wait_ended(&mut child, Duration::from_secs(30), input);
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        assert_eq!(status.code(), Some(2), "{input}: {stderr}");
        let abs = if input.starts_with('/') {
            input.to_string()
        } else {
            p.path(input).display().to_string()
        };
        assert_contains(
            &stderr,
            &format!("failed to hash {abs}: it is {kind}, not a regular file\n"),
        );
    }
}

/// A stage's error line full of terminal escapes and a byte that is not UTF-8: heddle shows
/// the escapes as text, in the progress line and in the summary, and sends none of them.
#[cfg(unix)]
#[test]
fn a_stages_terminal_escapes_are_shown_not_sent() {
    let p = Project::with_pipeline(include_str!("fixtures/integrity/terminal_escapes.toml"));
    let r = p.run("p.toml", &[]).code(1);
    let shown = "EvilError: \\x1b]0;pwned\\x07 \\x1b[2J\\x0d over \u{fffd}";
    assert_contains(&r.stderr, &format!("\nFAILED  s  {shown}\n"));
    assert_contains(&r.stderr, "\n  s FAILED\n");
    for c in ['\u{1b}', '\u{7}', '\r'] {
        assert!(!r.stderr.contains(c), "{c:?} sent raw: {:?}", r.stderr);
    }
    let show = p.heddle(&["show", "last"]).ok();
    assert_contains(&show.stdout, &format!("s  FAILED {shown}"));
    assert!(!show.stdout.contains('\u{1b}'), "{:?}", show.stdout);
}

#[test]
fn matrix_values_are_names_not_paths() {
    let p = Project::with_pipeline(include_str!("fixtures/integrity/matrix_names.toml"));
    p.run("p.toml", &[]).ok();
    assert!(!p.root().parent().unwrap().join("escaped").exists());
    assert!(!p.path("escaped").exists());
    let dirs: BTreeSet<String> = fs::read_dir(p.path("out/names"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let want = [
        "all",
        "w[k=%2Fabs]",
        "w[k=-rf]",
        "w[k=..%2F..%2Fescaped]",
        "w[k=..]",
        "w[k=CON]",
        "w[k=a%0Ab]",
    ];
    assert_eq!(dirs, want.iter().map(|s| s.to_string()).collect());
    assert_eq!(
        p.read("out/names/w[k=..%2F..%2Fescaped]/o.txt"),
        "../../escaped\n"
    );
    let members: BTreeSet<String> = p
        .read("out/names/all/o.txt")
        .lines()
        .map(String::from)
        .collect();
    let want = [
        "k=%2Fabs",
        "k=-rf",
        "k=.%2E",
        "k=..%2F..%2Fescaped",
        "k=CON",
        "k=a%0Ab",
    ];
    assert_eq!(members, want.iter().map(|s| s.to_string()).collect());
}

/// Two runs of one pipeline at once with different params: the second waits for the first,
/// `out/` ends as the later run made it, and both run records are right.
#[test]
fn concurrent_runs_with_different_params_do_not_mix_out() {
    let p = Project::with_pipeline(include_str!("fixtures/integrity/concurrent_params.toml"));
    let a = p
        .cmd(&["run", "p.toml", "--progress", "plain", "--set", "v=a"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let b = p
        .cmd(&["run", "p.toml", "--progress", "plain", "--set", "v=b"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    assert!(a.status.success() && b.status.success());
    let waited: Vec<bool> = [&a, &b]
        .iter()
        .map(|o| String::from_utf8_lossy(&o.stderr).contains("waiting for another run of `mix`"))
        .collect();
    assert_eq!(
        waited.iter().filter(|w| **w).count(),
        1,
        "exactly one run waits: {waited:?}"
    );
    let last = if waited[0] { "a" } else { "b" };
    for i in 1..=6 {
        assert_eq!(
            p.read(&format!("out/mix/s[i={i}]/o.txt")),
            format!("{last}\n")
        );
    }
    let runs = p.heddle(&["runs"]).ok();
    assert_eq!(
        runs.stdout.matches("completed").count(),
        2,
        "{}",
        runs.stdout
    );
}

/// `out/` on a full disk: the error says "No space left on device" and names the file being
/// written, the run exits 2 (the environment's fault, not the stage's); the cache stays
/// consistent and the next run, with space, completes.
#[cfg(target_os = "linux")]
#[test]
fn a_full_out_disk_says_so_and_the_next_run_completes() {
    let p = Project::new();
    let Some(out) = Tmpfs::mount(&p.path("out"), "size=256k") else {
        return;
    };
    p.file(
        "p.toml",
        include_str!("fixtures/integrity/full_out_disk.toml"),
    );
    let r = p.run("p.toml", &[]).code(2);
    let rec = p.last_record();
    let err = error(instance(&rec, "big"));
    assert!(
        err.contains("No space left on device"),
        "{err}\n{}",
        r.stderr
    );
    assert!(
        err.contains("/out/full/big/"),
        "names the file being written: {err}"
    );
    p.heddle(&["cache", "verify"]).ok();
    out.resize("8m");
    p.run("p.toml", &[]).ok();
    assert_eq!(
        fs::metadata(p.path("out/full/big/o.bin")).unwrap().len(),
        1_000_000
    );
    p.assert_cache_clean();
}

/// The cache on a full disk (a stage fills it): the run fails with the stage's own reason, the
/// cache is consistent, and the next run with space completes.
#[cfg(target_os = "linux")]
#[test]
fn a_full_cache_disk_leaves_the_cache_consistent() {
    let p = Project::new();
    let Some(cache) = Tmpfs::mount(&p.cache, "size=512k") else {
        return;
    };
    p.file(
        "p.toml",
        include_str!("fixtures/integrity/full_cache_disk.toml"),
    );
    let r = p.run("p.toml", &["--keep-going"]).code(1);
    let rec = p.last_record();
    let tail = instance(&rec, "big")["status"]["stderr_tail"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(
        tail.contains("No space left on device"),
        "{tail}\n{}",
        r.stderr
    );
    p.heddle(&["cache", "verify"]).ok();
    cache.resize("16m");
    let r = p.run("p.toml", &[]).ok();
    assert!(
        r.stderr.contains("cached") || r.stderr.contains("done"),
        "{}",
        r.stderr
    );
    assert_eq!(
        fs::metadata(p.path("out/fullc/big/o.bin")).unwrap().len(),
        2_000_000
    );
    p.assert_cache_clean();
}

/// A blob whose bytes rotted but kept its mtime: never fed to a stage, never the base of a
/// stored result; the run says which blob and exits 2 (the cache's fault, not the stage's), and
/// the next run recomputes it.
#[test]
fn a_rotted_blob_is_never_fed_and_the_next_run_recomputes_it() {
    let p = Project::with_pipeline(include_str!("fixtures/integrity/rotted_blob.toml"));
    p.run("p.toml", &[]).ok();
    // The blob of "payload\n", edited in place with its mtime put back.
    let blob = find_blob(&p.cache, b"payload\n");
    let mtime = fs::metadata(&blob).unwrap().modified().unwrap();
    fs::write(&blob, "poisond\n").unwrap();
    fs::File::options()
        .write(true)
        .open(&blob)
        .unwrap()
        .set_modified(mtime)
        .unwrap();

    let r = p.run("p.toml", &["--set", "n=2"]).code(2);
    assert_contains(&r.stderr, "its content no longer matches its digest");
    let r = p.run("p.toml", &["--set", "n=2"]).ok();
    assert!(
        r.stderr.contains("run     a"),
        "a is recomputed: {}",
        r.stderr
    );
    assert_eq!(p.read("out/rot/b/o.txt"), "payload\n2\n");
    p.assert_cache_clean();
}

/// `heddle cache verify` on a rotted blob moves it to quarantine (evidence kept, never served),
/// drops the action that named it, and says each in a line; `cache du` counts the quarantine
/// until `cache gc` empties it.
#[test]
fn verify_quarantines_a_rotted_blob_and_du_counts_it() {
    let p = Project::with_pipeline(include_str!("fixtures/integrity/rotted_blob.toml"));
    p.run("p.toml", &[]).ok();
    let blob = find_blob(&p.cache, b"payload\n");
    fs::write(&blob, "poisond\n").unwrap();
    let rec = p.last_record();
    let key = instance(&rec, "a")["cache_key"]
        .as_str()
        .unwrap()
        .to_string();

    let v = p.heddle(&["cache", "verify"]).code(1);
    let quarantined: Vec<_> = fs::read_dir(p.cache.join("quarantine"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(quarantined.len(), 1, "{quarantined:?}");
    let text = support::snapshot::normalise(&p, &v.stdout)
        .replace(&quarantined[0], "[NAME]")
        .replace(&key, "[KEY]");
    let (payload, poisoned) = (digest(b"payload\n"), digest(b"poisond\n"));
    assert_eq!(
        text,
        format!(
            "checked 2 blobs (18 B), 2 actions\n\
             BAD blob {payload} hashes to {poisoned}; moved to [PROJECT]/cache/quarantine/[NAME]\n\
             BAD action [KEY] names blob {payload}, which is gone; the action is removed\n\
             quarantine: 1 blob (8 B) that did not match their digest, kept in [PROJECT]/cache/quarantine for inspection; `heddle cache gc` removes them\n\
             2 bad entries (removed or quarantined; what they held will be recomputed)\n"
        )
    );
    let du = p.heddle(&["cache", "du"]).ok();
    assert_contains(
        &du.stdout,
        "\n  quarantine: 1 blob (8 B) that did not match their digest; `heddle cache gc` removes them\n",
    );
    p.heddle(&["cache", "gc"]).ok();
    assert_lacks(&p.heddle(&["cache", "du"]).ok().stdout, "quarantine");
}

fn digest(content: &[u8]) -> String {
    heddle_cache::Digest::of_bytes(content).to_string()
}

/// Where the store keeps the blob of `content`.
fn find_blob(cache: &std::path::Path, content: &[u8]) -> std::path::PathBuf {
    let hex = digest(content);
    cache.join("objects").join(&hex[..2]).join(&hex)
}

/// A key's lock file left behind (by a killed run, or by a heddle before lock files were
/// removed on release) is removed by `heddle cache gc`, which says so in one line; a run
/// itself leaves none.
#[cfg(unix)]
#[test]
fn gc_removes_the_lock_files_nobody_holds_and_says_so() {
    let p = Project::with_pipeline(
        "[pipeline]\nname = \"locks\"\n\n[stages.a]\nrun = \"echo a > {{ out.o }}\"\noutputs = { o = \"o.txt\" }\n",
    );
    p.run("p.toml", &[]).ok();
    let locks = p.cache.join("locks");
    let key_locks = || {
        let mut names: Vec<String> = fs::read_dir(&locks)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != "store.lock")
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        key_locks(),
        Vec::<String>::new(),
        "a run leaves no key lock"
    );
    for k in ["1", "2"] {
        fs::write(locks.join(format!("{}.lock", k.repeat(64))), "4242\n").unwrap();
    }
    let g = p.heddle(&["cache", "gc"]).ok();
    assert_eq!(
        g.stdout.lines().nth(1),
        Some("locks: removed 2 lock files nobody held (left by a killed run or an older heddle)"),
        "{}",
        g.stdout
    );
    assert_eq!(key_locks(), Vec::<String>::new());
    let again = p.heddle(&["cache", "gc"]).ok();
    assert_lacks(&again.stdout, "locks:");
}
