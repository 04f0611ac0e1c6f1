//! Questions asked of a run record (`heddle show last --json`): its instances are a list of
//! `[label, instance record]` pairs, so finding one by label, and reading its status and error,
//! are written here, once. Also the
//! cells of a Markdown table row, as report stages write them.

use std::collections::BTreeMap;

use serde_json::Value;

/// The record of one instance (by label) in a run record.
pub fn instance<'a>(record: &'a Value, label: &str) -> &'a Value {
    record["instances"]
        .as_array()
        .and_then(|all| all.iter().find(|i| i[0] == label))
        .map(|i| &i[1])
        .unwrap_or_else(|| panic!("no instance {label} in the run record:\n{record:#}"))
}

/// Every instance of a run record, by label.
pub fn instances(record: &Value) -> BTreeMap<String, Value> {
    record["instances"]
        .as_array()
        .unwrap_or_else(|| panic!("no instances in the run record:\n{record:#}"))
        .iter()
        .map(|pair| {
            let label = pair[0].as_str().expect("an instance label");
            (label.to_string(), pair[1].clone())
        })
        .collect()
}

/// The run's id.
pub fn run_id(record: &Value) -> String {
    record["run_id"].as_str().expect("run_id").to_string()
}

/// An instance's status word (`ok`, `failed`, `skipped`), `?` when it has none.
pub fn status(instance: &Value) -> &str {
    instance["status"]["status"].as_str().unwrap_or("?")
}

/// An instance's error class (`InputModified`, `Interrupted`, …), empty when it has none.
pub fn error_class(instance: &Value) -> &str {
    instance["status"]["error_class"].as_str().unwrap_or("")
}

/// An instance's error message, empty when it has none.
pub fn error(instance: &Value) -> &str {
    instance["status"]["error"].as_str().unwrap_or("")
}

/// The instance failed with exactly this error class and message.
#[track_caller]
pub fn assert_failed(instance: &Value, class: &str, message: &str) {
    assert_eq!(
        (status(instance), error_class(instance), error(instance)),
        ("failed", class, message),
        "{instance:#}"
    );
}

/// The run ended interrupted, and so did its instance `label` (the one a signal stopped);
/// `case` names the signal or scenario in a failure.
#[track_caller]
pub fn assert_interrupted(record: &Value, label: &str, case: &str) {
    assert_eq!(record["status"], "interrupted", "{case}: {record:#}");
    assert_eq!(
        error_class(instance(record, label)),
        "Interrupted",
        "{case}: {record:#}"
    );
}

/// Whether the instance was served from a cache.
pub fn cached(instance: &Value) -> bool {
    instance["cached"].as_bool().unwrap_or(false)
}

/// The trimmed cells of a Markdown table row (`| a | b |` → `["a", "b"]`).
pub fn table_cells(row: &str) -> Vec<&str> {
    row.trim()
        .trim_matches('|')
        .split('|')
        .map(str::trim)
        .collect()
}
