//! Naming how a command failed, from what it left behind: the class and one line a person
//! reads first (`AttributeError: 'function' object has no attribute …`), where in the stage's
//! own code, the exit code, and the tail of its stderr. A stage can name its failure itself
//! through `$HEDDLE_ERROR_FILE` (`{class, message, where}`, as stages/lib/heddle_stage.py
//! writes it); otherwise the last traceback-style line of stderr names it.
//!
//! The line is cut to its first line and [`MESSAGE_CAP`] characters: a library's message can be
//! kilobytes (onnxruntime lists every missing input name in one), and it is printed on the
//! terminal and kept in the record, where the whole of it would bury everything else. The whole
//! message and traceback stay in the stderr log the terminal names.

use std::path::Path;

use serde_json::Value;

use super::ExecOutcome;
use crate::record::ErrorClass;

/// The longest error line kept (characters), as heddle_stage.py's `MESSAGE_CAP`.
pub const MESSAGE_CAP: usize = 300;

/// A failed command as its status record states it.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub class: ErrorClass,
    pub error: String,
    /// The stage's own frame, `file.py:LINE in FUNCTION`, when its error file names one.
    pub at: Option<String>,
    pub exit_code: Option<i64>,
    pub stderr_tail: Option<String>,
}

/// How a command that ran ended, as a failure; `None` for a zero exit. `error_file` is the
/// stage's `$HEDDLE_ERROR_FILE`, `stderr_log` its stderr. `Cancelled` is classed `Interrupted`:
/// the caller records it as a skip, not a failure.
pub fn classify(outcome: &ExecOutcome, error_file: &Path, stderr_log: &Path) -> Option<Failure> {
    let tail = || super::output::tail_of(stderr_log);
    let failure = |class, error, exit_code, stderr_tail| Failure {
        class,
        error,
        at: None,
        exit_code,
        stderr_tail,
    };
    Some(match outcome {
        ExecOutcome::Exited(0) => return None,
        ExecOutcome::Exited(code) => {
            let t = tail();
            let (class, line, at) = error_line(error_file, t.as_deref())
                .unwrap_or_else(|| (ErrorClass::ExitCode, format!("exit code {code}"), None));
            Failure {
                at,
                ..failure(class, line, Some(*code), t)
            }
        }
        ExecOutcome::Signaled(s) => failure(
            ErrorClass::Signal,
            format!("killed by signal {s}"),
            None,
            tail(),
        ),
        ExecOutcome::OomKilled(code) => failure(
            ErrorClass::OutOfMemory,
            "killed by the out-of-memory killer".into(),
            Some(*code),
            tail(),
        ),
        ExecOutcome::TimedOut(d) => failure(
            ErrorClass::Timeout,
            format!("timed out after {}", humantime::format_duration(*d)),
            None,
            tail(),
        ),
        ExecOutcome::Cancelled => {
            failure(ErrorClass::Interrupted, "interrupted".into(), None, tail())
        }
    })
}

/// The error class, line and stage frame: the stage's own error file, else the last
/// traceback-style `Name: message` line of stderr (`AttributeError: …`,
/// `hailo_sdk_common.InferenceError: …`).
fn error_line(
    error_file: &Path,
    tail: Option<&str>,
) -> Option<(ErrorClass, String, Option<String>)> {
    if let Ok(text) = std::fs::read_to_string(error_file) {
        if let Ok(v) = serde_json::from_str::<Value>(&text) {
            let class = v.get("class").and_then(Value::as_str).unwrap_or("Error");
            let msg = v.get("message").and_then(Value::as_str).unwrap_or("");
            let at = v
                .get("where")
                .and_then(Value::as_str)
                .filter(|w| !w.trim().is_empty())
                .map(|w| cut(w.trim()));
            let short = class.rsplit('.').next().unwrap_or(class).to_string();
            let line = if msg.trim().is_empty() {
                short.clone()
            } else {
                cut(&format!("{short}: {msg}"))
            };
            return Some((ErrorClass::from(short), line, at));
        }
    }
    for line in tail?.lines().rev() {
        let line = line.trim();
        if let Some((name, msg)) = line.split_once(": ") {
            let short = name.rsplit('.').next().unwrap_or(name);
            let looks = !name.contains(' ')
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
                && (short.ends_with("Error")
                    || short.ends_with("Exception")
                    || short == "KeyboardInterrupt"
                    || short == "SystemExit");
            if looks {
                let class = ErrorClass::from(short.to_string());
                return Some((class, cut(&format!("{short}: {msg}")), None));
            }
        }
    }
    None
}

/// `text`'s first non-blank line, at most [`MESSAGE_CAP`] characters; `…` marks a cut (or
/// lines left out).
fn cut(text: &str) -> String {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or("");
    let more = lines.next().is_some();
    if first.chars().count() > MESSAGE_CAP {
        let kept: String = first.chars().take(MESSAGE_CAP - 1).collect();
        format!("{}\u{2026}", kept.trim_end())
    } else if more {
        format!("{first} \u{2026}")
    } else {
        first.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(class: &str) -> ErrorClass {
        ErrorClass::Stage(class.into())
    }

    #[test]
    fn error_lines_from_python_tracebacks() {
        let dir = tempfile::tempdir().unwrap();
        let none = dir.path().join("none.json");
        let tail = "Traceback (most recent call last):\n  File \"x.py\", line 3\nAttributeError: 'function' object has no attribute 'set_wraparound_loss'\n";
        assert_eq!(
            error_line(&none, Some(tail)).unwrap(),
            (
                stage("AttributeError"),
                "AttributeError: 'function' object has no attribute 'set_wraparound_loss'".into(),
                None
            )
        );
        let t2 = "hailo_sdk_common.InferenceError: graph execution error at conv2_1/act_op_1/pow\n";
        assert_eq!(
            error_line(&none, Some(t2)).unwrap().0,
            stage("InferenceError")
        );
        assert!(error_line(&none, Some("just some text: here\n")).is_none());
        let f = dir.path().join("e.json");
        std::fs::write(&f, r#"{"class":"pkg.SdkError","message":"boom"}"#).unwrap();
        assert_eq!(
            error_line(&f, None).unwrap(),
            (stage("SdkError"), "SdkError: boom".into(), None)
        );
        std::fs::write(
            &f,
            r#"{"class":"ValueError","message":"line one\nline two","where":"compare.py:57 in outputs"}"#,
        )
        .unwrap();
        assert_eq!(
            error_line(&f, None).unwrap(),
            (
                stage("ValueError"),
                "ValueError: line one \u{2026}".into(),
                Some("compare.py:57 in outputs".into())
            )
        );
    }

    #[test]
    fn a_long_message_is_cut_to_the_cap() {
        let long = format!("ValueError: {}", "x".repeat(10_000));
        let cut_line = cut(&long);
        assert_eq!(cut_line.chars().count(), MESSAGE_CAP);
        assert!(cut_line.starts_with("ValueError: xxx"));
        assert!(cut_line.ends_with('\u{2026}'));
        assert_eq!(cut("short"), "short");
    }

    #[test]
    fn a_non_zero_exit_without_an_error_line_is_named_by_its_code() {
        let dir = tempfile::tempdir().unwrap();
        let err = dir.path().join("stderr");
        std::fs::write(&err, "no traceback here\n").unwrap();
        let f = classify(&ExecOutcome::Exited(3), &dir.path().join("none"), &err).unwrap();
        assert_eq!(f.class, ErrorClass::ExitCode);
        assert_eq!(f.error, "exit code 3");
        assert_eq!(f.exit_code, Some(3));
        assert!(classify(&ExecOutcome::Exited(0), &dir.path().join("none"), &err).is_none());
    }
}
