//! The text forms inside a stage: input references (`stage.out`, `stage[*].out`,
//! `stage[k=v].out`), `run` templates, and the name rule that stages, outputs and matrix keys
//! share.

use std::collections::BTreeMap;
use std::ops::Range;

use crate::diag::{Diagnostic, Source};
use crate::shell_context;
use crate::spec::RunSpec;
use crate::template::{Segment, Template};

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Selector {
    /// `stage.out`: one instance per upstream instance, joined on shared matrix keys.
    Map,
    /// `stage[*].out`: every instance.
    All,
    /// `stage[k=v].out`: the instances with these values; remaining keys still map.
    Select(BTreeMap<String, String>),
}

#[derive(Debug, Clone)]
pub enum InputKind {
    /// A file or folder in the repo, relative to the root.
    Path(String),
    /// A path with `{{ params.NAME }}` / `{{ matrix.KEY }}` in it (`path = "{{ params.model }}"`):
    /// rendered per instance by the planner, after `--set`, and checked to exist then.
    PathTemplate(crate::template::Template),
    Ref {
        stage: String,
        selector: Selector,
        output: String,
    },
}

#[derive(Debug, Clone)]
pub struct Input {
    pub kind: InputKind,
    pub span: Range<usize>,
}

#[derive(Debug, Clone)]
pub enum RunTemplate {
    Shell(Template),
    Exec(Vec<Template>),
}

impl RunTemplate {
    pub fn templates(&self) -> Vec<&Template> {
        match self {
            RunTemplate::Shell(t) => vec![t],
            RunTemplate::Exec(ts) => ts.iter().collect(),
        }
    }
}

pub(crate) fn parse_run(
    run: &RunSpec,
    src: &Source,
    span: Range<usize>,
) -> Result<RunTemplate, Diagnostic> {
    let err = |off: usize, msg: String| src.error(Some(span.start + 1 + off..span.end), msg);
    match run {
        RunSpec::Shell(s) => {
            let t = Template::parse(s).map_err(|e| err(e.offset, e.to_string()))?;
            if let Some((offset, ctx)) = shell_context::unsafe_vars(&t).into_iter().next() {
                let nth = t.vars().take_while(|(_, o)| *o < offset).count();
                let expr = t
                    .vars()
                    .nth(nth)
                    .map(|(p, _)| p.join("."))
                    .unwrap_or_default();
                let at = nth_template_in_source(src, &span, nth);
                let d = src
                    .error(Some(at), format!("`{{{{ {expr} }}}}` is {}: {}", ctx.describe(), ctx.danger()))
                    .with_help(format!(
                        "write it as a word of its own, outside any quotes (heddle quotes every value it puts in a shell command: `echo {{{{ {expr} }}}}`, `--flag={{{{ {expr} }}}}`), or use exec form: `run = [\"prog\", \"{{{{ {expr} }}}}\"]`"
                    ));
                return Err(d);
            }
            Ok(RunTemplate::Shell(t))
        }
        RunSpec::Exec(args) => {
            let ts = args
                .iter()
                .map(|a| {
                    Template::parse(a).map_err(|e| src.error(Some(span.clone()), e.to_string()))
                })
                .collect::<Result<Vec<_>, _>>()?;
            check_shell_script(&ts, src, &span)?;
            Ok(RunTemplate::Exec(ts))
        }
    }
}

/// Shells whose `-c` argument is a script: exec form passes values raw, so a template in
/// that script is read by the shell as code.
const SHELLS: [&str; 7] = ["sh", "bash", "dash", "zsh", "ksh", "ash", "mksh"];

/// Exec form that runs a shell script (`["sh", "-c", "script", ...]`, `-ec` and the like
/// too): a template inside the script is refused, the fix being to pass the value as an
/// argument the script reads as `"$1"`.
fn check_shell_script(
    ts: &[Template],
    src: &Source,
    span: &Range<usize>,
) -> Result<(), Diagnostic> {
    let Some([Segment::Lit(prog)]) = ts.first().map(|t| t.segments.as_slice()) else {
        return Ok(());
    };
    let name = prog.rsplit(['/', '\\']).next().unwrap_or(prog);
    if !SHELLS.contains(&name) {
        return Ok(());
    }
    let is_c = |t: &Template| {
        matches!(t.segments.as_slice(), [Segment::Lit(a)]
            if a.starts_with('-') && !a.starts_with("--") && a.contains('c'))
    };
    let Some(at) = ts.iter().position(is_c) else {
        return Ok(());
    };
    let Some(script) = ts.get(at + 1) else {
        return Ok(());
    };
    let Some((first, _)) = script.vars().next() else {
        return Ok(());
    };
    let expr = first.join(".");
    let before: usize = ts[..at + 1].iter().map(|t| t.vars().count()).sum();
    let d = src
        .error(
            Some(nth_template_in_source(src, span, before)),
            format!(
                "`{{{{ {expr} }}}}` is inside the script `{name} -c` runs: exec form passes it raw, and the shell would run what it holds"
            ),
        )
        .with_help(format!(
            "pass it as an argument after the script and read it there as \"$1\": `[\"{name}\", \"-c\", \"echo \\\"$1\\\"\", \"{name}\", \"{{{{ {expr} }}}}\"]`, or use shell form, where heddle quotes it"
        ));
    Err(d)
}

/// Where the `nth` template of a `run` value starts in its file: the nth `{{` of the value's
/// source text (escapes such as `\"` move it from its offset in the parsed string). The whole
/// `{{ … }}` is underlined.
fn nth_template_in_source(src: &Source, span: &Range<usize>, nth: usize) -> Range<usize> {
    let text = src.text.get(span.clone()).unwrap_or("");
    let start = text
        .match_indices("{{")
        .nth(nth)
        .map_or(span.start, |(i, _)| span.start + i);
    let end = src.text[start..]
        .find("}}")
        .map_or(span.end, |i| start + i + 2);
    start..end
}

/// An input reference that is not `stage.output`, `stage[*].output` or
/// `stage[key=value].output`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefError {
    #[error("`{text}` is not a reference like \"stage.output\"")]
    NotARef { text: String },
    #[error("`{text}`: unclosed `[`")]
    Unclosed { text: String },
    #[error("`{text}`: selector `{part}` is not key=value")]
    NotKeyValue { text: String, part: String },
}

/// `stage.out`, `stage[*].out`, `stage[k=v,k2=v2].out`.
pub fn parse_ref(text: &str) -> Result<(String, Selector, String), RefError> {
    let not_a_ref = || RefError::NotARef { text: text.into() };
    let (head, output) = text.rsplit_once('.').ok_or_else(not_a_ref)?;
    let (stage, selector) = match head.split_once('[') {
        None => (head.to_string(), Selector::Map),
        Some((stage, rest)) => {
            let inner = rest
                .strip_suffix(']')
                .ok_or_else(|| RefError::Unclosed { text: text.into() })?;
            if inner.trim() == "*" {
                (stage.to_string(), Selector::All)
            } else {
                let mut sel = BTreeMap::new();
                for part in inner.split(',') {
                    let (k, v) = part.split_once('=').ok_or_else(|| RefError::NotKeyValue {
                        text: text.into(),
                        part: part.into(),
                    })?;
                    sel.insert(k.trim().to_string(), v.trim().to_string());
                }
                (stage.to_string(), Selector::Select(sel))
            }
        }
    };
    if !valid_name(&stage) || !valid_name(output) {
        return Err(not_a_ref());
    }
    Ok((stage, selector, output.to_string()))
}

pub fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs_parse() {
        assert_eq!(
            parse_ref("a.b").unwrap(),
            ("a".into(), Selector::Map, "b".into())
        );
        assert_eq!(
            parse_ref("a[*].b").unwrap(),
            ("a".into(), Selector::All, "b".into())
        );
        let (_, s, _) = parse_ref("a[k=2, j=x].b").unwrap();
        assert_eq!(
            s,
            Selector::Select([("j".into(), "x".into()), ("k".into(), "2".into())].into())
        );
        assert_eq!(
            parse_ref("ab").unwrap_err().to_string(),
            "`ab` is not a reference like \"stage.output\""
        );
        assert_eq!(
            parse_ref("a[k=2.b").unwrap_err(),
            RefError::Unclosed {
                text: "a[k=2.b".into()
            }
        );
        assert_eq!(
            parse_ref("a[k].b").unwrap_err().to_string(),
            "`a[k].b`: selector `k` is not key=value"
        );
    }
}
