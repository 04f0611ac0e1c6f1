//! How an instance ends. Every path through an instance's life — skipped, interrupted, failed
//! before it started, failed, succeeded, served from the cache, or a panic — ends in
//! [`conclude`], so its record, the event the display hears and what its dependents read
//! cannot disagree.

use crate::exec::failure::Failure;
use crate::model::Stage;
use crate::plan::Instance;
use crate::record::{Cause, ErrorClass, InstanceRecord, Status, StatusRecord};

use super::{Event, Inst};

/// A record with nothing filled in yet but the stage.
pub(super) fn empty_record(stage: &Stage) -> InstanceRecord {
    InstanceRecord {
        stage: stage.name.clone(),
        report: stage.settings.report,
        deps: Vec::new(),
        status: StatusRecord::ok("", Default::default()),
        cached: false,
        remote: false,
        remote_signer: None,
        cache_key: None,
        reason: String::new(),
        why: None,
        duration_ms: 0,
        start_ms: 0,
        end_ms: 0,
        attempts: 0,
        inputs: Default::default(),
        outputs: Default::default(),
        output_paths: Default::default(),
        env_identity: None,
        image: None,
        command: None,
        logs: None,
        key_parts: None,
        facts: None,
        host: None,
        job: None,
    }
}

/// End instance `i.id` with `status`: it goes into the record, and the display hears of it (a
/// skip without an error of its own is shown with its reason, `skipped: X did not succeed`).
pub(super) fn conclude(
    i: Inst<'_>,
    mut record: InstanceRecord,
    status: StatusRecord,
) -> InstanceRecord {
    let error = match (&status.error, status.status) {
        (Some(e), _) => Some(match &status.at {
            Some(at) => format!("{e} ({at})"),
            None => e.clone(),
        }),
        (None, Status::Skipped) => Some(record.reason.clone()),
        (None, _) => None,
    };
    let _ = i.sh.events.send(Event::Finished {
        id: i.id,
        label: status.label.clone(),
        status: status.status,
        cached: record.cached,
        duration_ms: record.duration_ms,
        error,
    });
    record.status = status;
    record
}

/// Skipped because `cause` did not succeed; never started.
pub(super) fn skipped(i: Inst<'_>, cause: Cause, tolerated: bool) -> InstanceRecord {
    let inst = i.inst;
    let mut record = empty_record(i.stage);
    record.reason = format!("skipped: {} did not succeed", cause.label);
    let status = StatusRecord::skipped(&inst.label, inst.matrix.clone(), cause, tolerated);
    conclude(i, record, status)
}

/// heddle itself failed on this instance (its task panicked): a failure, not a hang.
pub(super) fn internal_failure(i: Inst<'_>, what: &str) -> InstanceRecord {
    let inst = i.inst;
    let status = StatusRecord::failed(
        &inst.label,
        inst.matrix.clone(),
        ErrorClass::InternalError,
        format!("InternalError: heddle failed on this instance ({what}); please report it"),
    );
    conclude(i, empty_record(i.stage), status)
}

/// The cause every instance an interrupt stops names.
pub(super) fn interrupt_cause() -> Cause {
    Cause {
        label: "interrupt".into(),
        error: Some("run interrupted".into()),
    }
}

/// Interrupted while waiting for resources, a job slot or the key: a skip, never started.
pub(super) fn interrupted_before_start(inst: &Instance) -> StatusRecord {
    StatusRecord {
        error_class: Some(ErrorClass::Interrupted),
        error: Some("run interrupted before it started".into()),
        ..StatusRecord::skipped(&inst.label, inst.matrix.clone(), interrupt_cause(), false)
    }
}

/// A command that ran and failed.
pub(super) fn failed(inst: &Instance, f: Failure) -> StatusRecord {
    StatusRecord {
        exit_code: f.exit_code,
        at: f.at,
        stderr_tail: f.stderr_tail,
        ..StatusRecord::failed(&inst.label, inst.matrix.clone(), f.class, f.error)
    }
}

/// A command stopped by an interrupt: a skip, not a stage failure, since it did not finish.
pub(super) fn cancelled(inst: &Instance, f: Failure) -> StatusRecord {
    StatusRecord {
        status: Status::Skipped,
        cause: Some(interrupt_cause()),
        ..failed(inst, f)
    }
}

/// A failure heddle met around the command (a sandbox, the engine, a resource), no exit code.
pub(super) fn heddle_error(inst: &Instance, error: String) -> StatusRecord {
    StatusRecord::failed(
        &inst.label,
        inst.matrix.clone(),
        ErrorClass::HeddleError,
        error,
    )
}
