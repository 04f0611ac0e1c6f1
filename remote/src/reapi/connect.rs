//! How heddle reaches a REAPI server: the endpoint (plain HTTP/2 or TLS), the timeouts, the
//! headers every call carries (a bearer token, BuildBuddy's API key) and the client certificate
//! a `grpcs://` server may ask for (mTLS, read and checked by `tls_files.rs`, as for S3 and
//! WebDAV over https). Credentials come from the environment only, never from a pipeline, a lock
//! file or a config file a team shares, and are never printed: errors name a header, not its
//! value.

use std::sync::Arc;

use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Request, Status};

use crate::backend::Timeouts;
use crate::tls_files::{ClientCertFiles, TlsFiles};
use crate::RemoteError;

/// The channel every client of one remote shares, with its headers added to each call.
pub type Transport = InterceptedService<Channel, AddHeaders>;

/// The environment variable holding headers for every call, `name=value`, one per line or
/// comma-separated: `authorization=Bearer <token>`, `x-buildbuddy-api-key=<key>`.
pub const HEADERS_VAR: &str = "HEDDLE_REMOTE_HEADERS";

/// How to reach one REAPI remote, read from the environment.
#[derive(Debug, Clone, Default)]
pub struct ReapiOptions {
    /// `grpcs://`: TLS, trusting the platform's roots plus these files' CA, and showing their
    /// client certificate when asked.
    pub tls: Option<TlsFiles>,
    pub headers: ReapiHeaders,
}

impl ReapiOptions {
    /// The options of a `grpc://` (`tls` false) or `grpcs://` remote named `remote`. A client
    /// certificate for a `grpc://` remote is an error: whoever set one expects TLS.
    pub fn from_env(
        tls: bool,
        env: &dyn Fn(&str) -> Option<String>,
        remote: &str,
    ) -> Result<ReapiOptions, RemoteError> {
        let files = TlsFiles::from_env(env, remote)?;
        if !tls && files.client.is_some() {
            return Err(ClientCertFiles::needs_tls(remote));
        }
        Ok(ReapiOptions {
            tls: tls.then_some(files),
            headers: ReapiHeaders::parse(env(HEADERS_VAR).as_deref().unwrap_or(""), remote)?,
        })
    }
}

/// The headers every call carries. `Debug` shows names only.
#[derive(Clone, Default)]
pub struct ReapiHeaders(Arc<Vec<(AsciiMetadataKey, AsciiMetadataValue)>>);

impl std::fmt::Debug for ReapiHeaders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(k, _)| k.as_str()))
            .finish()
    }
}

impl ReapiHeaders {
    /// `name=value` entries, one per line or comma-separated; blank entries are ignored.
    pub fn parse(text: &str, remote: &str) -> Result<ReapiHeaders, RemoteError> {
        let bad = |reason: String| RemoteError::BadHeader {
            remote: remote.to_string(),
            reason,
        };
        let mut headers = Vec::new();
        for entry in text
            .split(['\n', ','])
            .map(str::trim)
            .filter(|e| !e.is_empty())
        {
            let Some((name, value)) = entry.split_once('=') else {
                return Err(bad(format!(
                    "an entry of {HEADERS_VAR} has no `=`: expected name=value"
                )));
            };
            let name = name.trim().to_ascii_lowercase();
            if name.ends_with("-bin") {
                return Err(bad(format!(
                    "{name:?}: binary (-bin) headers are not supported"
                )));
            }
            // Not echoed: what stands before the first `=` of `Authorization: Bearer abc==`
            // (the HTTP spelling, base64 padding) is the token itself.
            let key = AsciiMetadataKey::from_bytes(name.as_bytes()).map_err(|_| {
                bad(format!(
                    "an entry of {HEADERS_VAR} does not start with a header name (its text is not shown); expected name=value, e.g. authorization=Bearer <token>"
                ))
            })?;
            let value = value.trim();
            // `http` lets bytes over 0x7f through; a token or key is printable ASCII.
            let printable = value.bytes().all(|b| (b' '..=b'~').contains(&b));
            let value = AsciiMetadataValue::try_from(value)
                .ok()
                .filter(|_| printable)
                .ok_or_else(|| {
                    bad(format!(
                        "the value of header {name:?} is not printable ASCII"
                    ))
                })?;
            headers.push((key, value));
        }
        Ok(ReapiHeaders(Arc::new(headers)))
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_str())
    }
}

/// Adds the remote's headers to each call.
#[derive(Clone)]
pub struct AddHeaders(ReapiHeaders);

impl Interceptor for AddHeaders {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        for (key, value) in self.0 .0.iter() {
            request.metadata_mut().insert(key.clone(), value.clone());
        }
        Ok(request)
    }
}

/// The lazily connected transport to `authority` (no request is made here).
pub fn transport(
    authority: &str,
    options: ReapiOptions,
    remote: &str,
    timeouts: Timeouts,
) -> Result<Transport, RemoteError> {
    let scheme = if options.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let mut endpoint = Endpoint::from_shared(format!("{scheme}://{authority}")).map_err(|e| {
        RemoteError::BadUrl {
            url: remote.to_string(),
            reason: e.to_string(),
        }
    })?;
    if let Some(tls) = &options.tls {
        endpoint = endpoint
            .tls_config(client_config(tls, remote)?)
            .map_err(|source| RemoteError::TlsSetup {
                remote: remote.to_string(),
                source,
            })?;
    }
    let endpoint = endpoint
        .connect_timeout(timeouts.request)
        .tcp_nodelay(true)
        // A connection whose peer vanished (a server host that died without closing it)
        // is noticed within the idle timeout, not at the next TCP retransmit limit.
        .http2_keep_alive_interval(timeouts.idle)
        .keep_alive_timeout(timeouts.idle);
    Ok(InterceptedService::new(
        endpoint.connect_lazy(),
        AddHeaders(options.headers),
    ))
}

/// How a `grpcs://` remote is trusted: the platform's root certificates (rustls-native-certs:
/// the system store, or the file `SSL_CERT_FILE` names), plus the CA file, if named. The
/// server's name is checked against the host in the URL. With a client certificate, heddle
/// shows the server that certificate when asked (mTLS).
fn client_config(tls: &TlsFiles, remote: &str) -> Result<ClientTlsConfig, RemoteError> {
    let mut config = ClientTlsConfig::new().with_native_roots();
    if let Some(ca) = tls.read_ca(remote)? {
        config = config.ca_certificate(Certificate::from_pem(ca.pem));
    }
    if let Some(client) = &tls.client {
        let identity = client.read(remote)?;
        config = config.identity(Identity::from_pem(identity.cert_pem, identity.key_pem));
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls_files::tests::env_of;
    use crate::tls_files::{CLIENT_CERT_VAR, CLIENT_KEY_VAR};

    #[test]
    fn headers_parse_per_line_or_comma_and_hide_their_values() {
        let h = ReapiHeaders::parse(
            "Authorization=Bearer a.b.c\n x-buildbuddy-api-key = k1 ,\n",
            "r",
        )
        .unwrap();
        assert_eq!(
            h.names().collect::<Vec<_>>(),
            ["authorization", "x-buildbuddy-api-key"]
        );
        assert_eq!(
            format!("{h:?}"),
            r#"["authorization", "x-buildbuddy-api-key"]"#
        );
        assert_eq!(h.0[0].1, "Bearer a.b.c");
    }

    #[test]
    fn a_bad_header_is_refused_without_its_value() {
        for (text, reason) in [
            (
                "token",
                "an entry of HEDDLE_REMOTE_HEADERS has no `=`: expected name=value",
            ),
            ("bad name=x", "an entry of HEDDLE_REMOTE_HEADERS does not start with a header name (its text is not shown); expected name=value, e.g. authorization=Bearer <token>"),
            ("Authorization: Bearer s3cr3t==", "an entry of HEDDLE_REMOTE_HEADERS does not start with a header name (its text is not shown); expected name=value, e.g. authorization=Bearer <token>"),
            (
                "k-bin=x",
                "\"k-bin\": binary (-bin) headers are not supported",
            ),
            (
                "k=caf\u{e9}",
                "the value of header \"k\" is not printable ASCII",
            ),
        ] {
            let e = ReapiHeaders::parse(text, "grpc://h:1").unwrap_err();
            assert!(!e.to_string().to_lowercase().contains("s3cr3t"), "{e}");
            assert_eq!(
                e.to_string(),
                format!("failed to read the headers for remote cache grpc://h:1: {reason}")
            );
        }
    }

    #[test]
    fn a_client_certificate_goes_only_to_a_grpcs_remote() {
        let vars = [(CLIENT_CERT_VAR, "/c.pem"), (CLIENT_KEY_VAR, "/k.pem")];
        let o = ReapiOptions::from_env(true, &env_of(&vars), "grpcs://h:1/i").unwrap();
        assert_eq!(
            o.tls.unwrap().client.unwrap(),
            ClientCertFiles {
                cert: "/c.pem".into(),
                key: "/k.pem".into()
            }
        );
        let e = ReapiOptions::from_env(false, &env_of(&vars), "grpc://h:1/i").unwrap_err();
        assert_eq!(
            e.to_string(),
            "failed to use a client certificate for remote cache grpc://h:1/i: \
             HEDDLE_REMOTE_CLIENT_CERT and HEDDLE_REMOTE_CLIENT_KEY are set but this remote does \
             not use TLS, so the certificate would not be sent: use https (webdav+https://, an \
             https:// S3 endpoint) or grpcs://"
        );
        assert!(ReapiOptions::from_env(false, &env_of(&[]), "grpc://h:1/i")
            .unwrap()
            .tls
            .is_none());
    }
}
