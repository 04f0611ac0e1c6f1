//! A lock file (`pipelines/<name>.lock`, TOML): parsed as `LockFile::read` does. What parses
//! writes back to text that parses to the same text again.
#![no_main]

use heddle_runner::lock::LockFile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(lock) = toml::from_str::<LockFile>(text) else {
        return;
    };
    // Some parsed values have no TOML spelling (a NaN compares unequal, nulls are dropped), so
    // the property is on the written text: writing what was read back is a fixed point.
    let Ok(written) = lock.to_toml() else {
        return;
    };
    let again: LockFile = toml::from_str(&written)
        .unwrap_or_else(|e| panic!("a written lock file does not parse: {e}\n{written}"));
    assert_eq!(again.to_toml().expect("writes again"), written);
});
