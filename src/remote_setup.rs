//! Which shared cache a command uses and on what terms: the settings (`heddle-remote`'s
//! config.rs: user config, project config, environment, flags), the variables that tune it, the
//! trust files that say whose entries to accept and, for a remote this machine may write to,
//! the key its entries are signed with.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use heddle_remote::{
    open_backend, resolve_remote_trusting, signing_key_path, trust_files, user_config_dir,
    KeyError, ReadRules, RemoteCache, RemoteError, RemoteMode, RemoteSettings, SigningKey,
    Timeouts, TrustFileError, TrustedWriters, SIGNING_KEY_VAR,
};

/// The `--remote-cache` / `--remote-cache-mode` flags of a command.
#[derive(Debug, Clone, Default)]
pub struct RemoteFlags {
    pub url: Option<String>,
    pub mode: Option<String>,
}

/// Why no remote could be set up: a configuration the user must fix (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum RemoteSetupError {
    #[error(transparent)]
    Config(#[from] Box<heddle_remote::ConfigError>),
    #[error("cannot use remote cache {url}")]
    Open {
        url: String,
        #[source]
        source: Box<RemoteError>,
    },
    /// A variable that tunes the remote cache holds something unusable.
    #[error("failed to use {var}={value:?}: {reason}")]
    BadVar {
        var: &'static str,
        value: String,
        reason: &'static str,
    },
    #[error(transparent)]
    Trust(#[from] TrustFileError),
    /// A remote in `readwrite` mode, and no key to sign what would be written.
    #[error("remote cache {url} is in readwrite mode but there is no signing key at {}: run `heddle cache keygen` and add the line it prints to the team's .heddle/trusted-writers, or use the remote in read mode", path.display())]
    NoKey { url: String, path: PathBuf },
    #[error("remote cache {url} is in readwrite mode but there is no signing key: set {SIGNING_KEY_VAR} (no HOME to find one in)")]
    NoKeyPath { url: String },
    #[error("cannot sign entries for remote cache {url}")]
    Key {
        url: String,
        #[source]
        source: KeyError,
    },
}

/// Seconds a remote call may take (a request, the wait for a chunk, the grace before the
/// floor throughput applies); default 30.
pub const TIMEOUT_VAR: &str = "HEDDLE_REMOTE_TIMEOUT";
/// The most bytes one remote entry's outputs may add up to (`20G`, `500M`); default 64 GiB.
pub const MAX_ENTRY_VAR: &str = "HEDDLE_REMOTE_MAX_ENTRY_BYTES";

/// The remote cache this command uses in `project_root`, `Ok(None)` when none is configured.
/// Makes no request.
pub fn open_cache(
    project_root: &Path,
    flags: &RemoteFlags,
) -> Result<Option<RemoteCache>, RemoteSetupError> {
    let env = |k: &str| std::env::var(k).ok();
    let Some(settings) = resolve(project_root, flags, &env)? else {
        return Ok(None);
    };
    let url = settings.url.to_string();
    let (timeouts, mut rules) = tuning(&env)?;
    let config_dir = user_config_dir(&env);
    // The team's trusted-writers file in a project decides whose entries this machine accepts:
    // like the project's remote address, it counts only once the user trusts the project
    // (`heddle trust`), or a cloned repo could have its own writer's results served.
    let mut files = trust_files(project_root, config_dir.as_deref());
    if !crate::trust::check(project_root, &env).is_trusted() {
        files.retain(|f| !f.starts_with(project_root));
    }
    rules.writers = TrustedWriters::load(&files)?;
    let backend =
        open_backend(&settings, &env, timeouts).map_err(|source| RemoteSetupError::Open {
            url: url.clone(),
            source: Box::new(source),
        })?;
    let cache = RemoteCache::with_backend(backend, settings.mode).with_rules(rules);
    if !settings.mode.can_write() {
        return Ok(Some(cache));
    }
    let Some(path) = signing_key_path(&env, config_dir.as_deref()) else {
        return Err(RemoteSetupError::NoKeyPath { url });
    };
    let key = match SigningKey::load(&path) {
        Ok(key) => key,
        Err(KeyError::Read { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Err(RemoteSetupError::NoKey { url, path })
        }
        Err(source) => return Err(RemoteSetupError::Key { url, source }),
    };
    Ok(Some(cache.with_signer(Arc::new(key))))
}

/// The settings the user's layers and a trusted project give ([`crate::trust`]). An untrusted
/// project's `.heddle/config.toml` may only turn the remote down; when it asks for more, one
/// warning says what was not used and how to allow it.
fn resolve(
    project_root: &Path,
    flags: &RemoteFlags,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<RemoteSettings>, RemoteSetupError> {
    let (url, mode) = (flags.url.as_deref(), flags.mode.as_deref());
    let file = project_root.join(".heddle").join("config.toml");
    if !file.is_file() {
        // No project layer: nothing to trust, one resolution.
        return Ok(resolve_remote_trusting(project_root, env, url, mode, true).map_err(Box::new)?);
    }
    let trust = crate::trust::check(project_root, env);
    let asked = resolve_remote_trusting(project_root, env, url, mode, true).map_err(Box::new)?;
    if trust.is_trusted() {
        return Ok(asked);
    }
    let own = resolve_remote_trusting(project_root, env, url, mode, false).map_err(Box::new)?;
    if own != asked {
        let what = match &asked {
            Some(s) => format!(
                "the remote cache settings ({} {})",
                s.url,
                mode_word(s.mode)
            ),
            None => "the remote cache settings".into(),
        };
        crate::trust::warn_ignored(project_root, &file, &what, trust);
    }
    Ok(own)
}

fn mode_word(m: RemoteMode) -> &'static str {
    if m.can_write() {
        "readwrite"
    } else {
        "read"
    }
}

/// The remote this command uses, as an address another heddle's `--remote-cache` takes (a
/// cluster job's worker), and whether it may be written. `Ok(None)`: none configured. The same
/// trust rule as every other command: an untrusted project's file cannot choose it.
pub fn address(
    project_root: &Path,
    flags: &RemoteFlags,
) -> Result<Option<(String, bool)>, RemoteSetupError> {
    let env = |k: &str| std::env::var(k).ok();
    let settings = resolve(project_root, flags, &env)?;
    Ok(settings.map(|s| (s.url.to_string(), s.mode.can_write())))
}

/// The timeouts and read rules the environment asks for, else the defaults.
fn tuning(env: &dyn Fn(&str) -> Option<String>) -> Result<(Timeouts, ReadRules), RemoteSetupError> {
    let mut timeouts = Timeouts::default();
    let mut rules = ReadRules::default();
    if let Some(v) = env(TIMEOUT_VAR).filter(|v| !v.is_empty()) {
        let secs =
            v.trim()
                .parse::<u64>()
                .ok()
                .filter(|s| *s > 0)
                .ok_or(RemoteSetupError::BadVar {
                    var: TIMEOUT_VAR,
                    value: v.clone(),
                    reason: "expected a whole number of seconds, at least 1",
                })?;
        timeouts.request = Duration::from_secs(secs);
        timeouts.idle = Duration::from_secs(secs);
    }
    if let Some(v) = env(MAX_ENTRY_VAR).filter(|v| !v.is_empty()) {
        rules.max_bytes =
            heddle_containers::parse_size(v.trim()).map_err(|_| RemoteSetupError::BadVar {
                var: MAX_ENTRY_VAR,
                value: v.clone(),
                reason: "expected a size such as 500M or 20G",
            })?;
    }
    Ok((timeouts, rules))
}
