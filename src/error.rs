//! The binary's one error type, its exit codes and how it is printed.
//!
//! Every command returns [`Error`]; `main` prints it with [`render`] and exits with
//! [`Error::exit_code`]. Library errors are kept whole (`#[source]` or `transparent`), so the
//! renderer can print the headline and then each cause on its own line, as cargo does:
//!
//! ```text
//! error: cannot open the cache at /x/cache
//!   caused by: failed to create directory /x/cache/objects
//!   caused by: Not a directory (os error 20)
//! ```
//!
//! Exit codes (documented in README.md): 0 success, 1 a stage failed (or a check found a
//! difference), 2 invalid pipeline, usage or environment (the cache, the Docker Engine, a file
//! that cannot be read or written), 130 interrupted.

use std::fmt::Write as _;
use std::path::PathBuf;

use heddle_runner::diag::Diagnostics;
use heddle_runner::model::LoadError;

pub const EXIT_OK: i32 = 0;
pub const EXIT_STAGE_FAILED: i32 = 1;
pub const EXIT_INVALID: i32 = 2;
pub const EXIT_INTERRUPTED: i32 = 130;

/// Everything a command can fail with. Each variant names the thing it failed on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A pipeline or stage definition that does not validate. Diagnostics print their own
    /// `error:` lines with file:line:col and a snippet.
    #[error("{0}")]
    Invalid(Diagnostics),
    /// The command line asks for something that cannot be done (a bad `--set`, an unknown
    /// stage, no pipeline to run); the message says what to change.
    #[error("{0}")]
    Usage(String),
    /// A `--set` the pipeline does not accept (a param it does not declare, a value of the
    /// wrong type); the message says which and what is accepted.
    #[error(transparent)]
    Set(LoadError),
    #[error("cannot read pipeline {}", path.display())]
    ReadPipeline {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open the cache at {}", dir.display())]
    OpenCache {
        dir: PathBuf,
        #[source]
        source: heddle_cache::CacheError,
    },
    #[error(transparent)]
    Cache(#[from] heddle_cache::CacheError),
    #[error(transparent)]
    Prepare(#[from] heddle_runner::prepare::PrepareError),
    #[error(transparent)]
    OutLock(#[from] heddle_runner::out_lock::OutLockError),
    #[error(transparent)]
    Lock(#[from] heddle_runner::lock::LockError),
    /// `heddle status` without a lock file to compare with.
    #[error(transparent)]
    NoLock(heddle_runner::lock::LockError),
    #[error(transparent)]
    Record(#[from] heddle_runner::record::RecordError),
    #[error(transparent)]
    StageLib(#[from] heddle_runner::stage_lib::StageLibError),
    /// Boxed, as large as bollard's error is (it carries TLS causes).
    #[error(transparent)]
    Engine(Box<heddle_containers::ContainerError>),
    /// A `[dfc]` setting that cannot work (README, "Bring your DFC").
    #[error(transparent)]
    DfcConfig(#[from] crate::dfc::config::DfcConfigError),
    /// No DFC for the DFC stages, or a route whose parts do not fit together.
    #[error(transparent)]
    DfcRoute(#[from] crate::dfc::RouteError),
    /// Route (b)'s image could not be built.
    #[error(transparent)]
    DfcRecipe(#[from] crate::dfc::recipe::RecipeError),
    /// The shared cache's configuration (an unknown scheme, a bad mode, an unreadable config).
    #[error(transparent)]
    Remote(#[from] crate::remote_cache::RemoteSetupError),
    /// `heddle cache push` could not upload.
    #[error("failed to push to remote cache {remote}")]
    Push {
        remote: String,
        #[source]
        source: heddle_runner::shared_cache::SharedCacheError,
    },
    /// `heddle cache verify --remote` could not reach the remote.
    #[error("failed to verify remote cache {remote}: it is unavailable")]
    RemoteUnavailable {
        remote: String,
        #[source]
        source: Box<heddle_remote::RemoteError>,
    },
    /// A command that needs a shared cache, with none configured.
    #[error("no remote cache configured")]
    NoRemote,
    /// A file the command reads or writes (an entry, a report, a scaffold file).
    #[error("{op} {}", path.display())]
    Io {
        /// What was attempted: "cannot read", "cannot write", "failed to create", ...
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A logbook entry that does not parse, or states a tolerance that is not one: one line,
    /// the file then the parser's `line N: ...`, as a compiler prints a location. Not a
    /// `source`, so no renderer prints it twice.
    #[error("{}: {problem}", path.display())]
    BadEntry {
        path: PathBuf,
        problem: heddle_report::entry::EntryError,
    },
    #[error("params in the front matter are not JSON")]
    EntryParams(#[source] serde_json::Error),
    /// `heddle lock` needs every instance cached.
    #[error("{} instances are not in the cache ({}); run the pipeline first", .0.len(), .0.join(", "))]
    NotCached(Vec<String>),
    /// A report stage's `*.plots.json` output that is not a plots file: the stage's fault.
    #[error("{src} is not a plots file")]
    NotPlots {
        src: String,
        #[source]
        source: serde_json::Error,
    },
    /// A report stage's plot that cannot be drawn: the stage's fault.
    #[error("failed to draw the report")]
    DrawReport(#[source] heddle_report::html::HtmlError),
    /// A logbook entry whose pipeline cannot be rerun here (an image or engine missing, a
    /// pipeline that no longer loads): says which entry before the cause.
    #[error("cannot verify {}: its pipeline {pipeline_file} cannot run here", entry.display())]
    CannotVerify {
        entry: PathBuf,
        pipeline_file: String,
        #[source]
        source: Box<Error>,
    },
    /// `heddle cache keygen` could not make or write this machine's signing key.
    #[error(transparent)]
    SigningKey(#[from] heddle_remote::KeyError),
    /// `heddle trust` could not record (or forget) a trust.
    #[error(transparent)]
    Trust(#[from] crate::trust::TrustError),
    /// A logbook entry whose params its own pipeline does not accept (an unknown param, a
    /// value of the wrong type, one that would reach the shell unsafely): nothing ran.
    #[error("cannot verify {}: its params are not ones its pipeline {pipeline_file} accepts", entry.display())]
    BadEntryParams {
        entry: PathBuf,
        pipeline_file: String,
        #[source]
        source: Box<Error>,
    },
    /// A blocking task that panicked (a bug in heddle, not in the pipeline).
    #[error("a background task failed")]
    Task(#[source] tokio::task::JoinError),
}

impl From<LoadError> for Error {
    fn from(e: LoadError) -> Self {
        match e {
            LoadError::Invalid(d) => Error::Invalid(d),
            LoadError::Read { path, source } => Error::ReadPipeline { path, source },
            e @ (LoadError::UnknownParam { .. } | LoadError::WrongType { .. }) => Error::Set(e),
        }
    }
}

impl From<heddle_containers::ContainerError> for Error {
    fn from(e: heddle_containers::ContainerError) -> Self {
        Error::Engine(Box::new(e))
    }
}

impl From<heddle_runner::diag::Diagnostic> for Error {
    fn from(d: heddle_runner::diag::Diagnostic) -> Self {
        Error::Invalid(Diagnostics(vec![d]))
    }
}

impl From<Diagnostics> for Error {
    fn from(d: Diagnostics) -> Self {
        Error::Invalid(d)
    }
}

impl Error {
    /// The documented exit code (see the module comment).
    pub fn exit_code(&self) -> i32 {
        match self {
            // `heddle lock` before a run: nothing failed, the user has a step to take.
            Error::NotCached(_) => EXIT_INVALID,
            // A report stage wrote what the report cannot draw: the stage's fault.
            Error::NotPlots { .. } | Error::DrawReport(_) => EXIT_STAGE_FAILED,
            Error::CannotVerify { source, .. } => source.exit_code(),
            _ => EXIT_INVALID,
        }
    }

    /// What to do about it, printed after the causes.
    fn help(&self) -> Option<&'static str> {
        match self {
            Error::NoLock(_) => Some(
                "`heddle run` writes it after a successful run; `heddle lock` writes it from the cache",
            ),
            Error::NoRemote => Some(
                "pass --remote-cache URL, set HEDDLE_REMOTE_CACHE, or set `[cache] remote` in .heddle/config.toml",
            ),
            _ => None,
        }
    }
}

/// The text `main` prints to stderr: `error: <headline>`, then `  caused by: <cause>` for each
/// link of the chain ([`heddle_cache::causes`], which also gives records their one-line
/// errors), then a help line if there is one.
pub fn render(e: &Error) -> String {
    let causes = heddle_cache::causes(e);
    let mut out = match e {
        // Diagnostics carry their own `error:` lines.
        Error::Invalid(d) => d.to_string(),
        _ => format!("error: {}", causes[0]),
    };
    for text in &causes[1..] {
        // A nested diagnostic keeps its lines; only its own `error: ` lead is dropped.
        let _ = write!(
            out,
            "\n  caused by: {}",
            text.strip_prefix("error: ").unwrap_or(text)
        );
    }
    if let Some(help) = e.help() {
        let _ = write!(out, "\n  = help: {help}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(kind: std::io::ErrorKind, text: &str) -> std::io::Error {
        std::io::Error::new(kind, text)
    }

    #[test]
    fn each_cause_is_a_line() {
        let e = Error::OpenCache {
            dir: "/c".into(),
            source: heddle_cache::CacheError::Io {
                op: "create directory",
                path: "/c/objects".into(),
                source: io(std::io::ErrorKind::PermissionDenied, "Permission denied"),
            },
        };
        assert_eq!(
            render(&e),
            "error: cannot open the cache at /c\n  caused by: failed to create directory /c/objects\n  caused by: Permission denied"
        );
        assert_eq!(e.exit_code(), EXIT_INVALID);
    }

    #[test]
    fn a_transparent_error_shows_its_causes_once() {
        let e = Error::Lock(heddle_runner::lock::LockError::Write {
            path: "p.lock".into(),
            source: io(std::io::ErrorKind::PermissionDenied, "Permission denied"),
        });
        assert_eq!(
            render(&e),
            "error: failed to write lock file p.lock\n  caused by: Permission denied"
        );
    }

    #[test]
    fn not_cached_exits_2_as_nothing_failed() {
        let e = Error::NotCached(vec!["a".into(), "b[k=1]".into()]);
        assert_eq!(
            render(&e),
            "error: 2 instances are not in the cache (a, b[k=1]); run the pipeline first"
        );
        assert_eq!(e.exit_code(), EXIT_INVALID);
    }

    #[test]
    fn a_wrapped_error_keeps_the_exit_code_of_its_cause() {
        let e = Error::CannotVerify {
            entry: "e.md".into(),
            pipeline_file: "p.toml".into(),
            source: Box::new(Error::DrawReport(heddle_report::html::HtmlError::Plot {
                title: "loss".into(),
                message: "no axes".into(),
            })),
        };
        assert_eq!(
            render(&e),
            "error: cannot verify e.md: its pipeline p.toml cannot run here\n  caused by: failed to draw the report\n  caused by: failed to draw the plot `loss`: no axes"
        );
        assert_eq!(e.exit_code(), EXIT_STAGE_FAILED);
    }

    #[test]
    fn help_follows_the_causes() {
        let e = Error::NoLock(heddle_runner::lock::LockError::Read {
            path: "p.lock".into(),
            source: io(std::io::ErrorKind::NotFound, "not found"),
        });
        assert_eq!(
            render(&e),
            "error: failed to read lock file p.lock\n  caused by: not found\n  = help: `heddle run` writes it after a successful run; `heddle lock` writes it from the cache"
        );
    }
}
