//! A `secret_env` value reaches a container stage and none of what heddle writes: its logs
//! (attached output, masked as it streams in), its record, its outputs.

use crate::support::{assert_lacks, instance};

const SECRET: &str = "canary-container-secret-91c4";

#[test]
fn a_container_stage_gets_its_secret_and_its_logs_show_stars() {
    let (p, _d, _gc) = busybox_test!(
        "[pipeline]\nname = \"s\"\n[stages.a]\nimage = \"__BUSYBOX__\"\nsecret_env = [\"HEDDLE_TEST_TOKEN\"]\nrun = \"echo token $HEDDLE_TEST_TOKEN; echo err $HEDDLE_TEST_TOKEN >&2; printf %s $HEDDLE_TEST_TOKEN | wc -c > {{ out.n }}\"\noutputs = { n = \"n.txt\" }\n"
    );
    let r: crate::support::Run = p
        .cmd(&["run", "p.toml", "--progress", "plain"])
        .env("HEDDLE_TEST_TOKEN", SECRET)
        .output()
        .unwrap()
        .into();
    let r = r.ok();
    assert_eq!(p.read("out/s/a/n.txt").trim(), SECRET.len().to_string());
    let rec = p.last_record();
    let logs = instance(&rec, "a")["logs"].as_array().unwrap().clone();
    let read = |i: usize| std::fs::read_to_string(logs[i].as_str().unwrap()).unwrap();
    assert_eq!(read(0), "token ***\n");
    assert_eq!(read(1), "err ***\n");
    assert_lacks(&r.all(), SECRET);
    let mut stack = vec![p.root().to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                stack.push(e.path());
            } else if ft.is_file() {
                let bytes = std::fs::read(e.path()).unwrap_or_default();
                let found = bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes());
                assert!(!found, "{} holds the secret", e.path().display());
            }
        }
    }
}
