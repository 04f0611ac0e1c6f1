#![allow(clippy::result_large_err)] // the crate's error type, see remote/src/lib.rs
//! The config resolver: layers, precedence and the exact messages for bad input.

use std::collections::HashMap;
use std::path::Path;

use heddle_remote::{resolve_remote, RemoteMode, RemoteUrl, SettingSource};

struct Setup {
    home: tempfile::TempDir,
    project: tempfile::TempDir,
    env: HashMap<String, String>,
}

fn setup() -> Setup {
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let mut env = HashMap::new();
    env.insert("HOME".to_string(), home.path().display().to_string());
    Setup { home, project, env }
}

impl Setup {
    fn user_config(&self, text: &str) -> std::path::PathBuf {
        let p = self.home.path().join(".config/heddle/config.toml");
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    }

    fn project_config(&self, text: &str) -> std::path::PathBuf {
        let p = self.project.path().join(".heddle/config.toml");
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    }

    fn resolve(
        &self,
        flag_url: Option<&str>,
        flag_mode: Option<&str>,
    ) -> Result<Option<heddle_remote::RemoteSettings>, heddle_remote::ConfigError> {
        let env = &self.env;
        resolve_remote(
            self.project.path(),
            &|k| env.get(k).cloned(),
            flag_url,
            flag_mode,
        )
    }
}

#[test]
fn nothing_configured_is_no_remote() {
    assert_eq!(setup().resolve(None, None).unwrap(), None);
}

#[test]
fn layers_override_in_order_user_project_env_flag() {
    let mut s = setup();
    let user = s.user_config(
        "[cache]\nremote = \"s3://user-bucket/p\"\nremote_mode = \"read\"\ns3_endpoint = \"http://127.0.0.1:9000\"\n[hosts.gpu]\ndocker = \"tcp://x\"\n",
    );
    let r = s.resolve(None, None).unwrap().unwrap();
    assert_eq!(
        r.url,
        RemoteUrl::S3 {
            bucket: "user-bucket".into(),
            prefix: "p".into()
        }
    );
    assert_eq!(r.url_source, SettingSource::UserConfig(user));
    assert_eq!(r.mode, RemoteMode::Read);
    assert_eq!(r.s3.endpoint.as_deref(), Some("http://127.0.0.1:9000"));

    let project = s.project_config("[cache]\nremote = \"file:///srv/cache\"\n");
    let r = s.resolve(None, None).unwrap().unwrap();
    assert_eq!(r.url_source, SettingSource::ProjectConfig(project));
    assert_eq!(r.mode, RemoteMode::Read, "mode still from the user config");

    s.env
        .insert("HEDDLE_REMOTE_CACHE".into(), "webdav+http://h:1/d".into());
    s.env
        .insert("HEDDLE_REMOTE_CACHE_MODE".into(), "readwrite".into());
    let r = s.resolve(None, None).unwrap().unwrap();
    assert_eq!(r.url_source, SettingSource::Env("HEDDLE_REMOTE_CACHE"));
    assert_eq!(r.mode, RemoteMode::ReadWrite);

    let r = s.resolve(Some("s3://flag"), Some("read")).unwrap().unwrap();
    assert_eq!(r.url.to_string(), "s3://flag");
    assert_eq!(r.url_source, SettingSource::Flag("--remote-cache"));
    assert_eq!(r.mode, RemoteMode::Read);

    assert_eq!(s.resolve(Some("off"), None).unwrap(), None);
}

#[test]
fn xdg_config_home_wins_over_home() {
    let mut s = setup();
    let xdg = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(xdg.path().join("heddle")).unwrap();
    std::fs::write(
        xdg.path().join("heddle/config.toml"),
        "[cache]\nremote = \"s3://xdg\"\n",
    )
    .unwrap();
    s.user_config("[cache]\nremote = \"s3://home\"\n");
    s.env
        .insert("XDG_CONFIG_HOME".into(), xdg.path().display().to_string());
    assert_eq!(
        s.resolve(None, None).unwrap().unwrap().url.to_string(),
        "s3://xdg"
    );
}

#[test]
fn mode_defaults_to_read() {
    let s = setup();
    s.project_config("[cache]\nremote = \"s3://b\"\n");
    assert_eq!(
        s.resolve(None, None).unwrap().unwrap().mode,
        RemoteMode::Read
    );
}

fn display(p: &Path) -> String {
    p.display().to_string()
}

#[test]
fn bad_input_names_the_place_to_fix() {
    let s = setup();
    let p = s.project_config("[cache]\nremote = \"s3://b\"\nremote_mode = \"write\"\n");
    assert_eq!(
        s.resolve(None, None).unwrap_err().to_string(),
        format!(
            "failed to use {}:3:15: remote cache mode \"write\" is not \"read\" or \"readwrite\"",
            display(&p)
        )
    );

    s.project_config("[cache]\nremote = \"s3://b\"\nremote_mod = \"read\"\n");
    assert_eq!(
        s.resolve(None, None).unwrap_err().to_string(),
        format!(
            "failed to use {}:3: unknown key \"remote_mod\" in [cache]; expected one of remote, remote_mode, s3_endpoint, s3_region",
            display(&p)
        )
    );

    s.project_config("[cache]\nremote = \n");
    let err = s.resolve(None, None).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("failed to parse {}:2:", display(&p))),
        "{err}"
    );

    s.project_config("[cache]\nremote = \"gs://b\"\n");
    let err = s.resolve(None, None).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("failed to use the remote cache URL from {}", display(&p))
    );
    assert_eq!(
        std::error::Error::source(&err).unwrap().to_string(),
        "failed to parse remote cache URL \"gs://b\": unknown scheme \"gs\"; expected s3, webdav+http, webdav+https, http, https, file, grpc or grpcs"
    );

    assert_eq!(
        s.resolve(Some("s3://b"), Some("rw")).unwrap_err().to_string(),
        "failed to use --remote-cache-mode: remote cache mode \"rw\" is not \"read\" or \"readwrite\""
    );
}
