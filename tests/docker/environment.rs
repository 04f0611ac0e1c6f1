//! Environment problems (an absent image, an unreachable engine, a socket the user may not open)
//! stop a run before any stage starts, with exit 2: an absent image on one line, an engine
//! that cannot be reached on two (where, then why and what to check).

use crate::support::assert_contains;
use crate::support::fill;
use crate::support::Project;
use crate::unprivileged::Unprivileged;
use crate::{unique, BUSYBOX};

/// A host stage that leaves a mark, then a container stage that cannot start.
fn doomed(p: &Project, container_keys: &str) {
    p.file(
        "p.toml",
        &fill(
            include_str!("fixtures/doomed.toml"),
            &[
                ("MARK", &p.path("mark").display().to_string()),
                ("CONTAINER_KEYS", container_keys),
            ],
        ),
    );
}

#[test]
fn a_missing_image_or_engine_stops_the_run_before_any_stage() {
    let (_d, _gc) = engine!();
    let p = Project::new();
    let absent = format!("heddle-test/{}:v1", unique("absent"));
    doomed(&p, &format!("image = \"{absent}\""));
    let r = p.heddle(&["run", "p.toml"]).code(2);
    assert_eq!(
        r.stderr.trim().lines().count(),
        1,
        "one line:\n{}",
        r.stderr
    );
    assert!(r.stderr.contains(&absent), "{}", r.stderr);
    assert_contains(&r.stderr, "docker load");
    assert!(!p.path("mark").exists(), "a stage ran before the check");
    // `plan` only reports: a pipeline for an image this machine lacks still validates.
    let r = p.heddle(&["plan", "p.toml"]).ok();
    assert!(
        r.stdout.contains(&format!("image {absent} unavailable")),
        "{}",
        r.stdout
    );
    assert_contains(&r.stdout, "docker load");
    assert!(!p.path("mark").exists(), "plan ran a stage");

    doomed(
        &p,
        &format!("image = \"{BUSYBOX}\"\ndocker_host = \"unix:///nonexistent.sock\""),
    );
    let r = p.run("p.toml", &[]).code(2);
    assert_eq!(
        r.stderr.trim(),
        "error: cannot reach the Docker Engine at unix:///nonexistent.sock\n  caused by: socket \
         /nonexistent.sock does not exist — is the daemon running? set DOCKER_HOST or the \
         stage's docker_host if it listens elsewhere"
    );
    assert!(!p.path("mark").exists(), "a stage ran before the check");
    assert!(!p.path("out").exists());

    // A socket the user may not open (checked when the test can drop to a user without the
    // socket's group).
    match Unprivileged::get() {
        Some(u) if u.socket_mode & 0o006 == 0 => {
            doomed(&p, &format!("image = \"{BUSYBOX}\""));
            let r = u.heddle(&p, None, &["run", "p.toml"]).code(2);
            assert_eq!(
                r.stderr.trim().lines().count(),
                2,
                "the engine, then why:\n{}",
                r.stderr
            );
            assert_contains(&r.stderr, "permission denied");
            assert_contains(&r.stderr, "docker group");
            assert!(!p.path("mark").exists(), "a stage ran before the check");
        }
        _ => eprintln!(
            "(unreadable socket case not checked: needs root, setpriv and a private socket)"
        ),
    }
}
