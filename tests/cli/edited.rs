//! A stage that writes through its input (`chmod u+w` then append: a hard link into the
//! store, which its owner can make writable) fails cleanly; `out/` must not then show the
//! edited bytes under the upstream stage that the record calls `ok`.

use crate::support::{assert_contains, Project};

/// Large enough (over 64 KiB) that `out/` is a hard link to the blob, as the sandbox input is.
const PIPELINE: &str = "[pipeline]\nname = \"poison\"\n[stages.make]\nrun = \"head -c 100000 /dev/zero | tr '\\\\0' g > {{ out.o }}\"\noutputs = { o = \"o.bin\" }\n[stages.vandal]\ninputs = { x = \"make.o\" }\nrun = \"chmod u+w {{ in.x }}; echo bad >> {{ in.x }}; cp {{ in.x }} {{ out.o }}\"\noutputs = { o = \"o.bin\" }\n";

#[cfg(unix)]
#[test]
fn out_never_keeps_bytes_an_input_edit_left_under_the_upstream() {
    let p = Project::with_pipeline(PIPELINE);
    let r = p.run("p.toml", &["--keep-going"]).code(1);
    assert_contains(&r.stderr, "FAILED  vandal  input `x` was modified");
    let made = p.path("out/poison/make/o.bin");
    // The store lost the bytes with the blob the edit went through: the edited copy is gone,
    // and the user is told which file, why, and what happens next.
    assert!(
        !std::fs::read(&made).is_ok_and(|b| b.ends_with(b"bad\n")),
        "out/ keeps the edited bytes"
    );
    assert!(!made.exists());
    assert_contains(
        &r.stderr,
        &format!(
            "note    {} was changed by a stage writing through its input, and the store lost those bytes too; removed it (the next run recomputes make)",
            made.display()
        ),
    );
    // Without the vandal, the next run makes it again, as `make` made it.
    p.file(
        "p.toml",
        &PIPELINE.replace("chmod u+w {{ in.x }}; echo bad >> {{ in.x }}; ", ""),
    );
    p.run("p.toml", &[]).ok();
    assert_eq!(std::fs::read(&made).unwrap(), vec![b'g'; 100_000]);
}
