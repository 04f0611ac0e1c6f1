//! Which host variables a stage sees, and how: `pass_env` values enter the cache key (as
//! digests), so a name that looks like a credential is refused there and pointed at
//! `secret_env`, whose values reach the command and are stored nowhere (not in a key, a lock,
//! a record, a log or an output; see `runner/src/secrets.rs` for the masking).

use std::collections::BTreeMap;

use super::layers::Layers;
use super::loader::Loader;

/// Parts of a name that say "credential" (compared upper-cased), and prefixes that do.
const SECRET_PARTS: [&str; 6] = ["TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL"];
const SECRET_PREFIXES: [&str; 1] = ["AWS_"];

/// Whether a variable name looks like it holds a credential (`GITHUB_TOKEN`, `DB_PASSWORD`,
/// `API_KEY`, `AWS_REGION`: every `AWS_` variable, as the AWS tools read them together).
pub fn looks_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_PARTS.iter().any(|p| upper.contains(p))
        || SECRET_PREFIXES.iter().any(|p| upper.starts_with(p))
}

/// A name a process environment can hold and a shell can read: `[A-Za-z_][A-Za-z0-9_]*`.
fn valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl Loader {
    /// Check every layer's `pass_env` and `secret_env` entries (in the file each was written
    /// in) and merge the secret names.
    pub(super) fn secret_env(
        &mut self,
        layers: &Layers,
        vars: &BTreeMap<String, String>,
        pass_env: &[String],
    ) -> Vec<String> {
        let mut secrets: Vec<String> = Vec::new();
        for (raw, source) in layers.merge_order_sourced() {
            for v in raw.pass_env.iter().flatten() {
                let name = v.get_ref();
                if !valid_env_name(name) {
                    let d = source.error(
                        Some(v.span()),
                        format!("`pass_env` entry `{name}` is not a variable name"),
                    );
                    self.errors.push(d);
                } else if looks_secret(name) {
                    let d = source
                        .error(
                            Some(v.span()),
                            format!(
                                "`{name}` looks like a secret: a `pass_env` value enters the cache key, the lock file and the run record"
                            ),
                        )
                        .with_help(format!(
                            "pass it with `secret_env = [\"{name}\"]`: the stage gets the value and heddle stores it nowhere"
                        ));
                    self.errors.push(d);
                }
            }
            for v in raw.secret_env.iter().flatten() {
                let name = v.get_ref();
                let problem = if !valid_env_name(name) {
                    Some((
                        format!("`secret_env` entry `{name}` is not a variable name"),
                        None,
                    ))
                } else if pass_env.contains(name) {
                    Some((
                        format!("`{name}` is in both `pass_env` and `secret_env`"),
                        Some("a secret is passed by `secret_env` alone".to_string()),
                    ))
                } else if vars.contains_key(name) {
                    Some((
                        format!("`{name}` is set in `vars` and passed by `secret_env`"),
                        Some("a value written in the pipeline is no secret: keep it in the environment heddle runs in".to_string()),
                    ))
                } else {
                    None
                };
                match problem {
                    Some((msg, help)) => {
                        let mut d = source.error(Some(v.span()), msg);
                        if let Some(h) = help {
                            d = d.with_help(h);
                        }
                        self.errors.push(d);
                    }
                    None if !secrets.contains(name) => secrets.push(name.clone()),
                    None => {}
                }
            }
        }
        secrets
    }
}

#[cfg(test)]
mod tests {
    use super::looks_secret;

    #[test]
    fn secret_looking_names() {
        for n in [
            "GITHUB_TOKEN",
            "api_key",
            "DB_PASSWORD",
            "MY_SECRET",
            "AWS_REGION",
            "HF_TOKEN",
            "SSH_PASSWD",
            "GOOGLE_APPLICATION_CREDENTIALS",
        ] {
            assert!(looks_secret(n), "{n}");
        }
        for n in ["HOME", "CUDA_VISIBLE_DEVICES", "LANG", "HAILO_DEVICE"] {
            assert!(!looks_secret(n), "{n}");
        }
    }
}
