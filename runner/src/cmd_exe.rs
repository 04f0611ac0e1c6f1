//! How a shell-form `run` reaches `cmd.exe` on Windows: the quoting the template applies to
//! each value, and the one command line `cmd` is started with.
//!
//! `sh` quoting (`'C:\a b'`) means nothing to `cmd`, and the standard library's argument
//! quoting (`\"`) is the C runtime's, which `cmd` does not read: a `"` toggles its quoting,
//! so `\"` would leave the rest of the line open to `&`, `|`, `<` and `>`. So the command is
//! passed verbatim after `/D /S /C`, as Node.js and Python's `subprocess` do, and each value is
//! quoted the way both `cmd` and the C runtime's `argv` parser agree on: inside `"…"`, a `"`
//! is written `""` (two toggles for `cmd`, one literal quote for the C runtime) and the
//! backslashes before a quote are doubled. `%NAME%` of a variable that is set is still expanded
//! by `cmd` inside quotes; there is no escape for it on a `cmd /C` line, so a value that must
//! reach a program untouched belongs in an exec-form `run`.
//!
//! Compiled on every platform so that its tests run on Linux too; only Windows calls it.
#![cfg_attr(not(windows), allow(dead_code))]

use std::borrow::Cow;

/// Characters that need no quoting for `cmd` or for a program's `argv` parser.
fn is_plain(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_-.:/\\+@~#$*?[]{}'`".contains(c)
}

/// One value, quoted for a `cmd /C` line when it holds anything but plain characters.
pub fn quote(s: &str) -> Cow<'_, str> {
    if !s.is_empty() && s.chars().all(is_plain) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    let mut backslashes = 0usize;
    for c in s.chars() {
        match c {
            '\\' => backslashes += 1,
            '"' => {
                // The C runtime reads 2n backslashes before a quote as n; `""` is one quote.
                out.extend(std::iter::repeat_n('\\', backslashes * 2));
                out.push_str("\"\"");
                backslashes = 0;
                continue;
            }
            _ => {}
        }
        if c != '\\' {
            out.extend(std::iter::repeat_n('\\', backslashes));
            backslashes = 0;
            out.push(c);
        }
    }
    // Backslashes that end the value stand before the closing quote: doubled.
    out.extend(std::iter::repeat_n('\\', backslashes * 2));
    out.push('"');
    Cow::Owned(out)
}

/// The raw argument string for `cmd.exe`: `/D` skips AutoRun commands from the registry (they
/// are not part of the stage), `/S /C "…"` runs the line with only the outer quotes removed.
pub fn command_line(script: &str) -> String {
    format!("/D /S /C \"{script}\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_values_stay_as_they_are() {
        assert_eq!(
            quote(r"C:\heddle\in\model.onnx"),
            r"C:\heddle\in\model.onnx"
        );
        assert_eq!(quote("a8_w8"), "a8_w8");
    }

    #[test]
    fn spaces_and_metacharacters_are_quoted() {
        assert_eq!(
            quote(r"C:\Program Files\x y\out.txt"),
            r#""C:\Program Files\x y\out.txt""#
        );
        assert_eq!(quote("a&b|c>d"), r#""a&b|c>d""#);
        assert_eq!(quote(""), r#""""#);
    }

    #[test]
    fn quotes_and_trailing_backslashes_survive_the_c_runtime() {
        assert_eq!(quote(r#"say "hi""#), r#""say ""hi""""#);
        assert_eq!(quote(r"C:\a b\"), r#""C:\a b\\""#);
        assert_eq!(quote(r#"x\"y"#), r#""x\\""y""#);
    }

    #[test]
    fn the_line_keeps_the_script_verbatim() {
        assert_eq!(
            command_line(r#"type "a b.txt" > out.txt"#),
            r#"/D /S /C "type "a b.txt" > out.txt""#
        );
    }
}
