//! [`RemoteUrl`]: what a `remote = "..."` value names.

use std::fmt;
use std::path::PathBuf;

use crate::RemoteError;

/// A parsed remote cache address. Credentials are never part of it (they come from the
/// environment or the user's config), except a WebDAV user name and password in the URL's
/// user-info, which is the ordinary way to give them for WebDAV. `Debug` hides the password.
#[derive(Clone, PartialEq, Eq)]
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
                // `user:pa/ss@host/path`: a password holding a `/` would otherwise become part
                // of the host and path, and so of the name every message shows. Refused, and
                // the message hides everything before the last `@` (an `@` in a path is
                // refused with it: the two cannot be told apart).
                if userinfo.is_none() && path.contains('@') {
                    return Err(bad("an `@` after a `/`: write a `/` in the user or password as %2F (both are percent-decoded); an `@` in the path is not supported"));
                }
                if host.is_empty() {
                    return Err(bad("no host"));
                }
                if path.contains(['?', '#']) {
                    return Err(bad("a query or fragment is not supported"));
                }
                let (user, password) = match userinfo {
                    None => (None, None),
                    Some(u) => match u.split_once(':') {
                        Some((n, p)) => (Some(percent_decode(n)), Some(percent_decode(p))),
                        None => (Some(percent_decode(u)), None),
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

/// Like a derived `Debug`, with the password (if any) shown as `***`: settings holding a URL
/// get printed by `{:?}` in logs and panics.
impl fmt::Debug for RemoteUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RemoteUrl::S3 { bucket, prefix } => f
                .debug_struct("S3")
                .field("bucket", bucket)
                .field("prefix", prefix)
                .finish(),
            RemoteUrl::WebDav {
                endpoint,
                path,
                user,
                password,
            } => f
                .debug_struct("WebDav")
                .field("endpoint", endpoint)
                .field("path", path)
                .field("user", user)
                .field("password", &password.as_ref().map(|_| "***"))
                .finish(),
            RemoteUrl::Fs { root } => f.debug_struct("Fs").field("root", root).finish(),
            RemoteUrl::Grpc {
                authority,
                instance,
                tls,
            } => f
                .debug_struct("Grpc")
                .field("authority", authority)
                .field("instance", instance)
                .field("tls", tls)
                .finish(),
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

/// A URL with any user-info password replaced, for error messages. Everything before the
/// last `@` counts as user-info, even past a `/`: a password may hold one, and a message
/// that hides a path is harmless where one that shows a password is not.
fn redact(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://") {
        if let Some(at) = rest.rfind('@') {
            let user = rest[..at].split([':', '/']).next().unwrap_or("");
            return format!("{scheme}://{user}:***@{}", &rest[at + 1..]);
        }
    }
    url.to_string()
}

/// `%XX` escapes decoded (RFC 3986 user-info), so a user or password can hold `/`, `@` or `:`;
/// anything that is not a valid escape is kept as written.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0)) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| s.to_string())
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
        assert!(!format!("{u:?}").contains("pw"), "{u:?}");
    }

    #[test]
    fn a_password_with_a_slash_is_refused_without_showing_it() {
        for url in [
            "webdav+http://u:pa/ss@127.0.0.1:8080/heddle",
            "http://u:12/34@h:1/p",
            "webdav+https://u:a/b/c@h/dav",
        ] {
            let e = RemoteUrl::parse(url).unwrap_err().to_string();
            for secret in ["pa/ss", "12/34", "a/b/c", "ss@", "34@", "/c@"] {
                assert!(!e.contains(secret), "{e}");
            }
            assert!(
                e.contains("write a `/` in the user or password as %2F"),
                "{e}"
            );
        }
    }

    #[test]
    fn user_and_password_are_percent_decoded() {
        let u = RemoteUrl::parse("webdav+http://me%40corp:pa%2Fss%3A@h:1/dav").unwrap();
        assert_eq!(
            u,
            RemoteUrl::WebDav {
                endpoint: "http://h:1".into(),
                path: "/dav".into(),
                user: Some("me@corp".into()),
                password: Some("pa/ss:".into()),
            }
        );
        assert_eq!(u.to_string(), "webdav+http://h:1/dav");
    }
}
