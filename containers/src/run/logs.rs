//! A container's attached output: every chunk written to its log file as it arrives, and cut
//! into lines for whoever watches.

use std::path::{Path, PathBuf};

use bollard::container::LogOutput;
use bollard::errors::Error as BollardError;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc::UnboundedSender;

use crate::error::ContainerError;
use crate::mask::{Mask, MaskStream};
use crate::spec::{LogLine, Stream};

/// A line longer than this is passed on in pieces (the log files always get every byte).
const MAX_LINE: usize = 64 * 1024;

/// The two log files, each created (with its folder) at its first byte: most stages print
/// nothing on one stream or both, and an empty file costs an inode and says nothing (the host
/// executor does the same, `runner/src/exec/output.rs`).
pub(super) struct LogFiles {
    stdout: LazyFile,
    stderr: LazyFile,
    /// The secrets, hidden before a byte reaches a file or a line.
    stdout_mask: MaskStream,
    stderr_mask: MaskStream,
}

struct LazyFile {
    path: PathBuf,
    file: Option<tokio::fs::File>,
}

impl LazyFile {
    fn new(path: &Path) -> LazyFile {
        LazyFile {
            path: path.to_path_buf(),
            file: None,
        }
    }

    fn io(&self) -> impl Fn(std::io::Error) -> ContainerError + '_ {
        |source| ContainerError::Io {
            path: self.path.clone(),
            source,
        }
    }

    async fn write_all(&mut self, bytes: &[u8]) -> Result<(), ContainerError> {
        if bytes.is_empty() {
            return Ok(());
        }
        if self.file.is_none() {
            if let Some(parent) = self.path.parent().filter(|p| !p.as_os_str().is_empty()) {
                tokio::fs::create_dir_all(parent).await.map_err(self.io())?;
            }
            self.file = Some(
                tokio::fs::File::create(&self.path)
                    .await
                    .map_err(self.io())?,
            );
        }
        let path = self.path.clone();
        let file = self.file.as_mut().expect("opened above");
        file.write_all(bytes)
            .await
            .map_err(|source| ContainerError::Io { path, source })
    }

    async fn flush(&mut self) -> Result<(), ContainerError> {
        let path = self.path.clone();
        match self.file.as_mut() {
            Some(f) => f
                .flush()
                .await
                .map_err(|source| ContainerError::Io { path, source }),
            None => Ok(()),
        }
    }
}

impl LogFiles {
    pub(super) fn new(stdout: &Path, stderr: &Path, mask: &Mask) -> LogFiles {
        LogFiles {
            stdout: LazyFile::new(stdout),
            stderr: LazyFile::new(stderr),
            stdout_mask: mask.stream(),
            stderr_mask: mask.stream(),
        }
    }
}

/// Copy the attached output into the log files and send each line on `lines`.
pub(super) async fn pump_logs(
    mut output: std::pin::Pin<
        Box<dyn futures_util::Stream<Item = Result<LogOutput, BollardError>> + Send>,
    >,
    mut files: LogFiles,
    lines: Option<UnboundedSender<LogLine>>,
    container: String,
) -> Result<(), ContainerError> {
    let mut out_lines = LineSplitter::new(Stream::Stdout);
    let mut err_lines = LineSplitter::new(Stream::Stderr);
    let mut send = |line: LogLine| {
        if let Some(tx) = &lines {
            // A receiver that went away only means nobody is watching.
            let _ = tx.send(line);
        }
    };
    while let Some(chunk) = output.next().await {
        let chunk = chunk.map_err(|source| ContainerError::Logs {
            container: container.clone(),
            source,
        })?;
        let (file, splitter, mask, message) = match chunk {
            LogOutput::StdOut { message } | LogOutput::Console { message } => (
                &mut files.stdout,
                &mut out_lines,
                &mut files.stdout_mask,
                message,
            ),
            LogOutput::StdErr { message } => (
                &mut files.stderr,
                &mut err_lines,
                &mut files.stderr_mask,
                message,
            ),
            LogOutput::StdIn { .. } => continue,
        };
        let bytes = mask.feed(&message);
        file.write_all(&bytes).await?;
        splitter.push(&bytes, &mut send);
    }
    for (file, splitter, mask) in [
        (&mut files.stdout, &mut out_lines, &mut files.stdout_mask),
        (&mut files.stderr, &mut err_lines, &mut files.stderr_mask),
    ] {
        let rest = mask.finish();
        file.write_all(&rest).await?;
        splitter.push(&rest, &mut send);
        splitter.finish(&mut send);
        file.flush().await?;
    }
    Ok(())
}

/// Cuts a byte stream into lines. `\n`, `\r\n` and a lone `\r` (progress bars redrawing a
/// line) all end a line.
struct LineSplitter {
    stream: Stream,
    buf: Vec<u8>,
    after_cr: bool,
}

impl LineSplitter {
    fn new(stream: Stream) -> Self {
        LineSplitter {
            stream,
            buf: Vec::new(),
            after_cr: false,
        }
    }

    fn push(&mut self, bytes: &[u8], emit: &mut impl FnMut(LogLine)) {
        for &b in bytes {
            match b {
                b'\n' => {
                    if !(self.after_cr && self.buf.is_empty()) {
                        self.emit(emit);
                    }
                    self.after_cr = false;
                }
                b'\r' => {
                    self.emit(emit);
                    self.after_cr = true;
                }
                _ => {
                    self.after_cr = false;
                    self.buf.push(b);
                    if self.buf.len() >= MAX_LINE {
                        self.emit(emit);
                    }
                }
            }
        }
    }

    fn finish(&mut self, emit: &mut impl FnMut(LogLine)) {
        if !self.buf.is_empty() {
            self.emit(emit);
        }
    }

    fn emit(&mut self, emit: &mut impl FnMut(LogLine)) {
        let line = String::from_utf8_lossy(&self.buf).into_owned();
        self.buf.clear();
        emit(LogLine {
            stream: self.stream,
            line,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(chunks: &[&[u8]]) -> Vec<String> {
        let mut out = Vec::new();
        let mut s = LineSplitter::new(Stream::Stdout);
        for c in chunks {
            s.push(c, &mut |l| out.push(l.line));
        }
        s.finish(&mut |l| out.push(l.line));
        out
    }

    #[test]
    fn lines_split_across_chunks_and_line_endings() {
        assert_eq!(split(&[b"a\nb", b"c\n", b"d"]), ["a", "bc", "d"]);
        assert_eq!(split(&[b"x\r\ny\r", b"\n"]), ["x", "y"]);
        assert_eq!(split(&[b"10%\r20%\r100%\n"]), ["10%", "20%", "100%"]);
        assert_eq!(split(&[b"a\n\nb\n"]), ["a", "", "b"]);
        assert_eq!(split(&[b"caf\xc3", b"\xa9\n"]), ["café"]);
    }
}
