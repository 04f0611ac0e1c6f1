//! Every `{{ var }}` in a stage's `run` must name something the stage has: a param of the layer
//! that wrote `run`, a matrix key the stage's instances carry, a declared input or output. Each
//! unknown name is an error at the variable (shell form) or at `run` (exec form), with the
//! nearest known name when there is one.

use std::collections::BTreeSet;

use crate::diag::{did_you_mean, nearest, Diagnostic};
use crate::model::{InputKind, Pipeline, RunTemplate, Selector, Stage};

/// The names a stage's `run` may refer to.
struct Scope<'a> {
    s: &'a Stage,
    params: Vec<String>,
    keys: &'a BTreeSet<String>,
    inputs: Vec<String>,
}

/// Check every variable of `s.run` against what the stage has; `keys` are its matrix keys.
pub(super) fn check_templates(
    p: &Pipeline,
    s: &Stage,
    keys: &BTreeSet<String>,
) -> Result<(), Vec<Diagnostic>> {
    let scope = Scope::new(p, s, keys);
    let shell = matches!(s.run, RunTemplate::Shell(_));
    let mut errs = Vec::new();
    for t in s.run.templates() {
        for (path, off) in t.vars() {
            let Some(msg) = scope.problem(path) else {
                continue;
            };
            let span = if shell {
                s.run_span.start + 1 + off..s.run_span.start + 1 + off + 2
            } else {
                s.run_span.clone()
            };
            errs.push(
                s.run_source
                    .error(Some(span), format!("stage `{}`: {msg}", s.name))
                    .with_help("variables: params.NAME, matrix.KEY, in.NAME, in.NAME.dir, out.NAME, stage.dir, instance"),
            );
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs)
    }
}

impl<'a> Scope<'a> {
    fn new(p: &Pipeline, s: &'a Stage, keys: &'a BTreeSet<String>) -> Scope<'a> {
        let params = match &s.def {
            Some(d) => d.params.keys().cloned().collect(),
            None => p.params.keys().cloned().collect(),
        };
        let inputs = match &s.def {
            Some(d) => d.inputs.keys().cloned().collect(),
            None => s.inputs.keys().cloned().collect(),
        };
        Scope {
            s,
            params,
            keys,
            inputs,
        }
    }

    /// What is wrong with one variable, if anything.
    fn problem(&self, path: &[String]) -> Option<String> {
        let s = self.s;
        match path {
            [ns, k] if ns == "params" => (!self.params.contains(k)).then(|| {
                let hint = did_you_mean(k, &self.params, || {
                    format!("params: {}", list(&self.params))
                });
                format!("unknown param `{k}` ({hint})")
            }),
            [ns, k] if ns == "matrix" => (!self.keys.contains(k)).then(|| {
                let what = format!("keys of `{}`", s.name);
                format!(
                    "unknown matrix key `{k}` ({})",
                    hint_keys(k, self.keys, &what)
                )
            }),
            [ns, k] if ns == "in" => (!self.inputs.contains(k)).then(|| {
                let hint = did_you_mean(k, &self.inputs, || {
                    format!("inputs: {}", list(&self.inputs))
                });
                format!("unknown input `{k}` ({hint})")
            }),
            [ns, k, d] if ns == "in" && d == "dir" => self.dir_problem(k),
            [ns, k] if ns == "out" => (!s.outputs.contains_key(k)).then(|| {
                let o: Vec<String> = s.outputs.keys().cloned().collect();
                let hint = did_you_mean(k, &o, || format!("outputs: {}", list(&o)));
                format!("unknown output `{k}` ({hint})")
            }),
            [ns, d] if ns == "stage" && d == "dir" => s
                .def
                .is_none()
                .then(|| "`stage.dir` needs a `uses` definition".to_string()),
            [ns] if ns == "instance" => None,
            _ => Some(self.unknown_variable(path)),
        }
    }

    /// `in.NAME.dir`: only for a declared input that the stage gathers (`stage[*].out`).
    fn dir_problem(&self, k: &str) -> Option<String> {
        let gathered = matches!(
            self.s.inputs.get(k).map(|i| &i.kind),
            Some(InputKind::Ref {
                selector: Selector::All,
                ..
            })
        );
        if !self.inputs.iter().any(|i| i == k) {
            Some(format!("unknown input `{k}`"))
        } else if !gathered && self.s.inputs.contains_key(k) {
            Some(format!(
                "`in.{k}.dir` is only for gathered inputs (`stage[*].out`)"
            ))
        } else {
            None
        }
    }

    fn unknown_variable(&self, path: &[String]) -> String {
        let text = path.join(".");
        let known = self.variables();
        match nearest(&text, known.iter().map(String::as_str)) {
            Some(n) => format!("unknown variable `{text}` (did you mean `{n}`?)"),
            None => format!("unknown variable `{text}`"),
        }
    }

    /// Every variable the stage's `run` may name, to suggest from.
    fn variables(&self) -> Vec<String> {
        let ns = |ns: &str, names: &mut dyn Iterator<Item = &String>| -> Vec<String> {
            names.map(|n| format!("{ns}.{n}")).collect()
        };
        let mut v = ns("params", &mut self.params.iter());
        v.extend(ns("matrix", &mut self.keys.iter()));
        v.extend(ns("in", &mut self.inputs.iter()));
        v.extend(ns("out", &mut self.s.outputs.keys()));
        v.extend(["stage.dir".to_string(), "instance".to_string()]);
        v
    }
}

/// "did you mean `k`?", else "`what`: a, b" (or "none").
pub(super) fn hint_keys(k: &str, keys: &BTreeSet<String>, what: &str) -> String {
    let names: Vec<&String> = keys.iter().collect();
    did_you_mean(k, &names, || format!("{what}: {}", join_keys(keys)))
}

fn join_keys(k: &BTreeSet<String>) -> String {
    if k.is_empty() {
        "none".into()
    } else {
        k.iter().cloned().collect::<Vec<_>>().join(", ")
    }
}

fn list(v: &[String]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}
