//! A stage's matrix assignments: the cartesian product of its own matrix, joined with every
//! mapped upstream on the keys they share. `stage.out` maps every upstream instance and adds its
//! keys; `stage[k=v].out` maps the instances with those values and adds the remaining keys;
//! `stage[*].out` gathers and adds none.

use std::collections::{BTreeMap, BTreeSet};

use super::builder::Builder;
use super::check::hint_keys;
use super::join::join;
use super::Matrix;
use crate::diag::did_you_mean;
use crate::model::{value_text, Input, InputKind, Selector, Stage};

/// One mapped input: the upstream instances it may pair with, and the keys it contributes.
pub(super) struct Mapped {
    pub(super) cands: Vec<usize>,
    pub(super) keys: BTreeSet<String>,
}

/// A stage's joined assignments, the matrix keys they carry, and its mapped inputs by name.
pub(super) struct Expansion<'s> {
    pub(super) assigns: Vec<Matrix>,
    pub(super) keys: BTreeSet<String>,
    pub(super) mapped: BTreeMap<&'s str, Mapped>,
}

/// The cartesian product of a stage's own matrix, in the order its keys and values are written.
fn own_assignments(s: &Stage) -> Vec<Matrix> {
    let mut assigns: Vec<Matrix> = vec![Matrix::new()];
    for (k, vals) in &s.matrix {
        assigns = assigns
            .into_iter()
            .flat_map(|a| {
                vals.iter().map(move |v| {
                    let mut a = a.clone();
                    a.insert(k.clone(), v.clone());
                    a
                })
            })
            .collect();
    }
    assigns
}

impl Builder<'_> {
    /// Stage `s`'s assignments, or `None` after recording why it has none.
    pub(super) fn expand<'s>(&mut self, s: &'s Stage) -> Option<Expansion<'s>> {
        let mut assigns = own_assignments(s);
        let mut keys: BTreeSet<String> = s.matrix.iter().map(|(k, _)| k.clone()).collect();
        let mapped = self.mapped_inputs(s, &mut keys)?;
        for m in mapped.values() {
            assigns = join(&assigns, &m.cands, &m.keys, |u| &self.instances[u].matrix);
        }
        if assigns.is_empty() {
            self.errors.push(self.p.source.error(
                Some(s.name_span.clone()),
                format!("stage `{}` has no instances: its matrix and its mapped inputs share keys with no common values", s.name),
            ));
            return None;
        }
        Some(Expansion {
            assigns,
            keys,
            mapped,
        })
    }

    /// Candidate upstream instances per mapped input, with the keys they add to `keys`; `None`
    /// when an input names something its upstream lacks.
    fn mapped_inputs<'s>(
        &mut self,
        s: &'s Stage,
        keys: &mut BTreeSet<String>,
    ) -> Option<BTreeMap<&'s str, Mapped>> {
        let mut mapped = BTreeMap::new();
        let mut ok = true;
        for (iname, input) in &s.inputs {
            let InputKind::Ref {
                stage,
                selector,
                output,
            } = &input.kind
            else {
                continue;
            };
            let ui = self.index[stage.as_str()];
            if !self.has_output(input, stage, ui, output) {
                ok = false;
                continue;
            }
            let m = match selector {
                Selector::All => continue,
                Selector::Map => Mapped {
                    cands: self.by_stage[ui].clone(),
                    keys: self.keys_of[ui].clone(),
                },
                Selector::Select(sel) => self.select(input, stage, ui, sel, &mut ok),
            };
            keys.extend(m.keys.iter().cloned());
            mapped.insert(iname.as_str(), m);
        }
        ok.then_some(mapped)
    }

    /// Whether upstream `ui` (named `stage`) declares `output`; records the error if not.
    fn has_output(&mut self, input: &Input, stage: &str, ui: usize, output: &str) -> bool {
        let up = &self.p.stages[ui];
        if up.outputs.contains_key(output) {
            return true;
        }
        let known: Vec<_> = up.outputs.keys().cloned().collect();
        self.errors.push(
            self.p
                .source
                .error(
                    Some(input.span.clone()),
                    format!("stage `{stage}` has no output `{output}`"),
                )
                .with_help(did_you_mean(output, &known, || {
                    format!("its outputs: {}", known.join(", "))
                })),
        );
        false
    }

    /// `stage[k=v].out`: the upstream instances with those values, and the keys left to map.
    /// Clears `ok` on an unknown key, or when nothing matches and all was well so far.
    fn select(
        &mut self,
        input: &Input,
        stage: &str,
        ui: usize,
        sel: &BTreeMap<String, String>,
        ok: &mut bool,
    ) -> Mapped {
        for k in sel.keys() {
            if !self.keys_of[ui].contains(k) {
                self.errors.push(self.p.source.error(
                    Some(input.span.clone()),
                    format!(
                        "stage `{stage}` has no matrix key `{k}` ({})",
                        hint_keys(k, &self.keys_of[ui], "keys")
                    ),
                ));
                *ok = false;
            }
        }
        let cands: Vec<usize> = self.by_stage[ui]
            .iter()
            .copied()
            .filter(|&u| {
                sel.iter().all(|(k, v)| {
                    self.instances[u].matrix.get(k).map(value_text).as_deref() == Some(v.as_str())
                })
            })
            .collect();
        if *ok && cands.is_empty() {
            self.errors.push(self.p.source.error(
                Some(input.span.clone()),
                format!("no instance of `{stage}` matches the selector"),
            ));
            *ok = false;
        }
        let keys = self.keys_of[ui]
            .iter()
            .filter(|k| !sel.contains_key(*k))
            .cloned()
            .collect();
        Mapped { cands, keys }
    }
}
