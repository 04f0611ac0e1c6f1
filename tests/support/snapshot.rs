//! Exact-output tests of what users read: the text with the temp project's path (and the cache
//! beside it) replaced by `[PROJECT]`, so a snapshot is the same on every machine and run.

use super::project::Project;

/// `text` with `p`'s absolute path written as `[PROJECT]`.
pub fn normalise(p: &Project, text: &str) -> String {
    let root = p.root().display().to_string();
    let mut out = text.replace(&root, "[PROJECT]");
    // macOS and some CI temp dirs reach the same folder through a symlink.
    if let Ok(real) = p.root().canonicalize() {
        out = out.replace(&real.display().to_string(), "[PROJECT]");
    }
    out
}
