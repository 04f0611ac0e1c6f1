//! Which containers a run created, from the engine's own `docker events` stream: a cache hit or
//! a restore must create none.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::support::records::run_id;
use crate::support::{docker, Project, Run};
use crate::{unique, BUSYBOX};

/// Watches the engine's container `create` events from now on.
pub(crate) struct Creates {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Creates {
    pub(crate) fn watch() -> Creates {
        // A second of slack for clock rounding: events are matched to a run by label anyway.
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
            - 1.0;
        let mut child = Command::new("docker")
            .args(["events", "--since", &format!("{since:.3}")])
            .args(["--filter", "type=container", "--filter", "event=create"])
            .args(["--format", "{{json .Actor.Attributes}}"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("docker events");
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Creates { child, lines }
    }

    /// The labels of every container created since `watch`. Events arrive in order, so once a
    /// marker container created now shows up, every earlier create has been seen.
    pub(crate) fn finish(self) -> Vec<BTreeMap<String, String>> {
        let marker = unique("marker");
        let id = docker::cli(&[
            "create",
            "--label",
            &format!("heddle.test.marker={marker}"),
            BUSYBOX,
            "true",
        ]);
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .expect("docker events never reported the marker container");
            let attrs: BTreeMap<String, String> = serde_json::from_str(&line).unwrap_or_default();
            if attrs.get("heddle.test.marker") == Some(&marker) {
                break;
            }
            seen.push(attrs);
        }
        docker::cli(&["rm", "-f", &id]);
        seen
    }

    /// Instance labels of the containers run `run_id` created, sorted.
    pub(crate) fn of_run(creates: &[BTreeMap<String, String>], run_id: &str) -> Vec<String> {
        let mut v: Vec<String> = creates
            .iter()
            .filter(|a| a.get("heddle.run").map(String::as_str) == Some(run_id))
            .map(|a| a.get("heddle.instance").cloned().unwrap_or_default())
            .collect();
        v.sort();
        v
    }
}

impl Drop for Creates {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One `heddle run p.toml` (which must succeed) watched through the engine's events.
pub(crate) struct WatchedRun {
    pub(crate) run: Run,
    pub(crate) record: Value,
    /// Instance labels of the containers this run created, sorted.
    pub(crate) created: Vec<String>,
}

impl WatchedRun {
    pub(crate) fn id(&self) -> String {
        run_id(&self.record)
    }
}

/// Runs `p.toml` in `p`, expecting success, and says which containers the run created.
pub(crate) fn run_watched(p: &Project) -> WatchedRun {
    let watch = Creates::watch();
    let run = p.run("p.toml", &[]).ok();
    let record = p.last_record();
    let created = Creates::of_run(&watch.finish(), &run_id(&record));
    WatchedRun {
        run,
        record,
        created,
    }
}
