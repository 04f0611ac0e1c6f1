//! A stage's output: copied to its log file at disk speed, with only the latest line kept for
//! the progress display, and a bounded tail read back for the status record.
//!
//! Why chunks and not lines: the first version read line by line (`read_until`), wrote each line
//! through `tokio::fs` (one blocking-pool round trip per line) and allocated a `String` per line
//! for the progress channel: many short lines logged orders of magnitude slower than `cat`, and
//! one long line was held whole three times over (benches/RESULTS.md, M1). Now a buffer (8 KiB, then
//! 256 KiB once a stream fills that) is filled and written as it comes, whatever the line structure; the display gets at most one
//! line per read (it shows only the latest), cut to [`LINE_CAP`] bytes. Memory per stream is
//! the buffer plus the cap, whatever the stage prints.
//!
//! The pump also obeys a stop signal: a process that escaped its stage's kill (or simply holds
//! a copy of the pipe) must not keep heddle reading forever, so after the stage ends the
//! executor drains for a short bounded time and then stops the pump (see `host.rs`).

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use heddle_containers::MaskStream;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use super::ExecError;

/// Bytes read (and written to the log) at a time, once a stream has filled [`FIRST_CHUNK`].
const CHUNK: usize = 256 * 1024;

/// The buffer a stream starts with. Most stages print nothing or a few lines; a zeroed
/// 256 KiB buffer per stream per stage was a fresh allocation (page faults and a memset) on
/// every stage of a chain (benches/RESULTS.md, M15). A stream that fills it gets [`CHUNK`].
const FIRST_CHUNK: usize = 8 * 1024;

/// The longest line prefix sent to the progress display (it shows 160 characters).
pub const LINE_CAP: usize = 512;

/// The most of a log the status record keeps: the last bytes, cut at a line start.
pub const TAIL_BYTES: usize = 4096;

/// The most lines the status record keeps.
pub const TAIL_LINES: usize = 20;

/// Copy `stream` into `log` (created at the first byte: most stages print nothing, and each
/// file created costs an inode) until end of file or until `stop` is cancelled, sending the
/// latest complete line of each read to `lines`. The stage's secrets (`mask`) are written as
/// `***` in both.
pub async fn pump<R: AsyncRead + Unpin>(
    stream: Option<R>,
    log: PathBuf,
    lines: UnboundedSender<String>,
    stop: CancellationToken,
    mut mask: MaskStream,
) -> Result<(), ExecError> {
    let Some(mut stream) = stream else {
        return Ok(());
    };
    let log_err = |source| ExecError::Log {
        path: log.clone(),
        source,
    };
    let mut file: Option<tokio::fs::File> = None;
    let mut buf = vec![0u8; FIRST_CHUNK];
    let mut latest = LatestLine::default();
    loop {
        let n = tokio::select! {
            biased;
            n = stream.read(&mut buf) => n.map_err(log_err)?,
            _ = stop.cancelled() => break,
        };
        if n == 0 {
            break;
        }
        let filled = n == buf.len();
        let chunk = mask.feed(&buf[..n]);
        if chunk.is_empty() {
            continue;
        }
        let f = match &mut file {
            Some(f) => f,
            None => file.insert(tokio::fs::File::create(&log).await.map_err(log_err)?),
        };
        f.write_all(&chunk).await.map_err(log_err)?;
        if let Some(line) = latest.push(&chunk) {
            let _ = lines.send(line);
        }
        if filled && buf.len() < CHUNK {
            buf.resize(CHUNK, 0);
        }
    }
    let rest = mask.finish();
    if !rest.is_empty() {
        let f = match &mut file {
            Some(f) => f,
            None => file.insert(tokio::fs::File::create(&log).await.map_err(log_err)?),
        };
        f.write_all(&rest).await.map_err(log_err)?;
        if let Some(line) = latest.push(&rest) {
            let _ = lines.send(line);
        }
    }
    if let Some(line) = latest.finish() {
        let _ = lines.send(line);
    }
    if let Some(f) = &mut file {
        f.flush().await.map_err(log_err)?;
    }
    Ok(())
}

/// The line being read, kept to its first [`LINE_CAP`] bytes.
#[derive(Default)]
struct LatestLine {
    partial: Vec<u8>,
}

impl LatestLine {
    /// Take in a chunk; the last line it completes, if any and not blank.
    fn push(&mut self, chunk: &[u8]) -> Option<String> {
        let Some(last_nl) = memrchr(b'\n', chunk) else {
            self.extend(chunk);
            return None;
        };
        let line = match memrchr(b'\n', &chunk[..last_nl]) {
            Some(prev) => display(&chunk[prev + 1..last_nl]),
            None => {
                self.extend(&chunk[..last_nl]);
                display(&self.partial)
            }
        };
        self.partial.clear();
        self.extend(&chunk[last_nl + 1..]);
        line
    }

    /// End of stream: the unterminated last line, if any.
    fn finish(&mut self) -> Option<String> {
        let line = display(&self.partial);
        self.partial.clear();
        line
    }

    fn extend(&mut self, bytes: &[u8]) {
        let room = LINE_CAP.saturating_sub(self.partial.len());
        self.partial
            .extend_from_slice(&bytes[..bytes.len().min(room)]);
    }
}

fn display(line: &[u8]) -> Option<String> {
    let line = &line[..line.len().min(LINE_CAP)];
    let text = String::from_utf8_lossy(line);
    let text = text.trim_end();
    (!text.is_empty()).then(|| text.to_string())
}

fn memrchr(needle: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().rposition(|b| *b == needle)
}

/// The end of a log for the status record: at most [`TAIL_BYTES`] bytes and [`TAIL_LINES`]
/// lines, starting at a line start when the window holds one, never inside a UTF-8
/// character. Reads only the window, however large the log. `None` when the log is missing or
/// blank.
pub fn tail_of(path: &Path) -> Option<String> {
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    let start = len.saturating_sub(TAIL_BYTES as u64);
    f.seek(SeekFrom::Start(start)).ok()?;
    let mut bytes = Vec::with_capacity(TAIL_BYTES);
    f.take(TAIL_BYTES as u64).read_to_end(&mut bytes).ok()?;
    tail_text(&bytes, start > 0)
}

/// `window` is the end of a log; `cut` says whether it starts mid-log.
fn tail_text(window: &[u8], cut: bool) -> Option<String> {
    let mut w = window;
    if cut {
        // The first line is probably partial: start after it if a later line exists.
        match w.iter().position(|b| *b == b'\n') {
            Some(i) if w[i + 1..].iter().any(|b| !b.is_ascii_whitespace()) => w = &w[i + 1..],
            // One long line: keep its end, from a character boundary (a continuation byte
            // is 0b10xx_xxxx).
            _ => {
                let skip = w
                    .iter()
                    .take(4)
                    .take_while(|b| (**b & 0xC0) == 0x80)
                    .count();
                w = &w[skip..];
            }
        }
    }
    let text = String::from_utf8_lossy(w);
    let lines: Vec<&str> = text.lines().collect();
    let first = lines.len().saturating_sub(TAIL_LINES);
    let tail = lines[first..].join("\n");
    (!tail.trim().is_empty()).then_some(tail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latest_line_is_the_last_complete_one_and_bounded() {
        let mut l = LatestLine::default();
        assert_eq!(l.push(b"par"), None);
        assert_eq!(l.push(b"tial\nnext"), Some("partial".into()));
        assert_eq!(l.push(b" one\nb\nc\nd"), Some("c".into()));
        assert_eq!(l.push(b"\n\n"), None, "a blank line is not shown");
        assert_eq!(l.finish(), None);
        let long = vec![b'x'; 10 * LINE_CAP];
        assert_eq!(l.push(&long), None);
        assert_eq!(l.push(&long), None);
        assert_eq!(l.push(b"\n"), Some("x".repeat(LINE_CAP)));
        assert_eq!(l.push(b"end"), None);
        assert_eq!(l.finish(), Some("end".into()));
    }

    #[test]
    fn the_tail_is_bounded_starts_at_a_line_and_stays_utf8() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("err.log");
        assert_eq!(tail_of(&p), None, "no log, no tail");

        // Many lines: the last 20, whole.
        let text: String = (0..1000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&p, &text).unwrap();
        let t = tail_of(&p).unwrap();
        assert_eq!(t.lines().count(), TAIL_LINES);
        assert!(t.starts_with("line 980") && t.ends_with("line 999"), "{t}");

        // Long lines: at most 4 KiB, starting at a line start.
        let text: String = (0..10)
            .map(|i| format!("{i}{}\n", "y".repeat(1500)))
            .collect();
        std::fs::write(&p, &text).unwrap();
        let t = tail_of(&p).unwrap();
        assert!(t.len() <= TAIL_BYTES);
        assert!(t.starts_with('8') || t.starts_with('9'), "{}", &t[..10]);

        // One huge line of 3-byte characters: the end of it, no broken character.
        let text = "€".repeat(100_000) + "\n";
        std::fs::write(&p, &text).unwrap();
        let t = tail_of(&p).unwrap();
        assert!(t.len() <= TAIL_BYTES && t.len() > TAIL_BYTES - 8);
        assert!(t.chars().all(|c| c == '€'), "no replacement character");
    }
}
