//! Where the remote cache is and how it is used: [`resolve_remote`] merges, lowest first,
//! the user config (`$XDG_CONFIG_HOME/heddle/config.toml`, else `~/.config/heddle/config.toml`),
//! the project config (`<project>/.heddle/config.toml`), the environment
//! (`HEDDLE_REMOTE_CACHE`, `HEDDLE_REMOTE_CACHE_MODE`) and the command-line flags. Addresses
//! and credentials live only there, never in a pipeline or lock file, so a pipeline's keys
//! do not depend on where its cache is.
//!
//! ```toml
//! [cache]
//! remote = "s3://team-bucket/heddle"     # or webdav+http://host:port/path, file:///mnt/nfs/heddle,
//!                                        # grpc://host:port/instance (a REAPI server)
//! remote_mode = "readwrite"              # default "read": never upload
//! s3_endpoint = "http://minio.lan:9000"  # optional; else AWS_ENDPOINT_URL, else AWS itself
//! s3_region = "eu-west-1"                # optional; else AWS_REGION / AWS_DEFAULT_REGION
//! ```
//!
//! `remote = "off"` (or `--remote-cache off`) turns off a remote set by a lower layer.
//! Other keys and tables in the file belong to other parts of heddle and are left alone;
//! unknown keys in `[cache]` that start with `remote` or `s3_` are rejected as typos.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::{RemoteError, RemoteUrl};

/// Whether a run may upload to the remote.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RemoteMode {
    /// Read-through only. The default: what a shared cache holds decides every reader's
    /// results, so writing is for the builders a team chose (CI), who opt in and sign what
    /// they write (`signing.rs`).
    #[default]
    Read,
    /// Read-through and write-back, entries signed with this machine's key.
    ReadWrite,
}

impl RemoteMode {
    pub fn parse(s: &str) -> Option<RemoteMode> {
        match s {
            "read" => Some(RemoteMode::Read),
            "readwrite" => Some(RemoteMode::ReadWrite),
            _ => None,
        }
    }

    pub fn can_write(self) -> bool {
        self == RemoteMode::ReadWrite
    }
}

/// Which layer a setting came from, for messages ("remote cache s3://b (from HEDDLE_REMOTE_CACHE)").
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SettingSource {
    UserConfig(PathBuf),
    ProjectConfig(PathBuf),
    Env(&'static str),
    Flag(&'static str),
}

impl fmt::Display for SettingSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SettingSource::UserConfig(p) | SettingSource::ProjectConfig(p) => {
                write!(f, "{}", p.display())
            }
            SettingSource::Env(name) => f.write_str(name),
            SettingSource::Flag(name) => f.write_str(name),
        }
    }
}

/// S3 settings that are not in the URL. Credentials are not here: they come from the
/// standard AWS variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`)
/// or the AWS profile files, as for every AWS tool.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct S3Settings {
    pub endpoint: Option<String>,
    pub region: Option<String>,
}

/// The resolved remote cache settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteSettings {
    pub url: RemoteUrl,
    pub url_source: SettingSource,
    pub mode: RemoteMode,
    pub s3: S3Settings,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("failed to read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to parse {path}:{line}:{col}: {message}")]
    Parse {
        path: PathBuf,
        line: usize,
        col: usize,
        message: String,
    },
    #[error("failed to use {at}: {reason}")]
    BadValue { at: String, reason: String },
    #[error("failed to use the remote cache URL from {source_name}")]
    BadUrl {
        source_name: String,
        #[source]
        source: RemoteError,
    },
}

/// The file read twice: as a plain table to catch misspelt keys, and with spans so a bad
/// value can be pointed at by line and column.
#[derive(Deserialize, Default)]
struct ConfigKeys {
    #[serde(default)]
    cache: Option<toml::Table>,
}

#[derive(Deserialize, Default)]
struct ConfigValues {
    #[serde(default)]
    cache: CacheSection,
}

#[derive(Deserialize, Default)]
struct CacheSection {
    remote: Option<Spanned<String>>,
    remote_mode: Option<Spanned<String>>,
    s3_endpoint: Option<Spanned<String>>,
    s3_region: Option<Spanned<String>>,
}

const KNOWN_KEYS: [&str; 4] = ["remote", "remote_mode", "s3_endpoint", "s3_region"];

/// Merge every layer. `env` reads a variable (pass `|k| std::env::var(k).ok()` in the CLI; tests
/// pass a map). `flag_url` / `flag_mode` are the `--remote-cache` / `--remote-cache-mode`
/// values. `Ok(None)`: no remote configured (or turned off).
pub fn resolve_remote(
    project_root: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    flag_url: Option<&str>,
    flag_mode: Option<&str>,
) -> Result<Option<RemoteSettings>, ConfigError> {
    resolve_remote_trusting(project_root, env, flag_url, flag_mode, true)
}

/// [`resolve_remote`], with the project's `.heddle/config.toml` trusted by the user or not.
/// An untrusted project file may only turn the remote down (`remote = "off"`,
/// `remote_mode = "read"`): its `remote`, `s3_endpoint`, `s3_region` and a `"readwrite"` mode
/// are skipped, so the user's credentials (`HEDDLE_REMOTE_HEADERS`, the AWS keys, a client
/// certificate) go only where the user's own layers point. The CLI decides the trust
/// (`heddle trust`, recorded per project path and file content).
pub fn resolve_remote_trusting(
    project_root: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    flag_url: Option<&str>,
    flag_mode: Option<&str>,
    project_trusted: bool,
) -> Result<Option<RemoteSettings>, ConfigError> {
    let mut url: Option<(String, SettingSource)> = None;
    let mut mode: Option<(String, SettingSource)> = None;
    let mut s3 = S3Settings::default();

    let user_config = env("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| Path::new(&h).join(".config")))
        .map(|dir| dir.join("heddle").join("config.toml"));
    let project_config = project_root.join(".heddle").join("config.toml");
    let files = user_config
        .map(|p| (p.clone(), SettingSource::UserConfig(p)))
        .into_iter()
        .chain([(
            project_config.clone(),
            SettingSource::ProjectConfig(project_config),
        )]);
    for (path, source) in files {
        let Some((text, section)) = read_cache_section(&path)? else {
            continue;
        };
        let narrow_only = !project_trusted && matches!(source, SettingSource::ProjectConfig(_));
        if let Some(v) = section.remote.filter(|v| !v.get_ref().is_empty()) {
            if !narrow_only || v.get_ref() == "off" {
                url = Some((v.into_inner(), source.clone()));
            }
        }
        if let Some(v) = section.remote_mode {
            let (line, col) = line_col(&text, v.span().start);
            let at = format!("{}:{line}:{col}", path.display());
            check_mode(v.get_ref(), &at)?;
            if !narrow_only || v.get_ref() == "read" {
                mode = Some((v.into_inner(), source.clone()));
            }
        }
        if let Some(v) = section.s3_endpoint.filter(|_| !narrow_only) {
            s3.endpoint = Some(v.into_inner());
        }
        if let Some(v) = section.s3_region.filter(|_| !narrow_only) {
            s3.region = Some(v.into_inner());
        }
    }
    if let Some(v) = env("HEDDLE_REMOTE_CACHE").filter(|v| !v.is_empty()) {
        url = Some((v, SettingSource::Env("HEDDLE_REMOTE_CACHE")));
    }
    if let Some(v) = env("HEDDLE_REMOTE_CACHE_MODE").filter(|v| !v.is_empty()) {
        check_mode(&v, "HEDDLE_REMOTE_CACHE_MODE")?;
        mode = Some((v, SettingSource::Env("HEDDLE_REMOTE_CACHE_MODE")));
    }
    if let Some(v) = flag_url {
        url = Some((v.to_string(), SettingSource::Flag("--remote-cache")));
    }
    if let Some(v) = flag_mode {
        check_mode(v, "--remote-cache-mode")?;
        mode = Some((v.to_string(), SettingSource::Flag("--remote-cache-mode")));
    }

    let Some((url, url_source)) = url else {
        return Ok(None);
    };
    if url == "off" {
        return Ok(None);
    }
    let parsed = RemoteUrl::parse(&url).map_err(|source| ConfigError::BadUrl {
        source_name: url_source.to_string(),
        source,
    })?;
    let mode = mode
        .and_then(|(m, _)| RemoteMode::parse(&m))
        .unwrap_or_default();
    Ok(Some(RemoteSettings {
        url: parsed,
        url_source,
        mode,
        s3,
    }))
}

fn check_mode(v: &str, at: &str) -> Result<(), ConfigError> {
    match RemoteMode::parse(v) {
        Some(_) => Ok(()),
        None => Err(ConfigError::BadValue {
            at: at.to_string(),
            reason: format!("remote cache mode {v:?} is not \"read\" or \"readwrite\""),
        }),
    }
}

fn read_cache_section(path: &Path) -> Result<Option<(String, CacheSection)>, ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        // A config this user may not read is someone else's (`sudo -u` keeps HOME): heddle
        // runs without it rather than refusing every command.
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            tracing::debug!("ignoring {}: {e}", path.display());
            return Ok(None);
        }
        Err(source) => {
            return Err(ConfigError::Read {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let parse_error = |e: toml::de::Error| {
        let (line, col) = e.span().map(|s| line_col(&text, s.start)).unwrap_or((1, 1));
        ConfigError::Parse {
            path: path.to_path_buf(),
            line,
            col,
            message: e.message().trim_end().to_string(),
        }
    };
    let keys: ConfigKeys = toml::from_str(&text).map_err(parse_error)?;
    let Some(table) = keys.cache else {
        return Ok(None);
    };
    for key in table.keys() {
        if (key.starts_with("remote") || key.starts_with("s3_")) && !KNOWN_KEYS.contains(&&**key) {
            // The plain table has no spans; the key's own line is enough to find it.
            let line = text
                .lines()
                .position(|l| l.trim_start().starts_with(key.as_str()))
                .map(|i| i + 1)
                .unwrap_or(1);
            return Err(ConfigError::BadValue {
                at: format!("{}:{line}", path.display()),
                reason: format!(
                    "unknown key {key:?} in [cache]; expected one of {}",
                    KNOWN_KEYS.join(", ")
                ),
            });
        }
    }
    let values: ConfigValues = toml::from_str(&text).map_err(parse_error)?;
    Ok(Some((text, values.cache)))
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.len() - before.rfind('\n').map(|i| i + 1).unwrap_or(0) + 1;
    (line, col)
}
