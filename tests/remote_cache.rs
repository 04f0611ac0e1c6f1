//! The shared cache through the binary: two cache dirs (two engineers) sharing one bucket on a
//! real S3 server (moto), WebDAV server (nginx) or REAPI server (BuildGrid), started by the test
//! on 127.0.0.1. What the
//! remote serves is verified; a remote that breaks costs one warning and local work, never a
//! wrong result or a failed run.

#[path = "../remote/tests/common/mod.rs"]
mod servers;
use crate::support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use servers::{
    boto, s3_env, start_buildgrid, start_buildgrid_mtls, start_moto, start_nginx, BlobStorage,
    Server, BUCKET,
};
use support::process::wait_for;
use support::records::instances;
use support::{assert_contains, assert_lacks};
use support::{instance, Project, Run};

/// Two stages, a file and a folder output: enough to move blobs, a tree manifest and entries.
const PIPELINE: &str = include_str!("fixtures/remote_cache/shared.toml");

/// One engineer: a project with the pipeline and a cache dir of their own.
fn engineer() -> Project {
    let p = Project::new();
    p.file("pipelines/shared.toml", PIPELINE);
    p
}

/// `heddle ARGS` in `p`, configured for `remote` through the environment.
fn remote_cmd(p: &Project, remote: &Remote, args: &[&str]) -> Command {
    let mut c = p.cmd(args);
    c.envs(remote.env.iter().map(|(k, v)| (k, v)))
        .env("HEDDLE_REMOTE_CACHE", &remote.url);
    c
}

fn with_remote(p: &Project, remote: &Remote, args: &[&str]) -> Run {
    remote_cmd(p, remote, args).output().unwrap().into()
}

/// `heddle ARGS` in `p` as a writer: readwrite mode (read is the default), entries signed
/// with the key [`writer`] made.
fn as_writer(p: &Project, remote: &Remote, args: &[&str]) -> Run {
    remote_cmd(p, remote, args)
        .env("HEDDLE_REMOTE_CACHE_MODE", "readwrite")
        .output()
        .unwrap()
        .into()
}

/// Make `p` a writer (`heddle cache keygen`); the line a reader's trust file needs.
fn writer(p: &Project) -> String {
    let r = p.heddle(&["cache", "keygen", "--name", "writer"]).ok();
    r.stdout.lines().last().unwrap().to_string()
}

/// `p` trusts the writer whose line this is: the project's trust file lists it, and the user
/// trusts the project (a project's trusted-writers counts only then, docs/scale-out.md).
fn trusting(p: &Project, line: &str) {
    p.file(".heddle/trusted-writers", &format!("{line}\n"));
    p.trust();
}

struct Remote {
    server: Server,
    url: String,
    env: Vec<(String, String)>,
}

fn s3(prefix: &str) -> Option<Remote> {
    let server = start_moto()?;
    let env = s3_env(server.port).into_iter().collect();
    Some(Remote {
        url: format!("s3://{BUCKET}/{prefix}"),
        env,
        server,
    })
}

fn webdav() -> Option<Remote> {
    let server = start_nginx()?;
    Some(Remote {
        url: format!("webdav+http://127.0.0.1:{}/heddle", server.port),
        env: Vec::new(),
        server,
    })
}

fn reapi() -> Option<Remote> {
    let server = start_buildgrid(BlobStorage::Memory)?;
    Some(Remote {
        url: format!("grpc://127.0.0.1:{}", server.port),
        env: Vec::new(),
        server,
    })
}

fn cached_flags(record: &serde_json::Value, label: &str) -> (bool, bool) {
    let i = instance(record, label);
    (
        i["cached"].as_bool().unwrap_or(false),
        i["remote"].as_bool().unwrap_or(false),
    )
}

fn outputs(p: &Project) -> Vec<(PathBuf, Vec<u8>)> {
    let mut v = Vec::new();
    for rel in [
        "out/shared/make/w.bin",
        "out/shared/make/d/sub/a.txt",
        "out/shared/use/r.txt",
    ] {
        v.push((rel.into(), std::fs::read(p.path(rel)).unwrap()));
    }
    v
}

fn second_engineer_executes_nothing(remote: Remote) {
    let a = engineer();
    let line = writer(&a);
    as_writer(&a, &remote, &["run", "--progress", "plain"]).ok();
    let rec = a.last_record();
    assert_eq!(cached_flags(&rec, "make"), (false, false));

    let b = engineer();
    trusting(&b, &line);
    let plan = with_remote(&b, &remote, &["plan"]).ok();
    assert!(
        plan.stdout.contains("make") && plan.stdout.matches("(remote)").count() == 2,
        "{}",
        plan.stdout
    );
    let run = with_remote(&b, &remote, &["run", "--progress", "plain"]).ok();
    assert_lacks(&run.stderr, "warning");
    let rec = b.last_record();
    assert_eq!(cached_flags(&rec, "make"), (true, true));
    assert_eq!(cached_flags(&rec, "use"), (true, true));
    assert_eq!(outputs(&a), outputs(&b));
    assert_eq!(b.read("out/shared/use/r.txt"), "weightsone");
}

#[test]
fn s3_second_cache_dir_executes_nothing_and_gets_identical_outputs() {
    let Some(remote) = s3("team") else { return };
    second_engineer_executes_nothing(remote);
}

#[test]
fn webdav_second_cache_dir_executes_nothing_and_gets_identical_outputs() {
    let Some(remote) = webdav() else { return };
    second_engineer_executes_nothing(remote);
}

#[test]
fn reapi_second_cache_dir_executes_nothing_and_gets_identical_outputs() {
    let Some(remote) = reapi() else { return };
    second_engineer_executes_nothing(remote);
}

/// A matrix of `n` instances, each writing a file of its own size and bytes, and a gather: a
/// cold no-op of it fetches `n + 1` entries, many of them at once.
fn wide(n: usize) -> String {
    let values: Vec<String> = (0..n).map(|i| i.to_string()).collect();
    format!(
        r#"[pipeline]
name = "wide"

[stages.m]
matrix = {{ i = [{}] }}
run = "seq {{{{ matrix.i }}}} > {{{{ out.o }}}}; echo {{{{ matrix.i }}}} >> {{{{ out.o }}}}"
outputs = {{ o = "o.txt" }}

[stages.g]
inputs = {{ all = "m[*].o" }}
run = "cat $(find {{{{ in.all.dir }}}} -name o.txt) | wc -l > {{{{ out.n }}}}"
outputs = {{ n = "n.txt" }}
"#,
        values.join(", ")
    )
}

/// Every file under `dir`, by path relative to it, with its bytes.
fn tree(dir: &std::path::Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut files = std::collections::BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                let rel = path.strip_prefix(dir).unwrap().to_path_buf();
                files.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

/// A second engineer's first run of a wide matrix, with an empty cache of their own: every
/// entry comes from the remote, fetched many at a time, each counted once, every instance a
/// remote hit and every output byte-identical to the writer's. `-j 1`: how many entries are
/// fetched at once does not depend on how many stages may run at once.
fn a_cold_noop_fetches_every_entry_of_a_wide_matrix(remote: Remote) {
    const N: usize = 300;
    let a = Project::new();
    a.file("pipelines/wide.toml", &wide(N));
    let line = writer(&a);
    let full = as_writer(&a, &remote, &["run", "--progress", "plain"]).ok();
    assert_contains(&full.stderr, &format!("0 fetched, {} uploaded", N + 1));

    let b = Project::new();
    b.file("pipelines/wide.toml", &wide(N));
    trusting(&b, &line);
    let run = with_remote(&b, &remote, &["run", "--progress", "plain", "-j", "1"]).ok();
    assert_lacks(&run.stderr, "warning");
    assert_contains(&run.stderr, &format!("{} fetched, 0 uploaded", N + 1));
    let all = instances(&b.last_record());
    assert_eq!(all.len(), N + 1);
    for (label, i) in &all {
        assert_eq!(
            (i["cached"].as_bool(), i["remote"].as_bool()),
            (Some(true), Some(true)),
            "{label}"
        );
    }
    let (ours, theirs) = (tree(&b.path("out")), tree(&a.path("out")));
    assert_eq!(ours.len(), N + 1);
    assert!(ours == theirs, "the outputs differ from the writer's");
    assert_eq!(
        b.read("out/wide/g/n.txt").trim(),
        ((N * (N - 1)) / 2 + N).to_string()
    );
}

#[test]
fn s3_cold_noop_of_a_wide_matrix_fetches_every_entry() {
    let Some(remote) = s3("wide") else { return };
    a_cold_noop_fetches_every_entry_of_a_wide_matrix(remote);
}

#[test]
fn webdav_cold_noop_of_a_wide_matrix_fetches_every_entry() {
    let Some(remote) = webdav() else { return };
    a_cold_noop_fetches_every_entry_of_a_wide_matrix(remote);
}

#[test]
fn reapi_cold_noop_of_a_wide_matrix_fetches_every_entry() {
    let Some(remote) = reapi() else { return };
    a_cold_noop_fetches_every_entry_of_a_wide_matrix(remote);
}

#[test]
fn a_corrupted_blob_in_the_bucket_is_recomputed_never_served() {
    let Some(remote) = s3("corrupt") else { return };
    let a = engineer();
    let line = writer(&a);
    as_writer(&a, &remote, &["run", "--progress", "plain"]).ok();
    // Every blob in the bucket gets one flipped byte, behind heddle's back.
    boto(
        &remote.server,
        &format!(
            "for o in s3.list_objects_v2(Bucket='{BUCKET}', Prefix='corrupt/cas/')['Contents']:\n    \
             b = bytearray(s3.get_object(Bucket='{BUCKET}', Key=o['Key'])['Body'].read())\n    \
             b[0] ^= 1\n    \
             s3.put_object(Bucket='{BUCKET}', Key=o['Key'], Body=bytes(b))"
        ),
    );
    let b = engineer();
    trusting(&b, &line);
    let run = with_remote(&b, &remote, &["run", "--progress", "plain"]).ok();
    assert_eq!(
        run.stderr.matches("failed verification").count(),
        1,
        "{}",
        run.stderr
    );
    let rec = b.last_record();
    assert_eq!(cached_flags(&rec, "make"), (false, false));
    assert_eq!(b.read("out/shared/use/r.txt"), "weightsone");
}

#[test]
fn a_server_killed_mid_run_costs_one_warning_and_the_run_completes() {
    let Some(mut remote) = s3("killed") else {
        return;
    };
    let p = Project::new();
    // The first stage waits for the test to kill the server, so the kill lands mid-run.
    let gate = p.path("go");
    p.file(
        "pipelines/shared.toml",
        &PIPELINE.replace(
            "printf 'weights'",
            &format!(
                "touch {}.started; while [ ! -e {} ]; do sleep 0.05; done; printf 'weights'",
                gate.display(),
                gate.display()
            ),
        ),
    );
    writer(&p);
    let child = remote_cmd(&p, &remote, &["run", "--progress", "plain"])
        .env("HEDDLE_REMOTE_CACHE_MODE", "readwrite")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = PathBuf::from(format!("{}.started", gate.display()));
    wait_for("the first stage to start", Duration::from_secs(60), || {
        started.exists()
    });
    remote.server.kill();
    std::fs::write(&gate, "").unwrap();
    let run: Run = child.wait_with_output().unwrap().into();
    let run = run.ok();
    assert_eq!(
        run.stderr.matches("is unavailable").count(),
        1,
        "{}",
        run.stderr
    );
    assert_eq!(p.read("out/shared/use/r.txt"), "weightsone");
}

#[test]
fn cache_push_uploads_what_a_lock_file_names() {
    let Some(remote) = s3("pushed") else { return };
    let a = engineer();
    // A run with no remote: everything is local only.
    a.run("pipelines/shared.toml", &[]).ok();
    assert!(a.path("pipelines/shared.lock").exists());
    let line = writer(&a);
    let push = as_writer(
        &a,
        &remote,
        &["cache", "push", "--lock", "pipelines/shared.lock"],
    )
    .ok();
    assert_contains(&push.stdout, "pushed 2 actions");

    let b = engineer();
    trusting(&b, &line);
    with_remote(&b, &remote, &["run", "--progress", "plain"]).ok();
    let rec = b.last_record();
    assert_eq!(cached_flags(&rec, "make"), (true, true));
    assert_eq!(cached_flags(&rec, "use"), (true, true));
}

#[test]
fn read_mode_never_uploads() {
    let Some(remote) = s3("readonly") else { return };
    let a = engineer();
    let line = writer(&a);
    // The flag wins over the environment's readwrite.
    as_writer(
        &a,
        &remote,
        &["run", "--progress", "plain", "--remote-cache-mode", "read"],
    )
    .ok();
    let b = engineer();
    trusting(&b, &line);
    with_remote(&b, &remote, &["run", "--progress", "plain"]).ok();
    assert_eq!(cached_flags(&b.last_record(), "make"), (false, false));
}

#[test]
fn a_grpcs_remote_whose_ca_file_cannot_be_read_is_a_user_error() {
    let p = engineer();
    let r: Run = p
        .cmd(&["run", "--remote-cache", "grpcs://127.0.0.1:1/main"])
        .env("HEDDLE_REMOTE_CA_FILE", p.path("no-such-ca.pem"))
        .output()
        .unwrap()
        .into();
    let r = r.code(2);
    assert!(
        r.stderr.contains(&format!(
            "failed to read the CA certificates {} (HEDDLE_REMOTE_CA_FILE) for remote cache grpcs://127.0.0.1:1/main",
            p.path("no-such-ca.pem").display()
        )),
        "{}",
        r.stderr
    );
}

/// A `grpcs://` remote on a BuildGrid that requires a client certificate its CA signed, with
/// the CA file and, with `client`, that certificate and key in the environment.
fn reapi_mtls(client: bool) -> Option<Remote> {
    let server = start_buildgrid_mtls()?;
    let tls = server.dir.path().join("tls");
    let file = |name: &str| tls.join(name).display().to_string();
    let mut env = vec![("HEDDLE_REMOTE_CA_FILE".to_string(), file("ca.crt"))];
    if client {
        env.push(("HEDDLE_REMOTE_CLIENT_CERT".to_string(), file("client.crt")));
        env.push(("HEDDLE_REMOTE_CLIENT_KEY".to_string(), file("client.key")));
    }
    Some(Remote {
        url: format!("grpcs://127.0.0.1:{}/team", server.port),
        env,
        server,
    })
}

#[test]
fn reapi_with_a_client_certificate_second_cache_dir_executes_nothing() {
    let Some(remote) = reapi_mtls(true) else {
        return;
    };
    second_engineer_executes_nothing(remote);
}

/// Without the certificate the server closes the connection: one warning, the work done here.
#[test]
fn reapi_without_the_client_certificate_a_server_requires_costs_one_warning() {
    let Some(remote) = reapi_mtls(false) else {
        return;
    };
    let p = engineer();
    let run = with_remote(&p, &remote, &["run", "--progress", "plain"]).ok();
    assert_eq!(run.stderr.matches("warning").count(), 1, "{}", run.stderr);
    assert_eq!(cached_flags(&p.last_record(), "make"), (false, false));
    assert_eq!(p.read("out/shared/use/r.txt"), "weightsone");
}

#[test]
fn a_client_certificate_without_its_key_or_for_a_remote_without_tls_is_a_user_error() {
    let p = engineer();
    let run = |url: &str, vars: &[(&str, PathBuf)]| -> Run {
        let mut c = p.cmd(&["run", "--remote-cache", url]);
        c.envs(vars.iter().map(|(k, v)| (k, v)));
        c.output().unwrap().into()
    };
    let cert = ("HEDDLE_REMOTE_CLIENT_CERT", p.path("client.crt"));
    let key = ("HEDDLE_REMOTE_CLIENT_KEY", p.path("client.key"));
    let r = run("grpcs://127.0.0.1:1/main", std::slice::from_ref(&cert)).code(2);
    assert_contains(&r.stderr, "failed to use a client certificate for remote cache grpcs://127.0.0.1:1/main: HEDDLE_REMOTE_CLIENT_CERT is set but HEDDLE_REMOTE_CLIENT_KEY is not");
    let r = run("grpcs://127.0.0.1:1/main", std::slice::from_ref(&key)).code(2);
    assert_contains(
        &r.stderr,
        "HEDDLE_REMOTE_CLIENT_KEY is set but HEDDLE_REMOTE_CLIENT_CERT is not",
    );
    for url in ["grpc://127.0.0.1:1/main", "webdav+http://127.0.0.1:1/x"] {
        let r = run(url, &[cert.clone(), key.clone()]).code(2);
        assert_contains(&r.stderr, &format!("failed to use a client certificate for remote cache {url}: HEDDLE_REMOTE_CLIENT_CERT and HEDDLE_REMOTE_CLIENT_KEY are set but this remote does not use TLS, so the certificate would not be sent: use https (webdav+https://, an https:// S3 endpoint) or grpcs://"));
    }
    // Both set, the certificate missing: named.
    let r = run("grpcs://127.0.0.1:1/main", &[cert.clone(), key.clone()]).code(2);
    assert_contains(
        &r.stderr,
        &format!(
            "failed to read the client certificate {} (HEDDLE_REMOTE_CLIENT_CERT) for remote cache grpcs://127.0.0.1:1/main",
            cert.1.display()
        ),
    );
}

#[test]
fn a_remote_header_without_a_name_is_a_user_error_that_does_not_print_it() {
    let p = engineer();
    let r: Run = p
        .cmd(&["run", "--remote-cache", "grpc://127.0.0.1:1/main"])
        .env("HEDDLE_REMOTE_HEADERS", "s3cr3t-token")
        .output()
        .unwrap()
        .into();
    let r = r.code(2);
    assert_contains(&r.stderr, "failed to read the headers for remote cache grpc://127.0.0.1:1/main: an entry of HEDDLE_REMOTE_HEADERS has no `=`: expected name=value");
    assert_lacks(&r.stderr, "s3cr3t");
}

#[test]
fn a_header_written_the_http_way_is_refused_without_printing_the_token() {
    let p = engineer();
    // `Name: value` with base64 padding: the text before the first `=` is the token.
    let r: Run = p
        .cmd(&["plan", "--remote-cache", "grpc://127.0.0.1:1/main"])
        .env(
            "HEDDLE_REMOTE_HEADERS",
            "Authorization: Bearer s3cr3tT0ken==",
        )
        .output()
        .unwrap()
        .into();
    let r = r.code(2);
    assert_contains(&r.stderr, "failed to read the headers for remote cache grpc://127.0.0.1:1/main: an entry of HEDDLE_REMOTE_HEADERS does not start with a header name (its text is not shown); expected name=value, e.g. authorization=Bearer <token>");
    assert_lacks(&r.all().to_lowercase(), "s3cr3tt0ken");
}

#[test]
fn a_webdav_password_holding_a_slash_never_reaches_a_message() {
    let p = engineer();
    for command in [&["plan"][..], &["run", "--progress", "plain"][..]] {
        let r: Run = p
            .cmd(command)
            .env(
                "HEDDLE_REMOTE_CACHE",
                "webdav+http://alice:pa55/w0rd@127.0.0.1:1/heddle",
            )
            .output()
            .unwrap()
            .into();
        let r = r.code(2);
        assert_contains(
            &r.stderr,
            "failed to use the remote cache URL from HEDDLE_REMOTE_CACHE",
        );
        assert_contains(&r.stderr, "write a `/` in the user or password as %2F");
        assert_lacks(&r.all(), "pa55");
        assert_lacks(&r.all(), "w0rd");
    }
    // Written as %2F, it works: the server is down, so the run warns once, without it.
    let r: Run = p
        .cmd(&["run", "--progress", "plain"])
        .env(
            "HEDDLE_REMOTE_CACHE",
            "webdav+http://alice:pa55%2Fw0rd@127.0.0.1:1/heddle",
        )
        .output()
        .unwrap()
        .into();
    let r = r.ok();
    assert_contains(
        &r.stderr,
        "remote cache webdav+http://127.0.0.1:1/heddle is unavailable",
    );
    assert_lacks(&r.all(), "pa55");
    assert_lacks(&r.all(), "w0rd");
}

#[test]
fn an_unknown_remote_scheme_is_a_user_error() {
    let p = engineer();
    let r = p
        .cmd(&["run", "--remote-cache", "gopher://x/y"])
        .output()
        .unwrap();
    let r: Run = r.into();
    let r = r.code(2);
    assert_contains(&r.stderr, "gopher://x/y");
}
