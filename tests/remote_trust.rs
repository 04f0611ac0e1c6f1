//! The trust model through the binary, on a `file://` remote the tests can tamper with: read
//! is the default mode; a writer opts in and signs with a key `heddle cache keygen` made; a
//! reader accepts only entries a key in its trust file signed, names the signer in its run
//! record, and treats anything else as a miss with one warning; `cache verify --remote`
//! reports who signed what and what does not verify.

use crate::remote_team;
use crate::support;

use remote_team::*;
use support::{assert_contains, assert_lacks, instance, Project};

#[test]
fn keygen_writes_a_private_key_and_prints_the_trust_line_only() {
    let p = Project::new();
    let r = p.heddle(&["cache", "keygen", "--name", "ci-builder"]).ok();
    let key = signing_key(&p);
    let path = key_file(&p);
    assert_eq!(
        r.stdout,
        format!(
            "wrote the signing key {} (readable by you only; keep it secret)\n\
             to trust what this machine writes to a shared cache, add this line to the team's .heddle/trusted-writers:\n\
             {} ci-builder\n",
            path.display(),
            key.public()
        )
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let secret = std::fs::read_to_string(&path).unwrap();
    let secret = secret
        .lines()
        .find_map(|l| l.strip_prefix("ed25519-secret:"))
        .unwrap();
    assert_lacks(&r.all(), secret);

    // Never over an existing key by accident.
    let again = p.heddle(&["cache", "keygen"]).code(2);
    assert_contains(
        &again.stderr,
        &format!(
            "error: a signing key already exists at {} ({}); pass --force to replace it",
            path.display(),
            key.public()
        ),
    );
    assert_eq!(signing_key(&p).public(), key.public());
    p.heddle(&["cache", "keygen", "--force"]).ok();
    assert_ne!(signing_key(&p).public(), key.public());
}

#[test]
fn read_is_the_default_and_writing_needs_a_key() {
    let remote = remote();
    let p = engineer();
    read_run(&p, &remote.url, &[]).ok();
    assert!(
        !remote.dir.path().join("ac").exists(),
        "a default run wrote to the shared cache"
    );

    let r = write_run(&p, &remote.url).code(2);
    assert_contains(
        &r.stderr,
        &format!(
            "error: remote cache {} is in readwrite mode but there is no signing key at {}: run `heddle cache keygen` and add the line it prints to the team's .heddle/trusted-writers, or use the remote in read mode",
            remote.url,
            key_file(&p).display()
        ),
    );
    let push = heddle(&p, &remote.url, &[], &["cache", "push"]).code(2);
    assert_contains(&push.stderr, "is read-only (the default)");
}

#[test]
fn a_trusted_writers_entries_are_hits_and_the_record_names_the_signer() {
    let remote = remote();
    let (alice, bob, _) = team(&remote);
    let run = read_run(&bob, &remote.url, &[]).ok();
    assert_lacks(&run.stderr, "warning");
    assert_eq!(served(&bob, "make"), (true, true));
    assert_eq!(served(&bob, "use"), (true, true));
    let rec = bob.last_record();
    let key = signing_key(&alice).public().to_string();
    for label in ["make", "use"] {
        assert_eq!(
            instance(&rec, label)["remote_signer"],
            serde_json::json!({ "name": "alice", "key": key })
        );
    }
    assert_eq!(bob.read("out/shared/use/r.txt"), "weightsone");
}

#[test]
fn without_a_trust_file_every_entry_is_a_miss_with_one_warning() {
    let remote = remote();
    let (_alice, bob, _) = team(&remote);
    std::fs::remove_file(bob.path(".heddle/trusted-writers")).unwrap();
    let run = read_run(&bob, &remote.url, &[]).ok();
    let warnings = remote_warnings(&run.stderr);
    assert_eq!(warnings.len(), 1, "{}", run.stderr);
    assert_contains(
        warnings[0],
        "holds entries no trusted writer signed; they were not used (those instances run here): failed to trust action entry",
    );
    assert_contains(
        warnings[0],
        "no writer is trusted: list the keys of the writers whose results to use in .heddle/trusted-writers",
    );
    assert_eq!(served(&bob, "make"), (false, false));
    assert_eq!(bob.read("out/shared/use/r.txt"), "weightsone");
}

#[test]
fn an_unknown_signer_an_unsigned_entry_and_a_rewritten_one_are_misses() {
    let remote = remote();
    let (alice, bob, _) = team(&remote);
    let make = key_of(&alice, "make");
    let use_ = key_of(&alice, "use");

    // Mallory can write to the bucket and has a key of her own; nobody lists it.
    let mallory = engineer();
    keygen(&mallory, "mallory");
    let mallory_key = signing_key(&mallory);
    remote.put_signed(&remote.entry(&make), &mallory_key);
    // An entry without a signature (an older heddle, or by hand).
    let unsigned = serde_json::to_vec(&remote.entry(&use_)).unwrap();
    std::fs::write(remote.entry_path(&use_), unsigned).unwrap();
    let run = read_run(&bob, &remote.url, &[]).ok();
    let warnings = remote_warnings(&run.stderr);
    assert_eq!(warnings.len(), 1, "one warning for the run: {}", run.stderr);
    assert_contains(
        warnings[0],
        &format!(
            "failed to trust action entry {make} from remote cache {}: it is signed by {}, which no trusted-writers file lists",
            remote.url,
            mallory_key.public()
        ),
    );
    assert_eq!(served(&bob, "make"), (false, false));
    assert_eq!(served(&bob, "use"), (false, false));

    // Alice's signed entry, rewritten to point at other valid blobs: the signature no longer
    // matches. (`use`'s output digest swapped for `make`'s w.bin: a real blob on the remote.)
    remote.put_signed(&remote.entry(&make), &signing_key(&alice));
    remote.put_signed(&remote.entry(&use_), &signing_key(&alice));
    let carol = engineer();
    trust(
        &carol,
        &[&format!("{} alice", signing_key(&alice).public())],
    );
    let mut rewritten = remote.entry(&use_);
    let w = remote.entry(&make).outputs["w"].clone();
    rewritten.outputs.insert("r".into(), w);
    let mut bytes: serde_json::Value =
        serde_json::from_slice(&std::fs::read(remote.entry_path(&use_)).unwrap()).unwrap();
    bytes["outputs"] = serde_json::to_value(&rewritten.outputs).unwrap();
    std::fs::write(
        remote.entry_path(&use_),
        serde_json::to_vec(&bytes).unwrap(),
    )
    .unwrap();
    let run = read_run(&carol, &remote.url, &[]).ok();
    let warnings = remote_warnings(&run.stderr);
    assert_eq!(warnings.len(), 1, "{}", run.stderr);
    assert_contains(
        warnings[0],
        "its signature does not match its contents (changed after it was signed)",
    );
    assert_eq!(served(&carol, "make"), (true, true));
    assert_eq!(served(&carol, "use"), (false, false));
    assert_eq!(carol.read("out/shared/use/r.txt"), "weightsone");
}

#[test]
fn plan_shows_only_trusted_entries_as_remote() {
    let remote = remote();
    let (_alice, bob, _) = team(&remote);
    let plan = heddle(&bob, &remote.url, &[], &["plan"]).ok();
    assert_eq!(
        plan.stdout.matches("(remote)").count(),
        2,
        "{}",
        plan.stdout
    );
    std::fs::remove_file(bob.path(".heddle/trusted-writers")).unwrap();
    let plan = heddle(&bob, &remote.url, &[], &["plan"]).ok();
    assert_eq!(
        plan.stdout.matches("(remote)").count(),
        0,
        "{}",
        plan.stdout
    );
    assert_eq!(remote_warnings(&plan.stderr).len(), 1, "{}", plan.stderr);
}

#[test]
fn verify_remote_names_the_signers_and_reports_what_does_not_verify() {
    let remote = remote();
    let (alice, bob, _) = team(&remote);
    read_run(&bob, &remote.url, &[]).ok();
    let v = heddle(&bob, &remote.url, &[], &["cache", "verify", "--remote"]).ok();
    assert_contains(
        &v.stdout,
        &format!(
            "checked 2 entries on remote cache {} that this project's lock files and run records name: 2 signed by trusted writers (alice: 2), 0 not on the remote, 0 bad\n",
            remote.url
        ),
    );

    // A teammate with a trusted key rewrites `make`'s entry to other valid blobs and signs it:
    // the signature holds, but it disagrees with what bob's cache holds for that key.
    let make = key_of(&alice, "make");
    let mut rewritten = remote.entry(&make);
    let d = rewritten.outputs["d"].clone();
    let w = rewritten.outputs["w"].clone();
    rewritten.outputs.insert("w".into(), d);
    rewritten.outputs.insert("d".into(), w);
    remote.put_signed(&rewritten, &signing_key(&alice));
    // And `use`'s is signed by nobody bob trusts.
    let use_ = key_of(&alice, "use");
    let stranger = heddle_remote::SigningKey::from_seed([9; 32]);
    remote.put_signed(&remote.entry(&use_), &stranger);
    let v = heddle(&bob, &remote.url, &[], &["cache", "verify", "--remote"]).code(1);
    let alice_key = signing_key(&alice).public();
    let url = &remote.url;
    // One line per key, in key order.
    let mut bad = [
        (make, format!("BAD {make}: the remote entry, signed by alice ({alice_key}), gives other outputs than this cache's\n")),
        (use_, format!("BAD {use_}: failed to trust action entry {use_} from remote cache {url}: it is signed by {}, which no trusted-writers file lists\n", stranger.public())),
    ];
    bad.sort();
    assert_contains(
        &v.stdout,
        &format!(
            "checked 2 entries on remote cache {url} that this project's lock files and run records name: 0 signed by trusted writers, 0 not on the remote, 2 bad\n{}{}",
            bad[0].1, bad[1].1
        ),
    );
}
