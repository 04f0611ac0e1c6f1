//! The text forms inside a stage: input references (`stage.out`, `stage[*].out`,
//! `stage[k=v].out`), `run` templates, and the name rule that stages, outputs and matrix keys
//! share.

use std::collections::BTreeMap;
use std::ops::Range;

use crate::diag::{Diagnostic, Source};
use crate::spec::RunSpec;
use crate::template::Template;

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
        RunSpec::Shell(s) => Template::parse(s)
            .map(RunTemplate::Shell)
            .map_err(|e| err(e.offset, e.message)),
        RunSpec::Exec(args) => args
            .iter()
            .map(|a| Template::parse(a).map_err(|e| src.error(Some(span.clone()), e.message)))
            .collect::<Result<Vec<_>, _>>()
            .map(RunTemplate::Exec),
    }
}

/// `stage.out`, `stage[*].out`, `stage[k=v,k2=v2].out`.
pub fn parse_ref(text: &str) -> Result<(String, Selector, String), String> {
    let (head, output) = text
        .rsplit_once('.')
        .ok_or_else(|| format!("`{text}` is not a reference like \"stage.output\""))?;
    let (stage, selector) = match head.split_once('[') {
        None => (head.to_string(), Selector::Map),
        Some((stage, rest)) => {
            let inner = rest
                .strip_suffix(']')
                .ok_or_else(|| format!("`{text}`: unclosed `[`"))?;
            if inner.trim() == "*" {
                (stage.to_string(), Selector::All)
            } else {
                let mut sel = BTreeMap::new();
                for part in inner.split(',') {
                    let (k, v) = part
                        .split_once('=')
                        .ok_or_else(|| format!("`{text}`: selector `{part}` is not key=value"))?;
                    sel.insert(k.trim().to_string(), v.trim().to_string());
                }
                (stage.to_string(), Selector::Select(sel))
            }
        }
    };
    if !valid_name(&stage) || !valid_name(output) {
        return Err(format!("`{text}` is not a reference like \"stage.output\""));
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
        assert!(parse_ref("ab").is_err());
        assert!(parse_ref("a[k=2.b").is_err());
    }
}
