//! The test servers: moto (S3), nginx (WebDAV) and BuildGrid (REAPI) on 127.0.0.1, and the
//! backends that talk to them.

use super::*;

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
    run_ok(
        Command::new(venv().join("bin/python")).args(["-c", &script]),
        "boto3",
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
    start_nginx_with(false)
}

/// As [`start_nginx`], over https only, with a certificate for 127.0.0.1 from a CA made for the
/// test (`<server dir>/tls/ca.crt`, [`make_test_ca`]), and refusing a client that does not show
/// a certificate that CA signed (`ssl_verify_client on`): `tls/client.crt` and `client.key` are
/// one.
pub fn start_nginx_mtls() -> Option<Server> {
    require("openssl (to make the test CA)", openssl_path())?;
    start_nginx_with(true)
}

pub fn openssl_path() -> Option<PathBuf> {
    ["/usr/bin/openssl", "/usr/local/bin/openssl"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

fn start_nginx_with(mtls: bool) -> Option<Server> {
    let nginx = require(
        "nginx with the dav-ext module (WebDAV test server)",
        nginx_path(),
    )?;
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("dav")).unwrap();
    std::fs::create_dir_all(d.join("logs")).unwrap();
    let listen = if mtls {
        make_test_ca(&d.join("tls"));
        let tls = d.join("tls");
        format!(
            "listen 127.0.0.1:{port} ssl;
    ssl_certificate {tls}/server.crt;
    ssl_certificate_key {tls}/server.key;
    ssl_client_certificate {tls}/ca.crt;
    ssl_verify_client on;",
            tls = tls.display()
        )
    } else {
        format!("listen 127.0.0.1:{port};")
    };
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
    {listen}
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
    start_buildgrid_with(storage, Access::Open)
}

/// BuildGrid keeping its blobs on disk (where a test can reach them, [`buildgrid_blob_path`])
/// and the remote of instance [`REAPI_INSTANCE`] on it; `None` after a skip notice without
/// BuildGrid.
pub fn buildgrid_on_disk() -> Option<(Server, Arc<dyn RemoteBackend>)> {
    let server = start_buildgrid(BlobStorage::Disk)?;
    let remote = reapi_remote(&server, REAPI_INSTANCE, reapi_timeouts());
    Some((server, remote))
}

/// A BuildGrid server that speaks TLS only (`grpcs://`), its certificate for 127.0.0.1 signed
/// by a CA made for the test: `<server dir>/tls/ca.crt`, which no system trusts.
pub fn start_buildgrid_tls() -> Option<Server> {
    start_buildgrid_with(BlobStorage::Memory, Access::Tls)
}

/// As [`start_buildgrid_tls`], and the server refuses a client without a certificate the same
/// CA signed: `<server dir>/tls/client.crt` and `client.key` are one.
pub fn start_buildgrid_mtls() -> Option<Server> {
    start_buildgrid_with(BlobStorage::Memory, Access::MutualTls)
}

/// The HS256 secret [`start_buildgrid_jwt`] checks tokens against.
pub const JWT_SECRET: &str = "heddle-test-secret";

/// A BuildGrid server (plain HTTP/2) that refuses any call without a JWT bearer token signed
/// with [`JWT_SECRET`], localhost included.
pub fn start_buildgrid_jwt() -> Option<Server> {
    start_buildgrid_with(BlobStorage::Memory, Access::Jwt)
}

/// A JWT for [`start_buildgrid_jwt`]'s server, valid for an hour, made by the PyJWT that
/// BuildGrid itself uses.
pub fn make_test_jwt(secret: &str) -> String {
    let out = run_ok(
        Command::new(reapi_venv().join("bin/python")).args([
            "-c",
            "import jwt, sys, time; print(jwt.encode({'sub': 'heddle-test', 'exp': int(time.time()) + 3600}, sys.argv[1], algorithm='HS256'))",
            secret,
        ]),
        "pyjwt",
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Make, with openssl, in `dir`: `ca.crt` (a CA made for the test), `server.key`/`server.crt`
/// for IP 127.0.0.1 and `client.key`/`client.crt` (a client certificate, for mTLS) it signs,
/// and `stranger.key`/`stranger.crt`, a self-signed client certificate no server trusts.
pub fn make_test_ca(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("client.ext"),
        "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n",
    )
    .unwrap();
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let self_signed = |name: &str, subj: &str| -> Vec<String> {
        [
            &["req", "-x509"][..],
            &ec,
            &[
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.crt"),
                "-days",
                "2",
                "-subj",
                subj,
            ],
        ]
        .concat()
        .iter()
        .map(|a| a.to_string())
        .collect()
    };
    let request = |name: &str, subj: &str| -> Vec<String> {
        [
            &["req"][..],
            &ec,
            &[
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
                "-subj",
                subj,
            ],
        ]
        .concat()
        .iter()
        .map(|a| a.to_string())
        .collect()
    };
    let sign = |name: &str| -> Vec<String> {
        [
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &format!("{name}.crt"),
            "-days",
            "2",
            "-extfile",
            &format!("{name}.ext"),
        ]
        .iter()
        .map(|a| a.to_string())
        .collect()
    };
    for args in [
        self_signed("ca", "/CN=heddle test CA"),
        request("server", "/CN=127.0.0.1"),
        sign("server"),
        request("client", "/CN=heddle test client"),
        sign("client"),
        self_signed("stranger", "/CN=heddle test stranger"),
    ] {
        run_ok(
            Command::new("openssl").args(&args).current_dir(dir),
            &format!("openssl {args:?}"),
        );
    }
}

/// How a test BuildGrid lets clients in.
enum Access {
    /// Plain HTTP/2, no credentials.
    Open,
    /// TLS only, with a certificate from a CA made for the test ([`make_test_ca`]).
    Tls,
    /// As [`Access::Tls`], and every client must show a certificate that CA signed.
    MutualTls,
    /// Plain HTTP/2, every call with a JWT signed with [`JWT_SECRET`].
    Jwt,
}

fn start_buildgrid_with(storage: BlobStorage, access: Access) -> Option<Server> {
    let bgd = require("BuildGrid 0.4.4 (REAPI test server)", bgd_path())?;
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (channel, authorization) = match access {
        Access::Open => (
            "insecure-mode: true".to_string(),
            "method: none".to_string(),
        ),
        Access::Tls | Access::MutualTls => {
            make_test_ca(&d.join("tls"));
            let tls = d.join("tls").display().to_string();
            let mut credentials = format!(
                "tls-server-key: {tls}/server.key\n      tls-server-cert: {tls}/server.crt"
            );
            // BuildGrid then requires a client certificate chaining to this file.
            if matches!(access, Access::MutualTls) {
                credentials += &format!("\n      tls-client-certs: {tls}/ca.crt");
            }
            (
                format!("insecure-mode: false\n    credentials:\n      {credentials}"),
                "method: none".to_string(),
            )
        }
        Access::Jwt => {
            let secret = d.join("jwt.secret");
            std::fs::write(&secret, JWT_SECRET).unwrap();
            let jwt = format!("secret: {}\n  algorithm: hs256", secret.display());
            (
                "insecure-mode: true".to_string(),
                format!("method: jwt\n  {jwt}\n  allow-localhost-requests: false"),
            )
        }
    };
    let store = match storage {
        BlobStorage::Memory => "!lru-storage &cas\n    size: 1GB".to_string(),
        BlobStorage::Disk => format!("!disk-storage &cas\n    path: {}/store", d.display()),
    };
    let conf = format!(
        r#"server:
  - !channel
    address: "127.0.0.1:{port}"
    {channel}
authorization:
  {authorization}
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
        ..Timeouts::default()
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
        tls,
    } = RemoteUrl::parse(&url).unwrap()
    else {
        panic!("{url} is a grpc URL")
    };
    assert!(!tls);
    Arc::new(
        ReapiCache::open(
            &authority,
            &instance,
            ReapiOptions::default(),
            url,
            timeouts,
        )
        .unwrap(),
    )
}

// ------------------------------------------------------------------ stores and actions
