//! [`RemoteUrl`]: what a `remote = "..."` value names.

use std::fmt;
use std::path::PathBuf;

use crate::RemoteError;

/// A parsed remote cache address. Credentials are never part of it (they come from the
/// environment or the user's config), except a WebDAV user name and password in the URL's
/// user-info, which is the ordinary way to give them for WebDAV.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RemoteUrl {
    /// `s3://bucket/prefix`.
    S3 { bucket: String, prefix: String },
    /// `webdav+http://host:port/path`, `webdav+https://…`, or plain `http(s)://…`.
    WebDav {
        /// `http://host:port` (scheme, host and port only).
        endpoint: String,
        path: String,
        user: Option<String>,
        password: Option<String>,
    },
    /// `file:///path`: a plain directory, local or on NFS.
    Fs { root: PathBuf },
    /// `grpc://host:port[/instance_name]`: a REAPI server (CAS + ActionCache + ByteStream)
    /// over plain HTTP/2, or `grpcs://` over TLS. The instance name may hold slashes; empty is
    /// the default instance.
    Grpc {
        authority: String,
        instance: String,
        tls: bool,
    },
}

impl RemoteUrl {
    pub fn parse(url: &str) -> Result<RemoteUrl, RemoteError> {
        let bad = |reason: &str| RemoteError::BadUrl {
            url: redact(url),
            reason: reason.to_string(),
        };
        let (scheme, rest) = url.split_once("://").ok_or_else(|| {
            bad("expected s3://, webdav+http(s)://, http(s)://, file://, grpc:// or grpcs://")
        })?;
        match scheme {
            "s3" => {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(bad("no bucket name after s3://"));
                }
                if bucket.contains(['@', ':', '?', '#']) {
                    return Err(bad("the bucket name may not hold credentials, a port or a query; set the endpoint with AWS_ENDPOINT_URL or [cache] s3_endpoint"));
                }
                Ok(RemoteUrl::S3 {
                    bucket: bucket.to_string(),
                    prefix: prefix.trim_matches('/').to_string(),
                })
            }
            "webdav+http" | "webdav+https" | "http" | "https" => {
                let http = scheme.trim_start_matches("webdav+");
                let (authority, path) = match rest.find('/') {
                    Some(i) => (&rest[..i], &rest[i..]),
                    None => (rest, "/"),
                };
                let (userinfo, host) = match authority.rsplit_once('@') {
                    Some((u, h)) => (Some(u), h),
                    None => (None, authority),
                };
                if host.is_empty() {
                    return Err(bad("no host"));
                }
                if path.contains(['?', '#']) {
                    return Err(bad("a query or fragment is not supported"));
                }
                let (user, password) = match userinfo {
                    None => (None, None),
                    Some(u) => match u.split_once(':') {
                        Some((n, p)) => (Some(n.to_string()), Some(p.to_string())),
                        None => (Some(u.to_string()), None),
                    },
                };
                Ok(RemoteUrl::WebDav {
                    endpoint: format!("{http}://{host}"),
                    path: format!("/{}", path.trim_matches('/')),
                    user,
                    password,
                })
            }
            "file" => {
                if !rest.starts_with('/') {
                    return Err(bad("expected an absolute path: file:///path"));
                }
                Ok(RemoteUrl::Fs {
                    root: PathBuf::from(rest),
                })
            }
            "grpc" | "grpcs" => {
                let (authority, instance) = rest.split_once('/').unwrap_or((rest, ""));
                if authority.is_empty() {
                    return Err(bad(&format!("no host:port after {scheme}://")));
                }
                if authority.contains('@') || rest.contains(['?', '#']) {
                    return Err(bad(&format!(
                        "credentials, a query or a fragment are not supported in a {scheme}:// URL"
                    )));
                }
                Ok(RemoteUrl::Grpc {
                    authority: authority.to_string(),
                    instance: instance.trim_matches('/').to_string(),
                    tls: scheme == "grpcs",
                })
            }
            other => Err(bad(&format!(
                "unknown scheme {other:?}; expected s3, webdav+http, webdav+https, http, https, file, grpc or grpcs"
            ))),
        }
    }
}

/// Shown in messages and logs: never the password.
impl fmt::Display for RemoteUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RemoteUrl::S3 { bucket, prefix } if prefix.is_empty() => write!(f, "s3://{bucket}"),
            RemoteUrl::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
            RemoteUrl::WebDav { endpoint, path, .. } => write!(f, "webdav+{endpoint}{path}"),
            RemoteUrl::Fs { root } => write!(f, "file://{}", root.display()),
            RemoteUrl::Grpc {
                authority,
                instance,
                tls,
            } => {
                let scheme = if *tls { "grpcs" } else { "grpc" };
                write!(f, "{scheme}://{authority}")?;
                if instance.is_empty() {
                    Ok(())
                } else {
                    write!(f, "/{instance}")
                }
            }
        }
    }
}

/// A URL with any user-info password replaced, for error messages.
fn redact(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://") {
        let authority_end = rest.find('/').unwrap_or(rest.len());
        if let Some(at) = rest[..authority_end].rfind('@') {
            let user = rest[..at].split(':').next().unwrap_or("");
            return format!("{scheme}://{user}:***@{}", &rest[at + 1..]);
        }
    }
    url.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_scheme() {
        assert_eq!(
            RemoteUrl::parse("s3://bkt/team/cache/").unwrap(),
            RemoteUrl::S3 {
                bucket: "bkt".into(),
                prefix: "team/cache".into()
            }
        );
        assert_eq!(
            RemoteUrl::parse("s3://bkt").unwrap(),
            RemoteUrl::S3 {
                bucket: "bkt".into(),
                prefix: "".into()
            }
        );
        assert_eq!(
            RemoteUrl::parse("webdav+http://u:pw@127.0.0.1:8080/dav/c").unwrap(),
            RemoteUrl::WebDav {
                endpoint: "http://127.0.0.1:8080".into(),
                path: "/dav/c".into(),
                user: Some("u".into()),
                password: Some("pw".into()),
            }
        );
        assert_eq!(
            RemoteUrl::parse("https://h").unwrap(),
            RemoteUrl::WebDav {
                endpoint: "https://h".into(),
                path: "/".into(),
                user: None,
                password: None,
            }
        );
        assert_eq!(
            RemoteUrl::parse("file:///mnt/nfs/cache").unwrap(),
            RemoteUrl::Fs {
                root: "/mnt/nfs/cache".into()
            }
        );
        let grpc = RemoteUrl::parse("grpc://127.0.0.1:8980/team/main/").unwrap();
        assert_eq!(
            grpc,
            RemoteUrl::Grpc {
                authority: "127.0.0.1:8980".into(),
                instance: "team/main".into(),
                tls: false,
            }
        );
        assert_eq!(grpc.to_string(), "grpc://127.0.0.1:8980/team/main");
        let default_instance = RemoteUrl::parse("grpc://cache.lan:9092").unwrap();
        assert_eq!(default_instance.to_string(), "grpc://cache.lan:9092");
        let tls = RemoteUrl::parse("grpcs://cache.lan:443/team").unwrap();
        assert_eq!(
            tls,
            RemoteUrl::Grpc {
                authority: "cache.lan:443".into(),
                instance: "team".into(),
                tls: true,
            }
        );
        assert_eq!(tls.to_string(), "grpcs://cache.lan:443/team");
    }

    #[test]
    fn rejects_with_a_reason_and_hides_passwords() {
        let cases = [
            ("bucket/x", "failed to parse remote cache URL \"bucket/x\": expected s3://, webdav+http(s)://, http(s)://, file://, grpc:// or grpcs://"),
            ("s3:///x", "failed to parse remote cache URL \"s3:///x\": no bucket name after s3://"),
            ("file://rel/x", "failed to parse remote cache URL \"file://rel/x\": expected an absolute path: file:///path"),
            ("gs://b", "failed to parse remote cache URL \"gs://b\": unknown scheme \"gs\"; expected s3, webdav+http, webdav+https, http, https, file, grpc or grpcs"),
            ("grpc:///inst", "failed to parse remote cache URL \"grpc:///inst\": no host:port after grpc://"),
            ("grpcs:///i", "failed to parse remote cache URL \"grpcs:///i\": no host:port after grpcs://"),
            ("http://u:secret@/x", "failed to parse remote cache URL \"http://u:***@/x\": no host"),
        ];
        for (url, msg) in cases {
            assert_eq!(RemoteUrl::parse(url).unwrap_err().to_string(), msg);
        }
    }

    #[test]
    fn display_never_shows_the_password() {
        let u = RemoteUrl::parse("webdav+http://u:pw@h:1/p").unwrap();
        assert_eq!(u.to_string(), "webdav+http://h:1/p");
    }
}
