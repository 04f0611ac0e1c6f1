//! An instance's inputs as it receives them: a repo file with its digest, one upstream output,
//! or a gather of every member's status and output. Resolved from finished upstreams by both
//! the scheduler and the preview, and read by the key ([`crate::key`]) and the sandbox
//! ([`crate::sandbox`]).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

use heddle_cache::{Digest, OutputEntry};
use heddle_schema::VecMap;

use crate::names::path_segment;
use crate::plan::{member_dir, BoundInput, Plan};
use crate::prepare::Context;
use crate::record::{Cause, InstanceRecord, Status, StatusRecord};
use crate::render::input_file_name;

/// An input as the instance receives it.
#[derive(Debug, Clone)]
pub enum Resolved {
    Path { abs: PathBuf, digest: Digest },
    One { entry: OutputEntry, file: String },
    Gather { file: String, members: Vec<Member> },
}

/// One member of a gather: its instance id, its folder name (`k=v,...`), how it ended and, if
/// it succeeded, its output.
#[derive(Debug, Clone)]
pub struct Member {
    pub id: usize,
    pub dir: String,
    /// How it ended, unless that was a plain success: then its status is
    /// `StatusRecord::ok` of its label and matrix, which the plan holds ([`Member::status`]).
    /// A gather of a million members held a copy of each success's status (~300 bytes).
    pub not_ok: Option<Box<StatusRecord>>,
    pub entry: Option<OutputEntry>,
}

impl Member {
    /// How it ended, in one word.
    pub fn outcome(&self) -> Status {
        self.not_ok.as_ref().map_or(Status::Ok, |s| s.status)
    }

    /// Its status record, as its `status.json` holds it.
    pub fn status<'a>(&'a self, plan: &Plan) -> Cow<'a, StatusRecord> {
        match &self.not_ok {
            Some(s) => Cow::Borrowed(s),
            None => {
                let inst = &plan.instances[self.id];
                Cow::Owned(StatusRecord::ok(&inst.label, inst.matrix.clone()))
            }
        }
    }
}

/// Whether `s` is `StatusRecord::ok(label, matrix)`, checked without building one.
fn is_plain_ok(s: &StatusRecord, label: &str, matrix: &VecMap<serde_json::Value>) -> bool {
    s.is_plain_ok() && s.label == label && s.matrix == *matrix
}

/// What a dependent reads of a finished upstream: how it ended and what it produced.
pub trait Upstream {
    fn status(&self) -> &StatusRecord;
    fn outputs(&self) -> &VecMap<OutputEntry>;
}

impl<T: Upstream> Upstream for Box<T> {
    fn status(&self) -> &StatusRecord {
        (**self).status()
    }
    fn outputs(&self) -> &VecMap<OutputEntry> {
        (**self).outputs()
    }
}

/// A finished instance as the scheduler keeps it: its label beside its record.
impl<T: Upstream> Upstream for (String, T) {
    fn status(&self) -> &StatusRecord {
        self.1.status()
    }
    fn outputs(&self) -> &VecMap<OutputEntry> {
        self.1.outputs()
    }
}

impl Upstream for InstanceRecord {
    fn status(&self) -> &StatusRecord {
        &self.status
    }
    fn outputs(&self) -> &VecMap<OutputEntry> {
        &self.outputs
    }
}

/// Resolve an instance's inputs from finished upstreams (`done`, indexed by instance id), or
/// say which upstream skips it and whether that upstream's failure was allowed.
pub fn resolve_inputs<D: Upstream>(
    ctx: &Context,
    id: usize,
    done: &[Option<D>],
) -> Result<BTreeMap<String, Resolved>, (Cause, bool)> {
    let plan = &ctx.plan;
    let finished = |d: usize| done[d].as_ref().expect("dependency finished");
    let mut out = BTreeMap::new();
    for (name, b) in &plan.instances[id].inputs {
        let r = match b {
            BoundInput::Path { rel, abs } => Resolved::Path {
                abs: abs.clone(),
                digest: ctx.repo_inputs[rel],
            },
            BoundInput::One { from, output } => {
                let d = finished(*from);
                if d.status().status != Status::Ok {
                    return Err((cause_of(d.status()), d.status().tolerated));
                }
                Resolved::One {
                    entry: d.outputs()[output].clone(),
                    file: input_file_name(plan, b),
                }
            }
            BoundInput::Gather { members, output } => {
                let mut ms = Vec::with_capacity(members.len());
                for &m in members {
                    let d = finished(m);
                    if d.status().status != Status::Ok && !d.status().tolerated {
                        return Err((cause_of(d.status()), false));
                    }
                    let inst = &plan.instances[m];
                    let status = d.status();
                    ms.push(Member {
                        id: m,
                        dir: path_segment(&member_dir(&inst.matrix)).into_owned(),
                        not_ok: (!is_plain_ok(status, &inst.label, &inst.matrix))
                            .then(|| Box::new(status.clone())),
                        entry: d.outputs().get(output).cloned(),
                    });
                }
                Resolved::Gather {
                    file: input_file_name(plan, b),
                    members: ms,
                }
            }
        };
        out.insert(name.clone(), r);
    }
    Ok(out)
}

/// The failure a skip names: the upstream's own cause when it was itself skipped.
pub fn cause_of(s: &StatusRecord) -> Cause {
    match &s.cause {
        Some(c) => c.clone(),
        None => Cause {
            label: s.label.clone(),
            error: s.error.clone(),
        },
    }
}

/// Whether gathered member `m` succeeded: [`crate::render::render`] lists only their files.
/// The successful members are collected once: render asks about every member of a gather, and
/// a scan per question made rendering a gather of N members cost N².
pub fn member_ok_fn(inputs: &BTreeMap<String, Resolved>) -> impl Fn(usize) -> bool {
    let ok: HashSet<usize> = inputs
        .values()
        .flat_map(|r| match r {
            Resolved::Gather { members, .. } => members.as_slice(),
            _ => &[],
        })
        .filter(|mb| mb.outcome() == Status::Ok)
        .map(|mb| mb.id)
        .collect();
    move |m| ok.contains(&m)
}
