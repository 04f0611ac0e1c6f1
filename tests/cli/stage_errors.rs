//! A stage's Python error as a user reads it: the exception's first line (cut at 300
//! characters: onnxruntime's "Required inputs ([...]) are missing" lists every name, kilobytes)
//! and the stage's own frame, once on the terminal and once in the record; the summary names the
//! instance and its log, which holds the whole traceback and message. The stage is a project
//! definition that includes the repository's stages/lib/heddle_stage.py, as every library stage.

use crate::support::project::{copy_tree, repo_root, Project};
use crate::support::records::instance;

const STAGE: &str = r#"[stage]
include = ["../../lib/heddle_stage.py"]
run = ["python3", "{{ stage.dir }}/boom.py"]

[outputs]
o = "o.txt"
"#;

const SCRIPT: &str = r#"import heddle_stage as hs


def feed(n):
    names = [f"OC2_DUMMY_{i}" for i in range(n)]
    raise ValueError(f"Required inputs ({names}) are missing from input feed (['data_0']).\nsecond line")


hs.run(lambda: feed(2000))
"#;

#[test]
fn a_python_error_is_one_cut_line_with_the_stages_frame_once() {
    let p = Project::with_pipeline("[pipeline]\nname = \"p\"\n\n[stages.s]\nuses = \"t/boom\"\n");
    copy_tree(&repo_root().join("stages/lib"), &p.path("stages/lib"));
    p.file("stages/t/boom/stage.toml", STAGE);
    p.file("stages/t/boom/boom.py", SCRIPT);
    let r = p.run("p.toml", &[]).code(1);

    let names: Vec<String> = (0..2000).map(|i| format!("'OC2_DUMMY_{i}'")).collect();
    let whole = format!(
        "ValueError: Required inputs ([{}]) are missing",
        names.join(", ")
    );
    let line: String = whole.chars().take(299).collect::<String>() + "\u{2026}";
    assert_eq!(line.chars().count(), 300);
    let rec = p.last_record();
    let status = &instance(&rec, "s")["status"];
    assert_eq!(status["error"], line.as_str());
    assert_eq!(status["at"], "boom.py:6 in feed");
    assert_eq!(status["error_class"], "ValueError");

    let run_id = rec["run_id"].as_str().unwrap();
    let lines: Vec<&str> = r.stderr.lines().collect();
    let failed: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.contains("FAILED"))
        .collect();
    assert_eq!(failed.len(), 3, "{}", r.stderr);
    assert_eq!(failed[0], format!("FAILED  s  {line} (boom.py:6 in feed)"));
    assert!(
        failed[1].starts_with("FAILED p: 1 instances — 0 ran, 0 cached, 1 failed, 0 skipped in "),
        "{}",
        failed[1]
    );
    assert_eq!(failed[2], "  s FAILED");
    assert_eq!(r.stderr.matches("OC2_DUMMY_0'").count(), 1, "{}", r.stderr);
    let log = format!(".heddle/logs/{run_id}/s.err");
    assert!(
        r.stderr
            .contains(&format!("\n  s FAILED\n    log: {log}\n")),
        "{}",
        r.stderr
    );
    let traceback = p.read(&log);
    assert!(
        traceback.starts_with("Traceback (most recent call last):\n"),
        "{traceback}"
    );
    assert!(
        traceback.contains("'OC2_DUMMY_1999'"),
        "the whole message is in the log"
    );
    assert!(traceback.trim_end().ends_with("second line"), "{traceback}");
}
