//! A tree manifest from a cache (local, or a remote one: untrusted bytes): decoded, and what
//! decodes is safe to materialise and encodes back to the same entries.
#![no_main]

use heddle_cache::{decode_tree, encode_tree, Digest};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let digest = Digest::of_bytes(data);
    let Ok(entries) = decode_tree(digest, data) else {
        return;
    };
    for e in &entries {
        let p = std::path::Path::new(e.path());
        assert!(
            p.components()
                .all(|c| matches!(c, std::path::Component::Normal(_))),
            "decoded an unsafe path {:?}",
            e.path()
        );
    }
    let mut copy = entries.clone();
    let encoded = encode_tree(&mut copy);
    let back = decode_tree(Digest::of_bytes(&encoded), &encoded).expect("encoded tree decodes");
    assert_eq!(back, entries);
});
