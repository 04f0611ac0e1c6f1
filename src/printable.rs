//! Text a stage controls (its error line, its last log line, a file name it made, a matrix
//! value in a label) as heddle writes it to a terminal: control characters are shown escaped
//! (`\x1b`, `\u{9b}`), never sent raw. A stage that prints `ESC ]0;…BEL` would otherwise retitle
//! the user's terminal, `ESC [2J` clear it, and `\r` overwrite heddle's own `FAILED` with
//! whatever it liked. Newline and tab are kept: multi-line errors stay readable. Invalid UTF-8
//! never gets this far: stage output is read lossily (U+FFFD).

use std::borrow::Cow;
use std::fmt::Write;

/// `s` with every control character but `\n` and `\t` escaped (C0, DEL and the C1 range,
/// which some terminals read as escape sequences too, e.g. U+009B is CSI).
pub fn printable(s: &str) -> Cow<'_, str> {
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

fn needs_escape(c: char) -> bool {
    c.is_control() && c != '\n' && c != '\t'
}

#[cfg(test)]
mod tests {
    use super::printable;

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
