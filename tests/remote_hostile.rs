//! A hostile or broken shared cache through the binary: whatever a remote declares or sends,
//! a reader reads a bounded number of bytes in bounded time, refuses a lying entry before
//! downloading what it names, keeps its own good blobs, and writes a blob an entry lists many
//! times once. Each case is a miss with one warning and a run that completes with the right
//! outputs. The entries are on a `file://` remote written by a real writer's run; lies about
//! sizes and pace come from a loopback S3 server written for these tests (remote_team/loopback.rs).

use crate::remote_team;
use crate::support;

use std::time::Duration;

use heddle_cache::OutputEntry;
use remote_team::loopback::{Lie, Loopback};
use remote_team::*;
use support::{assert_contains, Project, Run};

/// `bob`'s run against the loopback server `lb`, with `extra` variables.
fn run_via(bob: &Project, lb: &Loopback, extra: &[(&str, &str)]) -> Run {
    let env = lb.env();
    let mut all: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    all.extend_from_slice(extra);
    read_run(bob, &lb.url(), &all)
}

/// The run's one warning about the remote (fails unless there is exactly one).
fn one_warning(run: &Run) -> String {
    let w = remote_warnings(&run.stderr);
    assert_eq!(w.len(), 1, "expected one warning:\n{}", run.stderr);
    w[0].to_string()
}

fn w_digest(remote: &Remote, alice: &Project) -> heddle_cache::Digest {
    remote.entry(&key_of(alice, "make")).outputs["w"].digest()
}

#[cfg(unix)]
#[test]
fn a_file_remote_entry_or_blob_linked_to_dev_zero_is_refused_at_once() {
    let remote = remote();
    let (alice, bob, line) = team(&remote);
    let entry = remote.entry_path(&key_of(&alice, "make"));
    let saved = std::fs::read(&entry).unwrap();
    std::fs::remove_file(&entry).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &entry).unwrap();
    let run = read_run(&bob, &remote.url, &[]).ok();
    assert_contains(&one_warning(&run), "it is not a regular file");
    assert_eq!(served(&bob, "make"), (false, false));
    assert_eq!(bob.read("out/shared/use/r.txt"), "weightsone");

    // The entry again, and the file output's blob a link to /dev/zero instead.
    std::fs::remove_file(&entry).unwrap();
    std::fs::write(&entry, saved).unwrap();
    let blob = remote.blob_path(&w_digest(&remote, &alice));
    std::fs::remove_file(&blob).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &blob).unwrap();
    let carol = engineer();
    trust(&carol, &[&line]);
    let run = read_run(&carol, &remote.url, &[]).ok();
    assert_contains(&one_warning(&run), "it is not a regular file");
    assert_eq!(served(&carol, "make"), (false, false));
    assert_eq!(carol.read("out/shared/use/r.txt"), "weightsone");
}

#[test]
fn a_get_that_announces_2_gib_and_never_ends_costs_one_warning() {
    let remote = remote();
    let (alice, bob, line) = team(&remote);
    let lb = Loopback::serve(remote.dir.path().to_path_buf());
    let make = key_of(&alice, "make");
    // A reader sends no HEAD (one GET per object): the GET's announced length is checked
    // before its body is read.
    lb.lie(&format!("ac/{make}.json"), Lie::Endless { head: 769 });
    let run = run_via(&bob, &lb, &[]).ok();
    assert_contains(
        &one_warning(&run),
        "2147483648 bytes is too large for an action entry",
    );
    assert_contains(&one_warning(&run), &format!("action entry {make}"));
    assert_eq!(served(&bob, "make"), (false, false));
    assert_eq!(bob.read("out/shared/use/r.txt"), "weightsone");

    // The entry honest, the blob endless: no more than its 7 bytes are taken.
    let lb = Loopback::serve(remote.dir.path().to_path_buf());
    lb.lie(
        &format!("cas/{}", w_digest(&remote, &alice)),
        Lie::Endless { head: 7 },
    );
    let carol = engineer();
    trust(&carol, &[&line]);
    let run = run_via(&carol, &lb, &[]).ok();
    one_warning(&run);
    assert_eq!(served(&carol, "make"), (false, false));
    // What the server got to send before the reader hung up: socket buffers, not 2 GiB.
    let sent = lb
        .counts
        .bytes_sent
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(sent < 64 * 1024 * 1024, "the server sent {sent} bytes");
}

#[test]
fn a_blob_that_trickles_in_is_a_miss_once_the_grace_is_over() {
    let remote = remote();
    let (alice, bob, _) = team(&remote);
    let lb = Loopback::serve(remote.dir.path().to_path_buf());
    // One byte a second keeps every idle timeout alive; 7 bytes would take 7 s.
    lb.lie(
        &format!("cas/{}", w_digest(&remote, &alice)),
        Lie::Trickle {
            gap: Duration::from_secs(1),
        },
    );
    let run = run_via(&bob, &lb, &[("HEDDLE_REMOTE_TIMEOUT", "2")]).ok();
    let w = one_warning(&run);
    assert_contains(
        &w,
        "is unavailable; this run continues with the local cache only",
    );
    assert_contains(&w, "under the floor of 1024 KiB/s");
    assert_eq!(served(&bob, "make"), (false, false));
    assert_eq!(bob.read("out/shared/use/r.txt"), "weightsone");
}

#[test]
fn an_entry_naming_outputs_the_stage_does_not_declare_is_refused_before_any_download() {
    let remote = remote();
    let (alice, bob, _) = team(&remote);
    let make = key_of(&alice, "make");
    let mut entry = remote.entry(&make);
    for i in 0..20_000u32 {
        let digest = heddle_cache::Digest::of_bytes(&i.to_le_bytes());
        let out = OutputEntry::File {
            digest,
            size: 4,
            executable: false,
        };
        entry.outputs.insert(format!("x{i}"), out);
    }
    remote.put_signed(&entry, &signing_key(&alice));
    let lb = Loopback::serve(remote.dir.path().to_path_buf());
    let run = run_via(&bob, &lb, &[]).ok();
    assert_contains(
        &one_warning(&run),
        &format!("failed to read action entry {make} from remote cache s3://team/heddle: it names 20000 outputs the action does not declare (\"x0\", \"x1\", \"x10\" and 19997 more); nothing was downloaded"),
    );
    assert_eq!(served(&bob, "make"), (false, false));
    // The one blob fetched is `use`'s output, a hit.
    assert_eq!(served(&bob, "use"), (true, true));
    let gets = lb
        .counts
        .blob_gets
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(gets, 1);
}

#[test]
fn a_wrong_size_for_a_blob_the_reader_has_never_costs_the_reader_that_blob() {
    let remote = remote();
    let bob = engineer();
    // Bob has every blob already, from a run of his own.
    bob.run("pipelines/shared.toml", &[]).ok();
    // Alice runs a variant whose `make` has another key but makes the same bytes, and her
    // entry for it gives the file a wrong size.
    let alice = engineer();
    let line = keygen(&alice, "alice");
    let variant = PIPELINE.replace("printf 'weights'", "true && printf 'weights'");
    alice.file("pipelines/shared.toml", &variant);
    write_run(&alice, &remote.url).ok();
    let mut entry = remote.entry(&key_of(&alice, "make"));
    let w = entry.outputs["w"].digest();
    entry.outputs.insert(
        "w".into(),
        OutputEntry::File {
            digest: w,
            size: 999,
            executable: false,
        },
    );
    remote.put_signed(&entry, &signing_key(&alice));

    trust(&bob, &[&line]);
    bob.file("pipelines/shared.toml", &variant);
    let run = read_run(&bob, &remote.url, &[]).ok();
    assert_contains(
        &one_warning(&run),
        &format!("it gives blob {w} 999 bytes; the local store's has 7 (kept)"),
    );
    assert_eq!(served(&bob, "make"), (false, false));
    let verify = bob.heddle(&["cache", "verify"]).ok();
    assert_contains(&verify.stdout, "cache is clean");
    assert!(!verify.stdout.contains("quarantine"), "{}", verify.stdout);
}

/// `make` writes a folder of 300 copies of one 1 MiB executable.
const COPIES: &str = r#"
[pipeline]
name = "copies"

[stages.make]
run = "mkdir -p {{ out.d }} && head -c 1048576 /dev/zero | tr '\\0' x > {{ out.d }}/f0 && chmod +x {{ out.d }}/f0 && for i in $(seq 1 299); do cp -p {{ out.d }}/f0 {{ out.d }}/f$i; done"
outputs = { d = "d" }
"#;

#[cfg(unix)]
#[test]
fn a_blob_listed_300_times_is_written_once_and_an_entry_past_the_cap_is_refused() {
    use std::os::unix::fs::MetadataExt;
    let remote = remote();
    let alice = Project::new();
    alice.file("pipelines/copies.toml", COPIES);
    let line = keygen(&alice, "alice");
    write_run(&alice, &remote.url).ok();

    let bob = Project::new();
    bob.file("pipelines/copies.toml", COPIES);
    trust(&bob, &[&line]);
    read_run(&bob, &remote.url, &[]).ok();
    assert_eq!(served(&bob, "make"), (true, true));
    let files = files_under(&bob.path("out/copies/make/d"));
    assert_eq!(files.len(), 300);
    let inodes: std::collections::BTreeSet<u64> = files
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().ino())
        .collect();
    assert_eq!(
        inodes.len(),
        1,
        "300 listings of one blob, one file on disk"
    );

    let carol = Project::new();
    carol.file("pipelines/copies.toml", COPIES);
    trust(&carol, &[&line]);
    let run = read_run(
        &carol,
        &remote.url,
        &[("HEDDLE_REMOTE_MAX_ENTRY_BYTES", "100M")],
    )
    .ok();
    assert_contains(
        &one_warning(&run),
        "its outputs add up to 314572800 bytes, over the limit of 104857600 an entry may expand to; none of its files was downloaded",
    );
    assert_eq!(served(&carol, "make"), (false, false));
}
