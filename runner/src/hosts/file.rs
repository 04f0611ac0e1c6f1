//! Reading `hosts.toml`: where the files are, and turning each `[hosts.NAME]` table into a
//! checked [`Host`]. Every mistake is a [`Diagnostic`] at the key that holds it (file:line:col,
//! the line, a caret), unknown keys included, with a did-you-mean when one is near.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use heddle_containers::TlsFiles;
use serde::Deserialize;
use toml::Spanned;

use super::clusters::{check_cluster, Cluster, RawCluster};
use super::{Host, Hosts};
use crate::diag::{did_you_mean, Diagnostic, Diagnostics, Source};
use crate::model::Transfer;
use crate::units::pool_spec::{self, Scope};

/// Where the docs say what each key means; every help line points there.
const DOCS: &str = "docs/scale-out.md";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    hosts: BTreeMap<Spanned<String>, Spanned<RawHost>>,
    #[serde(default)]
    clusters: BTreeMap<Spanned<String>, Spanned<RawCluster>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHost {
    docker: Option<Spanned<String>>,
    tls: Option<Spanned<RawTls>>,
    #[serde(default)]
    pools: BTreeMap<Spanned<String>, Spanned<toml::Value>>,
    transfer: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    ca: Spanned<String>,
    cert: Spanned<String>,
    key: Spanned<String>,
}

/// The hosts files heddle reads, in order (a later file's `[hosts.NAME]` replaces an earlier
/// one of the same name): the user's (`$HEDDLE_CONFIG_DIR/hosts.toml`, else
/// `$XDG_CONFIG_HOME/heddle/hosts.toml`, else `~/.config/heddle/hosts.toml`), then the
/// project's `.heddle/hosts.toml`. `env` reads a variable (tests pass a map).
pub fn config_files(project_root: &Path, env: &dyn Fn(&str) -> Option<String>) -> Vec<PathBuf> {
    let set = |k: &str| env(k).filter(|v| !v.is_empty());
    let user_dir = set("HEDDLE_CONFIG_DIR")
        .map(PathBuf::from)
        .or_else(|| set("XDG_CONFIG_HOME").map(|x| Path::new(&x).join("heddle")))
        .or_else(|| set("HOME").map(|h| Path::new(&h).join(".config").join("heddle")));
    user_dir
        .map(|d| d.join("hosts.toml"))
        .into_iter()
        .chain([project_root.join(".heddle").join("hosts.toml")])
        .collect()
}

/// Read and check every file that exists; a missing file (or one this user may not read: a
/// `sudo -u` keeps HOME) is no hosts, not an error. All mistakes of all files are reported
/// at once.
pub fn load(files: &[PathBuf]) -> Result<Hosts, Diagnostics> {
    let mut hosts = BTreeMap::new();
    let mut clusters = BTreeMap::new();
    let mut errors = Vec::new();
    for path in files {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
                ) =>
            {
                continue
            }
            Err(e) => {
                errors.push(Diagnostic::file(
                    path,
                    format!("cannot read hosts file: {e}"),
                ));
                continue;
            }
        };
        let src = Source::new(path, text);
        match parse_file(&src) {
            Ok((found, found_clusters)) => {
                hosts.extend(found.into_iter().map(|h| (h.name.clone(), h)));
                clusters.extend(found_clusters.into_iter().map(|c| (c.name.clone(), c)));
            }
            Err(mut d) => errors.append(&mut d),
        }
    }
    if errors.is_empty() {
        Ok(Hosts { hosts, clusters })
    } else {
        Err(Diagnostics(errors))
    }
}

/// One file's hosts and clusters, or every diagnostic it raised.
fn parse_file(src: &Source) -> Result<(Vec<Host>, Vec<Cluster>), Vec<Diagnostic>> {
    let raw: RawFile = toml::from_str(&src.text).map_err(|e| vec![toml_error(src, e)])?;
    let mut hosts = Vec::new();
    let mut clusters = Vec::new();
    let mut errors = Vec::new();
    for (name, raw) in raw.hosts {
        match check_host(src, &name, raw.into_inner()) {
            Ok(h) => hosts.push(h),
            Err(mut d) => errors.append(&mut d),
        }
    }
    for (name, raw) in raw.clusters {
        match check_cluster(src, &name, raw.into_inner()) {
            Ok(c) => clusters.push(c),
            Err(mut d) => errors.append(&mut d),
        }
    }
    if errors.is_empty() {
        Ok((hosts, clusters))
    } else {
        Err(errors)
    }
}

/// A syntax or shape error; an unknown key names the nearest accepted one.
fn toml_error(src: &Source, e: toml::de::Error) -> Diagnostic {
    let msg = e.message().trim().to_string();
    if let Some((field, expected)) = unknown_field(&msg) {
        let help = did_you_mean(field, &expected, || {
            format!("expected one of {} (see {DOCS})", expected.join(", "))
        });
        return src
            .error(e.span(), format!("unknown key `{field}`"))
            .with_help(help);
    }
    src.error(e.span(), msg)
        .with_help(format!("see {DOCS} for the format"))
}

/// From serde's "unknown field `pool`, expected one of `docker`, `tls`": the field and the
/// accepted names.
fn unknown_field(msg: &str) -> Option<(&str, Vec<&str>)> {
    let rest = msg.strip_prefix("unknown field `")?;
    let (field, expected) = rest.split_once('`')?;
    Some((field, expected.split('`').skip(1).step_by(2).collect()))
}

fn check_host(src: &Source, name: &Spanned<String>, raw: RawHost) -> Result<Host, Vec<Diagnostic>> {
    let mut errors = Vec::new();
    let docker = match raw.docker {
        Some(d) => {
            if let Err(why) = check_address(d.get_ref()) {
                errors.push(
                    src.error(Some(d.span()), format!("host `{}`: {why}", name.get_ref()))
                        .with_help(
                            "write unix:///var/run/docker.sock, tcp://HOST:PORT or ssh://USER@HOST",
                        ),
                );
            }
            Some(d)
        }
        None => {
            errors.push(
                src.error(
                    Some(name.span()),
                    format!("host `{}` has no `docker` address", name.get_ref()),
                )
                .with_help(format!("add docker = \"tcp://HOST:PORT\" (see {DOCS})")),
            );
            None
        }
    };
    let tls = raw.tls.map(|t| {
        if let Some(d) = docker
            .as_ref()
            .filter(|d| !d.get_ref().starts_with("tcp://"))
        {
            errors.push(src.error(
                Some(t.span()),
                format!(
                    "host `{}`: `tls` needs a tcp:// engine, not {}",
                    name.get_ref(),
                    d.get_ref()
                ),
            ));
        }
        let t = t.into_inner();
        let base = src.path.parent().unwrap_or(Path::new("."));
        TlsFiles {
            ca: expand(base, t.ca.get_ref()),
            cert: expand(base, t.cert.get_ref()),
            key: expand(base, t.key.get_ref()),
        }
    });
    let (pools, engine_wide) = check_pools(src, name, raw.pools, &mut errors);
    let transfer = check_transfer(src, name, raw.transfer.as_ref(), &mut errors);
    match docker {
        Some(docker) if errors.is_empty() => {
            let (line, col) = src.line_col(name.span().start);
            Ok(Host {
                name: name.get_ref().clone(),
                docker: docker.into_inner(),
                tls,
                pools,
                engine_wide,
                transfer,
                defined_at: format!("{}:{line}:{col}", src.path.display()),
            })
        }
        _ => Err(errors),
    }
}

/// A host's `[hosts.NAME.pools]`: each a positive number of units (this run's), or
/// `{ units = N, scope = "host" }` (shared by every heddle on the engine, [`pool_spec`]).
/// Returns the sizes and the engine-wide pools.
fn check_pools(
    src: &Source,
    name: &Spanned<String>,
    raw: BTreeMap<Spanned<String>, Spanned<toml::Value>>,
    errors: &mut Vec<Diagnostic>,
) -> (BTreeMap<String, u32>, BTreeSet<String>) {
    let mut pools = BTreeMap::new();
    let mut engine_wide = BTreeSet::new();
    for (pool, size) in raw {
        let spec = match pool_spec::parse(size.get_ref(), pool_spec::Place::Hosts) {
            // `scope = "host"` still means the engine here; its warning waits for hosts.toml
            // to have a warning channel (the pipeline's `[resources]` has one).
            Ok(parsed) => parsed.spec,
            Err(why) => {
                errors.push(src.error(
                    Some(size.span()),
                    format!(
                        "host `{}`: pool `{}`: {why}",
                        name.get_ref(),
                        pool.get_ref()
                    ),
                ));
                continue;
            }
        };
        if spec.scope == Scope::Shared {
            // Its lock containers are named after it, and the engine takes few characters.
            if !container_name_safe(pool.get_ref()) {
                errors.push(src.error(
                    Some(pool.span()),
                    format!(
                        "host `{}`: pool `{}` is shared on the engine (scope = \"engine\"), so \
                         its name must be letters, digits, `_`, `.` or `-`",
                        name.get_ref(),
                        pool.get_ref()
                    ),
                ));
                continue;
            }
            engine_wide.insert(pool.get_ref().clone());
        }
        pools.insert(pool.into_inner(), spec.units);
    }
    (pools, engine_wide)
}

/// Whether `pool` may be part of a container name (`[a-zA-Z0-9][a-zA-Z0-9_.-]*` after heddle's
/// prefix).
fn container_name_safe(pool: &str) -> bool {
    !pool.is_empty()
        && pool
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// A host's `transfer`: how inputs and outputs reach its engine.
fn check_transfer(
    src: &Source,
    name: &Spanned<String>,
    raw: Option<&Spanned<String>>,
    errors: &mut Vec<Diagnostic>,
) -> Transfer {
    match raw.map(|t| t.get_ref().as_str()) {
        None | Some("auto") => Transfer::Auto,
        Some("bind") => Transfer::Bind,
        Some("archive") => Transfer::Archive,
        Some(other) => {
            let t = raw.expect("matched Some");
            errors.push(src.error(
                Some(t.span()),
                format!(
                    "host `{}`: transfer must be \"auto\", \"bind\" or \"archive\", not \"{other}\"",
                    name.get_ref()
                ),
            ));
            Transfer::Auto
        }
    }
}

/// A `docker` address bollard cannot connect to.
#[derive(Debug, thiserror::Error)]
enum AddressError {
    #[error("docker address {0:?} names no engine")]
    NoEngine(String),
    #[error("docker address {0:?} is not unix://, tcp://, ssh:// or npipe://")]
    UnknownScheme(String),
}

/// What a `docker` address may be: the schemes bollard connects to.
fn check_address(addr: &str) -> Result<(), AddressError> {
    const SCHEMES: [&str; 4] = ["unix://", "tcp://", "ssh://", "npipe://"];
    match SCHEMES.iter().find(|s| addr.starts_with(**s)) {
        Some(s) if addr.len() > s.len() => Ok(()),
        Some(_) => Err(AddressError::NoEngine(addr.into())),
        None => Err(AddressError::UnknownScheme(addr.into())),
    }
}

/// `~/x` under HOME; a relative path is relative to the hosts file's folder, so a file and its
/// certificates can travel together.
fn expand(base: &Path, p: &str) -> PathBuf {
    if let Some(rest) = p.strip_prefix("~/") {
        if let Some(home) = std::env::var_os("HOME") {
            return PathBuf::from(home).join(rest);
        }
    }
    base.join(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<Host>, String> {
        let src = Source::new("hosts.toml", text);
        parse_file(&src)
            .map(|(h, _)| h)
            .map_err(|d| Diagnostics(d).to_string())
    }

    fn parse_clusters(text: &str) -> Result<Vec<Cluster>, String> {
        let src = Source::new("hosts.toml", text);
        parse_file(&src)
            .map(|(_, c)| c)
            .map_err(|d| Diagnostics(d).to_string())
    }

    #[test]
    fn a_slurm_cluster_with_its_settings() {
        let c = parse_clusters(
            "[clusters.hpc]\nkind = \"slurm\"\npartition = \"gpu\"\naccount = \"ml\"\n\
             sbatch_args = [\"--qos=low\"]\ngres = [\"gpu\", \"hailo\"]\npoll_interval = \"250ms\"\n\
             unreachable_limit = \"30s\"\n",
        )
        .unwrap();
        let c = &c[0];
        assert_eq!(c.name, "hpc");
        assert_eq!(c.kind, super::super::ClusterKind::Slurm);
        assert_eq!(c.partition.as_deref(), Some("gpu"));
        assert_eq!(c.account.as_deref(), Some("ml"));
        assert_eq!(c.sbatch_args, vec!["--qos=low".to_string()]);
        assert_eq!(c.gres, BTreeSet::from(["gpu".into(), "hailo".into()]));
        assert_eq!(c.poll_interval, std::time::Duration::from_millis(250));
        assert_eq!(c.unreachable_limit, std::time::Duration::from_secs(30));
        assert_eq!(c.pending_limit, std::time::Duration::from_secs(600));
        assert_eq!(c.retries, 1);
        assert_eq!(c.defined_at, "hosts.toml:1:11");
    }

    #[test]
    fn a_cluster_of_an_unknown_kind_or_key_points_at_it() {
        let e = parse_clusters("[clusters.k]\nkind = \"nomad\"\n").unwrap_err();
        assert_eq!(
            e,
            "error: cluster `k`: kind \"nomad\" is not supported\n  --> hosts.toml:2:8\n  |\n2 | kind = \"nomad\"\n  |        ^^^^^^^\n  = help: write kind = \"slurm\" or kind = \"kubernetes\""
        );
        let e = parse_clusters("[clusters.k]\nkind = \"slurm\"\npartiton = \"x\"\n").unwrap_err();
        assert!(e.contains("did you mean `partition`?"), "{e}");
    }

    #[test]
    fn a_kubernetes_cluster_with_its_settings() {
        let image = format!("registry.lab/heddle@sha256:{}", "e".repeat(64));
        let c = parse_clusters(&format!(
            "[clusters.k8s]\nkind = \"kubernetes\"\nnamespace = \"ml\"\nimage = \"{image}\"\n\
             resource_names = {{ gpu = \"nvidia.com/gpu\", hailo = \"hailo.ai/h8\" }}\n"
        ))
        .unwrap();
        let want = super::super::KubeCluster {
            namespace: "ml".into(),
            context: None,
            image,
            resource_names: BTreeMap::from([
                ("gpu".into(), "nvidia.com/gpu".into()),
                ("hailo".into(), "hailo.ai/h8".into()),
            ]),
        };
        assert_eq!(c[0].kind, super::super::ClusterKind::Kubernetes(want));
    }

    #[test]
    fn a_kubernetes_cluster_needs_an_image_by_digest_and_no_slurm_keys() {
        let e = parse_clusters(
            "[clusters.k8s]\nkind = \"kubernetes\"\nimage = \"registry.lab/heddle:latest\"\n",
        )
        .unwrap_err();
        assert_eq!(
            e,
            "error: cluster `k8s`: `image` must name a digest, not \"registry.lab/heddle:latest\"\n  --> hosts.toml:3:9\n  |\n3 | image = \"registry.lab/heddle:latest\"\n  |         ^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n  = help: write REGISTRY/REPO@sha256:DIGEST (a tag could move between submit and start)"
        );
        let e = parse_clusters("[clusters.k8s]\nkind = \"kubernetes\"\n").unwrap_err();
        assert!(
            e.starts_with(
                "error: cluster `k8s` (kubernetes) has no `image`\n  --> hosts.toml:1:11"
            ),
            "{e}"
        );
        let e =
            parse_clusters("[clusters.hpc]\nkind = \"slurm\"\nnamespace = \"ml\"\n").unwrap_err();
        assert!(
            e.starts_with("error: cluster `hpc`: `namespace` is a kubernetes key, and this cluster is slurm\n  --> hosts.toml:2:8"),
            "{e}"
        );
    }

    #[test]
    fn a_host_with_pools_tls_and_transfer() {
        let hosts = parse(
            r#"
[hosts.gpubox]
docker = "tcp://gpubox.lab:2376"
tls = { ca = "certs/ca.pem", cert = "/abs/cert.pem", key = "certs/key.pem" }
pools = { gpu = 2, hailo = 1 }
transfer = "archive"
"#,
        )
        .unwrap();
        let h = &hosts[0];
        assert_eq!(h.name, "gpubox");
        assert_eq!(h.docker, "tcp://gpubox.lab:2376");
        assert_eq!(
            h.pools,
            BTreeMap::from([("gpu".into(), 2), ("hailo".into(), 1)])
        );
        assert_eq!(h.transfer, Transfer::Archive);
        let tls = h.tls.as_ref().unwrap();
        assert_eq!(tls.ca, PathBuf::from("certs/ca.pem"));
        assert_eq!(tls.cert, PathBuf::from("/abs/cert.pem"));
        assert_eq!(h.defined_at, "hosts.toml:2:8");
    }

    #[test]
    fn an_unknown_key_points_at_itself_and_suggests() {
        let e = parse("[hosts.a]\ndocker = \"unix:///x.sock\"\npool = { gpu = 1 }\n").unwrap_err();
        assert_eq!(
            e,
            "error: unknown key `pool`\n  --> hosts.toml:3:1\n  |\n3 | pool = { gpu = 1 }\n  | ^^^^\n  = help: did you mean `pools`?"
        );
    }

    #[test]
    fn bad_values_are_each_reported() {
        let e = parse(
            "[hosts.a]\ndocker = \"http://x\"\npools = { gpu = 0 }\ntransfer = \"copy\"\n[hosts.b]\npools = {}\n",
        )
        .unwrap_err();
        assert!(e.contains("hosts.toml:2:10"), "{e}");
        assert!(
            e.contains("is not unix://, tcp://, ssh:// or npipe://"),
            "{e}"
        );
        assert!(e.contains("pool `gpu`: needs a positive size"), "{e}");
        assert!(e.contains("transfer must be"), "{e}");
        assert!(e.contains("host `b` has no `docker` address"), "{e}");
        assert!(e.ends_with("4 errors"), "{e}");
    }

    #[test]
    fn a_pool_may_be_shared_by_every_heddle_on_the_engine() {
        let hosts = parse(
            "[hosts.devbox]\ndocker = \"tcp://devbox:2375\"\n\
             pools = { gpu = 2, hailo = { units = 1, scope = \"host\" }, npu = { units = 3 } }\n",
        )
        .unwrap();
        let h = &hosts[0];
        assert_eq!(
            h.pools,
            BTreeMap::from([("gpu".into(), 2), ("hailo".into(), 1), ("npu".into(), 3)])
        );
        assert_eq!(h.engine_wide, BTreeSet::from(["hailo".to_string()]));
    }

    #[test]
    fn a_scope_other_than_run_or_engine_points_at_the_pool() {
        let e = parse(
            "[hosts.devbox]\ndocker = \"tcp://devbox:2375\"\npools = { hailo = { units = 1, scope = \"planet\" } }\n",
        )
        .unwrap_err();
        assert_eq!(
            e,
            "error: host `devbox`: pool `hailo`: `scope` is \"run\" or \"engine\"\n  --> hosts.toml:3:19\n  |\n3 | pools = { hailo = { units = 1, scope = \"planet\" } }\n  |                   ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"
        );
    }

    #[test]
    fn an_engine_wide_pool_needs_a_name_the_engine_takes() {
        let e = parse(
            "[hosts.a]\ndocker = \"tcp://a:1\"\npools = { \"hai lo\" = { units = 1, scope = \"host\" } }\n",
        )
        .unwrap_err();
        assert!(
            e.contains("pool `hai lo` is shared on the engine (scope = \"engine\"), so its name must be letters, digits, `_`, `.` or `-`"),
            "{e}"
        );
        assert!(e.contains("hosts.toml:3:11"), "{e}");
    }

    #[test]
    fn tls_needs_tcp() {
        let e = parse(
            "[hosts.a]\ndocker = \"unix:///x.sock\"\ntls = { ca = \"a\", cert = \"b\", key = \"c\" }\n",
        )
        .unwrap_err();
        assert!(e.contains("`tls` needs a tcp:// engine"), "{e}");
    }

    #[test]
    fn user_file_then_project_file() {
        let env = |k: &str| match k {
            "XDG_CONFIG_HOME" => Some("/xdg".to_string()),
            "HOME" => Some("/home/u".to_string()),
            _ => None,
        };
        assert_eq!(
            config_files(Path::new("/p"), &env),
            vec![
                PathBuf::from("/xdg/heddle/hosts.toml"),
                PathBuf::from("/p/.heddle/hosts.toml")
            ]
        );
        let env = |k: &str| (k == "HEDDLE_CONFIG_DIR").then(|| "/cfg".to_string());
        assert_eq!(
            config_files(Path::new("/p"), &env)[0],
            PathBuf::from("/cfg/hosts.toml")
        );
    }

    #[test]
    fn a_later_file_replaces_a_host_of_the_same_name() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.toml"), dir.path().join("b.toml"));
        std::fs::write(
            &a,
            "[hosts.x]\ndocker = \"tcp://a:1\"\n[hosts.y]\ndocker = \"tcp://y:1\"\n",
        )
        .unwrap();
        std::fs::write(&b, "[hosts.x]\ndocker = \"tcp://b:1\"\n").unwrap();
        let hosts = load(&[a, b, dir.path().join("missing.toml")]).unwrap();
        assert_eq!(hosts.hosts["x"].docker, "tcp://b:1");
        assert_eq!(hosts.hosts["y"].docker, "tcp://y:1");
    }
}
