use super::*;
use crate::record::{list, load as load_id, prune, runs_dir, save as save_rec, Status};

/// Instance `i` as the run that computed it records it, or as a later hit of it.
fn instance(i: usize, hit: bool, start: u64) -> (String, InstanceRecord) {
    let label = format!("m[i={i}]");
    let json = serde_json::json!({
        "stage": "m", "deps": [],
        "status": {"label": label, "status": "ok", "exit_code": if hit { None } else { Some(0) },
                   "matrix": {"i": i}},
        "cached": hit, "cache_key": format!("{i:064x}"),
        "reason": if hit { "cached" } else { "never run" },
        "duration_ms": if hit { 0 } else { 7 }, "start_ms": start, "end_ms": start + 3,
        "attempts": if hit { 0 } else { 1 },
        "inputs": {"src": {"digest": "ab"}}, "outputs": {},
        "output_paths": {"o": format!("out/m/{i}/o.txt")},
        "command": if hit { None } else { Some(format!("echo {i}")) },
        "key_parts": {"version": "v", "i": i, "f": 0.1},
    });
    (label, serde_json::from_str(&json.to_string()).unwrap())
}

fn run(id: &str, instances: Vec<(String, InstanceRecord)>) -> RunRecord {
    RunRecord {
        run_id: id.into(),
        pipeline: "p".into(),
        pipeline_file: "p.toml".into(),
        status: RunStatus::Completed,
        started_unix_ms: 1,
        duration_ms: 2,
        heddle_version: "0".into(),
        host: "h".into(),
        params: BTreeMap::new(),
        jobs: 2,
        instances,
    }
}

fn json(rec: &RunRecord) -> String {
    serde_json::to_string(rec).unwrap()
}

fn size(root: &Path, id: &str) -> u64 {
    std::fs::metadata(runs_dir(root).join(format!("{id}.json")))
        .unwrap()
        .len()
}

/// A no-op run after a full one is a few bytes per instance and reads back as the very
/// record format 1 would have written; a run that changed some instances writes them whole.
#[test]
fn a_no_op_record_is_small_and_reads_back_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let n = 2000;
    let full = run("1", (0..n).map(|i| instance(i, false, i as u64)).collect());
    save_rec(root, &mut full.clone()).unwrap();
    assert!(runs_dir(root).join("1.idx").exists());
    assert_eq!(json(&load_id(root, "1").unwrap()), json(&full));

    let noop = run(
        "2",
        (0..n).map(|i| instance(i, true, 5 + i as u64)).collect(),
    );
    let mut saved = noop.clone();
    save_rec(root, &mut saved).unwrap();
    assert_eq!(
        json(&saved),
        json(&noop),
        "save leaves the record as it was"
    );
    assert!(
        !runs_dir(root).join("2.idx").exists(),
        "a record with a base is no base"
    );
    let (whole, delta) = (size(root, "1"), size(root, "2"));
    assert!(delta * 30 < whole, "{delta} vs {whole}");
    assert_eq!(json(&load_id(root, "2").unwrap()), json(&noop));

    // Some instances changed (a new key, a rerun, a new instance), one moved: the rest are
    // still references to run 1, and every instance reads back as it was.
    let mut some: Vec<_> = (0..n).map(|i| instance(i, true, 9)).collect();
    some[3].1.cache_key = Some("ff".repeat(32));
    some[10] = instance(10, false, 1);
    some.swap(20, 1500);
    some.push(instance(n + 1, true, 0));
    let some = run("3", some);
    save_rec(root, &mut some.clone()).unwrap();
    assert!(size(root, "3") * 10 < whole);
    assert_eq!(json(&load_id(root, "3").unwrap()), json(&some));
    let text = std::fs::read_to_string(runs_dir(root).join("3.json")).unwrap();
    assert!(
        text.starts_with("{\"record_format\":2,\"base\":\"1\""),
        "{}",
        &text[..80]
    );
    assert_eq!(
        text.matches("{\"full\":").count(),
        3,
        "changed ones are whole"
    );

    // Mostly changed: written whole, and the next base.
    let rerun = run("4", (0..n).map(|i| instance(i + n, false, 0)).collect());
    save_rec(root, &mut rerun.clone()).unwrap();
    assert!(runs_dir(root).join("4.idx").exists());
    let hits = run("5", (0..n).map(|i| instance(i + n, true, 0)).collect());
    save_rec(root, &mut hits.clone()).unwrap();
    assert_eq!(
        base_of(&runs_dir(root).join("5.json")).as_deref(),
        Some("4")
    );
    assert_eq!(json(&load_id(root, "5").unwrap()), json(&hits));
}

/// `is_hit_form` says exactly whether an instance is its own hit form: each field
/// `hit_form` sets, changed alone, makes it not.
#[test]
fn hit_form_and_its_test_agree() {
    let same = |r: &InstanceRecord| {
        serde_json::to_string(&hit_form(r, r.start_ms, r.end_ms)).unwrap()
            == serde_json::to_string(r).unwrap()
    };
    let (_, hit) = instance(1, true, 4);
    assert!(is_hit_form(&hit) && same(&hit));
    let (_, ran) = instance(1, false, 4);
    assert!(!is_hit_form(&ran) && !same(&ran));
    let changes: Vec<fn(&mut InstanceRecord)> = vec![
        |r| r.status.exit_code = Some(0),
        |r| r.status.error = Some("e".into()),
        |r| r.status.at = Some("a".into()),
        |r| r.status.stderr_tail = Some("t".into()),
        |r| r.status.tolerated = true,
        |r| r.status.status = Status::Failed,
        |r| r.cached = false,
        |r| r.remote = true,
        |r| r.reason = "never run".into(),
        |r| r.why = Some(Box::new(heddle_schema::Reason::Forced)),
        |r| r.duration_ms = 1,
        |r| r.attempts = 1,
        |r| r.command = Some("c".into()),
        |r| r.logs = Some(Box::new(["a".into(), "b".into()])),
        |r| r.facts = Some(Value::Null),
        |r| r.host = Some("h".into()),
    ];
    for (i, change) in changes.iter().enumerate() {
        let mut r = hit.clone();
        change(&mut r);
        assert!(!is_hit_form(&r), "change {i}");
        assert!(!same(&r), "change {i}");
    }
}

/// A format 2 record carries every field of a run record's head: a field added to
/// `RunRecord` and not here would be lost by every record with a base.
#[test]
fn a_format_2_head_has_every_field_of_a_run_record() {
    let keys = |v: serde_json::Value| -> Vec<String> {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.retain(|k| !["record_format", "base", "base_bytes"].contains(&k.as_str()));
        k.sort();
        k
    };
    let rec = run("1", Vec::new());
    let delta = DeltaRecord::<Item> {
        record_format: RECORD_FORMAT,
        base: "0".into(),
        base_bytes: 0,
        run_id: rec.run_id.clone(),
        pipeline: rec.pipeline.clone(),
        pipeline_file: rec.pipeline_file.clone(),
        status: rec.status,
        started_unix_ms: 0,
        duration_ms: 0,
        heddle_version: String::new(),
        host: String::new(),
        params: BTreeMap::new(),
        jobs: 0,
        instances: Vec::new(),
    };
    assert_eq!(
        keys(serde_json::to_value(&delta).unwrap()),
        keys(serde_json::to_value(&rec).unwrap())
    );
}

/// A record of format 1 from an older heddle (no index beside it) still reads, and is no
/// base: the run after it is written whole.
#[test]
fn a_format_1_record_without_an_index_reads_and_is_no_base() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let fixture = include_str!("testdata/record-v1.json");
    std::fs::create_dir_all(runs_dir(root)).unwrap();
    std::fs::write(runs_dir(root).join("20261205-120000000-abcd.json"), fixture).unwrap();
    let old = load_id(root, "last").unwrap();
    assert_eq!(old.instances.len(), 2);
    assert_eq!(old.counts(), (0, 2, 0, 0));
    let again = run("20261205-130000000-abcd", old.instances.clone());
    save_rec(root, &mut again.clone()).unwrap();
    assert!(base_of(&runs_dir(root).join("20261205-130000000-abcd.json")).is_none());
    assert_eq!(json(&load_id(root, "last").unwrap()), json(&again));
}

/// Prune keeps a base while a kept record refers to it, and removes indexes with records;
/// a base changed after the fact is an error, never a wrong record.
#[test]
fn prune_keeps_bases_and_a_changed_base_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let full = |id: &str| run(id, (0..50).map(|i| instance(i, false, 0)).collect());
    let hits = |id: &str| run(id, (0..50).map(|i| instance(i, true, 0)).collect());
    save_rec(root, &mut full("1")).unwrap();
    save_rec(root, &mut hits("2")).unwrap();
    save_rec(root, &mut hits("3")).unwrap();
    let pruned = prune(root, 1).unwrap();
    assert_eq!(pruned.ids, ["2"]);
    assert_eq!(list(root), ["1", "3"]);
    assert_eq!(json(&load_id(root, "3").unwrap()), json(&hits("3")));
    std::fs::remove_file(runs_dir(root).join("3.json")).unwrap();
    prune(root, 0).unwrap();
    assert!(list(root).is_empty());
    assert_eq!(std::fs::read_dir(runs_dir(root)).unwrap().count(), 0);

    save_rec(root, &mut full("4")).unwrap();
    save_rec(root, &mut hits("5")).unwrap();
    let base = runs_dir(root).join("4.json");
    let text = std::fs::read_to_string(&base).unwrap();
    std::fs::write(&base, text.replace("echo 1\"", "echo 1 \"")).unwrap();
    let err = load_id(root, "5").unwrap_err();
    assert!(matches!(err, RecordError::Base { .. }), "{err}");
    std::fs::remove_file(&base).unwrap();
    assert!(matches!(load_id(root, "5"), Err(RecordError::Base { .. })));
}
