//! The exact text of the binary's error messages: `error: <headline>`, then one
//! `  caused by: <cause>` line per link of the chain (the OS or engine error included), and the
//! documented exit code. Each test runs the real binary against a real filesystem.

use crate::support;

use support::snapshot::normalise;
use support::{Project, Run};

/// `heddle run p.toml` with the cache at `cache` instead of the project's exits 2, saying it
/// cannot create the cache's folders because of the OS error `cause`.
fn assert_cache_cannot_be_created(p: &Project, cache: &std::path::Path, cause: &str) {
    let r: Run = p
        .cmd(&["run", "p.toml", "--progress", "plain"])
        .env("HEDDLE_CACHE_DIR", cache)
        .output()
        .unwrap()
        .into();
    assert_eq!(
        r.code(2).stderr,
        format!(
            "error: cannot open the cache at {c}\n  caused by: failed to create directory {c}/objects\n  caused by: {cause}\n",
            c = cache.display()
        )
    );
}

/// The stderr of `heddle ARGS` in `p`, which must exit 2 (a user error), with the project's
/// temporary path written as `[PROJECT]`.
fn user_error(p: &Project, args: &[&str]) -> String {
    normalise(p, &p.heddle(args).code(2).stderr)
}

const PIPELINE: &str = "[pipeline]\nname = \"e\"\n[stages.a]\nrun = \"echo a > {{ out.o }}\"\noutputs = { o = \"o.txt\" }\n";

#[test]
fn a_cache_dir_under_a_file_names_the_os_error() {
    let p = Project::new();
    p.file("p.toml", PIPELINE).file("plain-file", "");
    let cache = p.path("plain-file/cache");
    assert_cache_cannot_be_created(&p, &cache, "Not a directory (os error 20)");
}

/// A command whose input is not there says exactly which and why (exit 2): a missing pipeline
/// with the OS error, `show last` before any run with where it looked, `status` without a lock
/// with how to write one.
#[test]
fn a_command_missing_its_input_says_which_and_why() {
    let p = Project::new();
    p.file("p.toml", PIPELINE);
    let cases: [(&[&str], &str); 3] = [
        (
            &["plan", "missing.toml"],
            "error: cannot read pipeline missing.toml\n  caused by: No such file or directory (os error 2)\n",
        ),
        (
            &["show", "last"],
            "error: no runs recorded under [PROJECT]/.heddle/runs\n",
        ),
        (
            &["status", "p.toml"],
            "error: failed to read lock file p.lock\n  caused by: No such file or directory (os error 2)\n  = help: `heddle run` writes it after a successful run; `heddle lock` writes it from the cache\n",
        ),
    ];
    for (args, stderr) in cases {
        assert_eq!(user_error(&p, args), stderr, "heddle {args:?}");
    }
}

/// An unwritable cache: a read-only filesystem when this test may mount one (root), else a
/// folder without write permission (root would write through it).
#[cfg(target_os = "linux")]
#[test]
fn an_unwritable_cache_dir_names_the_os_error() {
    use support::tmpfs::Tmpfs;
    let p = Project::new();
    p.file("p.toml", PIPELINE);
    let cache = p.path("ro-cache");
    std::fs::create_dir_all(&cache).unwrap();
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let mut _mounted = None;
    let cause = if root {
        let Some(m) = Tmpfs::mount(&cache, "ro,size=64k") else {
            return;
        };
        _mounted = Some(m);
        "Read-only file system (os error 30)"
    } else {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o555)).unwrap();
        "Permission denied (os error 13)"
    };
    assert_cache_cannot_be_created(&p, &cache, cause);
}

/// A typo in the project's hosts.toml points at the key, suggests the right one, and stops the
/// command before anything runs (exit 2).
#[test]
fn a_bad_hosts_file_points_at_the_key() {
    let p = Project::new();
    p.file("p.toml", PIPELINE).file(
        ".heddle/hosts.toml",
        "[hosts.gpubox]\ndocker = \"tcp://127.0.0.1:1\"\npool = { gpu = 1 }\n",
    );
    assert_eq!(
        user_error(&p, &["run", "p.toml", "--progress", "plain"]),
        "error: unknown key `pool`\n  --> [PROJECT]/.heddle/hosts.toml:3:1\n  |\n3 | pool = { gpu = 1 }\n  | ^^^^\n  = help: did you mean `pools`?\n"
    );
    assert!(!p.path("out").exists(), "nothing ran");
}

/// A container stage whose resource no configured host offers fails before anything runs,
/// naming the resource and what each host offers.
#[test]
fn a_resource_no_host_offers_names_it_and_the_hosts() {
    let p = Project::new();
    p.file(
        "p.toml",
        "[pipeline]\nname = \"e\"\n[resources]\nhailo = 1\n[stages.flash]\nimage = \"heddle-test/busybox:1\"\nresources = { hailo = 1 }\nrun = \"true\"\n",
    )
    .file(
        ".heddle/hosts.toml",
        "[hosts.gpubox]\ndocker = \"tcp://127.0.0.1:1\"\npools = { gpu = 2 }\n[hosts.bare]\ndocker = \"unix:///nonexistent.sock\"\n",
    )
    .trust();
    for cmd in ["run", "plan"] {
        assert_eq!(
            user_error(&p, &[cmd, "p.toml"]),
            "error: stage `flash` asks for hailo = 1, which no configured host offers (hosts: bare offers no pools; gpubox offers gpu = 2)\n",
            "{cmd}"
        );
    }
}

/// A configured host whose engine does not answer stops the run before any stage starts, named
/// with where it is defined (exit 2).
#[test]
fn an_unreachable_host_is_named_with_its_file_and_line() {
    let p = Project::new();
    p.file(
        "p.toml",
        "[pipeline]\nname = \"e\"\n[resources]\ngpu = 1\n[stages.train]\nimage = \"heddle-test/busybox:latest\"\nresources = { gpu = 1 }\nrun = \"true\"\n",
    )
    .file(
        ".heddle/hosts.toml",
        "# the GPU box\n[hosts.gpubox]\ndocker = \"tcp://127.0.0.1:1\"\npools = { gpu = 2 }\n",
    )
    .trust();
    assert_eq!(
        user_error(&p, &["run", "p.toml", "--progress", "plain"]),
        "error: cannot reach host `gpubox` (defined at [PROJECT]/.heddle/hosts.toml:2:8)\n  caused by: cannot reach the Docker Engine at tcp://127.0.0.1:1\n  caused by: connection refused — is the daemon running and listening at that address?\n"
    );
}

/// A reader that went away (`heddle schema pipeline | head -c 1`, the pipe closed before heddle
/// wrote) ends heddle quietly with exit 0, for every command that prints (completions and man
/// write through their own generators; they panicked 7 times in 10). SIGPIPE itself is ignored,
/// so a server closing a socket is an error, not a death (that side is `tests/remote_cache.rs`,
/// `reapi_without_the_client_certificate_a_server_requires_costs_one_warning`).
#[cfg(unix)]
#[test]
fn a_closed_stdout_ends_heddle_quietly() {
    for args in [
        &["schema", "pipeline"][..],
        &["completions", "bash"],
        &["completions", "zsh"],
        &["man"],
    ] {
        // The read end is closed before heddle starts: its first write meets EPIPE.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = std::process::Command::new(support::bin())
            .args(args)
            .stdout(writer)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "heddle {args:?}: {stderr}");
        assert_eq!(stderr, "", "heddle {args:?}");
    }
}

/// A misspelt `uses` or `--force` names the nearest real one.
#[test]
fn a_misspelt_definition_or_forced_stage_suggests_the_nearest() {
    let p = Project::new();
    p.file(
        "p.toml",
        "[pipeline]\nname = \"e\"\n[stages.optimize]\nuses = \"ort/optimise\"\n",
    );
    assert_eq!(
        user_error(&p, &["plan", "p.toml"]),
        "error: no stage definition `ort/optimise`\n  --> p.toml:4:8\n  |\n4 | uses = \"ort/optimise\"\n  |        ^^^^^^^^^^^^^^\n  = help: did you mean `ort/optimize`? (`heddle stages list`)\n"
    );
    p.file("q.toml", &PIPELINE.replace("stages.a", "stages.optimize"));
    assert_eq!(
        user_error(&p, &["run", "q.toml", "--force", "optimise"]),
        "error: --force optimise: no such stage (did you mean `optimize`?)\n"
    );
}
