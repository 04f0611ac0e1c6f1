//! Files in and out of a container without a shared filesystem: the Engine API's archive
//! endpoints (`PUT`/`GET /containers/{id}/archive`, bollard's `upload_to_container` and
//! `download_from_container`), as testcontainers copies files.
//!
//! A remote engine (`tcp://`, `ssh://`) cannot bind-mount heddle's sandbox: the path names a
//! folder on the wrong machine. So before the container starts, the sandbox folders are sent
//! as one tar stream, and after it exits the writable folders come back the same way. Both
//! directions stream through a bounded channel between a blocking thread (the `tar` crate) and
//! the HTTP body, so memory stays flat in the size of the files.
//!
//! What comes back is untrusted (a stage wrote it): entries are unpacked only at plain
//! relative paths below the destination, never beneath a symlink the archive itself created,
//! and only files, folders and symlinks are kept. Symlinks are unpacked as symlinks; the cache
//! then refuses any that leads outside its output (`heddle_cache::check_tree`).

use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};

use bollard::query_parameters::{DownloadFromContainerOptions, UploadToContainerOptions};
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::mpsc;

use crate::engine::Engine;
use crate::error::ContainerError;

/// Chunks in flight between the tar thread and the HTTP body.
const CHANNEL_DEPTH: usize = 8;
/// Size of one chunk.
const CHUNK: usize = 256 * 1024;

/// A folder copied into the container before it starts, or out of it after it exits.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Copy {
    /// A folder on heddle's machine.
    pub host: PathBuf,
    /// An absolute folder path inside the container.
    pub container: String,
}

impl Engine {
    /// Send every `copies[i].host` folder to `copies[i].container`, as one tar stream.
    pub async fn copy_in(&self, id: &str, copies: &[Copy]) -> Result<(), ContainerError> {
        let (tx, mut rx) = mpsc::channel::<Bytes>(CHANNEL_DEPTH);
        let copies_owned = copies.to_vec();
        let writer = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            let mut tar = tar::Builder::new(ChannelWriter::new(tx));
            tar.follow_symlinks(false);
            for c in &copies_owned {
                let inside = c.container.trim_start_matches('/');
                tar.append_dir_all(inside, &c.host)?;
            }
            tar.into_inner()?.finish()
        });
        let body = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
        let upload = self.docker.upload_to_container(
            id,
            Some(UploadToContainerOptions {
                path: "/".to_string(),
                // No `copyUIDGID`: the engine then keeps the tar's owners, i.e. the invoking
                // user who owns the sandbox and whom the container runs as (copyUIDGID would
                // need that user in the image's passwd).
                ..Default::default()
            }),
            bollard::body_stream(body),
        );
        let sent = upload.await;
        let built = writer.await.expect("tar thread does not panic");
        let what = || {
            copies
                .iter()
                .map(|c| c.container.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        built.map_err(|source| ContainerError::ArchivePack {
            paths: what(),
            source,
        })?;
        sent.map_err(|source| ContainerError::CopyIn {
            container: id.to_string(),
            paths: what(),
            source,
        })
    }

    /// Fetch the container folder `copy.container` into the host folder `copy.host` (its
    /// contents, not the folder itself), replacing files of the same names.
    pub async fn copy_out(&self, id: &str, copy: &Copy) -> Result<(), ContainerError> {
        let mut stream = self.docker.download_from_container(
            id,
            Some(DownloadFromContainerOptions {
                path: copy.container.clone(),
            }),
        );
        let (tx, rx) = std::sync::mpsc::sync_channel::<Bytes>(CHANNEL_DEPTH);
        let dest = copy.host.clone();
        let reader = tokio::task::spawn_blocking(move || unpack(ChannelReader::new(rx), &dest));
        let mut fetch_err = None;
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(b) => {
                    if tx.send(b).is_err() {
                        break; // the unpacker stopped on an error of its own
                    }
                }
                Err(source) => {
                    fetch_err = Some(source);
                    break;
                }
            }
        }
        drop(tx);
        let unpacked = reader.await.expect("untar thread does not panic");
        if let Some(source) = fetch_err {
            return Err(ContainerError::CopyOut {
                container: id.to_string(),
                path: copy.container.clone(),
                source,
            });
        }
        unpacked.map_err(|source| ContainerError::ArchiveUnpack {
            dest: copy.host.clone(),
            source,
        })
    }
}

/// Unpack a `GET /archive` tar (whose entries start with the folder's own name) into `dest`.
fn unpack(reader: impl Read, dest: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dest)?;
    let mut archive = tar::Archive::new(reader);
    archive.set_preserve_permissions(true);
    archive.set_overwrite(true);
    let mut links: Vec<PathBuf> = Vec::new();
    for entry in archive.entries()? {
        let mut entry = entry?;
        let path = entry.path()?.into_owned();
        // Drop the first component: the copied folder's own name.
        let rel: PathBuf = path.components().skip(1).collect();
        if rel.as_os_str().is_empty() {
            continue;
        }
        if !rel.components().all(|c| matches!(c, Component::Normal(_))) {
            return Err(std::io::Error::other(format!(
                "archive entry {} is not a plain relative path",
                path.display()
            )));
        }
        if links.iter().any(|l| rel.starts_with(l) && rel != *l) {
            return Err(std::io::Error::other(format!(
                "archive entry {} lies beneath a symlink",
                path.display()
            )));
        }
        let kind = entry.header().entry_type();
        if kind.is_symlink() {
            links.push(rel.clone());
        } else if !(kind.is_file() || kind.is_dir()) {
            continue;
        }
        let at = dest.join(&rel);
        if kind.is_file() || kind.is_symlink() {
            match std::fs::symlink_metadata(&at) {
                Ok(m) if m.is_dir() => std::fs::remove_dir_all(&at)?,
                Ok(_) => std::fs::remove_file(&at)?,
                Err(_) => {}
            }
        }
        entry.unpack(&at)?;
    }
    Ok(())
}

/// A `Write` that sends fixed-size chunks over a tokio channel (from a blocking thread).
struct ChannelWriter {
    tx: mpsc::Sender<Bytes>,
    buf: Vec<u8>,
}

impl ChannelWriter {
    fn new(tx: mpsc::Sender<Bytes>) -> Self {
        ChannelWriter {
            tx,
            buf: Vec::with_capacity(CHUNK),
        }
    }
    fn flush_chunk(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)));
        self.tx
            .blocking_send(chunk)
            .map_err(|_| std::io::Error::other("the engine stopped reading the upload"))
    }
    fn finish(mut self) -> std::io::Result<()> {
        self.flush_chunk()
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let n = data.len().min(CHUNK - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == CHUNK {
            self.flush_chunk()?;
        }
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A `Read` over chunks arriving on a channel (in a blocking thread).
struct ChannelReader {
    rx: std::sync::mpsc::Receiver<Bytes>,
    cur: Bytes,
}

impl ChannelReader {
    fn new(rx: std::sync::mpsc::Receiver<Bytes>) -> Self {
        ChannelReader {
            rx,
            cur: Bytes::new(),
        }
    }
}

impl Read for ChannelReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.cur.is_empty() {
            match self.rx.recv() {
                Ok(b) => self.cur = b,
                Err(_) => return Ok(0),
            }
        }
        let n = out.len().min(self.cur.len());
        out[..n].copy_from_slice(&self.cur[..n]);
        self.cur = self.cur.slice(n..);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(entries: &[(&str, tar::EntryType, &str)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, kind, link) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_mode(0o644);
            h.set_size(0);
            if kind.is_symlink() {
                h.set_link_name(link).unwrap();
            }
            // Raw name: set_path would refuse `..`, which is what a hostile archive holds.
            let name = h.as_old_mut().name.as_mut();
            name[..path.len()].copy_from_slice(path.as_bytes());
            h.set_cksum();
            b.append(&h, std::io::empty()).unwrap();
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn unpacks_below_dest_and_refuses_escapes() {
        let dir = tempfile::tempdir().unwrap();
        let ok = tar_of(&[
            ("out/", tar::EntryType::Directory, ""),
            ("out/a/", tar::EntryType::Directory, ""),
            ("out/a/f", tar::EntryType::Regular, ""),
            ("out/l", tar::EntryType::Symlink, "a/f"),
        ]);
        unpack(&ok[..], &dir.path().join("d")).unwrap();
        assert!(dir.path().join("d/a/f").is_file());
        assert_eq!(
            std::fs::read_link(dir.path().join("d/l")).unwrap(),
            Path::new("a/f")
        );

        let climb = tar_of(&[("out/../../x", tar::EntryType::Regular, "")]);
        assert!(unpack(&climb[..], &dir.path().join("e")).is_err());
        assert!(!dir.path().join("x").exists());

        let through = tar_of(&[
            ("out/l", tar::EntryType::Symlink, "/tmp"),
            ("out/l/x", tar::EntryType::Regular, ""),
        ]);
        assert!(unpack(&through[..], &dir.path().join("f")).is_err());
    }
}
