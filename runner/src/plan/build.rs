//! The walk over stages in dependency order. Each stage becomes its instances: its matrix
//! assignments joined with its mapped upstreams (`expand`), its `run` checked (`check`), then
//! one instance per assignment with its inputs, params, image and GPUs (`bind`). Every error is
//! collected, so one `heddle plan` names every problem; a stage downstream of one that failed is
//! left out, since it could only echo that error.

use std::collections::BTreeMap;

use super::builder::Builder;
use super::check::check_templates;
use super::expand::Expansion;
use super::join::ProjectionIndex;
use super::params::resolve_params;
use super::{bind, label, Instance, Matrix};

use crate::model::{InputKind, Stage};

impl Builder<'_> {
    /// Plan stage `si`, whose upstreams are planned.
    pub(super) fn stage(&mut self, si: usize) {
        let p = self.p;
        let s = &p.stages[si];
        if self.upstream_failed(s) {
            return;
        }
        let Some(Expansion {
            assigns,
            keys,
            mapped,
        }) = self.expand(s)
        else {
            return;
        };
        self.keys_of[si] = keys.clone();
        if let Err(mut e) = check_templates(self.p, s, &keys) {
            self.errors.append(&mut e);
            return;
        }
        // Each instance's partner per mapped input, found through an index on the keys the
        // input contributes (every joined assignment has them all).
        let partners: BTreeMap<&str, ProjectionIndex> = mapped
            .iter()
            .map(|(iname, m)| {
                let ix = ProjectionIndex::new(
                    m.keys.iter().cloned().collect(),
                    m.cands.iter().copied(),
                    |u| &self.instances[u].matrix,
                );
                (*iname, ix)
            })
            .collect();
        // Sized once: a million instances grown by doubling copied the vector twenty times and
        // left up to half of it unused.
        self.instances.reserve(assigns.len());
        self.by_stage[si].reserve_exact(assigns.len());
        for m in assigns {
            if let Some(inst) = self.instance(si, s, m, &partners) {
                self.by_stage[si].push(inst.id);
                self.instances.push(inst);
            }
        }
    }

    /// A stage downstream of one that failed to plan would only add echoes of that error.
    /// (Every stage that planned has instances, so an empty upstream is one that failed.)
    fn upstream_failed(&self, s: &Stage) -> bool {
        s.inputs.values().any(|i| {
            matches!(&i.kind, InputKind::Ref { stage, .. }
                if self.by_stage[self.index[stage.as_str()]].is_empty())
        })
    }

    /// One instance of stage `si` for the assignment `m`, or `None` after recording why not.
    fn instance(
        &mut self,
        si: usize,
        s: &Stage,
        m: Matrix,
        partners: &BTreeMap<&str, ProjectionIndex>,
    ) -> Option<Instance> {
        let bound = self
            .bind_inputs(s, &m, partners)
            .and_then(|(inputs, deps)| {
                let params = resolve_params(self.p, s, &m)?;
                Ok((inputs, deps, params))
            });
        let bound = bound.and_then(|(inputs, deps, params)| {
            let image = bind::image(self.p, s, &params, &m)?;
            let gpus = bind::gpus(self.p, s, &params, &m)?;
            Ok((inputs, deps, params, image, gpus))
        });
        let (inputs, deps, params, image, gpus) = match bound {
            Ok(b) => b,
            Err(d) => {
                self.errors.push(d);
                return None;
            }
        };
        Some(Instance {
            id: self.instances.len(),
            stage: si,
            label: label(&s.name, &m),
            matrix: m,
            params,
            inputs,
            deps,
            image,
            gpus,
        })
    }
}
