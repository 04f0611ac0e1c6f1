//! The files behind heddle's cross-process locks (a pipeline's `out/`, a machine-wide resource
//! unit): the OS lock on the file is the lock, and the file's text says who holds it, for
//! whoever waits and for `heddle status`. The text is a diagnostic only; nothing trusts it.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

/// Open (creating it and its folder) the lock file at `path`, keeping what it says.
pub fn open(path: &Path) -> std::io::Result<File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

/// Replace what the held lock file says with `text`. Best effort: a holder that cannot say who
/// it is still holds the lock.
pub fn say_holder(file: &mut File, text: &str) {
    let _ = file.set_len(0);
    let _ = file.seek(SeekFrom::Start(0));
    let _ = file.write_all(text.as_bytes());
}
