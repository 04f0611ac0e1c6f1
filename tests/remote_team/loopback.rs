//! A hostile S3 server on 127.0.0.1, written for these tests: no real server can be made to
//! lie about sizes or trickle bytes on purpose, so this one speaks just enough HTTP/1.1 for
//! OpenDAL's S3 client (path-style `HEAD` and `GET` of `/<bucket>/<key>`, one request per
//! connection, `Connection: close`) and serves a `file://` remote's folder, except for the
//! objects a test tells it to lie about. It counts what it serves so a test can tell how much a
//! reader took. A stand-in by necessity, not a mock of heddle: heddle's real S3 client talks to
//! it over a real socket.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const BUCKET: &str = "team";

/// How to answer for one object instead of serving it from the folder.
#[derive(Clone, Copy, Debug)]
pub enum Lie {
    /// HEAD says `head` bytes; GET announces 2 GiB and sends zeros until the client hangs up.
    Endless { head: u64 },
    /// HEAD tells the truth; GET sends the true bytes one at a time, `gap` apart.
    Trickle { gap: Duration },
}

#[derive(Default)]
pub struct Counts {
    /// Body bytes written to clients, all objects.
    pub bytes_sent: AtomicU64,
    /// GETs of blobs (`cas/`).
    pub blob_gets: AtomicU64,
}

pub struct Loopback {
    pub port: u16,
    pub counts: Arc<Counts>,
    lies: Arc<Mutex<HashMap<String, Lie>>>,
}

impl Loopback {
    /// Serve `root` (a `file://` remote's folder) as `s3://team/<anything>/...`.
    pub fn serve(root: PathBuf) -> Loopback {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let counts = Arc::new(Counts::default());
        let lies: Arc<Mutex<HashMap<String, Lie>>> = Arc::default();
        let (c, l) = (counts.clone(), lies.clone());
        // Detached: the listener lives as long as the test process, which is short.
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (root, c, l) = (root.clone(), c.clone(), l.clone());
                std::thread::spawn(move || {
                    let _ = answer(stream, &root, &c, &l);
                });
            }
        });
        Loopback { port, counts, lies }
    }

    /// Lie about the object at `rel` (`ac/<hex>.json`, `cas/<hex>`).
    pub fn lie(&self, rel: &str, lie: Lie) {
        self.lies.lock().unwrap().insert(rel.to_string(), lie);
    }

    pub fn url(&self) -> String {
        format!("s3://{BUCKET}/heddle")
    }

    /// The variables an S3 client needs to reach it (any credentials do: nothing checks them).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            (
                "AWS_ENDPOINT_URL",
                format!("http://127.0.0.1:{}", self.port),
            ),
            ("AWS_ACCESS_KEY_ID", "test".into()),
            ("AWS_SECRET_ACCESS_KEY", "test".into()),
            ("AWS_REGION", "us-east-1".into()),
        ]
    }
}

fn answer(
    stream: TcpStream,
    root: &std::path::Path,
    counts: &Counts,
    lies: &Mutex<HashMap<String, Lie>>,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut first = String::new();
    reader.read_line(&mut first)?;
    // The rest of the head; a HEAD or GET has no body.
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" {
            break;
        }
    }
    let mut parts = first.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    // `/team/heddle/cas/<hex>` → `cas/<hex>`.
    let rel = path
        .trim_start_matches('/')
        .splitn(3, '/')
        .nth(2)
        .unwrap_or("")
        .to_string();
    let mut out = stream;
    if method == "GET" && rel.starts_with("cas/") {
        counts.blob_gets.fetch_add(1, Ordering::Relaxed);
    }
    let lie = lies.lock().unwrap().get(&rel).copied();
    let bytes = std::fs::read(root.join(&rel)).ok();
    let head = |out: &mut TcpStream, status: &str, len: u64| {
        write!(
            out,
            "HTTP/1.1 {status}\r\nContent-Length: {len}\r\nETag: \"x\"\r\nLast-Modified: Mon, 01 Jan 2024 00:00:00 GMT\r\nConnection: close\r\n\r\n"
        )
    };
    match (method, lie, bytes) {
        (_, None, None) | (_, Some(Lie::Trickle { .. }), None) => {
            head(&mut out, "404 Not Found", 0)
        }
        ("HEAD", Some(Lie::Endless { head: n }), _) => head(&mut out, "200 OK", n),
        ("HEAD", _, Some(b)) => head(&mut out, "200 OK", b.len() as u64),
        ("GET", Some(Lie::Endless { .. }), _) => {
            head(&mut out, "200 OK", 2 * 1024 * 1024 * 1024)?;
            let zeros = [0u8; 64 * 1024];
            loop {
                out.write_all(&zeros)?;
                counts
                    .bytes_sent
                    .fetch_add(zeros.len() as u64, Ordering::Relaxed);
            }
        }
        ("GET", Some(Lie::Trickle { gap }), Some(b)) => {
            head(&mut out, "200 OK", b.len() as u64)?;
            for byte in b {
                out.write_all(&[byte])?;
                out.flush()?;
                counts.bytes_sent.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(gap);
            }
            Ok(())
        }
        ("GET", _, Some(b)) => {
            head(&mut out, "200 OK", b.len() as u64)?;
            out.write_all(&b)?;
            counts
                .bytes_sent
                .fetch_add(b.len() as u64, Ordering::Relaxed);
            Ok(())
        }
        _ => head(&mut out, "405 Method Not Allowed", 0),
    }
}
