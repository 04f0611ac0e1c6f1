//! Pins the exact key bytes of host and Docker instances (plain, matrix, gather, every
//! container setting), so moving key assembly around provably changes no key.

use std::path::Path;
use std::sync::Arc;

use heddle_cache::{OutputEntry, StatCache, Store};
use heddle_containers::ImageIdentity;

use super::*;
use crate::inputs::{resolve_inputs, Upstream};
use crate::record::{Status, StatusRecord};

const PIPELINE: &str = r#"
[pipeline]
name = "pins"

[params]
level = 3

[stages.make]
matrix = { k = [1, 2] }
vars = { MODE = "fast" }
run = "echo {{ matrix.k }} {{ params.level }} > {{ out.t }}"
outputs = { t = "t.txt" }

[stages.up]
image = "heddle-pin:latest"
gpus = 2
devices = ["/dev/null:/dev/hailo0"]
network = "bridge"
shm_size = "64m"
memory = "1g"
cpus = 1.5
user = "1000:1000"
workdir = "/w"
inputs = { t = "make[k=1].t" }
run = "tr a-z A-Z < {{ in.t }} > {{ out.u }}"
outputs = { u = "u.txt" }

[stages.bare]
image = "heddle-pin:latest"
run = "true > {{ out.b }}"
outputs = { b = "b.txt" }

[stages.all]
inputs = { ts = "make[*].t" }
allow_failure = true
run = "cat {{ in.ts }} > {{ out.a }}"
outputs = { a = "a.txt" }
"#;

fn context(dir: &Path) -> Context {
    let file = dir.join("p.toml");
    std::fs::write(&file, PIPELINE).unwrap();
    let opts = crate::model::LoadOptions {
        root: Some(dir.to_path_buf()),
        ..Default::default()
    };
    let pipeline = crate::model::load(&file, &opts).expect("pipeline loads");
    let plan = Arc::new(crate::plan::build(Arc::new(pipeline)).expect("plan builds"));
    let store = Arc::new(Store::open(&dir.join("cache")).unwrap());
    let image = ImageIdentity {
        reference: "heddle-pin:latest".into(),
        id: "sha256:0123456789abcdef".into(),
        repo_digests: vec![],
    };
    Context {
        plan,
        store,
        stats: Arc::new(StatCache::load(&dir.join("stats"))),
        definitions: BTreeMap::new(),
        repo_inputs: BTreeMap::new(),
        envs: BTreeMap::new(),
        images: [("heddle-pin:latest".to_string(), image)].into(),
        unresolved: BTreeMap::new(),
        host: Arc::new(crate::exec::host::HostExecutor),
        docker: None,
        placement: Default::default(),
        engines: Default::default(),
    }
}

/// Every instance's key, in plan order, with `make[k=2]` failed so the gather sees a
/// failed member.
fn keys(ctx: &Context) -> Vec<(String, String, Value)> {
    let plan = &ctx.plan;
    let mut done: Vec<Option<Up>> = vec![None; plan.instances.len()];
    let mut out = Vec::new();
    for &id in &plan.order {
        let inst = &plan.instances[id];
        let inputs = resolve_inputs(ctx, id, &done).expect("inputs resolve");
        // A member keeps only a status that is not a plain success; either way it reads back
        // as its upstream's own record (what its `status.json` holds).
        for m in inputs.values().flat_map(|r| match r {
            Resolved::Gather { members, .. } => members.as_slice(),
            _ => &[],
        }) {
            let up = &done[m.id].as_ref().expect("member finished").status;
            assert_eq!(*m.status(plan), *up, "{}", plan.instances[m.id].label);
            assert_eq!(m.not_ok.is_some(), up.status != Status::Ok);
        }
        let parts = KeyParts::for_instance(ctx, id, &inputs);
        // A run keys the borrowed view, a miss stores the owned parts: the pins below hold
        // for both only if they print the same bytes. (`for_instance` checks it too, but
        // with a `debug_assert`, which the release test build CI runs leaves out.)
        let launch = Launch::for_instance(ctx, id);
        let view = KeyView::for_launch(ctx, id, &inputs, &launch);
        assert_eq!(
            view.digest_and_text().1.get(),
            parts.digest_and_text().1.get(),
            "{}: the view and the parts print different keys",
            inst.label
        );
        out.push((
            inst.label.clone(),
            parts.digest().to_string(),
            parts.executor.clone(),
        ));
        let mut status = StatusRecord::ok(&inst.label, inst.matrix.clone());
        let mut outputs = BTreeMap::new();
        if inst.label == "make[k=2]" {
            status.status = Status::Failed;
            status.tolerated = true;
            status.error = Some("ExitCode: exit code 1".into());
            status.error_class = Some(crate::record::ErrorClass::ExitCode);
        } else {
            for name in plan.stage_of(id).outputs.keys() {
                let entry = OutputEntry::File {
                    digest: Digest::of_bytes(inst.label.as_bytes()),
                    size: 3,
                    executable: false,
                };
                outputs.insert(name.clone(), entry);
            }
        }
        done[id] = Some(Up {
            status,
            outputs: outputs.into(),
        });
    }
    out
}

/// A finished upstream: how it ended and what it produced.
#[derive(Clone)]
struct Up {
    status: StatusRecord,
    outputs: heddle_schema::VecMap<OutputEntry>,
}

impl Upstream for Up {
    fn status(&self) -> &StatusRecord {
        &self.status
    }
    fn outputs(&self) -> &heddle_schema::VecMap<OutputEntry> {
        &self.outputs
    }
}

#[test]
fn key_bytes_are_pinned() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = context(dir.path());
    let got = keys(&ctx);
    let text: Vec<String> = got
        .iter()
        .map(|(l, k, e)| format!("{l} {k} {}", serde_json::to_string(e).unwrap()))
        .collect();
    let docker = r#"{"cpus":1.5,"devices":["/dev/null:/dev/hailo0"],"gpus":2,"image_id":"sha256:0123456789abcdef","kind":"docker","memory":"1g","network":"bridge","shm_size":"64m","user":"1000:1000","workdir":"/w"}"#;
    let bare = r#"{"cpus":null,"devices":[],"gpus":null,"image_id":"sha256:0123456789abcdef","kind":"docker","memory":null,"network":"none","shm_size":null,"user":null,"workdir":null}"#;
    let host = r#"{"kind":"host"}"#;
    assert_eq!(
        text,
        [
            format!("bare d0e8f9b95300e7d4a26f3aa0740bb762570bd91a1e695f9955230043300aeba1 {bare}"),
            // `make` has `vars`: its keys changed when values became digests (issue 23);
            // every key without variables is the same as before.
            format!(
                "make[k=1] 119ba7c332381894eb7ac3ccfe6b55665d38171ed235607a401dde3efa1fb1d2 {host}"
            ),
            format!(
                "make[k=2] 1403fc65fa63c556d2dedf331682ce5f6ac9db1ebeb8028605bbb7f4ac744601 {host}"
            ),
            format!("all 080c4d1e4d138f3665c382b3d641e34469d506f67f6706839a7eda317bb8a096 {host}"),
            format!("up 39ad2534e15f85d6853274a98e87153148bb51b5881ad5e10b360d339d60f7e2 {docker}"),
        ]
    );
}
