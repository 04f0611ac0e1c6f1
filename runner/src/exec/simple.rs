//! The fast path for shell-form commands that need no shell: `cat in > out`, `python3 x.py
//! --flag 'a b'`. GNU make does the same for recipe lines without shell metacharacters; here
//! plain redirections are accepted too, because nearly every stage ends in `> {{ out.x }}`.
//! Starting the program directly saves one `exec` of `/bin/sh` per stage, which on a
//! 1,000-stage chain is about a third of heddle's own cost.
//!
//! Anything this parser is not certain about — variables, globs, pipes, `&&`, double quotes,
//! backslashes, comments, assignments, builtins, a program not on PATH — returns `None`, and
//! the command runs through `sh -c` as written. Accepted: words of safe characters and
//! single-quoted strings (the quoting heddle's templates produce), and the redirections
//! `<`, `>`, `>>`, `N>`, `N>>` (N = 0, 1, 2) and `N>&M`.

/// One redirection, applied in order as the shell would.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Redirect {
    /// `fd` opened on `path`: `<` reads, `>` truncates, `>>` appends.
    File {
        fd: u8,
        path: String,
        mode: OpenMode,
    },
    /// `fd>&to`.
    Dup { fd: u8, to: u8 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    Read,
    Truncate,
    Append,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Simple {
    pub argv: Vec<String>,
    pub redirects: Vec<Redirect>,
}

/// Builtins and keywords of POSIX `sh` (and dash/bash extras): a program by that name on PATH
/// may behave differently from the builtin (`echo -n`, `test`), so those keep their shell.
const SHELL_WORDS: &[&str] = &[
    ".", ":", "[", "alias", "bg", "break", "cd", "command", "continue", "echo", "eval", "exec",
    "exit", "export", "false", "fc", "fg", "getopts", "hash", "jobs", "kill", "local", "printf",
    "pwd", "read", "readonly", "return", "set", "shift", "source", "test", "times", "trap", "true",
    "type", "ulimit", "umask", "unalias", "unset", "wait", "if", "then", "else", "elif", "fi",
    "case", "esac", "for", "while", "until", "do", "done", "in", "function", "select", "time", "!",
    "{", "}",
];

fn safe(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_./,:=+@%-".contains(c)
}

type Chars<'a> = std::iter::Peekable<std::str::Chars<'a>>;

/// Parse `cmd` if it can run without a shell.
pub fn parse(cmd: &str) -> Option<Simple> {
    let mut argv: Vec<String> = Vec::new();
    let mut redirects = Vec::new();
    let mut chars = cmd.chars().peekable();
    loop {
        skip_blanks(&mut chars);
        let Some(&c) = chars.peek() else { break };
        let fd = if matches!(c, '<' | '>') {
            None
        } else {
            let (w, quoted) = word(&mut chars)?;
            // `2>`: an unquoted number right before the operator names a descriptor.
            let names_fd = !quoted
                && !w.is_empty()
                && w.bytes().all(|b| b.is_ascii_digit())
                && matches!(chars.peek(), Some('<' | '>'));
            if !names_fd {
                argv.push(w);
                continue;
            }
            // `3>`: a descriptor heddle does not set up.
            Some(fd_number(&w)?)
        };
        redirects.push(redirect(&mut chars, fd)?);
    }
    let first = argv.first()?;
    // `a=b cmd` is an assignment; a builtin or keyword needs its shell.
    if first.contains('=') || SHELL_WORDS.contains(&first.as_str()) {
        return None;
    }
    Some(Simple { argv, redirects })
}

fn skip_blanks(chars: &mut Chars) {
    while matches!(chars.peek(), Some(' ' | '\t')) {
        chars.next();
    }
}

/// One word: safe characters and single-quoted parts, up to a blank, `<`, `>` or the end.
/// Returns the word and whether any of it was quoted; `None` for any other character or an
/// unterminated quote.
fn word(chars: &mut Chars) -> Option<(String, bool)> {
    let mut w = String::new();
    let mut quoted = false;
    while let Some(&c) = chars.peek() {
        match c {
            ' ' | '\t' | '<' | '>' => break,
            '\'' => {
                chars.next();
                loop {
                    match chars.next()? {
                        '\'' => break,
                        ch => w.push(ch),
                    }
                }
                quoted = true;
            }
            c if safe(c) => {
                chars.next();
                w.push(c);
            }
            _ => return None,
        }
    }
    Some((w, quoted))
}

fn fd_number(s: &str) -> Option<u8> {
    match s {
        "0" => Some(0),
        "1" => Some(1),
        "2" => Some(2),
        _ => None,
    }
}

/// The redirection at `chars` (which start at `<` or `>`); `fd` when a number preceded it.
fn redirect(chars: &mut Chars, fd: Option<u8>) -> Option<Redirect> {
    let op = chars.next()?;
    let fd = fd.unwrap_or(if op == '<' { 0 } else { 1 });
    let mode = match (op, chars.peek()) {
        ('<', Some('<' | '&' | '>')) | ('>', Some('|')) => return None,
        ('<', _) => OpenMode::Read,
        ('>', Some('>')) => {
            chars.next();
            OpenMode::Append
        }
        ('>', Some('&')) => {
            chars.next();
            let to = fd_number(&chars.next()?.to_string())?;
            // `2>&1` must end there: `2>&1x` is something else.
            if !matches!(chars.peek(), None | Some(' ' | '\t')) {
                return None;
            }
            return Some(Redirect::Dup { fd, to });
        }
        _ => OpenMode::Truncate,
    };
    skip_blanks(chars);
    let (path, _) = word(chars)?;
    if path.is_empty() {
        return None;
    }
    Some(Redirect::File { fd, path, mode })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(fd: u8, path: &str, mode: OpenMode) -> Redirect {
        Redirect::File {
            fd,
            path: path.into(),
            mode,
        }
    }

    #[test]
    fn plain_words_and_single_quotes() {
        let s = parse("python3 -m x --name 'a b' 'it'x /p/q.txt").unwrap();
        assert_eq!(
            s.argv,
            ["python3", "-m", "x", "--name", "a b", "itx", "/p/q.txt"]
        );
        assert!(s.redirects.is_empty());
        assert_eq!(parse("cat ''").unwrap().argv, ["cat", ""]);
    }

    #[test]
    fn redirections_in_order() {
        let s = parse("cat /in/a.txt - < /in/b >/out/o.txt 2>> err.log").unwrap();
        assert_eq!(s.argv, ["cat", "/in/a.txt", "-"]);
        assert_eq!(
            s.redirects,
            [
                file(0, "/in/b", OpenMode::Read),
                file(1, "/out/o.txt", OpenMode::Truncate),
                file(2, "err.log", OpenMode::Append),
            ]
        );
        let s = parse("tool > 'out dir/o.txt' 2>&1").unwrap();
        assert_eq!(
            s.redirects,
            [
                file(1, "out dir/o.txt", OpenMode::Truncate),
                Redirect::Dup { fd: 2, to: 1 }
            ]
        );
    }

    #[test]
    fn digit_is_an_fd_only_alone_and_unquoted() {
        let s = parse("echo2 a2>f").unwrap();
        assert_eq!(s.argv, ["echo2", "a2"]);
        assert_eq!(s.redirects, [file(1, "f", OpenMode::Truncate)]);
        let s = parse("seq '2'>f").unwrap();
        assert_eq!(s.argv, ["seq", "2"]);
        let s = parse("seq 3 2>f").unwrap();
        assert_eq!(s.argv, ["seq", "3"]);
        assert_eq!(s.redirects, [file(2, "f", OpenMode::Truncate)]);
    }

    #[test]
    fn anything_shell_like_keeps_the_shell() {
        for cmd in [
            "echo hi > x",       // builtin
            "cd /tmp",           // builtin
            "A=1 tool",          // assignment
            "cat $HOME/x",       // variable
            "cat *.txt",         // glob
            "cat a | wc -l",     // pipe
            "a && b",            // list
            "a; b",              // list
            "cat \"x\"",         // double quotes
            "cat a\\ b",         // backslash
            "cat ~/x",           // tilde
            "cat x # note",      // comment
            "tool <<EOF",        // here-document
            "tool >| f",         // clobber
            "tool 3> f",         // fd 3 is not ours to set up
            "tool > ",           // no target
            "tool 2>&1x",        // odd dup
            "tool 2>&5",         // fd we do not manage
            "cat 'unterminated", // bad quoting
            "line1\nline2",      // several commands
            "(subshell)",        // grouping
            "tool &",            // background
            "",                  // nothing to run
            "> only-a-redirect", // nothing to run
        ] {
            assert_eq!(parse(cmd), None, "{cmd:?} should need a shell");
        }
    }
}
