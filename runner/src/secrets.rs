//! A stage's `secret_env` values, kept out of what heddle stores: they never enter the key
//! (`key.rs` leaves them out), its logs and displayed lines show `***` for them
//! ([`heddle_containers::Mask`], applied as output streams in), the error and facts it reports
//! are masked, and an output that holds one fails the stage instead of entering the cache (a
//! cached output is materialised in `out/`, listed in the lock and uploaded to the shared
//! cache).

use std::io::Read;
use std::path::Path;

use heddle_containers::Mask;

use crate::exec::failure::Failure;
use crate::record::ErrorClass;

/// The values of `names` in heddle's environment (unset ones hide nothing).
pub fn mask_of(names: &[String]) -> Mask {
    Mask::new(names.iter().filter_map(|n| std::env::var(n).ok()))
}

/// A failure as the record will hold it: its error line and class masked (the stage wrote
/// both; the stderr tail comes from the masked log).
pub fn mask_failure(mut f: Failure, mask: &Mask) -> Failure {
    if mask.is_empty() {
        return f;
    }
    f.error = mask.apply(&f.error).into_owned();
    if let ErrorClass::Stage(c) = &f.class {
        f.class = ErrorClass::from(mask.apply(c).into_owned());
    }
    f.stderr_tail = f.stderr_tail.map(|t| mask.apply(&t).into_owned());
    f
}

/// The first declared output (under the sandbox's `out/`) whose bytes hold a secret value:
/// files are read in chunks, each searched with the end of the one before it.
pub fn output_holding(
    sandbox: &Path,
    files: &std::collections::BTreeMap<String, String>,
    mask: &Mask,
) -> Option<String> {
    if mask.is_empty() {
        return None;
    }
    files
        .iter()
        .find(|(name, file)| holds(&sandbox.join("out").join(name).join(file), mask))
        .map(|(name, _)| name.clone())
}

/// Whether the file, or any file beneath the folder, at `path` holds a value. Links are not
/// followed (collecting refuses links that leave the output anyway).
fn holds(path: &Path, mask: &Mask) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return false;
    };
    if meta.is_dir() {
        let Ok(entries) = std::fs::read_dir(path) else {
            return false;
        };
        return entries.flatten().any(|e| holds(&e.path(), mask));
    }
    if !meta.is_file() {
        return false;
    }
    let Ok(mut f) = std::fs::File::open(path) else {
        return false;
    };
    let keep = mask.longest().saturating_sub(1);
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 20);
    let mut chunk = vec![0u8; 1 << 20];
    loop {
        let n = match f.read(&mut chunk) {
            Ok(0) | Err(_) => return false,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        if mask.found_in(&buf) {
            return true;
        }
        let cut = buf.len().saturating_sub(keep);
        buf.drain(..cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_holding_a_value_is_found_across_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out/o");
        std::fs::create_dir_all(out.join("f/sub")).unwrap();
        let mut big = vec![b'x'; (1 << 20) - 3];
        big.extend_from_slice(b"s3cr3t");
        std::fs::write(out.join("f/sub/big.bin"), &big).unwrap();
        let files = [("o".to_string(), "f".to_string())].into();
        let mask = Mask::new(["s3cr3t"]);
        assert_eq!(output_holding(dir.path(), &files, &mask), Some("o".into()));
        std::fs::write(out.join("f/sub/big.bin"), b"clean").unwrap();
        assert_eq!(output_holding(dir.path(), &files, &mask), None);
        assert_eq!(output_holding(dir.path(), &files, &Mask::default()), None);
    }
}
