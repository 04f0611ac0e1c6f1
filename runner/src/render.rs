//! Rendering an instance's `run` into a concrete command for one path layout: the host sandbox,
//! the container's `/heddle/...` mounts, or the virtual layout that enters the cache key (which
//! is the container one, so keys never hold a machine-specific path).

use crate::model::{RunTemplate, Stage};
use crate::names::path_segment;
use crate::plan::{member_dir, scalar, BoundInput, Instance, Plan};
use crate::template::{LookupError, Rendered, TemplateError};

/// Where inputs, outputs and the stage folder are, as the command sees them.
#[derive(Debug, Clone)]
pub struct PathLayout {
    pub in_root: String,
    pub out_root: String,
    pub stage_dir: Option<String>,
}

impl PathLayout {
    /// The layout inside a container, and the one cache keys are rendered with.
    pub fn virtual_root() -> PathLayout {
        PathLayout {
            in_root: "/heddle/in".into(),
            out_root: "/heddle/out".into(),
            stage_dir: Some("/heddle/stage".into()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Command {
    /// Run by `sh -c` (unix) or `cmd /C` (Windows).
    Shell(String),
    Exec(Vec<String>),
}

impl Command {
    pub fn display(&self) -> String {
        match self {
            Command::Shell(s) => s.clone(),
            Command::Exec(v) => shell_words::join(v),
        }
    }
}

/// The file name an input's path ends in: the upstream output's declared name, or the repo
/// path's last component.
pub fn input_file_name(plan: &Plan, b: &BoundInput) -> String {
    match b {
        BoundInput::Path { rel, .. } => rel
            .trim_end_matches(['/', '\\'])
            .rsplit(['/', '\\'])
            .next()
            .unwrap_or(rel)
            .to_string(),
        BoundInput::One { from, output } => plan.stage_of(*from).outputs[output].clone(),
        BoundInput::Gather { members, output } => members
            .first()
            .map(|m| plan.stage_of(*m).outputs[output].clone())
            .unwrap_or_default(),
    }
}

/// Render `run` for `inst`. `member_ok(id)` says whether a gathered member succeeded (only
/// successful members' files are listed; all of them appear in `in.NAME.dir`).
pub fn render(
    plan: &Plan,
    inst: &Instance,
    layout: &PathLayout,
    member_ok: &dyn Fn(usize) -> bool,
) -> Result<Command, TemplateError> {
    let stage: &Stage = plan.stage_of(inst.id);
    let lookup = |path: &[String]| -> Result<Rendered, LookupError> {
        if let Some(r) = scalar(inst, path) {
            return Ok(r);
        }
        match path {
            [ns, name] if ns == "in" => match inst.inputs.get(name) {
                None => Ok(Rendered::Many(vec![])), // an optional input left unbound
                Some(b @ BoundInput::Gather { members, .. }) => {
                    let file = input_file_name(plan, b);
                    Ok(Rendered::Many(
                        members
                            .iter()
                            .filter(|m| member_ok(**m))
                            .map(|m| {
                                format!(
                                    "{}/{name}/{}/{file}",
                                    layout.in_root,
                                    path_segment(&member_dir(&plan.instances[*m].matrix))
                                )
                            })
                            .collect(),
                    ))
                }
                Some(b) => Ok(Rendered::One(format!(
                    "{}/{name}/{}",
                    layout.in_root,
                    input_file_name(plan, b)
                ))),
            },
            [ns, name, d] if ns == "in" && d == "dir" => {
                Ok(Rendered::One(format!("{}/{name}", layout.in_root)))
            }
            [ns, name] if ns == "out" => match stage.outputs.get(name) {
                Some(file) => Ok(Rendered::One(format!("{}/{name}/{file}", layout.out_root))),
                None => Err(LookupError::UnknownOutput { name: name.clone() }),
            },
            [ns, d] if ns == "stage" && d == "dir" => layout
                .stage_dir
                .clone()
                .map(Rendered::One)
                .ok_or(LookupError::StageDirNeedsUses),
            _ => Err(LookupError::unknown(path)),
        }
    };
    Ok(match &stage.run {
        RunTemplate::Shell(t) => Command::Shell(t.render_shell(lookup)?),
        RunTemplate::Exec(ts) => {
            let mut args = Vec::new();
            for t in ts {
                args.extend(t.render_args(lookup)?);
            }
            Command::Exec(args)
        }
    })
}
