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

/// Parse `cmd` if it can run without a shell.
pub fn parse(cmd: &str) -> Option<Simple> {
    let mut argv: Vec<String> = Vec::new();
    let mut redirects = Vec::new();
    let mut chars = cmd.chars().peekable();
    // The word being read, and whether any of it was quoted (a quoted `2` is not an fd).
    let mut word = String::new();
    let mut in_word = false;
    let mut quoted = false;
    loop {
        let c = chars.peek().copied();
        match c {
            None | Some(' ') | Some('\t') => {
                if in_word {
                    argv.push(std::mem::take(&mut word));
                    in_word = false;
                    quoted = false;
                }
                if c.is_none() {
                    break;
                }
                chars.next();
            }
            Some('\'') => {
                chars.next();
                loop {
                    match chars.next()? {
                        '\'' => break,
                        ch => word.push(ch),
                    }
                }
                in_word = true;
                quoted = true;
            }
            Some(op @ ('<' | '>')) => {
                chars.next();
                // `2>`: a lone unquoted digit right before the operator names the fd.
                let digits = in_word && !quoted && word.bytes().all(|b| b.is_ascii_digit());
                let fd = if digits {
                    // `3>`: a descriptor heddle does not set up.
                    if !matches!(word.as_str(), "0" | "1" | "2") {
                        return None;
                    }
                    let fd = word.as_bytes()[0] - b'0';
                    word.clear();
                    in_word = false;
                    fd
                } else {
                    if in_word {
                        argv.push(std::mem::take(&mut word));
                        in_word = false;
                        quoted = false;
                    }
                    if op == '<' {
                        0
                    } else {
                        1
                    }
                };
                let mode = match (op, chars.peek()) {
                    ('<', Some('<' | '&' | '>')) => return None,
                    ('<', _) => OpenMode::Read,
                    ('>', Some('>')) => {
                        chars.next();
                        OpenMode::Append
                    }
                    ('>', Some('|')) => return None,
                    ('>', Some('&')) => {
                        chars.next();
                        let to = chars.next()?;
                        if !matches!(to, '0'..='2') {
                            return None;
                        }
                        // `2>&1` must end there: `2>&1x` is something else.
                        if !matches!(chars.peek(), None | Some(' ' | '\t')) {
                            return None;
                        }
                        redirects.push(Redirect::Dup {
                            fd,
                            to: to as u8 - b'0',
                        });
                        continue;
                    }
                    _ => OpenMode::Truncate,
                };
                while matches!(chars.peek(), Some(' ' | '\t')) {
                    chars.next();
                }
                let path = target(&mut chars)?;
                redirects.push(Redirect::File { fd, path, mode });
            }
            Some(ch) if safe(ch) => {
                chars.next();
                word.push(ch);
                in_word = true;
            }
            Some(_) => return None,
        }
    }
    let first = argv.first()?;
    // `a=b cmd` is an assignment; a builtin or keyword needs its shell.
    if first.contains('=') || SHELL_WORDS.contains(&first.as_str()) {
        return None;
    }
    Some(Simple { argv, redirects })
}

/// A redirection target: one word of safe characters and single-quoted parts.
fn target(chars: &mut std::iter::Peekable<std::str::Chars>) -> Option<String> {
    let mut path = String::new();
    let mut any = false;
    while let Some(&c) = chars.peek() {
        match c {
            '\'' => {
                chars.next();
                loop {
                    match chars.next()? {
                        '\'' => break,
                        ch => path.push(ch),
                    }
                }
                any = true;
            }
            c if safe(c) => {
                chars.next();
                path.push(c);
                any = true;
            }
            ' ' | '\t' => break,
            _ => return None,
        }
    }
    (any && !path.is_empty()).then_some(path)
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
