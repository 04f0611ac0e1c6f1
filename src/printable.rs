//! Text a stage controls (its error line, its last log line, a file name it made, a matrix
//! value in a label) as heddle writes it to a terminal: control characters are shown escaped
//! (`\x1b`, `\u{9b}`), never sent raw. A stage that prints `ESC ]0;…BEL` would otherwise retitle
//! the user's terminal, `ESC [2J` clear it, and `\r` overwrite heddle's own `FAILED` with
//! whatever it liked. Newline and tab are kept: multi-line errors stay readable. Invalid UTF-8
//! never gets this far: stage output is read lossily (U+FFFD).

use std::borrow::Cow;
use std::fmt::Write;

/// `s` with every control character but `\n` and `\t` escaped (C0, DEL and the C1 range,
/// which some terminals read as escape sequences too, e.g. U+009B is CSI): for text that may
/// span lines (an error, a stage's message, a report).
pub fn printable(s: &str) -> Cow<'_, str> {
    escape(s, |c| c.is_control() && c != '\n' && c != '\t')
}

/// `s` with every control character escaped, `\n` and `\t` too: for one field of a line
/// (a label, a param value, a reason), where a newline would forge a line of heddle's own.
pub fn printable_line(s: &str) -> Cow<'_, str> {
    escape(s, char::is_control)
}

/// `println!` of one line that holds a stage's or a user's text, made [`printable_line`]:
/// heddle's own lines have no control characters, so escaping the whole line escapes only
/// what came from outside.
macro_rules! say {
    ($($t:tt)*) => {
        println!("{}", $crate::printable::printable_line(&format!($($t)*)))
    };
}
pub(crate) use say;

/// [`say`] on stderr.
macro_rules! say_err {
    ($($t:tt)*) => {
        eprintln!("{}", $crate::printable::printable_line(&format!($($t)*)))
    };
}
pub(crate) use say_err;

/// The one escaping both use: `\x1b` for ASCII controls, `\u{9b}` beyond.
fn escape(s: &str, needs_escape: fn(char) -> bool) -> Cow<'_, str> {
    if !s.chars().any(needs_escape) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if !needs_escape(c) {
            out.push(c);
        } else if (c as u32) < 0x80 {
            let _ = write!(out, "\\x{:02x}", c as u32);
        } else {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::{printable, printable_line};

    #[test]
    fn a_line_field_escapes_newlines_too() {
        assert_eq!(printable_line("a\nb\tc\x1b"), "a\\x0ab\\x09c\\x1b");
    }

    #[test]
    fn escapes_are_shown_not_sent() {
        assert_eq!(
            printable("a\x1b]0;pwned\x07b\r\x7f\u{9b}2J\tc\nd"),
            "a\\x1b]0;pwned\\x07b\\x0d\\x7f\\u{9b}2J\tc\nd"
        );
        assert!(matches!(
            printable("plain ünïcode"),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}
