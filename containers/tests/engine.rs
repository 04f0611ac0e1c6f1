//! Integration tests against the real Docker Engine (no mocks).
//!
//! Each test labels its containers `heddle.test=<unique>` so tests running in parallel can
//! count and clean up only their own.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use heddle_containers::test_images::{self, BUSYBOX, BUSYBOX_MOVED};
use heddle_containers::{
    ContainerError, ContainerOutcome, ContainerSpec, Engine, ImageIdentity, LogLine, Mount,
    NetworkMode, PullPolicy, Stream,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const TEST_LABEL: &str = "heddle.test";

struct Fixture {
    engine: Engine,
    image: String,
    label: String,
    dir: tempfile::TempDir,
}

/// `let f = fixture!();` opens every test: the running test's [`Fixture`], or a return from the
/// test after the skip notice when busybox-static is not installed. A macro because only a
/// macro can return from the test that calls it.
macro_rules! fixture {
    () => {
        match Fixture::new().await {
            Some(f) => f,
            None => return,
        }
    };
}

impl Fixture {
    /// The running test's fixture (libtest names the thread it runs a test on after the test;
    /// its containers are labelled with that name), or `None` after a loud notice when
    /// busybox-static is not installed.
    async fn new() -> Option<Fixture> {
        let test = std::thread::current()
            .name()
            .unwrap_or("engine-test")
            .to_string();
        if !test_images::busybox_available() {
            test_images::skip_notice(&test);
            return None;
        }
        static N: AtomicUsize = AtomicUsize::new(0);
        let engine = Engine::connect(None).await.expect("connect to the engine");
        let image = test_images::ensure_busybox(&engine)
            .await
            .expect("build the busybox test image");
        let label = format!(
            "{test}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        Some(Fixture {
            engine,
            image: image.id,
            label,
            dir: tempfile::tempdir().unwrap(),
        })
    }

    fn spec(&self, script: &str) -> ContainerSpec {
        ContainerSpec {
            image: self.image.clone(),
            cmd: vec!["/bin/sh".into(), "-c".into(), script.into()],
            labels: [(TEST_LABEL.to_string(), self.label.clone())].into(),
            stdout_log: self.dir.path().join("logs/stdout.log"),
            stderr_log: self.dir.path().join("logs/stderr.log"),
            ..Default::default()
        }
    }

    async fn run(&self, spec: &ContainerSpec) -> ContainerOutcome {
        self.engine
            .run(spec, None, CancellationToken::new())
            .await
            .expect("run the container")
    }

    /// What `reference` names on the engine now, which must resolve.
    async fn resolve(&self, reference: &str, policy: PullPolicy) -> ImageIdentity {
        self.engine.resolve_image(reference, policy).await.unwrap()
    }

    async fn count(&self) -> usize {
        self.engine
            .count_labelled((TEST_LABEL, &self.label))
            .await
            .unwrap()
    }

    /// A container that prints `started` and sleeps, run in a task; returns once it printed
    /// (and so exists).
    async fn start_sleeper(
        &self,
    ) -> tokio::task::JoinHandle<Result<ContainerOutcome, ContainerError>> {
        let spec = self.spec("echo started; sleep 30");
        let (tx, mut rx) = mpsc::unbounded_channel();
        let engine = self.engine.clone();
        let run =
            tokio::spawn(
                async move { engine.run(&spec, Some(tx), CancellationToken::new()).await },
            );
        wait_for_line(&mut rx, "started").await;
        assert_eq!(self.count().await, 1);
        run
    }

    fn stdout(&self) -> String {
        read(&self.dir.path().join("logs/stdout.log"))
    }

    fn stderr(&self) -> String {
        read(&self.dir.path().join("logs/stderr.log"))
    }
}

/// Fails unless the container stopped less than 5 s after `start`: on SIGTERM, not after a
/// grace period ran out.
#[track_caller]
fn assert_stopped_within_the_grace_period(start: Instant) {
    let took = start.elapsed();
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// A log for a failure message: a stream the container never wrote to has no file.
fn read_if_written(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|_| "(no log: nothing written)".into())
}

/// Waits on the channel for a line, so tests act on what the container did, not on sleeps.
async fn wait_for_line(rx: &mut mpsc::UnboundedReceiver<LogLine>, wanted: &str) {
    let found = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(l) = rx.recv().await {
            if l.line == wanted {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(found, Ok(true), "the container never printed {wanted:?}");
}

#[tokio::test]
async fn echo_goes_to_log_files_and_channel() {
    let f = fixture!();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut spec = f.spec("echo hello; echo oops >&2; printf 'no newline'");
    spec.env.insert("GREETING".into(), "hi there".into());
    let outcome = f
        .engine
        .run(&spec, Some(tx), CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(outcome, ContainerOutcome::Exited { code: 0 });
    assert_eq!(f.stdout(), "hello\nno newline");
    assert_eq!(f.stderr(), "oops\n");
    let mut lines = Vec::new();
    while let Some(l) = rx.recv().await {
        lines.push((l.stream, l.line));
    }
    assert!(
        lines.contains(&(Stream::Stdout, "hello".into())),
        "{lines:?}"
    );
    assert!(
        lines.contains(&(Stream::Stderr, "oops".into())),
        "{lines:?}"
    );
    assert!(
        lines.contains(&(Stream::Stdout, "no newline".into())),
        "{lines:?}"
    );
    assert_eq!(f.count().await, 0, "the container must be removed");
}

#[tokio::test]
async fn env_and_workdir_reach_the_command() {
    let f = fixture!();
    let mut spec = f.spec("echo \"$GREETING\"; pwd");
    spec.env.insert("GREETING".into(), "hi there".into());
    spec.workdir = Some("/tmp".into());
    assert_eq!(f.run(&spec).await, ContainerOutcome::Exited { code: 0 });
    assert_eq!(f.stdout(), "hi there\n/tmp\n");
}

#[cfg(unix)]
#[tokio::test]
async fn output_mount_receives_a_file_owned_by_the_given_user() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let f = fixture!();
    let out = f.dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut spec = f.spec("echo result > /out/answer.txt && id -u && id -g");
    spec.mounts.push(Mount {
        host: out.clone(),
        container: "/out".into(),
        read_only: false,
    });
    spec.user = Some("4321:8765".into());
    assert_eq!(f.run(&spec).await, ContainerOutcome::Exited { code: 0 });
    let written = out.join("answer.txt");
    assert_eq!(read(&written), "result\n");
    let meta = std::fs::metadata(&written).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (4321, 8765));
    assert_eq!(f.stdout(), "4321\n8765\n");
}

#[tokio::test]
async fn read_only_input_cannot_be_modified() {
    let f = fixture!();
    let input = f.dir.path().join("in");
    std::fs::create_dir(&input).unwrap();
    std::fs::write(input.join("data.txt"), "original\n").unwrap();
    // Runs as root inside: read-only must hold even for root.
    let mut spec = f.spec(
        "cat /in/data.txt; \
         if echo changed > /in/data.txt; then exit 10; fi; \
         if touch /in/new; then exit 11; fi; \
         exit 3",
    );
    spec.mounts.push(Mount {
        host: input.clone(),
        container: "/in".into(),
        read_only: true,
    });
    assert_eq!(f.run(&spec).await, ContainerOutcome::Exited { code: 3 });
    assert_eq!(f.stdout(), "original\n");
    assert!(
        f.stderr().contains("Read-only file system"),
        "{}",
        f.stderr()
    );
    assert_eq!(read(&input.join("data.txt")), "original\n");
    assert!(!input.join("new").exists());
}

#[tokio::test]
async fn network_none_has_only_loopback() {
    let f = fixture!();
    let mut spec = f.spec("ls /sys/class/net");
    spec.network = NetworkMode::None;
    assert_eq!(f.run(&spec).await, ContainerOutcome::Exited { code: 0 });
    assert_eq!(f.stdout().split_whitespace().collect::<Vec<_>>(), ["lo"]);

    // And bridge really is different, so the assertion above means something.
    spec.network = NetworkMode::Bridge;
    assert_eq!(f.run(&spec).await, ContainerOutcome::Exited { code: 0 });
    assert!(
        f.stdout().split_whitespace().any(|i| i != "lo"),
        "{}",
        f.stdout()
    );
}

#[tokio::test]
async fn nonzero_exit_reports_the_code() {
    let f = fixture!();
    assert_eq!(
        f.run(&f.spec("echo failing >&2; exit 7")).await,
        ContainerOutcome::Exited { code: 7 }
    );
    assert_eq!(f.stderr(), "failing\n");
    assert_eq!(f.count().await, 0);
}

#[tokio::test]
async fn timeout_stops_and_removes_the_container() {
    let f = fixture!();
    let mut spec = f.spec("echo started; sleep 30");
    spec.timeout = Some(Duration::from_millis(500));
    spec.stop_grace = Duration::from_secs(5);
    let start = Instant::now();
    assert_eq!(f.run(&spec).await, ContainerOutcome::TimedOut);
    // The init forwards SIGTERM, so the grace period is not used up.
    assert_stopped_within_the_grace_period(start);
    assert_eq!(f.stdout(), "started\n");
    assert_eq!(f.count().await, 0);
}

#[tokio::test]
async fn cancel_stops_and_removes_the_container() {
    let f = fixture!();
    let spec = f.spec("echo started; sleep 30");
    let cancel = CancellationToken::new();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let run = {
        let engine = f.engine.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move { engine.run(&spec, Some(tx), cancel).await })
    };
    wait_for_line(&mut rx, "started").await;
    let start = Instant::now();
    cancel.cancel();
    let outcome = run.await.unwrap().unwrap();
    assert_eq!(outcome, ContainerOutcome::Cancelled);
    assert_stopped_within_the_grace_period(start);
    assert_eq!(f.count().await, 0);
}

#[tokio::test]
async fn cancelled_before_start_creates_nothing() {
    let f = fixture!();
    let cancel = CancellationToken::new();
    cancel.cancel();
    let outcome = f.engine.run(&f.spec("true"), None, cancel).await.unwrap();
    assert_eq!(outcome, ContainerOutcome::Cancelled);
    assert_eq!(f.count().await, 0);
}

#[tokio::test]
async fn dropping_the_run_future_still_removes_the_container() {
    let f = fixture!();
    let run = f.start_sleeper().await;
    run.abort();
    assert!(run.await.unwrap_err().is_cancelled());
    // The guard's removal runs in the background; give it a bounded time.
    let deadline = Instant::now() + Duration::from_secs(15);
    while f.count().await != 0 {
        assert!(
            Instant::now() < deadline,
            "container left behind after drop"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn oom_is_reported() {
    let f = fixture!();
    // The shell keeps the whole substitution in memory: far over a 16 MiB limit.
    let mut spec = f.spec("x=$(head -c 268435456 /dev/zero | tr '\\0' a); echo survived");
    spec.memory = Some(16 << 20);
    let outcome = f.run(&spec).await;
    assert!(
        matches!(outcome, ContainerOutcome::OomKilled { .. }),
        "{outcome:?}, stdout {:?}, stderr {:?}",
        read_if_written(&f.dir.path().join("logs/stdout.log")),
        read_if_written(&f.dir.path().join("logs/stderr.log")),
    );
    assert_eq!(f.count().await, 0);
}

#[tokio::test]
async fn missing_image_is_image_missing() {
    let f = fixture!();
    let reference = "heddle-test/does-not-exist:never";
    let err = f
        .engine
        .resolve_image(reference, PullPolicy::Never)
        .await
        .unwrap_err();
    assert!(
        matches!(err, ContainerError::ImageMissing { .. }),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.contains(reference), "{message}");
    assert!(message.contains("docker load -i"), "{message}");
    assert!(message.contains("pull = \"missing\""), "{message}");
}

#[tokio::test]
async fn resolve_follows_a_moved_tag() {
    let f = fixture!();
    let moved = test_images::ensure_busybox_moved(&f.engine).await.unwrap();
    let latest = f.resolve(BUSYBOX, PullPolicy::Never).await;
    assert!(latest.id.starts_with("sha256:"), "{latest:?}");
    assert_ne!(latest.id, moved.id);

    let reference = format!("heddle-test/retag:{}", f.label);
    f.engine.tag_image(BUSYBOX, &reference).await.unwrap();
    let before = f.resolve(&reference, PullPolicy::Missing).await;
    assert_eq!(before.id, latest.id);
    f.engine.tag_image(BUSYBOX_MOVED, &reference).await.unwrap();
    let after = f.resolve(&reference, PullPolicy::Never).await;
    assert_eq!(after.id, moved.id);

    let spec = f.spec("cat /moved.txt");
    let mut spec = ContainerSpec {
        image: after.id,
        ..spec
    };
    spec.name = None;
    assert_eq!(f.run(&spec).await, ContainerOutcome::Exited { code: 0 });
    assert_eq!(f.stdout(), "moved\n");
}

#[tokio::test]
async fn remove_labelled_cleans_up_a_running_container() {
    let f = fixture!();
    let run = f.start_sleeper().await;
    let removed = f
        .engine
        .remove_labelled(Some((TEST_LABEL, &f.label)))
        .await
        .unwrap();
    assert_eq!(removed, 1);
    assert_eq!(f.count().await, 0);
    // The run notices its container is gone and returns promptly, one way or another.
    let result = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("run returns after its container is removed")
        .unwrap();
    eprintln!("run after gc: {result:?}");
}

#[tokio::test]
async fn unreachable_engine_says_what_to_fix() {
    // (address, what the cause says): a socket that is not there, a port nothing listens on.
    for (host, cause) in [
        ("unix:///nonexistent.sock", "is the daemon running"),
        ("tcp://127.0.0.1:1", "refused"),
    ] {
        let err = Engine::connect(Some(host)).await.unwrap_err();
        assert!(
            matches!(err, ContainerError::EngineUnreachable { .. }),
            "{err:?}"
        );
        // The headline and its one cause, as a record's one-line error joins them.
        let reason = std::error::Error::source(&err).expect("a cause");
        let message = format!("{err}: {reason}");
        let headline = format!("cannot reach the Docker Engine at {host}: ");
        assert!(message.starts_with(&headline), "{message}");
        assert!(message.contains(cause), "{message}");
        assert!(!message.contains('\n'), "{message}");
    }
}

#[tokio::test]
async fn engine_negotiates_an_older_api() {
    let f = fixture!();
    // What the engine itself says it speaks at most, asked through the docker CLI.
    let out = std::process::Command::new("docker")
        .args(["version", "--format", "{{.Server.APIVersion}}"])
        .output()
        .expect("the docker CLI");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let server = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let parse = |v: &str| -> (usize, usize) {
        let (major, minor) = v.split_once('.').unwrap_or_else(|| panic!("version {v}"));
        (major.parse().unwrap(), minor.parse().unwrap())
    };
    // Negotiation picks the older of bollard's own version and the engine's.
    let ours = bollard::API_DEFAULT_VERSION;
    let want = parse(&server).min((ours.major_version, ours.minor_version));
    assert_eq!(
        parse(&f.engine.api_version()),
        want,
        "engine speaks {server}"
    );
}

#[tokio::test]
async fn missing_executable_fails_and_leaves_nothing() {
    let f = fixture!();
    let mut spec = f.spec("");
    spec.cmd = vec!["/no/such/binary".into()];
    // The init execs the command, so this is an exit code (127, like a shell) with the reason
    // on stderr, not a start error.
    let outcome = f.run(&spec).await;
    assert_eq!(outcome, ContainerOutcome::Exited { code: 127 });
    assert!(f.stderr().contains("/no/such/binary"), "{}", f.stderr());
    assert_eq!(f.count().await, 0);
}

#[tokio::test]
async fn missing_mount_source_is_an_error_naming_the_image() {
    let f = fixture!();
    let mut spec = f.spec("true");
    spec.mounts.push(Mount {
        host: f.dir.path().join("absent"),
        container: "/in".into(),
        read_only: true,
    });
    let err = f
        .engine
        .run(&spec, None, CancellationToken::new())
        .await
        .unwrap_err();
    let cause = std::error::Error::source(&err).unwrap().to_string();
    assert!(cause.contains("bind source path does not exist"), "{cause}");
    assert!(matches!(err, ContainerError::Create { .. }), "{err:?}");
    assert!(err.to_string().contains(&f.image), "{err}");
    assert_eq!(f.count().await, 0);
}

#[tokio::test]
async fn devices_and_limits_reach_the_container() {
    let f = fixture!();
    let mut spec = f.spec(
        "test -c /dev/heddle-null && echo device; \
         df -k /dev/shm | tail -n 1 | awk '{print $2}'; \
         cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu.max 2>/dev/null | head -n 1; \
         cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/memory.max 2>/dev/null | head -n 1",
    );
    spec.devices = vec!["/dev/null:/dev/heddle-null:rw".into()];
    spec.shm_size = Some(heddle_containers::parse_size("32m").unwrap());
    spec.cpus = Some(1.5);
    spec.memory = Some(heddle_containers::parse_size("256m").unwrap());
    assert_eq!(f.run(&spec).await, ContainerOutcome::Exited { code: 0 });
    let out = f.stdout();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert_eq!(lines[0], "device");
    assert_eq!(lines[1], "32768", "shm size in KiB");
    // cgroup v1: quota per 100ms period; v2: "quota period".
    assert!(lines[2] == "150000" || lines[2] == "150000 100000", "{out}");
    assert_eq!(lines[3], (256u64 << 20).to_string());
}
