//! The value of a pool entry: `gpu = 1` (a pool of one run) or
//! `hailo = { units = 1, scope = "machine" }` in a pipeline's `[resources]` (shared by every
//! heddle on this machine, [`super::machine`]), `scope = "engine"` in `hosts.toml` (shared by
//! every heddle placing on that Docker engine, [`super::engine`]).
//!
//! Both were once spelled `scope = "host"`, which read as the same thing in two files that mean
//! different things; that spelling is still accepted, with a warning, for one release.

/// How far a pool's units are shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Within one run (a semaphore in the process).
    Run,
    /// Beyond this run: every heddle on this machine (`[resources]`) or on the engine
    /// (`hosts.toml`), as [`Place`] says.
    Shared,
}

/// Where the pool is declared, which decides what a shared scope is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// A pipeline's `[resources]`: `scope = "machine"`.
    Resources,
    /// A host of `hosts.toml`: `scope = "engine"`.
    Hosts,
}

impl Place {
    /// The spelling of [`Scope::Shared`] here.
    pub fn shared_word(self) -> &'static str {
        match self {
            Place::Resources => "machine",
            Place::Hosts => "engine",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSpec {
    pub units: u32,
    pub scope: Scope,
}

/// A parsed entry, and a warning when it used the old spelling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    pub spec: PoolSpec,
    pub warning: Option<String>,
}

/// An entry that is not a pool: what to write instead. The loader prefixes the pool's name
/// and points at the entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolSpecError {
    #[error("needs a positive size")]
    NotPositive,
    #[error("unknown key `{key}` (expected `units` and `scope`)")]
    UnknownKey { key: String },
    #[error("needs `units = N`")]
    NoUnits,
    #[error("`scope` is \"run\" or \"{}\"", place.shared_word())]
    BadScope { place: Place },
}

/// Parse one entry declared at `place`.
pub fn parse(v: &toml::Value, place: Place) -> Result<Parsed, PoolSpecError> {
    let units = |v: &toml::Value| match v.as_integer().map(u32::try_from) {
        Some(Ok(n)) if n > 0 => Ok(n),
        _ => Err(PoolSpecError::NotPositive),
    };
    match v {
        toml::Value::Table(t) => {
            if let Some(k) = t.keys().find(|k| !["units", "scope"].contains(&k.as_str())) {
                return Err(PoolSpecError::UnknownKey { key: k.clone() });
            }
            let n = units(t.get("units").ok_or(PoolSpecError::NoUnits)?)?;
            let shared = place.shared_word();
            let mut warning = None;
            let scope = match t.get("scope").map(|s| s.as_str()) {
                None | Some(Some("run")) => Scope::Run,
                Some(Some(w)) if w == shared => Scope::Shared,
                Some(Some("host")) => {
                    warning = Some(format!(
                        "`scope = \"host\"` is the old spelling of `scope = \"{shared}\"`; it \
                         is accepted until the next release"
                    ));
                    Scope::Shared
                }
                _ => return Err(PoolSpecError::BadScope { place }),
            };
            Ok(Parsed {
                spec: PoolSpec { units: n, scope },
                warning,
            })
        }
        other => Ok(Parsed {
            spec: PoolSpec {
                units: units(other)?,
                scope: Scope::Run,
            },
            warning: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<PoolSpec, PoolSpecError> {
        let t: toml::Table = toml::from_str(&format!("x = {text}")).unwrap();
        parse(&t["x"], Place::Resources).map(|p| p.spec)
    }

    #[test]
    fn sizes_and_scopes() {
        assert_eq!(
            p("2"),
            Ok(PoolSpec {
                units: 2,
                scope: Scope::Run
            })
        );
        assert_eq!(
            p(r#"{ units = 1, scope = "machine" }"#),
            Ok(PoolSpec {
                units: 1,
                scope: Scope::Shared
            })
        );
        assert_eq!(p("0"), Err(PoolSpecError::NotPositive));
        let galaxy = p(r#"{ units = 1, scope = "galaxy" }"#).unwrap_err();
        assert_eq!(galaxy.to_string(), "`scope` is \"run\" or \"machine\"");
        // Each file's word, and the old one with a warning.
        let t: toml::Table = toml::from_str(
            "m = { units = 1, scope = \"machine\" }\ne = { units = 1, scope = \"engine\" }\nh = { units = 1, scope = \"host\" }",
        )
        .unwrap();
        assert!(parse(&t["e"], Place::Resources).is_err());
        assert!(parse(&t["m"], Place::Hosts).is_err());
        let shared = |v, place| parse(v, place).unwrap();
        assert_eq!(shared(&t["e"], Place::Hosts).spec.scope, Scope::Shared);
        assert_eq!(shared(&t["e"], Place::Hosts).warning, None);
        let old = shared(&t["h"], Place::Hosts);
        assert_eq!(old.spec.scope, Scope::Shared);
        assert_eq!(
            old.warning.as_deref(),
            Some(
                "`scope = \"host\"` is the old spelling of `scope = \"engine\"`; it is accepted \
                 until the next release"
            )
        );
        assert_eq!(
            p(r#"{ unit = 1 }"#).unwrap_err().to_string(),
            "unknown key `unit` (expected `units` and `scope`)"
        );
        assert_eq!(p(r#"{ scope = "machine" }"#), Err(PoolSpecError::NoUnits));
    }
}
