//! A run record (`.heddle/runs/<id>.json`): parsed as `record::load` does, and `counts`. What
//! parses writes back to JSON that parses to the same JSON.
#![no_main]

use heddle_runner::record::RunRecord;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(rec) = serde_json::from_slice::<RunRecord>(data) else {
        return;
    };
    let _ = rec.counts();
    let written = serde_json::to_string(&rec).expect("a record serialises");
    let again: RunRecord = serde_json::from_str(&written)
        .unwrap_or_else(|e| panic!("a written record does not parse: {e}\n{written}"));
    assert_eq!(serde_json::to_string(&again).expect("serialises"), written);
});
