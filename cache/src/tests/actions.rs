//! Action entries: record, lookup, family index, and what reads as a miss.

use super::*;

#[test]
fn action_record_lookup_and_family() {
    let (dir, s) = store();
    let out = put_file(&s, dir.path(), "f", b"out");
    let a1 = action("k1", "p/stage", &[("o", out.clone())], 10, 1);
    let a2 = action("k2", "p/stage", &[("o", out.clone())], 10, 2);
    let other = action("k3", "p/other", &[], 10, 3);
    assert!(s.lookup_action(&a1.key).unwrap().is_none());
    assert!(!s.family_recorded("p/stage"));
    for a in [&a1, &a2, &other, &a1] {
        s.record_action(a).unwrap();
    }
    assert_eq!(s.lookup_action(&a1.key).unwrap().unwrap(), a1);
    let fam: Vec<Digest> = s
        .actions_in_family("p/stage")
        .unwrap()
        .iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(fam, vec![a2.key, a1.key]);
    assert_eq!(s.actions_in_family("nope").unwrap().len(), 0);
    assert!(s.family_recorded("p/stage") && s.family_recorded("p/other"));
    assert!(!s.family_recorded("nope"));
    // Recording an action whose blob is missing fails.
    let ghost = OutputEntry::File {
        digest: Digest::of_bytes(b"ghost"),
        size: 5,
        executable: false,
    };
    assert!(s
        .record_action(&action("k4", "p/stage", &[("o", ghost)], 1, 4))
        .is_err());
}

#[test]
fn torn_action_and_missing_blob_are_misses() {
    let (dir, s) = store();
    let out = put_file(&s, dir.path(), "f", big(100_000, 9));
    let a = action("k", "fam", &[("o", out.clone())], 1, 1);
    s.record_action(&a).unwrap();
    let p = s.action_path(&a.key);
    let json = fs::read(&p).unwrap();
    fs::write(&p, &json[..json.len() / 2]).unwrap();
    assert!(s.lookup_action(&a.key).unwrap().is_none());
    fs::write(&p, b"").unwrap();
    assert!(s.lookup_action(&a.key).unwrap().is_none());
    s.record_action(&a).unwrap();
    assert!(s.lookup_action(&a.key).unwrap().is_some());
    crate::fsutil::remove_any(&s.blob_path(&out.digest())).unwrap();
    assert!(s.lookup_action(&a.key).unwrap().is_none());
    assert!(matches!(
        s.materialize(&out, &dir.path().join("x")),
        Err(crate::CacheError::MissingBlob { .. })
    ));
}

#[test]
fn record_actions_batch_and_verify_reports_torn_entries() {
    let (dir, s) = store();
    let mut batch = Vec::new();
    for i in 0..5 {
        let p = dir.path().join(format!("o{i}"));
        fs::write(&p, format!("{i}")).unwrap();
        let out = s.put_output(&p).unwrap();
        batch.push(action(&format!("k{i}"), "b", &[("o", out)], 1, i));
    }
    s.record_actions(&batch).unwrap();
    assert_eq!(s.actions_in_family("b").unwrap().len(), 5);
    let p = s.action_path(&batch[0].key);
    fs::write(&p, b"{\"key\": ").unwrap();
    fs::create_dir_all(s.root().join("objects/ab")).unwrap();
    let stray = s.root().join("objects/ab/not-a-digest");
    fs::write(&stray, b"x").unwrap();
    let r = s.verify().unwrap();
    assert_eq!(r.bad.len(), 2, "{r:?}");
    assert!(r
        .bad
        .iter()
        .any(|b| matches!(b, crate::BadEntry::BadAction { .. })));
    assert!(r
        .bad
        .iter()
        .any(|b| matches!(b, crate::BadEntry::StrayObject { .. })));
    assert!(s.verify().unwrap().is_clean());
    assert_eq!(s.actions_in_family("b").unwrap().len(), 4);
}

#[test]
fn lookups_are_cheap() {
    let dir = tempfile::tempdir().unwrap();
    // Durability does not change lookups; skip the fsyncs to keep the test quick.
    let s = Store::open_with(
        &dir.path().join("store"),
        crate::StoreOptions {
            durability: crate::Durability::None,
        },
    )
    .unwrap();
    let mut keys = Vec::new();
    for i in 0..1000u32 {
        let p = dir.path().join("o");
        fs::write(&p, i.to_le_bytes()).unwrap();
        let out = s.put_output(&p).unwrap();
        let a = action(&format!("k{i}"), "fam", &[("o", out)], 1, i as u64);
        keys.push(a.key);
        s.record_action(&a).unwrap();
    }
    let t = std::time::Instant::now();
    for k in &keys {
        assert!(s.lookup_action(k).unwrap().is_some());
    }
    let el = t.elapsed();
    eprintln!("1000 lookups: {el:?}");
    // Generous: debug build, loaded CI machine.
    assert!(el < std::time::Duration::from_secs(2), "{el:?}");
}

/// A hit read for its outputs alone is a hit exactly when the whole entry is: a torn entry, an
/// entry under another key, one missing a field and one whose blob is gone are misses both ways.
#[test]
fn outputs_only_lookup_agrees_with_the_full_lookup() {
    let (dir, s) = store();
    let out = put_file(&s, dir.path(), "f", big(100_000, 4));
    let a = action("k", "fam", &[("o", out.clone())], 1, 1);
    let agree = |want_hit: bool| {
        let full = s.lookup_action(&a.key).unwrap();
        let outputs = s.lookup_outputs(&a.key).unwrap();
        assert_eq!(full.is_some(), want_hit);
        assert_eq!(full.map(|e| e.outputs), outputs);
    };
    agree(false);
    s.record_action(&a).unwrap();
    agree(true);
    assert_eq!(s.lookup_outputs(&a.key).unwrap().unwrap()["o"], out);
    let p = s.action_path(&a.key);
    let json = fs::read(&p).unwrap();
    fs::write(&p, &json[..json.len() / 2]).unwrap();
    agree(false);
    let mut v: serde_json::Value = serde_json::from_slice(&json).unwrap();
    v.as_object_mut().unwrap().remove("family");
    fs::write(&p, serde_json::to_vec(&v).unwrap()).unwrap();
    agree(false);
    let other = action("other", "fam", &[("o", out.clone())], 1, 1);
    fs::write(&p, serde_json::to_vec(&other).unwrap()).unwrap();
    agree(false);
    fs::write(&p, &json).unwrap();
    agree(true);
    crate::fsutil::remove_any(&s.blob_path(&out.digest())).unwrap();
    agree(false);
}
