//! Where each `{{ … }}` of a shell-form `run` sits, as `sh` will read it, so that a value
//! heddle quotes is never read again by the shell.
//!
//! heddle quotes every value it puts into a shell command (`'…'`, [`crate::template`]). That
//! quoting holds only where the shell reads a plain word. Inside the user's own quotes it
//! is undone: in `echo "{{ params.x }}"` the value `$(id)` becomes `"'$(id)'"`, and the
//! shell runs `id`. Inside single quotes the value ends the user's quote; in a backquoted
//! command, a here-document, a comment, `${…}` or `$((…))`, or after a `\` or a `$`, the
//! shell reads the value's characters again in its own way.
//!
//! Two ways out: render each value for the context it lands in, or refuse the template at
//! load time. heddle refuses. Rendering per context needs a shell parser exact in every
//! nested context (`"$(…"…")"`, backquotes, here-documents, `${x:-"…"}`), and a mistake
//! there is an injection, silently; a refusal errs, at worst, on the side of an error message
//! that says what to write instead. And the fix is always available: drop the quotes
//! (heddle's own quoting keeps spaces and quotes in the value intact, `--out={{ out.x }}`
//! included) or use exec form, where values are passed as arguments and no shell reads them.
//!
//! The scanner below is deliberately small: it tracks quoting, `$(…)` (whose inside is a
//! fresh, plain context), backquotes, `${…}`, `$((…))`, comments and here-documents, and
//! says "plain" only where it is sure.

use crate::template::{Segment, Template};

/// Why a template may not sit where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    DoubleQuotes,
    SingleQuotes,
    Backquotes,
    HereDocument,
    Comment,
    ParamExpansion,
    Arithmetic,
    AfterBackslash,
    AfterDollar,
}

impl Context {
    /// "inside a double-quoted string", for the error message.
    pub fn describe(self) -> &'static str {
        match self {
            Context::DoubleQuotes => "inside a double-quoted string",
            Context::SingleQuotes => "inside a single-quoted string",
            Context::Backquotes => "inside a backquoted command",
            Context::HereDocument => "inside a here-document",
            Context::Comment => "inside a comment",
            Context::ParamExpansion => "inside a `${…}` expansion",
            Context::Arithmetic => "inside a `$((…))` expansion",
            Context::AfterBackslash => "right after a `\\`",
            Context::AfterDollar => "right after a `$`",
        }
    }

    /// What the shell would do with the value there.
    pub fn danger(self) -> &'static str {
        match self {
            Context::DoubleQuotes | Context::Backquotes | Context::ParamExpansion => {
                "the shell would run a `$(…)` or backquote in its value"
            }
            Context::HereDocument => {
                "the shell would expand its value, and a line of it could end the document"
            }
            Context::Comment => "a newline in its value would end the comment and run the rest",
            Context::Arithmetic => "the shell would evaluate its value",
            Context::SingleQuotes | Context::AfterBackslash | Context::AfterDollar => {
                "its value would end up unquoted"
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Frame {
    /// Plain shell words: the top level, or the inside of `$(…)` (with its open parentheses).
    Words {
        sub: bool,
        parens: u32,
    },
    Single,
    Double,
    Backquote,
    Param {
        braces: u32,
    },
    Arith {
        parens: u32,
    },
    Comment,
    /// The delimiter word after `<<` or `<<-`.
    HereWord {
        strip_tabs: bool,
        word: String,
        started: bool,
    },
    /// A here-document's lines, until one equals the delimiter.
    HereBody {
        strip_tabs: bool,
        delim: String,
        line: String,
    },
}

struct Scanner {
    stack: Vec<Frame>,
    /// The previous character was an unquoted (or in-quotes escaping) backslash.
    escaped: bool,
    /// The previous character was a `$` that may start an expansion.
    dollar: bool,
    /// The previous character opened a `$(`: a `(` now makes it `$((`.
    opened_sub: bool,
    /// The previous character was `<` at word level: one more makes `<<`.
    lt: u8,
    /// At the start of a word, where `#` begins a comment.
    word_start: bool,
    /// Here-documents whose bodies start at the next newline, in order.
    pending: Vec<(bool, String)>,
}

/// Every variable of a shell-form template that is not in a plain-word context: its byte
/// offset in the template text, and the context.
pub fn unsafe_vars(t: &Template) -> Vec<(usize, Context)> {
    let mut s = Scanner {
        stack: vec![Frame::Words {
            sub: false,
            parens: 0,
        }],
        escaped: false,
        dollar: false,
        opened_sub: false,
        lt: 0,
        word_start: true,
        pending: Vec::new(),
    };
    let mut found = Vec::new();
    for seg in &t.segments {
        match seg {
            Segment::Lit(text) => text.chars().for_each(|c| s.step(c)),
            Segment::Var { offset, .. } => {
                if let Some(ctx) = s.var_context() {
                    found.push((*offset, ctx));
                }
                // The value is one word's worth of characters.
                s.escaped = false;
                s.dollar = false;
                s.opened_sub = false;
                s.lt = 0;
                s.word_start = false;
                if let Some(Frame::HereWord { started, .. }) = s.stack.last_mut() {
                    *started = true;
                }
            }
        }
    }
    found
}

impl Scanner {
    fn var_context(&self) -> Option<Context> {
        let ctx = match self.stack.last().expect("the top frame stays") {
            Frame::Words { .. } if self.escaped => Context::AfterBackslash,
            Frame::Words { .. } if self.dollar => Context::AfterDollar,
            Frame::Words { .. } => return None,
            Frame::Single => Context::SingleQuotes,
            Frame::Double => Context::DoubleQuotes,
            Frame::Backquote => Context::Backquotes,
            Frame::Param { .. } => Context::ParamExpansion,
            Frame::Arith { .. } => Context::Arithmetic,
            Frame::Comment => Context::Comment,
            Frame::HereWord { .. } | Frame::HereBody { .. } => Context::HereDocument,
        };
        Some(ctx)
    }

    fn step(&mut self, c: char) {
        let escaped = std::mem::take(&mut self.escaped);
        let dollar = std::mem::take(&mut self.dollar);
        let opened_sub = std::mem::take(&mut self.opened_sub);
        let lt = std::mem::take(&mut self.lt);
        let top = self.stack.last_mut().expect("the top frame stays");
        match top {
            Frame::Single => {
                if c == '\'' {
                    self.stack.pop();
                }
            }
            Frame::Double => {
                if escaped || self.expansion(c, dollar) {
                } else if c == '\\' {
                    self.escaped = true;
                } else if c == '"' {
                    self.stack.pop();
                } else if c == '$' {
                    self.dollar = true;
                } else if c == '`' {
                    self.stack.push(Frame::Backquote);
                }
            }
            Frame::Backquote => {
                if escaped {
                } else if c == '\\' {
                    self.escaped = true;
                } else if c == '`' {
                    self.stack.pop();
                }
            }
            Frame::Param { braces } => {
                if c == '{' {
                    *braces += 1;
                } else if c == '}' {
                    if *braces == 0 {
                        self.stack.pop();
                    } else {
                        *braces -= 1;
                    }
                }
            }
            Frame::Arith { parens } => {
                if c == '(' {
                    *parens += 1;
                } else if c == ')' {
                    if *parens == 0 {
                        // The first of `))`; the second is swallowed by the outer context's
                        // parenthesis count being zero, which is harmless for this scanner.
                        self.stack.pop();
                        self.skip_close_paren();
                    } else {
                        *parens -= 1;
                    }
                }
            }
            Frame::Comment => {
                if c == '\n' {
                    self.stack.pop();
                    self.newline();
                }
            }
            Frame::HereWord {
                strip_tabs,
                word,
                started,
            } => {
                let ends = matches!(c, ' ' | '\t') && *started
                    || matches!(c, '\n' | ';' | '&' | '|' | '<' | '>' | '(' | ')');
                if c == '<' && !*started && word.is_empty() && !*strip_tabs {
                    // `<<<`: a here-string (bash), a plain word follows.
                    self.stack.pop();
                    self.word_start = true;
                } else if c == '-' && !*started && word.is_empty() && !*strip_tabs {
                    *strip_tabs = true;
                } else if matches!(c, ' ' | '\t') && !*started {
                } else if ends {
                    let (strip, delim) = (*strip_tabs, std::mem::take(word));
                    self.stack.pop();
                    self.pending.push((strip, delim));
                    self.word_char(c, false, false);
                } else {
                    *started = true;
                    // Quotes around the delimiter only stop expansion in the body.
                    if !matches!(c, '\'' | '"' | '\\') {
                        word.push(c);
                    }
                }
            }
            Frame::HereBody {
                strip_tabs,
                delim,
                line,
            } => {
                if c == '\n' {
                    let l = if *strip_tabs {
                        line.trim_start_matches('\t')
                    } else {
                        line.as_str()
                    };
                    if l == delim {
                        self.stack.pop();
                        self.newline();
                    } else {
                        line.clear();
                    }
                } else {
                    line.push(c);
                }
            }
            Frame::Words { .. } => {
                if escaped {
                    self.word_start = false;
                    return;
                }
                if opened_sub && c == '(' {
                    // `$((`: arithmetic, not a command substitution.
                    self.stack.pop();
                    self.stack.push(Frame::Arith { parens: 0 });
                    return;
                }
                self.word_char(c, dollar, lt == 1);
            }
        }
    }

    /// `$(`, `${` or `$'` after a `$`: push the context it opens. True when `c` was consumed.
    fn expansion(&mut self, c: char, dollar: bool) -> bool {
        if !dollar {
            return false;
        }
        match c {
            '(' => {
                self.stack.push(Frame::Words {
                    sub: true,
                    parens: 0,
                });
                self.opened_sub = true;
                self.word_start = true;
            }
            '{' => self.stack.push(Frame::Param { braces: 0 }),
            // `$'…'` (bash's ANSI-C quoting) reads backslash escapes: no plain context.
            '\'' if matches!(self.stack.last(), Some(Frame::Words { .. })) => {
                self.stack.push(Frame::Single)
            }
            _ => return false,
        }
        true
    }

    /// One unescaped character in a plain-word context.
    fn word_char(&mut self, c: char, dollar: bool, after_lt: bool) {
        if self.expansion(c, dollar) {
            self.word_start = false;
            return;
        }
        let word_start = std::mem::replace(&mut self.word_start, false);
        match c {
            '\\' => self.escaped = true,
            '\'' => self.stack.push(Frame::Single),
            '"' => self.stack.push(Frame::Double),
            '`' => self.stack.push(Frame::Backquote),
            '$' => self.dollar = true,
            '#' if word_start => self.stack.push(Frame::Comment),
            '<' if after_lt => self.stack.push(Frame::HereWord {
                strip_tabs: false,
                word: String::new(),
                started: false,
            }),
            '<' => {
                self.lt = 1;
                self.word_start = true;
            }
            '(' => {
                if let Some(Frame::Words { parens, .. }) = self.stack.last_mut() {
                    *parens += 1;
                }
                self.word_start = true;
            }
            ')' => {
                match self.stack.last_mut() {
                    Some(Frame::Words { parens, .. }) if *parens > 0 => *parens -= 1,
                    Some(Frame::Words { sub: true, .. }) => {
                        self.stack.pop();
                    }
                    _ => {}
                }
                self.word_start = true;
            }
            '\n' => self.newline(),
            ' ' | '\t' | ';' | '&' | '|' | '>' => self.word_start = true,
            _ => {}
        }
    }

    /// A newline at word level: pending here-documents start, in order.
    fn newline(&mut self) {
        self.word_start = true;
        // The last pending document is read first from the stack's top: push in reverse.
        for (strip_tabs, delim) in self.pending.drain(..).rev() {
            self.stack.push(Frame::HereBody {
                strip_tabs,
                delim,
                line: String::new(),
            });
        }
    }

    /// After `$((…)` closed, its second `)` belongs to it, not to the context around.
    fn skip_close_paren(&mut self) {
        if let Some(Frame::Words { parens, .. }) = self.stack.last_mut() {
            *parens += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contexts(text: &str) -> Vec<Context> {
        let t = Template::parse(text).unwrap();
        unsafe_vars(&t).into_iter().map(|(_, c)| c).collect()
    }

    #[test]
    fn plain_words_are_safe() {
        for ok in [
            "echo {{ params.x }} > {{ out.o }}",
            "cp --target={{ out.o }} {{ in.a }}",
            "echo \"a\" {{ params.x }} 'b' \"c\"{{ params.x }}",
            "echo \"$(cat {{ in.a }})\" \"x\"",
            "test \"$(wc -l < {{ in.a }})\" -gt 0 && echo {{ params.x }}",
            "awk '{ print \"| \" $2 \" |\" }' {{ in.a }} > {{ out.o }}",
            "echo $((1 + 2)) {{ params.x }}",
            "echo ${HOME} {{ params.x }}",
            "echo a#b {{ params.x }}",
            "cat <<EOF > f\nbody $x\nEOF\necho {{ params.x }}",
            "cat <<-'END'\n\tbody\n\tEND\necho {{ params.x }}",
            "f() { echo {{ params.x }}; }; f",
            "( cd sub && echo {{ params.x }} )",
            "echo `date` {{ params.x }}",
            "x=\\\" echo {{ params.x }}",
            "# a comment\necho {{ params.x }}",
        ] {
            assert_eq!(contexts(ok), [], "{ok}");
        }
    }

    #[test]
    fn quoted_and_reread_contexts_are_named() {
        let cases = [
            ("echo \"{{ params.x }}\"", Context::DoubleQuotes),
            (
                "echo \"a $(echo \"{{ params.x }}\")\"",
                Context::DoubleQuotes,
            ),
            ("echo '{{ params.x }}'", Context::SingleQuotes),
            ("echo $'{{ params.x }}'", Context::SingleQuotes),
            ("echo `cat {{ in.a }}`", Context::Backquotes),
            ("cat <<EOF\n{{ params.x }}\nEOF", Context::HereDocument),
            ("cat <<'EOF'\nx {{ params.x }}\nEOF", Context::HereDocument),
            (
                "cat <<EOF; echo\n{{ params.x }}\nEOF",
                Context::HereDocument,
            ),
            ("echo # {{ params.x }}", Context::Comment),
            ("echo ${x:-{{ params.x }}}", Context::ParamExpansion),
            ("echo $(( {{ params.x }} + 1 ))", Context::Arithmetic),
            ("echo \\{{ params.x }}", Context::AfterBackslash),
            ("echo ${{ params.x }}", Context::AfterDollar),
            ("sh -c \"echo {{ params.x }}\"", Context::DoubleQuotes),
        ];
        for (text, want) in cases {
            assert_eq!(contexts(text), [want], "{text}");
        }
        assert_eq!(
            contexts("echo \"{{ params.x }}\" {{ params.x }} '{{ out.o }}'"),
            [Context::DoubleQuotes, Context::SingleQuotes]
        );
    }
}
