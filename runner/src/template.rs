//! `{{ ns.name }}` templates in `run` and `with`. Parsed once at load (so an unknown variable is a
//! load-time error with a position), rendered per instance and per executor (host paths or
//! container paths).

use std::borrow::Cow;

#[derive(Debug, Clone, PartialEq)]
pub enum Segment {
    Lit(String),
    /// A variable path such as `["in", "calib", "dir"]`, with the byte offset of its `{{`.
    Var {
        path: Vec<String>,
        offset: usize,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    pub segments: Vec<Segment>,
}

/// What a variable renders to.
#[derive(Debug, Clone, PartialEq)]
pub enum Rendered {
    One(String),
    /// A gathered input: one path per member.
    Many(Vec<String>),
}

/// A template that does not parse or names a variable without a value, at `offset` (the byte
/// offset of its `{{` inside the template text, so a diagnostic can point at it).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{problem}")]
pub struct TemplateError {
    pub offset: usize,
    pub problem: TemplateProblem,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TemplateProblem {
    #[error("unclosed `{{{{` in template")]
    Unclosed,
    #[error("`{{{{ {expr} }}}}` is not a variable like `params.name`")]
    NotAVariable { expr: String },
    #[error(transparent)]
    Lookup(#[from] LookupError),
}

/// Why a variable has no value where it is rendered. The lookups of each place a template
/// appears (`run`, `with`, `image`, `gpus`, a param's default) share these.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    #[error("unknown variable `{}`", .path.join("."))]
    UnknownVariable { path: Vec<String> },
    #[error("unknown param `{name}`")]
    UnknownParam { name: String },
    #[error("unknown matrix key `{name}`")]
    UnknownMatrixKey { name: String },
    #[error("unknown output `{name}`")]
    UnknownOutput { name: String },
    #[error("`stage.dir` needs a `uses` definition")]
    StageDirNeedsUses,
    /// A param value may only name facts about this machine (`allowed`, listed by
    /// `host_vars`, which renders param values).
    #[error(
        "unknown variable `{}` in a param value (a param value may use {allowed})",
        .path.join(".")
    )]
    NotAHostVariable { path: Vec<String>, allowed: String },
}

impl LookupError {
    /// `path` names no variable of the place it is rendered in.
    pub fn unknown(path: &[String]) -> LookupError {
        LookupError::UnknownVariable {
            path: path.to_vec(),
        }
    }
}

impl Template {
    pub fn parse(text: &str) -> Result<Template, TemplateError> {
        let mut segments = Vec::new();
        let mut rest = text;
        let mut base = 0;
        while let Some(start) = rest.find("{{") {
            if start > 0 {
                segments.push(Segment::Lit(rest[..start].to_string()));
            }
            let after = &rest[start + 2..];
            let end = after.find("}}").ok_or(TemplateError {
                offset: base + start,
                problem: TemplateProblem::Unclosed,
            })?;
            let expr = after[..end].trim();
            let valid = !expr.is_empty()
                && expr.split('.').all(|p| {
                    !p.is_empty()
                        && p.chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                });
            if !valid {
                return Err(TemplateError {
                    offset: base + start,
                    problem: TemplateProblem::NotAVariable { expr: expr.into() },
                });
            }
            segments.push(Segment::Var {
                path: expr.split('.').map(str::to_string).collect(),
                offset: base + start,
            });
            let consumed = start + 2 + end + 2;
            base += consumed;
            rest = &rest[consumed..];
        }
        if !rest.is_empty() {
            segments.push(Segment::Lit(rest.to_string()));
        }
        Ok(Template { segments })
    }

    pub fn vars(&self) -> impl Iterator<Item = (&[String], usize)> {
        self.segments.iter().filter_map(|s| match s {
            Segment::Var { path, offset } => Some((path.as_slice(), *offset)),
            Segment::Lit(_) => None,
        })
    }

    pub fn is_literal(&self) -> bool {
        self.vars().next().is_none()
    }

    /// Render for a shell: every variable's value is shell-quoted, gathered lists become
    /// space-separated quoted words.
    pub fn render_shell<F>(&self, lookup: F) -> Result<String, TemplateError>
    where
        F: FnMut(&[String]) -> Result<Rendered, LookupError>,
    {
        self.render_words(lookup, quote)
    }

    /// Render one exec-form argument: raw values. An argument that is exactly one gathered
    /// variable expands to one argument per member.
    pub fn render_args<F>(&self, mut lookup: F) -> Result<Vec<String>, TemplateError>
    where
        F: FnMut(&[String]) -> Result<Rendered, LookupError>,
    {
        if let [Segment::Var { path, offset }] = self.segments.as_slice() {
            return match lookup(path).map_err(|e| TemplateError {
                offset: *offset,
                problem: e.into(),
            })? {
                Rendered::One(v) => Ok(vec![v]),
                Rendered::Many(vs) => Ok(vs),
            };
        }
        self.render_plain(lookup).map(|s| vec![s])
    }

    /// Render without quoting (for `with` values); lists join with spaces.
    pub fn render_plain<F>(&self, lookup: F) -> Result<String, TemplateError>
    where
        F: FnMut(&[String]) -> Result<Rendered, LookupError>,
    {
        self.render_words(lookup, verbatim)
    }

    /// Render with each value passed through `word`; a gathered list becomes its members'
    /// words joined by spaces.
    fn render_words<F>(
        &self,
        mut lookup: F,
        word: for<'v> fn(&'v str) -> Cow<'v, str>,
    ) -> Result<String, TemplateError>
    where
        F: FnMut(&[String]) -> Result<Rendered, LookupError>,
    {
        let mut out = String::new();
        for seg in &self.segments {
            match seg {
                Segment::Lit(s) => out.push_str(s),
                Segment::Var { path, offset } => {
                    match lookup(path).map_err(|e| TemplateError {
                        offset: *offset,
                        problem: e.into(),
                    })? {
                        Rendered::One(v) => out.push_str(&word(&v)),
                        Rendered::Many(vs) => {
                            let words: Vec<Cow<str>> = vs.iter().map(|v| word(v)).collect();
                            out.push_str(&words.join(" "));
                        }
                    }
                }
            }
        }
        Ok(out)
    }
}

/// A value as it is (for [`Template::render_plain`]).
fn verbatim(s: &str) -> Cow<'_, str> {
    Cow::Borrowed(s)
}

/// `sh` quoting; on Windows a shell-form command runs through `cmd.exe`, which reads `"…"`.
fn quote(s: &str) -> Cow<'_, str> {
    #[cfg(windows)]
    return crate::cmd_exe::quote(s);
    #[cfg(not(windows))]
    shell_words::quote(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lk(path: &[String]) -> Result<Rendered, LookupError> {
        match path.join(".").as_str() {
            "params.greeting" => Ok(Rendered::One("hello".into())),
            "out.text" => Ok(Rendered::One("/tmp/a b/greeting.txt".into())),
            "in.all" => Ok(Rendered::Many(vec!["/x/1".into(), "/x/2 b".into()])),
            _ => Err(LookupError::unknown(path)),
        }
    }

    #[test]
    fn shell_quotes_paths_with_spaces() {
        let t = Template::parse("echo {{ params.greeting }} > {{out.text}}").unwrap();
        assert_eq!(
            t.render_shell(lk).unwrap(),
            "echo hello > '/tmp/a b/greeting.txt'"
        );
    }

    #[test]
    fn gathered_lists_expand() {
        let t = Template::parse("cat {{ in.all }}").unwrap();
        assert_eq!(t.render_shell(lk).unwrap(), "cat /x/1 '/x/2 b'");
        let a = Template::parse("{{ in.all }}").unwrap();
        assert_eq!(a.render_args(lk).unwrap(), vec!["/x/1", "/x/2 b"]);
    }

    #[test]
    fn errors_carry_offsets() {
        let t = Template::parse("echo {{ nope.x }}").unwrap();
        let e = t.render_shell(lk).unwrap_err();
        assert_eq!(e.offset, 5);
        assert_eq!(e.to_string(), "unknown variable `nope.x`");
        let e = Template::parse("echo {{ x").unwrap_err();
        assert_eq!(e.offset, 5);
        assert_eq!(e.to_string(), "unclosed `{{` in template");
        assert!(Template::parse("{{ a b }}").is_err());
    }
}
