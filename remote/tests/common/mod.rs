//! Shared by the remote cache tests: real servers on 127.0.0.1 (moto for S3, nginx for
//! WebDAV) started and killed by the test, local stores with an action of file and tree
//! outputs, and the cases every backend must pass.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use heddle_cache::{ActionEntry, Digest, OutputEntry, Store};
use heddle_remote::{
    fetch_action, push_action, FetchReport, OpendalCache, ReapiCache, RemoteBackend, RemoteError,
    RemoteUrl, S3Settings, Timeouts,
};

/// The workspace root, whether this file is compiled into heddle-remote's tests or (through
/// `#[path]`) into the binary's end-to-end tests.
pub fn repo_root() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    if dir.join("remote").is_dir() {
        dir.to_path_buf()
    } else {
        dir.parent().unwrap().to_path_buf()
    }
}

/// `None` (after saying why) when the server is not installed and the run does not require
/// it; a panic when `HEDDLE_REQUIRE_REMOTE_SERVERS` is set (tests/all.sh installs them).
pub fn require(what: &str, found: Option<PathBuf>) -> Option<PathBuf> {
    if found.is_some() {
        return found;
    }
    if std::env::var_os("HEDDLE_REQUIRE_REMOTE_SERVERS").is_some() {
        panic!("{what} is not installed but HEDDLE_REQUIRE_REMOTE_SERVERS is set; run bash remote/tests/servers.sh");
    }
    eprintln!("skipped: {what} is not installed (run bash remote/tests/servers.sh)");
    None
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Up to 3 minutes: BuildGrid (Python) takes 45 s to start on a 2-core machine busy with
/// builds. A bound on a hang, not a timing assertion.
fn wait_listening(port: u16, child: &mut Child, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(180);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("{what} exited before listening: {status}");
        }
        assert!(
            Instant::now() < deadline,
            "{what} did not listen on {port} within 180 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A server process, killed when dropped.
pub struct Server {
    pub child: Child,
    pub port: u16,
    pub dir: tempfile::TempDir,
}

impl Server {
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Freeze the server (SIGSTOP): it keeps its socket but answers nothing.
    pub fn stop(&self) {
        signal(self.child.id(), "STOP");
    }

    pub fn resume(&self) {
        signal(self.child.id(), "CONT");
    }
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig} {pid}");
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // A stopped process still dies of SIGKILL; no need to resume it first.
            self.kill();
        }
    }
}

// ------------------------------------------------------------------ moto (S3)

pub fn venv() -> PathBuf {
    repo_root().join("target/remote-venv")
}

pub fn moto_path() -> Option<PathBuf> {
    let p = venv().join("bin/moto_server");
    p.exists().then_some(p)
}

pub const BUCKET: &str = "heddle-test";

/// A moto S3 server with bucket [`BUCKET`], or `None` when skipped.
pub fn start_moto() -> Option<Server> {
    let moto = require("moto (S3 test server)", moto_path())?;
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(moto)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::from(
            std::fs::File::create(dir.path().join("moto.log")).unwrap(),
        ))
        .spawn()
        .unwrap();
    wait_listening(port, &mut child, "moto_server");
    let server = Server { child, port, dir };
    boto(&server, &format!("s3.create_bucket(Bucket='{BUCKET}')"));
    Some(server)
}

/// Run a line of Python with `s3`, a boto3 client of the moto server: how the tests reach
/// into the bucket behind the crate's back.
pub fn boto(server: &Server, code: &str) {
    let script = format!(
        "import boto3\ns3 = boto3.client('s3', endpoint_url='http://127.0.0.1:{}', region_name='us-east-1', aws_access_key_id='test', aws_secret_access_key='test')\n{code}\n",
        server.port
    );
    let out = Command::new(venv().join("bin/python"))
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "boto3 failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn s3_env(port: u16) -> HashMap<String, String> {
    [
        ("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}")),
        ("AWS_REGION", "us-east-1".to_string()),
        ("AWS_ACCESS_KEY_ID", "test".to_string()),
        ("AWS_SECRET_ACCESS_KEY", "test".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

pub fn open(
    url: &str,
    env: &HashMap<String, String>,
    timeouts: Timeouts,
) -> Arc<dyn RemoteBackend> {
    let url = RemoteUrl::parse(url).unwrap();
    Arc::new(
        OpendalCache::open(
            &url,
            &S3Settings::default(),
            &|k| env.get(k).cloned(),
            timeouts,
        )
        .unwrap(),
    )
}

pub fn s3_remote(server: &Server, prefix: &str, timeouts: Timeouts) -> Arc<dyn RemoteBackend> {
    open(
        &format!("s3://{BUCKET}/{prefix}"),
        &s3_env(server.port),
        timeouts,
    )
}

// ------------------------------------------------------------------ nginx (WebDAV)

pub fn nginx_path() -> Option<PathBuf> {
    let found = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists());
    found.filter(|_| Path::new(DAV_EXT).exists())
}

const DAV_EXT: &str = "/usr/lib/nginx/modules/ngx_http_dav_ext_module.so";

/// nginx serving WebDAV from `<dir>/dav`, or `None` when skipped.
pub fn start_nginx() -> Option<Server> {
    let nginx = require(
        "nginx with the dav-ext module (WebDAV test server)",
        nginx_path(),
    )?;
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("dav")).unwrap();
    std::fs::create_dir_all(d.join("logs")).unwrap();
    // One process (no master): killing it kills the server. Workers would otherwise run as
    // the user that starts nginx (root in CI would otherwise become nobody,
    // who cannot write the temp dir).
    let user = if unsafe_is_root() { "user root;" } else { "" };
    let conf = format!(
        r#"{user}
load_module {DAV_EXT};
daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/logs/error.log;
events {{ worker_connections 64; }}
http {{
  access_log off;
  client_body_temp_path {d}/body;
  client_max_body_size 0;
  server {{
    listen 127.0.0.1:{port};
    root {d}/dav;
    location / {{
      dav_methods PUT DELETE MKCOL COPY MOVE;
      dav_ext_methods PROPFIND OPTIONS;
      create_full_put_path on;
      dav_access user:rw group:r all:r;
    }}
  }}
}}
"#,
        d = d.display()
    );
    std::fs::write(d.join("nginx.conf"), conf).unwrap();
    let mut child = Command::new(nginx)
        .args([
            "-p",
            &d.display().to_string(),
            "-c",
            &d.join("nginx.conf").display().to_string(),
            "-e",
            &d.join("logs/error.log").display().to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_listening(port, &mut child, "nginx");
    Some(Server { child, port, dir })
}

fn unsafe_is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

// ------------------------------------------------------------------ BuildGrid (REAPI)

/// The venv remote/tests/servers.sh installs BuildGrid 0.4.4 into.
pub fn reapi_venv() -> PathBuf {
    repo_root().join("target/reapi-venv")
}

pub fn bgd_path() -> Option<PathBuf> {
    let p = reapi_venv().join("bin/bgd");
    p.exists().then_some(p)
}

/// Where a test BuildGrid keeps its blobs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum BlobStorage {
    /// In memory (an LRU of 1 GB): the plain server.
    Memory,
    /// Files under `<dir>/store/cas/objects/`, so a test can reach a blob behind the
    /// server's back ([`buildgrid_blob_path`]).
    Disk,
}

/// Instance names the test server serves: the default one and a named one.
pub const REAPI_INSTANCE: &str = "team";

/// A BuildGrid server (CAS, ByteStream and ActionCache, on instances "" and [`REAPI_INSTANCE`])
/// on 127.0.0.1, or `None` when skipped.
pub fn start_buildgrid(storage: BlobStorage) -> Option<Server> {
    let bgd = require("BuildGrid 0.4.4 (REAPI test server)", bgd_path())?;
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let store = match storage {
        BlobStorage::Memory => "!lru-storage &cas\n    size: 1GB".to_string(),
        BlobStorage::Disk => format!("!disk-storage &cas\n    path: {}/store", d.display()),
    };
    let conf = format!(
        r#"server:
  - !channel
    address: "127.0.0.1:{port}"
    insecure-mode: true
authorization:
  method: none
monitoring:
  enabled: false
storages:
  - {store}
caches:
{default_ac}{named_ac}instances:
{default}{named}"#,
        default_ac = buildgrid_action_cache("default"),
        named_ac = buildgrid_action_cache("named"),
        default = buildgrid_instance(""),
        named = buildgrid_instance(REAPI_INSTANCE),
    );
    std::fs::write(d.join("buildgrid.yml"), conf).unwrap();
    let mut child = Command::new(bgd)
        .args([
            "server",
            "start",
            &d.join("buildgrid.yml").display().to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::from(
            std::fs::File::create(d.join("buildgrid.log")).unwrap(),
        ))
        .spawn()
        .unwrap();
    wait_listening(port, &mut child, "bgd server");
    Some(Server { child, port, dir })
}

/// One ActionCache per instance: BuildGrid keys a shared one by action digest alone.
fn buildgrid_action_cache(anchor: &str) -> String {
    format!(
        r#"  - !lru-action-cache &ac-{anchor}
    storage: *cas
    max-cached-refs: 100000
    allow-updates: true
    cache-failed-actions: true
"#
    )
}

fn buildgrid_instance(name: &str) -> String {
    let anchor = if name.is_empty() { "default" } else { "named" };
    format!(
        r#"  - name: '{name}'
    services:
      - !cas
        storage: *cas
      - !bytestream
        storage: *cas
      - !action-cache
        cache: *ac-{anchor}
"#
    )
}

/// Timeouts for the REAPI tests: BuildGrid is Python, and on a loaded 2-core machine with two
/// test servers it can take seconds to answer; the failure tests set their own.
pub fn reapi_timeouts() -> Timeouts {
    Timeouts {
        request: Duration::from_secs(20),
        idle: Duration::from_secs(20),
        retries: 3,
    }
}

/// Where a [`BlobStorage::Disk`] BuildGrid keeps blob `digest`.
pub fn buildgrid_blob_path(server: &Server, digest: Digest) -> PathBuf {
    let hex = digest.to_hex();
    server
        .dir
        .path()
        .join("store/cas/objects")
        .join(&hex[..2])
        .join(&hex[2..])
}

/// The REAPI backend for `server`'s instance `instance` ("" for the default one).
pub fn reapi_remote(server: &Server, instance: &str, timeouts: Timeouts) -> Arc<dyn RemoteBackend> {
    let url = if instance.is_empty() {
        format!("grpc://127.0.0.1:{}", server.port)
    } else {
        format!("grpc://127.0.0.1:{}/{instance}", server.port)
    };
    let RemoteUrl::Grpc {
        authority,
        instance,
    } = RemoteUrl::parse(&url).unwrap()
    else {
        panic!("{url} is a grpc URL")
    };
    Arc::new(ReapiCache::open(&authority, &instance, url, timeouts).unwrap())
}

// ------------------------------------------------------------------ stores and actions

/// A local store in a temp dir.
pub struct Local {
    pub dir: tempfile::TempDir,
    pub store: Arc<Store>,
}

pub fn local() -> Local {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(&dir.path().join("store")).unwrap());
    Local { dir, store }
}

/// Bytes that differ by seed and are not trivially compressible.
pub fn pseudo_random(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Produce an action's outputs in `work` (a file, an executable, and a tree with a
/// subfolder, an empty folder and a symlink), store them in `local` and record the entry.
pub fn make_action(local: &Local, seed: u64, big: usize) -> ActionEntry {
    let work = local.dir.path().join(format!("work-{seed}"));
    let tree = work.join("tree");
    std::fs::create_dir_all(tree.join("sub/deeper")).unwrap();
    std::fs::create_dir_all(tree.join("empty")).unwrap();
    std::fs::write(work.join("model.onnx"), pseudo_random(seed, big)).unwrap();
    std::fs::write(tree.join("a.txt"), b"alpha\n").unwrap();
    std::fs::write(
        tree.join("sub/deeper/b.bin"),
        pseudo_random(seed + 1, 100_000),
    )
    .unwrap();
    let tool = tree.join("sub/run.sh");
    std::fs::write(&tool, b"#!/bin/sh\necho hi\n").unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink("sub/deeper/b.bin", tree.join("link")).unwrap();
    }
    let mut outputs = BTreeMap::new();
    outputs.insert(
        "model".to_string(),
        local.store.put_output(&work.join("model.onnx")).unwrap(),
    );
    outputs.insert("tree".to_string(), local.store.put_output(&tree).unwrap());
    let entry = ActionEntry {
        key: Digest::of_bytes(format!("action-{seed}").as_bytes()),
        family: "test/stage".to_string(),
        key_parts: serde_json::json!({ "seed": seed }),
        outputs,
        duration_ms: 1234,
        created_unix_ms: 1_700_000_000_000,
        meta: serde_json::json!({}),
    };
    local.store.record_action(&entry).unwrap();
    entry
}

/// Materialise every output of `entry` from `store` under `dest`.
pub fn materialize_all(store: &Store, entry: &ActionEntry, dest: &Path) {
    std::fs::create_dir_all(dest).unwrap();
    for (name, out) in &entry.outputs {
        store.materialize(out, &dest.join(name)).unwrap();
    }
}

/// What a fetch of the action `entry` (pushed from `a`, its 5 blobs) into the empty store `b`
/// must leave: the same entry, recorded in `b`, every blob moved, outputs identical to `a`'s.
pub fn assert_fetched(
    a: &Local,
    b: &Local,
    entry: &ActionEntry,
    (fetched, report): (ActionEntry, FetchReport),
) {
    assert_eq!(&fetched, entry);
    assert_eq!(report.blobs_fetched, 5, "{report:?}");
    assert_eq!(
        b.store.lookup_action(&entry.key).unwrap(),
        Some(entry.clone())
    );
    assert_same_outputs(a, b, entry);
}

/// `entry`'s outputs materialised from `a` and from `b` are the same files, modes and bytes.
pub fn assert_same_outputs(a: &Local, b: &Local, entry: &ActionEntry) {
    materialize_all(&a.store, entry, &a.dir.path().join("out"));
    materialize_all(&b.store, entry, &b.dir.path().join("out"));
    assert_eq!(
        snapshot(&a.dir.path().join("out")),
        snapshot(&b.dir.path().join("out"))
    );
}

/// A listing of a file or tree: path, kind, mode bits that matter, and full contents.
pub fn snapshot(root: &Path) -> Vec<(String, String, Vec<u8>)> {
    let mut out = Vec::new();
    fn walk(p: &Path, rel: String, out: &mut Vec<(String, String, Vec<u8>)>) {
        let m = std::fs::symlink_metadata(p).unwrap();
        if m.file_type().is_symlink() {
            let t = std::fs::read_link(p).unwrap();
            out.push((rel, "link".into(), t.to_string_lossy().as_bytes().to_vec()));
        } else if m.is_dir() {
            out.push((rel.clone(), "dir".into(), vec![]));
            let mut names: Vec<_> = std::fs::read_dir(p)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            names.sort();
            for n in names {
                walk(&p.join(&n), format!("{rel}/{}", n.to_string_lossy()), out);
            }
        } else {
            #[cfg(unix)]
            let exec = {
                use std::os::unix::fs::PermissionsExt;
                m.permissions().mode() & 0o111 != 0
            };
            #[cfg(not(unix))]
            let exec = false;
            out.push((rel, format!("file exec={exec}"), std::fs::read(p).unwrap()));
        }
    }
    walk(root, String::new(), &mut out);
    out
}

/// Files left in a store's tmp/ (a failed fetch must leave none).
pub fn tmp_leftovers(store: &Store) -> Vec<PathBuf> {
    std::fs::read_dir(store.root().join("tmp"))
        .map(|rd| rd.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default()
}

// ------------------------------------------------------------------ cases

pub fn short_timeouts() -> Timeouts {
    Timeouts {
        request: Duration::from_secs(3),
        idle: Duration::from_secs(3),
        retries: 3,
    }
}

/// Push from one store, fetch into a second, empty one: the same entry, byte-identical outputs.
pub async fn case_round_trip(remote: Arc<dyn RemoteBackend>) {
    let a = local();
    let entry = make_action(&a, 1, 3 * 1024 * 1024 + 17);
    let pushed = push_action(&*remote, &a.store, &entry).await.unwrap();
    // model, tree manifest, a.txt, b.bin, run.sh.
    assert_eq!(pushed.blobs_uploaded, 5, "{pushed:?}");
    let again = push_action(&*remote, &a.store, &entry).await.unwrap();
    assert_eq!((again.blobs_uploaded, again.blobs_present), (0, 5));

    let b = local();
    assert!(b.store.lookup_action(&entry.key).unwrap().is_none());
    let (fetched, report) = fetch_action(&*remote, b.store.clone(), entry.key)
        .await
        .unwrap()
        .expect("the remote has the entry");
    assert_fetched(&a, &b, &entry, (fetched, report));
    assert!(tmp_leftovers(&b.store).is_empty());

    let missing = Digest::of_bytes(b"never pushed");
    assert!(fetch_action(&*remote, b.store.clone(), missing)
        .await
        .unwrap()
        .is_none());
}

/// A blob overwritten on the server with other bytes of the same length is detected by
/// hash, never reaches the second store, and the entry is not recorded there.
pub async fn case_corrupt_blob(
    remote: Arc<dyn RemoteBackend>,
    corrupt: impl FnOnce(Digest, Vec<u8>),
) {
    let a = local();
    let entry = make_action(&a, 2, 200_000);
    push_action(&*remote, &a.store, &entry).await.unwrap();
    let OutputEntry::File { digest, size, .. } = entry.outputs["model"] else {
        panic!("model is a file")
    };
    let mut evil = pseudo_random(99, size as usize);
    evil[0] ^= 1;
    corrupt(digest, evil);

    let b = local();
    let err = fetch_action(&*remote, b.store.clone(), entry.key)
        .await
        .unwrap_err();
    match &err {
        RemoteError::CorruptBlob {
            digest: d, size: s, ..
        } => {
            assert_eq!((*d, *s), (digest, size));
        }
        other => panic!("expected CorruptBlob, got {other:?}"),
    }
    assert!(err.to_string().starts_with(&format!(
        "failed to verify blob {digest} from remote cache "
    )));
    assert!(!b.store.has_blob(&digest));
    assert!(b.store.lookup_action(&entry.key).unwrap().is_none());
    assert!(
        tmp_leftovers(&b.store).is_empty(),
        "{:?}",
        tmp_leftovers(&b.store)
    );
}

/// Two writers push the same action at once, each from its own store and client: both
/// succeed, and a third store fetches an entry equal to theirs with identical outputs.
pub async fn case_concurrent_writers(make_remote: impl Fn() -> Arc<dyn RemoteBackend>) {
    let a = local();
    let b = local();
    // 20 MiB: several multipart parts on S3, so the two uploads overlap part by part.
    let ea = make_action(&a, 3, 20 * 1024 * 1024);
    let eb = make_action(&b, 3, 20 * 1024 * 1024);
    assert_eq!(ea, eb);
    let (ra, rb) = (make_remote(), make_remote());
    let (pa, pb) = tokio::join!(
        push_action(&*ra, &a.store, &ea),
        push_action(&*rb, &b.store, &eb)
    );
    pa.unwrap();
    pb.unwrap();
    let c = local();
    let (fetched, _) = fetch_action(&*make_remote(), c.store.clone(), ea.key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(fetched, ea);
    assert_same_outputs(&a, &c, &ea);
}

/// Upper bound for "answered within the timeout": one call's whole retry budget (the first
/// call that fails ends the fetch), plus scheduling slack. Not a performance assertion: it
/// tells a bounded failure from a hang.
pub fn hang_bound(t: Timeouts) -> Duration {
    t.request_budget() + Duration::from_secs(10)
}

/// An action pushed through `pusher` (patient timeouts where the server is slow to take it),
/// then the server goes away (`break_server`: killed, frozen): a fetch through `remote` (with
/// `timeouts`) into an empty store fails within [`hang_bound`] and records nothing. Returns the
/// fetch's error and what a push through `remote` after it gives.
pub async fn case_server_gone(
    pusher: Arc<dyn RemoteBackend>,
    remote: Arc<dyn RemoteBackend>,
    timeouts: Timeouts,
    seed: u64,
    break_server: impl FnOnce(),
) -> (RemoteError, Result<heddle_remote::PushReport, RemoteError>) {
    let a = local();
    let entry = make_action(&a, seed, 100_000);
    push_action(&*pusher, &a.store, &entry).await.unwrap();
    break_server();
    let b = local();
    let started = Instant::now();
    let err = fetch_action(&*remote, b.store.clone(), entry.key)
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < hang_bound(timeouts),
        "took {:?}",
        started.elapsed()
    );
    assert!(b.store.lookup_action(&entry.key).unwrap().is_none());
    (err, push_action(&*remote, &a.store, &entry).await)
}

/// The local blob of an action's model no longer hashes to its name: the push is refused with
/// `LocalCorrupt` naming it. Returns the entry and the model's digest, so the caller can look
/// for what must not be on the server.
pub async fn case_locally_corrupted_blob(
    remote: Arc<dyn RemoteBackend>,
    seed: u64,
    size: usize,
) -> (ActionEntry, Digest) {
    let a = local();
    let entry = make_action(&a, seed, size);
    let model = entry.outputs["model"].digest();
    let blob = a.store.blob_path(&model);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&blob, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    std::fs::write(&blob, pseudo_random(seed + 1000, size)).unwrap();
    let err = push_action(&*remote, &a.store, &entry).await.unwrap_err();
    assert!(
        matches!(err, RemoteError::LocalCorrupt { digest, .. } if digest == model),
        "{err:?}"
    );
    (entry, model)
}
