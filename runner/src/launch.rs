//! What an instance is launched with besides its command and sandbox: its container request
//! and the host variables it passes through. Built once per instance and read by both the
//! cache key ([`crate::key::KeyParts::for_launch`]) and the executor's request
//! (`sched/attempt.rs`), so a setting cannot reach the command without reaching the key: the
//! key's executor identity destructures the request exhaustively
//! ([`crate::key::ExecutorIdentity::of`]), and the request destructures the stage's container
//! settings the same way, so a field added to either fails to compile until it is keyed or
//! explicitly excluded.

use crate::exec::ContainerRequest;
use crate::prepare::Context;

#[derive(Debug, Clone)]
pub struct Launch {
    /// The container the instance runs in, before placement (`on_host`) and held units.
    pub container: Option<ContainerRequest>,
    /// Each `pass_env` name with the host's value, read once (`None`: unset, or not UTF-8).
    pub passed_env: Vec<(String, Option<String>)>,
}

impl Launch {
    pub fn for_instance(ctx: &Context, id: usize) -> Launch {
        let inst = &ctx.plan.instances[id];
        let stage = ctx.plan.stage_of(id);
        let container = match (&stage.container, &inst.image) {
            (Some(c), Some(image)) => Some(ContainerRequest::for_instance(
                &ctx.images,
                c,
                image,
                inst.gpus.as_ref(),
            )),
            _ => None,
        };
        let passed_env = stage
            .settings
            .pass_env
            .iter()
            .map(|k| (k.clone(), std::env::var(k).ok()))
            .collect();
        Launch {
            container,
            passed_env,
        }
    }
}
