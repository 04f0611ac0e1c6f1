//! Where lock text goes: streamed to the lock file piece by piece, and compared with the file
//! already there as it arrives, so a lock that did not change is never rewritten (its mtime
//! stays) and a lock that did is replaced atomically.
//!
//! The lock of a 100,000-value matrix is about 80 MB. Built whole as one `String` before it
//! was compared and written, it grew by doubling (a copy of tens of megabytes at each step) and
//! was a sixth of a no-op run's peak memory; streamed, the run holds one instance's text.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use heddle_cache::Digest;
use sha2::Digest as _;

use super::LockError;

/// The lock file being written at `path`. Feed it with [`LockSink::push`], end it with
/// [`LockSink::finish`]. Dropped unfinished (an error), it leaves the old file as it was and
/// removes its temp file. The temp file is this process's own (`<name>.lock.<pid>.tmp`): two
/// runs of one pipeline that end together each write a whole lock, and the last rename wins,
/// instead of both writing into one temp file.
pub(super) struct LockSink {
    path: PathBuf,
    tmp: PathBuf,
    /// The file already at `path`, read in step with what is pushed while the two agree.
    existing: Option<BufReader<File>>,
    /// Bytes pushed so far that equal the existing file's first bytes.
    matched: u64,
    /// Once the text differs: the temp file that replaces the lock.
    out: Option<BufWriter<File>>,
    hasher: sha2::Sha256,
    /// The temp file exists and has not become the lock (removed on drop).
    tmp_live: bool,
}

impl Drop for LockSink {
    fn drop(&mut self) {
        if self.tmp_live {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

const BUFFER: usize = 256 * 1024;

impl LockSink {
    pub(super) fn new(path: &Path) -> LockSink {
        LockSink {
            path: path.to_path_buf(),
            tmp: path.with_extension(format!("lock.{}.tmp", std::process::id())),
            existing: File::open(path)
                .ok()
                .map(|f| BufReader::with_capacity(BUFFER, f)),
            matched: 0,
            out: None,
            hasher: sha2::Sha256::new(),
            tmp_live: false,
        }
    }

    pub(super) fn push(&mut self, text: &str) -> Result<(), LockError> {
        self.hasher.update(text.as_bytes());
        if self.out.is_none() {
            if let Some(existing) = &mut self.existing {
                if starts_with(existing, text.as_bytes()) {
                    self.matched += text.len() as u64;
                    return Ok(());
                }
            }
            self.diverge().map_err(|e| self.error(e))?;
        }
        let out = self.out.as_mut().expect("diverged above");
        out.write_all(text.as_bytes()).map_err(|e| self.error(e))
    }

    /// The lock is complete: keep the old file if it held exactly these bytes, else move the
    /// new text into place. Returns the sha256 of the lock's bytes.
    pub(super) fn finish(mut self) -> Result<Digest, LockError> {
        let digest = Digest::from_bytes(self.hasher.clone().finalize().into());
        if self.out.is_none() {
            let at_end = match &mut self.existing {
                Some(existing) => existing.fill_buf().map(|b| b.is_empty()).unwrap_or(false),
                None => false,
            };
            if at_end {
                return Ok(digest);
            }
            self.diverge().map_err(|e| self.error(e))?;
        }
        let out = self.out.take().expect("diverged above");
        let file = out.into_inner().map_err(|e| self.error(e.into_error()))?;
        drop(file);
        std::fs::rename(&self.tmp, &self.path).map_err(|e| self.error(e))?;
        self.tmp_live = false;
        Ok(digest)
    }

    /// The text stops matching the old file: start the temp file with the part that did.
    fn diverge(&mut self) -> io::Result<()> {
        let mut out = BufWriter::with_capacity(BUFFER, File::create(&self.tmp)?);
        self.tmp_live = true;
        if self.matched > 0 {
            io::copy(&mut File::open(&self.path)?.take(self.matched), &mut out)?;
        }
        self.existing = None;
        self.out = Some(out);
        Ok(())
    }

    fn error(&self, source: io::Error) -> LockError {
        LockError::Write {
            path: self.path.clone(),
            source,
        }
    }
}

/// Whether the next bytes of `r` are `want` (consuming them). A read error counts as a
/// difference: the lock is then rewritten, which is always correct.
fn starts_with(r: &mut BufReader<File>, mut want: &[u8]) -> bool {
    while !want.is_empty() {
        let have = match r.fill_buf() {
            Ok(b) if !b.is_empty() => b,
            _ => return false,
        };
        let n = have.len().min(want.len());
        if have[..n] != want[..n] {
            return false;
        }
        r.consume(n);
        want = &want[n..];
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, pieces: &[&str]) -> Digest {
        let mut sink = LockSink::new(path);
        for p in pieces {
            sink.push(p).unwrap();
        }
        sink.finish().unwrap()
    }

    fn mtime(path: &Path) -> std::time::SystemTime {
        std::fs::metadata(path).unwrap().modified().unwrap()
    }

    #[test]
    fn writes_rewrites_and_leaves_an_unchanged_lock_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.lock");
        let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        // (what is there, the pieces pushed, whether the file must be left alone)
        let cases: &[(Option<&str>, &[&str], bool)] = &[
            (None, &["a\n", "b\n"], false),
            (Some("a\nb\n"), &["a\n", "b\n"], true),
            (Some("a\nb\n"), &["a", "\nb\n"], true),
            (Some("a\nb\n"), &["a\n", "c\n"], false),
            (Some("a\nb\nc\n"), &["a\n", "b\n"], false),
            (Some("a\n"), &["a\n", "b\n"], false),
            (Some("x"), &["a\n", "b\n"], false),
            (Some(""), &[], true),
        ];
        for (before, pieces, untouched) in cases {
            let _ = std::fs::remove_file(&path);
            if let Some(b) = before {
                std::fs::write(&path, b).unwrap();
                File::options()
                    .write(true)
                    .open(&path)
                    .unwrap()
                    .set_modified(old)
                    .unwrap();
            }
            let text = pieces.concat();
            let digest = write(&path, pieces);
            let case = format!("{before:?} <- {pieces:?}");
            assert_eq!(std::fs::read_to_string(&path).unwrap(), text, "{case}");
            assert_eq!(digest, Digest::of_bytes(text.as_bytes()), "{case}");
            assert_eq!(mtime(&path) == old, *untouched, "{case}");
            let leftovers = std::fs::read_dir(dir.path()).unwrap().count();
            assert_eq!(leftovers, 1, "{case}: only the lock is left");
        }
    }

    #[test]
    fn a_lock_abandoned_halfway_leaves_the_old_one_and_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.lock");
        std::fs::write(&path, "a\nb\n").unwrap();
        let mut sink = LockSink::new(&path);
        sink.push("a\nc\n").unwrap();
        drop(sink);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a\nb\n");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn an_unwritable_folder_names_the_lock_and_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing").join("p.lock");
        let mut sink = LockSink::new(&path);
        let text = heddle_cache::error_chain(&sink.push("a\n").unwrap_err());
        assert!(text.contains(&path.display().to_string()), "{text}");
        assert!(text.contains("No such file or directory"), "{text}");
    }
}
