//! [`HttpTls`]: the team's TLS files (`tls_files.rs`) as reqwest takes them, for an S3 or WebDAV
//! remote over https. Both HTTP clients of such a remote are built with it: OpenDAL's (handed
//! over with `HttpClientLayer`) and the streamed WebDAV PUT's (`webdav_upload.rs`), so every
//! request shows the same certificate and trusts the same roots.
//!
//! The CA file is *added* to reqwest's roots (`tls_certs_merge`: rustls-platform-verifier with
//! extra roots), never put in their place, so a remote behind a public certificate keeps working
//! when a team sets the variable for another one. Without any TLS file the clients stay exactly
//! as before (OpenDAL's shared default client), and a CA file named for a plain-http remote is
//! unused, as for `grpc://`; a client certificate for one is an error, since it would silently
//! not be sent.

use crate::tls_files::{ClientCertFiles, TlsFiles};
use crate::RemoteError;

/// Roots and identity to build an https remote's clients with; read and checked once.
#[derive(Clone)]
pub(crate) struct HttpTls {
    roots: Vec<reqwest::Certificate>,
    identity: Option<reqwest::Identity>,
}

impl HttpTls {
    /// The TLS settings of a remote whose endpoint is `https` or not; `None` when there is
    /// nothing to add to reqwest's defaults. A client certificate for a remote that is not
    /// https is refused ([`ClientCertFiles::needs_tls`]).
    pub(crate) fn for_endpoint(
        files: &TlsFiles,
        https: bool,
        remote: &str,
    ) -> Result<Option<HttpTls>, RemoteError> {
        if !https {
            return match files.client {
                Some(_) => Err(ClientCertFiles::needs_tls(remote)),
                None => Ok(None),
            };
        }
        if *files == TlsFiles::default() {
            return Ok(None);
        }
        let setup = |source| RemoteError::HttpSetup {
            remote: remote.to_string(),
            source,
        };
        let mut roots = Vec::new();
        if let Some(ca) = files.read_ca(remote)? {
            for der in &ca.der {
                roots.push(reqwest::Certificate::from_der(der).map_err(setup)?);
            }
        }
        let identity = match &files.client {
            Some(client) => {
                let pem = client.read(remote)?.combined_pem();
                Some(reqwest::Identity::from_pem(&pem).map_err(setup)?)
            }
            None => None,
        };
        Ok(Some(HttpTls { roots, identity }))
    }

    /// `builder` (its timeouts set by the caller) with these roots and this identity.
    pub(crate) fn client(
        &self,
        builder: reqwest::ClientBuilder,
        remote: &str,
    ) -> Result<reqwest::Client, RemoteError> {
        let mut builder = builder.tls_certs_merge(self.roots.iter().cloned());
        if let Some(identity) = &self.identity {
            builder = builder.identity(identity.clone());
        }
        builder.build().map_err(|source| RemoteError::HttpSetup {
            remote: remote.to_string(),
            source,
        })
    }
}

/// True when `url` is an `https://` address (scheme compared as URLs do, without case).
pub(crate) fn is_https(url: &str) -> bool {
    url.get(..8)
        .is_some_and(|s| s.eq_ignore_ascii_case("https://"))
}
