//! Diagnostics that point at a line: every user-input error in a pipeline or stage definition
//! carries the file, the 1-based line and column, the offending line and a caret, like cargo's.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// One source file as the user wrote it, kept so errors can quote it.
#[derive(Debug, Clone)]
pub struct Source {
    pub path: PathBuf,
    pub text: String,
}

impl Source {
    pub fn new(path: impl Into<PathBuf>, text: impl Into<String>) -> Self {
        Source {
            path: path.into(),
            text: text.into(),
        }
    }

    /// 1-based line and column (in characters) of a byte offset.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let before = &self.text[..floor_char_boundary(&self.text, offset)];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
        let col = before[line_start..].chars().count() + 1;
        (line, col)
    }

    pub fn error(&self, span: Option<Range<usize>>, message: impl Into<String>) -> Diagnostic {
        Diagnostic::at(self, span, message)
    }
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// A user-facing error with a position. Rendered as:
/// ```text
/// error: unknown stage `mak` in input `text`
///   --> pipelines/example.toml:12:18
///    |
/// 12 | inputs = { text = "mak.text" }
///    |                   ^^^^^^^^^^
///    = help: known stages: make, count
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub path: PathBuf,
    pub line: usize,
    pub col: usize,
    pub message: String,
    /// The quoted source line and the caret width, when a span is known.
    pub snippet: Option<(String, usize)>,
    pub help: Option<String>,
}

impl Diagnostic {
    pub fn at(src: &Source, span: Option<Range<usize>>, message: impl Into<String>) -> Self {
        let (line, col, snippet) = match span {
            Some(span) => {
                let (line, col) = src.line_col(span.start);
                let text = src.text.lines().nth(line - 1).unwrap_or("").to_string();
                let width = {
                    let end = floor_char_boundary(&src.text, span.end.min(src.text.len()));
                    let start = floor_char_boundary(&src.text, span.start.min(end));
                    let seg = &src.text[start..end];
                    let first = seg.lines().next().unwrap_or("");
                    first.chars().count().max(1)
                };
                (line, col, Some((text, width)))
            }
            None => (1, 1, None),
        };
        Diagnostic {
            path: src.path.clone(),
            line,
            col,
            message: message.into(),
            snippet,
            help: None,
        }
    }

    /// An error about a file as a whole (missing, unreadable).
    pub fn file(path: &Path, message: impl Into<String>) -> Self {
        Diagnostic {
            path: path.to_path_buf(),
            line: 1,
            col: 1,
            message: message.into(),
            snippet: None,
            help: None,
        }
    }

    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
}

impl Diagnostic {
    /// The diagnostic as a warning: its lines, led by `warning:` instead of `error:`.
    pub fn warning_text(&self) -> String {
        let text = self.to_string();
        match text.strip_prefix("error: ") {
            Some(rest) => format!("warning: {rest}"),
            None => text,
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "error: {}", self.message)?;
        write!(
            f,
            "  --> {}:{}:{}",
            self.path.display(),
            self.line,
            self.col
        )?;
        if let Some((text, width)) = &self.snippet {
            let num = self.line.to_string();
            let pad = " ".repeat(num.len());
            write!(f, "\n{pad} |\n{num} | {text}\n{pad} | ")?;
            let lead: String = text
                .chars()
                .take(self.col - 1)
                .map(|c| if c == '\t' { '\t' } else { ' ' })
                .collect();
            write!(f, "{lead}{}", "^".repeat(*width))?;
        }
        if let Some(help) = &self.help {
            write!(f, "\n  = help: {help}")?;
        }
        Ok(())
    }
}

/// The candidate nearest to `unknown` when it is close enough to be a typo of it, as rustc and
/// cargo suggest: an edit distance (a transposition counts as one edit, case is ignored) of at
/// most a third of the name's length and less than all of it, so `j` suggests nothing for `k`.
/// The nearest wins; on a tie, the first candidate.
pub fn nearest<'a>(
    unknown: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let len = unknown.chars().count();
    let limit = (len / 3).max(1);
    let lower = unknown.to_lowercase();
    candidates
        .into_iter()
        .map(|c| (strsim::damerau_levenshtein(&lower, &c.to_lowercase()), c))
        .filter(|(d, _)| *d <= limit && *d < len)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// "did you mean `x`?" for the nearest of `names`, else `otherwise()` (say, the list of names).
pub fn did_you_mean<S: AsRef<str>>(
    unknown: &str,
    names: &[S],
    otherwise: impl FnOnce() -> String,
) -> String {
    match nearest(unknown, names.iter().map(AsRef::as_ref)) {
        Some(n) => format!("did you mean `{n}`?"),
        None => otherwise(),
    }
}

/// Several diagnostics from one validation pass; users fix them all at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        if self.0.len() > 1 {
            write!(f, "\n\n{} errors", self.0.len())?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_column_are_one_based() {
        let src = Source::new("p.toml", "a = 1\nbb = \"x\"\n");
        assert_eq!(src.line_col(0), (1, 1));
        assert_eq!(src.line_col(6), (2, 1));
        assert_eq!(src.line_col(11), (2, 6));
    }

    #[test]
    fn nearest_names_are_likely_typos_only() {
        let keys = ["timeout", "retries", "report"];
        assert_eq!(nearest("timout", keys), Some("timeout"));
        assert_eq!(nearest("TimeOut", keys), Some("timeout"));
        assert_eq!(
            nearest("reprot", keys),
            Some("report"),
            "a transposition is one edit"
        );
        assert_eq!(nearest("colour", keys), None);
        assert_eq!(nearest("j", ["k"]), None, "one letter of one is not a typo");
        assert_eq!(
            nearest("ab", ["ax", "ay"]),
            Some("ax"),
            "the first on a tie"
        );
        assert_eq!(
            did_you_mean("mkae", &["make", "use"], || "stages: make, use".into()),
            "did you mean `make`?"
        );
        assert_eq!(did_you_mean("zzz", &["make"], || "no".into()), "no");
    }

    #[test]
    fn renders_caret_under_span() {
        let src = Source::new("p.toml", "[stages.a]\nrun = \"echo\"\n");
        let d = src.error(Some(17..23), "bad run");
        let text = d.to_string();
        assert!(text.contains("--> p.toml:2:7"), "{text}");
        assert!(text.contains("2 | run = \"echo\""), "{text}");
        assert!(text.contains("  |       ^^^^^^"), "{text}");
    }
}
