//! `heddle completions <shell>`, `heddle man` and the colours of statuses, through the built
//! binary: the bash script must pass `bash -n`, every script must name heddle's commands, and
//! colour must follow `--color` and `NO_COLOR` (on a real pseudo-terminal from `script`).

use crate::support;

use support::assert_contains;
use support::Project;

const PIPELINE: &str = "[pipeline]\nname = \"c\"\n[stages.a]\nrun = \"echo a > {{ out.o }}\"\noutputs = { o = \"o.txt\" }\n";

#[test]
fn completions_for_each_shell_name_the_commands() {
    let p = Project::new();
    for (shell, marker) in [
        ("bash", "complete -F _heddle"),
        ("zsh", "#compdef heddle"),
        ("fish", "complete -c heddle"),
        (
            "powershell",
            "Register-ArgumentCompleter -Native -CommandName 'heddle'",
        ),
    ] {
        let r = p.heddle(&["completions", shell]).ok();
        assert!(r.stdout.contains(marker), "{shell}: {}", r.stdout);
        for cmd in ["logbook", "status", "completions"] {
            assert!(r.stdout.contains(cmd), "{shell} lacks {cmd}");
        }
    }
    p.heddle(&["completions", "tcsh"]).code(2);
}

/// The dynamic completion (`source <(COMPLETE=bash heddle)`) asked as bash's hook asks it:
/// the words after `--`, the index of the one being completed.
fn complete(p: &Project, words: &[&str]) -> Vec<String> {
    let mut args = vec!["--", "heddle"];
    args.extend_from_slice(words);
    let out = p
        .cmd(&args)
        .env("COMPLETE", "bash")
        .env("_CLAP_COMPLETE_INDEX", words.len().to_string())
        .env("_CLAP_COMPLETE_COMP_TYPE", "9")
        .env("_CLAP_IFS", "\n")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut got: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    got.sort();
    got
}

#[test]
fn dynamic_completion_offers_the_projects_stages_and_params() {
    let p = Project::new();
    p.file(
        "pipelines/a.toml",
        "[pipeline]\nname = \"a\"\n[params]\nquant = \"a8_w8\"\nscale = 2\n[stages.translate]\nrun = \"true\"\n[stages.optimize]\nrun = \"true\"\n",
    )
    .file(
        "pipelines/b.toml",
        "[pipeline]\nname = \"b\"\n[stages.compile]\nrun = \"true\"\n[stages.optimize]\nrun = \"true\"\n",
    )
    .file("pipelines/broken.toml", "[stages\n");
    assert_eq!(
        complete(&p, &["run", "--force", ""]),
        ["compile", "optimize", "translate"]
    );
    assert_eq!(complete(&p, &["run", "--force", "o"]), ["optimize"]);
    assert_eq!(complete(&p, &["run", "--set", ""]), ["quant=", "scale="]);
    // The hook itself is a bash function that calls heddle back.
    let hook = p.cmd(&[]).env("COMPLETE", "bash").output().unwrap();
    let hook = String::from_utf8(hook.stdout).unwrap();
    assert_contains(&hook, "_CLAP_COMPLETE_INDEX");
}

#[test]
fn the_bash_script_is_valid_bash() {
    let p = Project::new();
    let r = p.heddle(&["completions", "bash"]).ok();
    p.file("heddle.bash", &r.stdout);
    let check = std::process::Command::new("bash")
        .arg("-n")
        .arg(p.path("heddle.bash"))
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
}

#[test]
fn the_man_page_is_roff_with_every_command() {
    let p = Project::new();
    let r = p.heddle(&["man"]).ok();
    assert_contains(&r.stdout, ".TH heddle 1");
    assert_contains(&r.stdout, ".SH NAME");
    for cmd in ["heddle\\-run", "heddle\\-logbook", "heddle\\-man"] {
        assert!(r.stdout.contains(cmd), "no {cmd} in\n{}", r.stdout);
    }
}

#[test]
fn color_always_paints_only_the_status_word() {
    let p = Project::new();
    p.file("p.toml", PIPELINE);
    let r = p.run("p.toml", &["--color", "always"]).ok();
    assert!(
        r.stderr
            .lines()
            .any(|l| l.starts_with("\x1b[32mok\x1b[0m      a  ")),
        "{:?}",
        r.stderr
    );
    let r = p.run("p.toml", &["--color", "always"]).ok();
    assert_contains(&r.stderr, "\x1b[36mcached\x1b[0m  a\n");
    let r = p.run("p.toml", &["--color", "never"]).ok();
    assert_contains(&r.stderr, "cached  a\n");
    assert!(!r.stderr.contains('\x1b'), "{:?}", r.stderr);
    // Not a terminal: auto means no colour.
    let r = p.run("p.toml", &[]).ok();
    assert!(!r.stderr.contains('\x1b'), "{:?}", r.stderr);
}

#[test]
fn failed_is_painted_in_show() {
    let p = Project::new();
    p.file(
        "p.toml",
        "[pipeline]\nname = \"f\"\n[stages.bad]\nrun = \"exit 3\"\noutputs = { o = \"o.txt\" }\n",
    );
    p.run("p.toml", &[]).code(1);
    let r = p.heddle(&["show", "--color", "always"]).ok();
    assert_contains(&r.stdout, "\x1b[1;31mFAILED\x1b[0m exit code 3");
}

/// On a terminal, auto paints unless NO_COLOR is set (and not empty).
#[cfg(target_os = "linux")]
#[test]
fn auto_on_a_terminal_honours_no_color() {
    let p = Project::new();
    p.file("p.toml", PIPELINE);
    p.run("p.toml", &[]).ok();
    let on_tty = |no_color: Option<&str>| {
        let mut c = std::process::Command::new("script");
        c.current_dir(p.root())
            .env("HEDDLE_CACHE_DIR", &p.cache)
            .env_remove("NO_COLOR")
            .args(["-qec"])
            .arg(format!("{} show", support::bin()))
            .arg("/dev/null");
        if let Some(v) = no_color {
            c.env("NO_COLOR", v);
        }
        let o = c.output().expect("script (util-linux) runs");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let painted = on_tty(None);
    assert_contains(&painted, "\x1b[32mok\x1b[0m");
    let plain = on_tty(Some("1"));
    assert!(
        plain.contains("ok ") && !plain.contains('\x1b'),
        "{plain:?}"
    );
    // An empty NO_COLOR does not count (no-color.org).
    let empty = on_tty(Some(""));
    assert_contains(&empty, "\x1b[32mok\x1b[0m");
}
