//! S3 and WebDAV over https with a team's CA and client certificate (`HEDDLE_REMOTE_CA_FILE`,
//! `HEDDLE_REMOTE_CLIENT_CERT`, `HEDDLE_REMOTE_CLIENT_KEY`): against nginx on 127.0.0.1 serving
//! WebDAV over TLS with a certificate from a CA made by the test, and requiring a client
//! certificate that CA signed (`ssl_verify_client on`), as teams run it.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use common::*;
use heddle_remote::{
    push_action, OpendalCache, RemoteBackend, RemoteError, RemoteUrl, S3Settings, CA_FILE_VAR,
    CLIENT_CERT_VAR, CLIENT_KEY_VAR,
};

fn url(server: &Server, path: &str) -> String {
    format!("webdav+https://127.0.0.1:{}/{path}", server.port)
}

/// The environment naming `ca` and the client pair `(cert, key)`, files in `tls`.
fn tls_env(tls: &Path, ca: Option<&str>, client: Option<(&str, &str)>) -> HashMap<String, String> {
    let file = |name: &str| tls.join(name).display().to_string();
    let mut env = HashMap::new();
    if let Some(ca) = ca {
        env.insert(CA_FILE_VAR.to_string(), file(ca));
    }
    if let Some((cert, key)) = client {
        env.insert(CLIENT_CERT_VAR.to_string(), file(cert));
        env.insert(CLIENT_KEY_VAR.to_string(), file(key));
    }
    env
}

/// The backend for `url`, opened as heddle opens one, or the error it was refused with. Boxed:
/// `RemoteError` is large for an `Err` (clippy's `result_large_err`).
fn try_open(
    url: &str,
    env: &HashMap<String, String>,
) -> Result<Arc<dyn RemoteBackend>, Box<RemoteError>> {
    let url = RemoteUrl::parse(url).unwrap();
    OpendalCache::open(
        &url,
        &S3Settings::default(),
        &|k| env.get(k).cloned(),
        short_timeouts(),
    )
    .map(|c| Arc::new(c) as Arc<dyn RemoteBackend>)
    .map_err(Box::new)
}

/// What a push to `remote` failed with, its whole chain of causes.
async fn push_error(remote: Arc<dyn RemoteBackend>) -> (RemoteError, String) {
    let a = local();
    let entry = make_action(&a, 31, 1000);
    let err = push_action(&*remote, &a.store, &entry, &signer())
        .await
        .unwrap_err();
    let chain = heddle_cache::error_chain(&err);
    (err, chain)
}

/// With the team's CA and a client certificate it signed, a push and a fetch (both HTTP
/// clients: OpenDAL's and the streamed PUT's) round-trip byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webdav_https_round_trips_with_the_teams_ca_and_client_certificate() {
    let Some(server) = start_nginx_mtls() else {
        return;
    };
    let env = tls_env(
        &server.dir.path().join("tls"),
        Some("ca.crt"),
        Some(("client.crt", "client.key")),
    );
    case_round_trip(try_open(&url(&server, "heddle"), &env).unwrap()).await;
    assert!(server.dir.path().join("dav/heddle/ac").is_dir());
}

/// Without a client certificate, or with one the server's CA did not sign, nginx refuses the
/// request; the error says so and marks the remote unavailable (one warning, then local work).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webdav_https_without_a_trusted_client_certificate_is_refused() {
    let Some(server) = start_nginx_mtls() else {
        return;
    };
    let tls = server.dir.path().join("tls");
    for client in [None, Some(("stranger.crt", "stranger.key"))] {
        let env = tls_env(&tls, Some("ca.crt"), client);
        let (err, chain) = push_error(try_open(&url(&server, "r"), &env).unwrap()).await;
        eprintln!("client certificate {client:?}: {chain}");
        assert!(err.is_unavailable(), "{chain}");
        assert!(chain.contains("400 Bad Request"), "{chain}");
        let phrase = match client {
            None => "No required SSL certificate was sent",
            Some(_) => "The SSL certificate error",
        };
        assert!(chain.contains(phrase), "{chain}");
    }
}

/// Without the team's CA the server's certificate chains to nothing trusted: the error names
/// the certificate, not a timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webdav_https_without_the_teams_ca_does_not_trust_the_server() {
    let Some(server) = start_nginx_mtls() else {
        return;
    };
    let tls = server.dir.path().join("tls");
    for client in [None, Some(("client.crt", "client.key"))] {
        let env = tls_env(&tls, None, client);
        let (err, chain) = push_error(try_open(&url(&server, "u"), &env).unwrap()).await;
        eprintln!("no CA, client certificate {client:?}: {chain}");
        assert!(err.is_unavailable(), "{chain}");
        assert!(
            chain.contains("invalid peer certificate: UnknownIssuer"),
            "{chain}"
        );
    }
}

/// The files are read and checked when the remote is opened, before any request: each error
/// names the variable and the file, with the reason, and never prints the key.
#[test]
fn tls_files_are_checked_when_an_https_remote_is_opened() {
    let Some(_) = require("openssl (to make the test CA)", openssl_path()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let tls = dir.path();
    make_test_ca(tls);
    let missing = tls.join("missing.pem");
    std::fs::write(tls.join("empty.pem"), "").unwrap();
    for url in [
        "webdav+https://127.0.0.1:9/x".to_string(),
        "s3://bucket/p".to_string(),
    ] {
        let remote = RemoteUrl::parse(&url).unwrap().to_string();
        let refused = |env: HashMap<String, String>| {
            let mut env = env;
            if url.starts_with("s3") {
                env.insert("AWS_ENDPOINT_URL".into(), "https://127.0.0.1:9".into());
            }
            let Err(err) = try_open(&url, &env) else {
                panic!("{url} opened with {env:?}")
            };
            heddle_cache::error_chain(&*err)
        };
        let t = |name: &str| tls.join(name).display().to_string();

        let mut cert_only = tls_env(tls, Some("ca.crt"), None);
        cert_only.insert(CLIENT_CERT_VAR.into(), t("client.crt"));
        assert_eq!(
            refused(cert_only),
            format!(
                "failed to use a client certificate for remote cache {remote}: \
                 HEDDLE_REMOTE_CLIENT_CERT is set but HEDDLE_REMOTE_CLIENT_KEY is not: set both \
                 or neither"
            )
        );
        assert_eq!(
            refused(tls_env(tls, Some("missing.pem"), None)),
            format!(
                "failed to read the CA certificates {} (HEDDLE_REMOTE_CA_FILE) for remote cache \
                 {remote}: No such file or directory (os error 2)",
                missing.display()
            )
        );
        assert_eq!(
            refused(tls_env(tls, Some("empty.pem"), None)),
            format!(
                "failed to read the CA certificates {} (HEDDLE_REMOTE_CA_FILE) for remote cache \
                 {remote}: no PEM certificate in it (a -----BEGIN CERTIFICATE----- line)",
                tls.join("empty.pem").display()
            )
        );
        assert_eq!(
            refused(tls_env(tls, None, Some(("missing.pem", "client.key")))),
            format!(
                "failed to read the client certificate {} (HEDDLE_REMOTE_CLIENT_CERT) for remote \
                 cache {remote}: No such file or directory (os error 2)",
                missing.display()
            )
        );
        assert_eq!(
            refused(tls_env(tls, None, Some(("client.crt", "client.crt")))),
            format!(
                "failed to read the client private key {} (HEDDLE_REMOTE_CLIENT_KEY) for remote \
                 cache {remote}: no PEM private key in it (a -----BEGIN ... PRIVATE KEY----- line)",
                tls.join("client.crt").display()
            )
        );
        let key = std::fs::read_to_string(tls.join("server.key")).unwrap();
        let mismatch = refused(tls_env(tls, None, Some(("client.crt", "server.key"))));
        assert_eq!(
            mismatch,
            format!(
                "failed to use the client certificate {} with the key {} for remote cache \
                 {remote}: keys may not be consistent: KeyMismatch",
                tls.join("client.crt").display(),
                tls.join("server.key").display()
            )
        );
        let body = key.lines().nth(1).unwrap();
        assert!(!mismatch.contains(body));
    }
}

/// A client certificate for a remote that does not use TLS would silently not be sent: it is
/// refused, saying to use https. A CA file alone is unused there, as for `grpc://`.
#[test]
fn a_client_certificate_for_a_plain_http_remote_is_refused() {
    let client = [
        (CLIENT_CERT_VAR, "/nowhere/c.pem"),
        (CLIENT_KEY_VAR, "/nowhere/k.pem"),
    ];
    for (url, endpoint) in [
        ("webdav+http://127.0.0.1:9/x", None),
        ("http://127.0.0.1:9/x", None),
        ("s3://bucket/p", Some("http://127.0.0.1:9")),
        ("file:///tmp/heddle-remote", None),
    ] {
        let mut env: HashMap<String, String> = client
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        if let Some(e) = endpoint {
            env.insert("AWS_ENDPOINT_URL".into(), e.into());
        }
        let Err(err) = try_open(url, &env) else {
            panic!("{url} opened with a client certificate")
        };
        let remote = RemoteUrl::parse(url).unwrap().to_string();
        assert_eq!(
            err.to_string(),
            format!(
                "failed to use a client certificate for remote cache {remote}: \
                 HEDDLE_REMOTE_CLIENT_CERT and HEDDLE_REMOTE_CLIENT_KEY are set but this remote \
                 does not use TLS, so the certificate would not be sent: use https \
                 (webdav+https://, an https:// S3 endpoint) or grpcs://"
            )
        );
        let ca_only: HashMap<String, String> =
            [(CA_FILE_VAR.to_string(), "/nowhere/ca.pem".to_string())].into();
        let mut ca_only = ca_only;
        if let Some(e) = endpoint {
            ca_only.insert("AWS_ENDPOINT_URL".into(), e.into());
        }
        assert!(try_open(url, &ca_only).is_ok(), "{url} with a CA file only");
    }
}
