//! A logbook entry (`logbook/*.md`): parsed, rendered; rendering what was parsed and parsing it
//! again gives the same entry.
#![no_main]

use heddle_report::entry::Entry;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(entry) = Entry::parse(text) else {
        return;
    };
    let _ = entry.blocks().count();
    let rendered = entry.render();
    let again = Entry::parse(&rendered)
        .unwrap_or_else(|e| panic!("a rendered entry does not parse: {e}\n{rendered}"));
    assert_eq!(again.render(), rendered);
});
