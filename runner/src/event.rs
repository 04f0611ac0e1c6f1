//! What a run tells whoever displays it ([`crate::run`]'s channel): the engine never touches
//! the terminal.

use crate::record::Status;

/// What the engine tells the reporter. The engine never touches the terminal.
#[derive(Debug, Clone)]
pub enum Event {
    Started {
        id: usize,
        label: String,
        reason: String,
    },
    Line {
        id: usize,
        line: String,
    },
    Finished {
        id: usize,
        label: String,
        status: Status,
        cached: bool,
        duration_ms: u64,
        error: Option<String>,
    },
    Message(String),
}
