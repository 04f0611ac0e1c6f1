//! The Docker guard: a test that needs the engine (or an image) skips loudly without it, unless
//! `HEDDLE_REQUIRE_DOCKER=1` (tests/all.sh sets it when it built the test images), which makes
//! the absence a failure.

use std::process::{Command, Stdio};

/// Report that `test` cannot run because of `why`: a panic under `HEDDLE_REQUIRE_DOCKER=1`,
/// else a loud notice. Callers return after it.
pub fn skip(test: &str, why: &str) {
    if std::env::var("HEDDLE_REQUIRE_DOCKER").as_deref() == Ok("1") {
        panic!("{test}: HEDDLE_REQUIRE_DOCKER=1 but {why}");
    }
    eprintln!(
        "\n*** SKIPPED {test}: {why}; set HEDDLE_REQUIRE_DOCKER=1 to make this a failure ***\n"
    );
}

/// The running test's name (`module::test`), which libtest gives the thread it runs the test
/// on: what a skip notice names.
pub fn current_test() -> String {
    std::thread::current()
        .name()
        .unwrap_or("a docker test")
        .to_string()
}

/// Whether the docker CLI reaches an engine.
pub fn engine_reachable() -> bool {
    quiet(&["info", "--format", "{{.ServerVersion}}"])
}

/// Whether the engine has `image`.
pub fn image_present(image: &str) -> bool {
    quiet(&["image", "inspect", image])
}

/// True when the engine and `image` are there; otherwise [`skip`] with the reason (and the
/// script that builds the image) and false.
pub fn image_ready(test: &str, image: &str, build: &str) -> bool {
    if !engine_reachable() {
        skip(test, "no Docker Engine is reachable");
        return false;
    }
    if !image_present(image) {
        skip(test, &format!("image {image} is missing (bash {build})"));
        return false;
    }
    true
}

/// Run the docker CLI, panicking with its stderr on failure; returns trimmed stdout.
pub fn cli(args: &[&str]) -> String {
    let o = Command::new("docker").args(args).output().expect("docker");
    assert!(
        o.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn quiet(args: &[&str]) -> bool {
    Command::new("docker")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The local engine exposed on 127.0.0.1 over TCP (a byte proxy to its unix socket), as a
/// remote engine would be: heddle cannot bind-mount there, so the sandbox goes through the
/// archive API. Returns the `tcp://` address; the proxy lives as long as the test process.
#[cfg(unix)]
pub fn engine_over_tcp() -> String {
    use std::os::unix::net::UnixStream;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for tcp in listener.incoming().flatten() {
            let Ok(unix) = UnixStream::connect("/var/run/docker.sock") else {
                continue;
            };
            let (mut t2, mut u2) = (tcp.try_clone().unwrap(), unix.try_clone().unwrap());
            let (mut t1, mut u1) = (tcp, unix);
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut t1, &mut u1);
                let _ = u1.shutdown(std::net::Shutdown::Write);
            });
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut u2, &mut t2);
                let _ = t2.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    format!("tcp://{addr}")
}
