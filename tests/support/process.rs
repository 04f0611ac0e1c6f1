//! Processes the tests start or look for: whether a pid lives, signals, and waiting (bounded)
//! for a condition, a pid file or an exit. Limits here only keep a regression from hanging the
//! suite; no test asserts how fast something happened through them.

use std::path::Path;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// Whether process `pid` (as a pid file holds it) lives: heddle's own check, which counts a
/// zombie as dead (this machine's PID 1 does not reap orphans).
pub fn alive(pid: &str) -> bool {
    pid.trim()
        .parse()
        .is_ok_and(heddle_runner::liveness::pid_alive)
}

/// kill(2) with `sig` to `pid`.
pub fn signal(pid: u32, sig: i32) {
    extern "C" {
        fn kill(pid: i32, sig: i32) -> i32;
    }
    // SAFETY: kill(2) has no memory effects; a stale pid only makes it fail.
    unsafe {
        kill(pid as i32, sig);
    }
}

pub const SIGHUP: i32 = 1;
pub const SIGINT: i32 = 2;
pub const SIGKILL: i32 = 9;
pub const SIGTERM: i32 = 15;

/// Poll `done` every 20 ms until it holds; fails naming `what` after `limit`.
pub fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let t = Instant::now();
    while !done() {
        assert!(t.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The trimmed, non-empty text of `pidfile` once a stage wrote it; fails if `child` (the heddle
/// running that stage) ended without it being written, or after 20 s. Each poll reads the file
/// after asking whether the child ended: a stage may write it and heddle end between two polls.
pub fn wait_for_pid(pidfile: &Path, child: &mut Child) -> String {
    let read = || {
        std::fs::read_to_string(pidfile)
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    let mut pid = String::new();
    wait_for(
        &format!("a pid in {}", pidfile.display()),
        Duration::from_secs(20),
        || {
            let ended = child.try_wait().ok().flatten();
            pid = read();
            match ended {
                Some(status) if pid.is_empty() => {
                    panic!(
                        "heddle ended ({status}) before {} was written",
                        pidfile.display()
                    )
                }
                _ => !pid.is_empty(),
            }
        },
    );
    pid
}

/// Wait for `child` to end, failing (and killing it) if it takes longer than `limit`: the
/// property is "ends at all", the limit only keeps a regression from hanging the suite.
pub fn wait_ended(child: &mut Child, limit: Duration, what: &str) -> ExitStatus {
    let t = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: heddle still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Fails if `pid` is still alive a few seconds from now (and kills it, so nothing is left
/// behind for the next test).
pub fn assert_gone(pid: &str, what: &str) {
    let t = Instant::now();
    while alive(pid) {
        if t.elapsed() > Duration::from_secs(10) {
            signal(pid.parse().unwrap(), SIGKILL);
            panic!("{what}: process {pid} outlived its stage");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A running heddle stopped with SIGTERM when dropped, so a failing test leaves none behind.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            signal(self.0.id(), SIGTERM);
            let _ = self.0.wait();
        }
    }
}

/// A child's stderr read line by line on a thread as it arrives, so a test can wait for the
/// line that proves a state ("waiting for `hailo` …") instead of sleeping and hoping the
/// child got there; the pipe is drained meanwhile, so the child never blocks on it.
pub struct StderrLines {
    text: std::sync::Arc<std::sync::Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl StderrLines {
    /// Takes `child`'s piped stderr.
    pub fn watch(child: &mut Child) -> StderrLines {
        use std::io::BufRead;
        let stderr = child.stderr.take().expect("stderr must be piped");
        let text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let sink = text.clone();
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let mut t = sink.lock().unwrap();
                t.push_str(&line);
                t.push('\n');
            }
        });
        StderrLines {
            text,
            reader: Some(reader),
        }
    }

    /// Waits until a line contains `needle`; fails if `child` ends first, or after `limit`.
    pub fn wait_for(&self, needle: &str, child: &mut Child, limit: Duration) {
        let t = Instant::now();
        loop {
            if self.text.lock().unwrap().contains(needle) {
                return;
            }
            if let Some(status) = child.try_wait().unwrap() {
                // The line may have arrived between the check and the exit.
                std::thread::sleep(Duration::from_millis(50));
                let text = self.text.lock().unwrap();
                assert!(
                    text.contains(needle),
                    "ended ({status}) without printing {needle:?}:\n{text}"
                );
                return;
            }
            assert!(
                t.elapsed() < limit,
                "no {needle:?} after {limit:?}:\n{}",
                self.text.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Everything the child wrote, once its stderr closed (call after it ended).
    pub fn finish(mut self) -> String {
        if let Some(r) = self.reader.take() {
            r.join().unwrap();
        }
        let text = self.text.lock().unwrap();
        text.clone()
    }
}
