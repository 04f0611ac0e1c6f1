//! How a run ended, in the words of its last line: allowed failures that left a whole sweep with
//! no result (a run can complete with nothing to show, and should not look like a success), and
//! what `--strict` counts. Also the `(double)` mark on a table line whose numbers come from a
//! test double.

use heddle_runner::record::{RunRecord, RunStatus, Status};

/// Any instance failed, allowed or not (`--strict` exits 1 then).
pub fn any_failed(rec: &RunRecord) -> bool {
    rec.instances
        .iter()
        .any(|(_, r)| r.status.status == Status::Failed)
}

/// Stages none of whose instances succeeded because of allowed failures: (stage, failed,
/// skipped, instances), in plan order.
fn eaten_sweeps(rec: &RunRecord) -> Vec<(String, usize, usize, usize)> {
    let mut stages: Vec<(String, usize, usize, usize, usize)> = Vec::new();
    for (_, r) in &rec.instances {
        let i = match stages.iter().position(|s| s.0 == r.stage) {
            Some(i) => i,
            None => {
                stages.push((r.stage.clone(), 0, 0, 0, 0));
                stages.len() - 1
            }
        };
        let s = &mut stages[i];
        s.3 += 1;
        match r.status.status {
            Status::Ok => s.4 += 1,
            Status::Failed if r.status.tolerated => s.1 += 1,
            Status::Skipped if r.status.tolerated => s.2 += 1,
            // A failure that was not allowed is the run's failure, reported as such.
            _ => s.4 += 1,
        }
    }
    stages
        .into_iter()
        .filter(|s| s.4 == 0 && s.1 > 0)
        .map(|(name, failed, skipped, n, _)| (name, failed, skipped, n))
        .collect()
}

/// The run's last line when its status line alone would mislead: a completed run whose allowed
/// failures ate a whole sweep, or a strict run that exits 1 on allowed failures.
pub fn last_line(rec: &RunRecord, strict: bool) -> Option<String> {
    if rec.status != RunStatus::Completed {
        return None;
    }
    let eaten = eaten_sweeps(rec);
    let strict_note = if strict && any_failed(rec) {
        "exit 1 (--strict)"
    } else {
        "exit 0; --strict makes any failure exit 1"
    };
    if !eaten.is_empty() {
        let parts: Vec<String> = eaten
            .iter()
            .map(|(s, f, _, n)| format!("{s} ({f} of {n} failed)"))
            .collect();
        return Some(format!(
            "warning: allowed failures left no result at all from {}: the run completed without \
             them ({strict_note})",
            parts.join(", ")
        ));
    }
    (strict && any_failed(rec)).then(|| {
        let n = rec
            .instances
            .iter()
            .filter(|(_, r)| r.status.status == Status::Failed)
            .count();
        format!("{n} allowed failure(s): exit 1 (--strict)")
    })
}

/// ` (double: numbers from a test double, not the vendor's tool)` for a report instance whose
/// inputs go back to a stage that ran against a test double, else nothing.
pub fn double_label(rec: &RunRecord, label: &str) -> &'static str {
    if heddle_report::double::downstream_of_doubles(rec).contains(label) {
        "  (double: numbers from a test double, not the vendor's tool)"
    } else {
        ""
    }
}

/// What to do when the engine cannot give a container the GPU a stage asked for.
pub const NO_GPU_HINT: &str = "this Docker Engine cannot give containers a GPU (no NVIDIA \
GPU, or no NVIDIA container toolkit): run without one by setting the stage's gpus to \"none\" \
(the DFC pipelines: --set gpus=none --set level=0, since the DFC optimises above level 0 only \
with a GPU), or place the stage on a host with a GPU (hosts.toml)";

/// Whether a stage's error is the engine refusing a GPU request (Docker says "could not select
/// device driver \"\" with capabilities: [[gpu]]" when no GPU runtime is installed).
pub fn no_gpu_runtime(error: &str) -> bool {
    error.contains("could not select device driver") && error.contains("gpu")
}
