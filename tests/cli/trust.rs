//! A cloned project cannot send the user's credentials where it likes: its
//! `.heddle/config.toml` and `.heddle/hosts.toml` are used only once the user ran `heddle
//! trust`, for the files as they were then. Each case points the project at a listener on
//! 127.0.0.1 that this test runs, and checks what reached it.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::{assert_contains, assert_lacks, Project};

/// A TCP listener that records every connection's bytes and answers each request with an
/// HTTP 404 (a miss for S3; an unreadable answer for gRPC and Docker, which costs a warning).
struct Listener {
    port: u16,
    seen: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Listener {
    fn start() -> Listener {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let seen: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let record = seen.clone();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(mut conn) = conn else { return };
                let record = record.clone();
                std::thread::spawn(move || {
                    let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
                    let mut got = Vec::new();
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = conn.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        got.extend_from_slice(&buf[..n]);
                        if got.windows(4).any(|w| w == b"\r\n\r\n") {
                            let _ = conn.write_all(
                                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                            );
                            break;
                        }
                    }
                    record.lock().unwrap().push(got);
                });
            }
        });
        Listener { port, seen }
    }

    fn connections(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// Whether a connection arrives within 20 s. heddle may have connected and exited before
    /// the accept thread ran (the kernel completes the handshake from its backlog), and a
    /// connection is counted only once its request is read, so the count can lag heddle's
    /// exit on a loaded machine.
    fn was_connected(&self) -> bool {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while self.connections() == 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.connections() > 0
    }

    fn received(&self) -> String {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect()
    }
}

const PIPELINE: &str = "[pipeline]\nname = \"t\"\n[stages.a]\nrun = \"echo a > {{ out.o }}\"\noutputs = { o = \"o.txt\" }\n";

/// The user's credentials, as a shell would hold them, with values this test looks for.
fn with_credentials(mut c: std::process::Command, home: &std::path::Path) -> std::process::Command {
    c.env("HOME", home)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("HEDDLE_REMOTE_CACHE")
        .env_remove("AWS_ENDPOINT_URL")
        .env_remove("AWS_ENDPOINT_URL_S3")
        .env_remove("AWS_PROFILE")
        .env("AWS_ACCESS_KEY_ID", "AKIACANARYKEYID")
        .env("AWS_SECRET_ACCESS_KEY", "canary-secret-access-key")
        .env("AWS_SESSION_TOKEN", "canary-session-token")
        .env(
            "HEDDLE_REMOTE_HEADERS",
            "authorization=Bearer canary-bearer-token",
        );
    c
}

fn heddle(p: &Project, home: &std::path::Path, args: &[&str]) -> crate::support::Run {
    with_credentials(p.cmd(args), home).output().unwrap().into()
}

/// An S3 remote the project names (`s3_endpoint` on a listener): `plan` and `run` never
/// contact it, and say why once; after `heddle trust` the same `plan` does, with the user's
/// keys; an edit to the file lapses the trust.
#[test]
fn a_project_remote_gets_no_credentials_until_trusted() {
    let evil = Listener::start();
    let home = tempfile::tempdir().unwrap();
    let p = Project::with_pipeline(PIPELINE);
    let config = format!(
        "[cache]\nremote = \"s3://bucket/p\"\ns3_endpoint = \"http://127.0.0.1:{}\"\ns3_region = \"us-east-1\"\n",
        evil.port
    );
    p.file(".heddle/config.toml", &config);

    let plan = heddle(&p, home.path(), &["plan", "p.toml"]).ok();
    assert_eq!(
        plan.stderr,
        format!(
            "warning: not using the remote cache settings (s3://bucket/p read) in .heddle/config.toml: this project is not trusted to choose where your credentials go\n  = help: read it, then `heddle trust --root .` to use it\n"
        )
    );
    let run = heddle(&p, home.path(), &["run", "p.toml", "--progress", "plain"]).ok();
    assert_contains(
        &run.stderr,
        "not trusted to choose where your credentials go",
    );
    assert_eq!(evil.connections(), 0, "{}", evil.received());

    let trust = heddle(&p, home.path(), &["trust"]).ok();
    assert_contains(&trust.stdout, "trusted ");
    assert_contains(&trust.stdout, ": .heddle/config.toml as they are now");
    // A fresh cache, so the plan asks the remote for `a`.
    std::fs::remove_dir_all(&p.cache).unwrap();
    let plan = heddle(&p, home.path(), &["plan", "p.toml"]).ok();
    assert_lacks(&plan.stderr, "not trusted");
    assert!(evil.was_connected(), "a trusted remote is asked");
    assert_contains(&evil.received(), "canary-session-token");
    assert_contains(&evil.received(), "AKIACANARYKEYID");

    let before = evil.connections();
    p.file(".heddle/config.toml", &format!("{config}# pulled\n"));
    let plan = heddle(&p, home.path(), &["plan", "p.toml"]).ok();
    assert_contains(
        &plan.stderr,
        "in .heddle/config.toml: it changed since you trusted this project",
    );
    assert_eq!(
        evil.connections(),
        before,
        "an edited file is untrusted again"
    );

    heddle(&p, home.path(), &["trust", "--revoke"]).ok();
    p.file(".heddle/config.toml", &config);
    heddle(&p, home.path(), &["plan", "p.toml"]).ok();
    assert_eq!(evil.connections(), before, "a revoked trust is no trust");
}

/// The user's own remote (`HEDDLE_REMOTE_CACHE` and `AWS_ENDPOINT_URL`) cannot be pointed
/// elsewhere by the project's `s3_endpoint`, nor made writable by its `remote_mode`.
#[test]
fn a_project_cannot_redirect_the_users_own_remote() {
    let evil = Listener::start();
    let mine = Listener::start();
    let home = tempfile::tempdir().unwrap();
    let p = Project::with_pipeline(PIPELINE);
    p.file(
        ".heddle/config.toml",
        &format!(
            "[cache]\ns3_endpoint = \"http://127.0.0.1:{}\"\nremote_mode = \"readwrite\"\n",
            evil.port
        ),
    );
    let run = with_credentials(
        p.cmd(&["run", "p.toml", "--progress", "plain"]),
        home.path(),
    )
    .env("HEDDLE_REMOTE_CACHE", "s3://bucket/p")
    .env("HEDDLE_REMOTE_CACHE_MODE", "read")
    .env(
        "AWS_ENDPOINT_URL",
        format!("http://127.0.0.1:{}", mine.port),
    )
    .env("AWS_REGION", "us-east-1")
    .output()
    .unwrap();
    let run: crate::support::Run = run.into();
    let run = run.ok();
    assert_contains(
        &run.stderr,
        "not trusted to choose where your credentials go",
    );
    assert_eq!(evil.connections(), 0, "{}", evil.received());
    assert!(mine.was_connected(), "the user's remote is used");
    assert_lacks(&mine.received(), "PUT ");
}

/// A project may always turn the remote down: `remote = "off"` needs no trust, and says
/// nothing (here it turns off the remote of the user's own config file).
#[test]
fn a_project_may_turn_the_remote_off_without_trust() {
    let mine = Listener::start();
    let p = Project::with_pipeline(PIPELINE);
    p.file(".heddle/config.toml", "[cache]\nremote = \"off\"\n");
    let home2 = tempfile::tempdir().unwrap();
    p.file(
        "home-config/heddle/config.toml",
        &format!("[cache]\nremote = \"grpc://127.0.0.1:{}\"\n", mine.port),
    );
    let before = mine.connections();
    let plan: crate::support::Run = with_credentials(p.cmd(&["plan", "p.toml"]), home2.path())
        .env("XDG_CONFIG_HOME", p.path("home-config"))
        .output()
        .unwrap()
        .into();
    assert_eq!(plan.ok().stderr, "", "turning down needs no warning");
    assert_eq!(
        mine.connections(),
        before,
        "the project turned the user's remote off"
    );
}

/// A gRPC (REAPI) remote the project names, where `HEDDLE_REMOTE_HEADERS` would go: not one
/// connection before `heddle trust`, and the plan asks it after.
#[test]
fn a_project_grpc_remote_is_not_contacted_until_trusted() {
    let evil = Listener::start();
    let home = tempfile::tempdir().unwrap();
    let p = Project::with_pipeline(PIPELINE);
    p.file(
        ".heddle/config.toml",
        &format!("[cache]\nremote = \"grpc://127.0.0.1:{}\"\n", evil.port),
    );
    for cmd in [
        &["plan", "p.toml"][..],
        &["run", "p.toml", "--progress", "plain"],
    ] {
        let r = heddle(&p, home.path(), cmd).ok();
        assert_contains(&r.stderr, "not trusted to choose where your credentials go");
    }
    heddle(&p, home.path(), &["cache", "push"]).code(2);
    assert_eq!(evil.connections(), 0, "{}", evil.received());
    heddle(&p, home.path(), &["trust"]).ok();
    std::fs::remove_dir_all(&p.cache).unwrap();
    heddle(&p, home.path(), &["plan", "p.toml"]).ok();
    assert!(evil.was_connected(), "a trusted remote is asked");
}

/// The project's hosts.toml names an engine: before `heddle trust` it is not contacted (the
/// stage then has no host), after it is.
#[test]
fn a_project_engine_is_not_contacted_until_trusted() {
    let evil = Listener::start();
    let home = tempfile::tempdir().unwrap();
    let p = Project::with_pipeline(
        "[pipeline]\nname = \"t\"\n[resources]\ngpu = 1\n[stages.a]\nimage = \"heddle-test/busybox:1\"\nresources = { gpu = 1 }\nrun = \"true\"\n",
    );
    p.file(
        ".heddle/hosts.toml",
        &format!(
            "[hosts.evil]\ndocker = \"tcp://127.0.0.1:{}\"\npools = {{ gpu = 1 }}\n",
            evil.port
        ),
    );
    // Without the project's hosts the stage is planned on the default engine, as with none.
    let plan = heddle(&p, home.path(), &["plan", "p.toml"]).ok();
    assert_eq!(
        plan.stderr,
        "warning: not using the engines it names in .heddle/hosts.toml: this project is not trusted to choose where your credentials go\n  = help: read it, then `heddle trust --root .` to use it\n"
    );
    assert_lacks(&plan.stdout, "(on evil)");
    assert_eq!(evil.connections(), 0, "{}", evil.received());
    heddle(&p, home.path(), &["trust"]).ok();
    let plan = heddle(&p, home.path(), &["plan", "p.toml"]);
    assert_lacks(&plan.stderr, "not trusted");
    assert!(evil.was_connected(), "a trusted engine is asked");
}
