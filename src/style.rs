//! Colours for the words that say how an instance ended (`ok`, `cached`, `FAILED`), decided
//! once per run: `--color always|never` wins, else `NO_COLOR` (set and not empty, see
//! no-color.org) turns them off, else they are on when the stream is a terminal. Only the word
//! is painted, so columns line up the same with and without colour.

use std::io::IsTerminal;
use std::sync::OnceLock;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    /// Colour on a terminal, unless NO_COLOR is set.
    Auto,
    Always,
    Never,
}

/// Whether stdout and stderr are painted.
static PAINT: OnceLock<(bool, bool)> = OnceLock::new();

/// Decide for this process (call once, before anything is printed).
pub fn init(choice: ColorChoice) {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let on = |terminal: bool| match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => !no_color && terminal,
    };
    let _ = PAINT.set((
        on(std::io::stdout().is_terminal()),
        on(std::io::stderr().is_terminal()),
    ));
}

/// The stream a word is printed to.
#[derive(Debug, Clone, Copy)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// How an instance (or a run) ended, as a word's colour.
#[derive(Debug, Clone, Copy)]
pub enum Tone {
    Ok,
    Cached,
    Failed,
}

/// `word` in its tone's colour when `stream` is painted, else as it is.
pub fn paint(stream: Stream, tone: Tone, word: &str) -> String {
    let (out, err) = PAINT.get().copied().unwrap_or((false, false));
    let on = match stream {
        Stream::Stdout => out,
        Stream::Stderr => err,
    };
    if !on {
        return word.to_string();
    }
    let code = match tone {
        Tone::Ok => "32",       // green
        Tone::Cached => "36",   // cyan
        Tone::Failed => "1;31", // bold red
    };
    format!("\x1b[{code}m{word}\x1b[0m")
}
