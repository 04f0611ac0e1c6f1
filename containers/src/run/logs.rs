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

/// The two log files, created (with their folders) before the container starts.
pub(super) struct LogFiles {
    stdout: tokio::fs::File,
    stdout_path: PathBuf,
    stderr: tokio::fs::File,
    stderr_path: PathBuf,
    /// The secrets, hidden before a byte reaches a file or a line.
    stdout_mask: MaskStream,
    stderr_mask: MaskStream,
}

impl LogFiles {
    pub(super) async fn create(
        stdout: &Path,
        stderr: &Path,
        mask: &Mask,
    ) -> Result<LogFiles, ContainerError> {
        async fn open(path: &Path) -> Result<tokio::fs::File, ContainerError> {
            let io = |source| ContainerError::Io {
                path: path.to_path_buf(),
                source,
            };
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                tokio::fs::create_dir_all(parent).await.map_err(io)?;
            }
            tokio::fs::File::create(path).await.map_err(io)
        }
        Ok(LogFiles {
            stdout: open(stdout).await?,
            stdout_path: stdout.to_path_buf(),
            stderr: open(stderr).await?,
            stderr_path: stderr.to_path_buf(),
            stdout_mask: mask.stream(),
            stderr_mask: mask.stream(),
        })
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
        let (file, path, splitter, mask, message) = match chunk {
            LogOutput::StdOut { message } | LogOutput::Console { message } => (
                &mut files.stdout,
                &files.stdout_path,
                &mut out_lines,
                &mut files.stdout_mask,
                message,
            ),
            LogOutput::StdErr { message } => (
                &mut files.stderr,
                &files.stderr_path,
                &mut err_lines,
                &mut files.stderr_mask,
                message,
            ),
            LogOutput::StdIn { .. } => continue,
        };
        let bytes = mask.feed(&message);
        file.write_all(&bytes)
            .await
            .map_err(|source| ContainerError::Io {
                path: path.clone(),
                source,
            })?;
        splitter.push(&bytes, &mut send);
    }
    for (file, path, splitter, mask) in [
        (
            &mut files.stdout,
            &files.stdout_path,
            &mut out_lines,
            &mut files.stdout_mask,
        ),
        (
            &mut files.stderr,
            &files.stderr_path,
            &mut err_lines,
            &mut files.stderr_mask,
        ),
    ] {
        let rest = mask.finish();
        let io = |source| ContainerError::Io {
            path: path.clone(),
            source,
        };
        file.write_all(&rest).await.map_err(io)?;
        splitter.push(&rest, &mut send);
        splitter.finish(&mut send);
        file.flush().await.map_err(io)?;
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
