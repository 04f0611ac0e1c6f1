//! The value of a `[resources]` entry: `gpu = 1` (a pool of one run) or
//! `hailo = { units = 1, scope = "host" }` (shared by every heddle on the host, see
//! [`crate::host_pool`]).

/// How far a pool's units are shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Within one run (a semaphore in the process).
    Run,
    /// Across every heddle process on this host (a lock file per unit).
    Host,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSpec {
    pub units: u32,
    pub scope: Scope,
}

/// Parse one entry; the error says what to write instead.
pub fn parse(v: &toml::Value) -> Result<PoolSpec, String> {
    let units = |v: &toml::Value| match v.as_integer().map(u32::try_from) {
        Some(Ok(n)) if n > 0 => Ok(n),
        _ => Err("needs a positive size".to_string()),
    };
    match v {
        toml::Value::Table(t) => {
            if let Some(k) = t.keys().find(|k| !["units", "scope"].contains(&k.as_str())) {
                return Err(format!("unknown key `{k}` (expected `units` and `scope`)"));
            }
            let n = units(t.get("units").ok_or("needs `units = N`")?)?;
            let scope = match t.get("scope").map(|s| s.as_str()) {
                None | Some(Some("run")) => Scope::Run,
                Some(Some("host")) => Scope::Host,
                _ => return Err("`scope` is \"run\" or \"host\"".into()),
            };
            Ok(PoolSpec { units: n, scope })
        }
        other => Ok(PoolSpec {
            units: units(other)?,
            scope: Scope::Run,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<PoolSpec, String> {
        let t: toml::Table = toml::from_str(&format!("x = {text}")).unwrap();
        parse(&t["x"])
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
            p(r#"{ units = 1, scope = "host" }"#),
            Ok(PoolSpec {
                units: 1,
                scope: Scope::Host
            })
        );
        assert_eq!(p("0"), Err("needs a positive size".into()));
        assert_eq!(
            p(r#"{ units = 1, scope = "galaxy" }"#),
            Err("`scope` is \"run\" or \"host\"".into())
        );
        assert_eq!(
            p(r#"{ unit = 1 }"#),
            Err("unknown key `unit` (expected `units` and `scope`)".into())
        );
        assert_eq!(p(r#"{ scope = "host" }"#), Err("needs `units = N`".into()));
    }
}
